"""``tfc calibrate``: repeated runs started together on every device, medians, spreads."""

import threading

import pytest

from tfc.errors import TfcError
from tfc.runtime import calibrate as cal

TINY = {"gemm_n": 16, "stream_elements": 4096}


def test_spread_is_min_median_max_of_the_runs():
    s = cal.Spread([3.0, 1.0, 2.0, 10.0, 2.0])
    assert (s.min, s.median, s.max) == (1.0, 2.0, 10.0)
    assert s.relative == pytest.approx(4.5)
    assert cal.Spread([2.0, 2.0]).relative == 0.0


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_calibrate_reports_medians_and_spread_per_device(backend):
    devices = ["/cpu:0", "/cpu:1"]
    result = cal.calibrate(devices, backend=backend, repeats=3, **TINY)
    assert list(result.profile.devices) == devices == list(result.measurements)
    for d in devices:
        m = result.measurements[d]
        assert len(m.gemm.samples) == len(m.stream.samples) == 3
        assert len(m.overhead.samples) == 60
        for s in (m.gemm, m.stream, m.overhead):
            assert 0 < s.min <= s.median <= s.max
        rates = result.profile.devices[d]
        assert rates.flops_per_s == pytest.approx(2.0 * 16 ** 3 / m.gemm.median)
        assert rates.bytes_per_s == pytest.approx(12.0 * 4096 / m.stream.median)
        assert rates.kernel_overhead_s == m.overhead.median
        assert "gemm " in m.spread_summary() and "spread " in m.spread_summary()


def test_every_run_starts_on_all_devices_together(monkeypatch):
    """Each device's k-th run starts after every device has finished its (k-1)-th: the
    barrier, not the threads' luck, decides what overlaps a measurement."""
    starts: dict[str, list[int]] = {}
    rounds = {"n": 0}
    lock = threading.Lock()
    real = cal.measure_device

    def recording(backend, repeats, *, sync, **sizes):
        name = threading.current_thread().name
        starts[name] = []

        def synced():
            sync()
            with lock:
                starts[name].append(rounds["n"])
            sync()  # everyone recorded this round before anyone moves on
            with lock:
                rounds["n"] += 1
        return real(backend, repeats, sync=synced, **sizes)

    monkeypatch.setattr(cal, "measure_device", recording)
    cal.calibrate(["/cpu:0", "/cpu:1"], backend="reference", repeats=2, **TINY)
    a, b = starts.values()
    assert len(a) == len(b) == 2 + 2 + 40
    assert a == b  # both recorded every round before either started the next


def test_a_failing_device_fails_calibration_without_hanging(monkeypatch):
    real = cal.measure_device

    def broken(backend, repeats, *, sync, **sizes):
        if threading.current_thread().name.endswith("/cpu:1"):
            raise RuntimeError("device lost")
        return real(backend, repeats, sync=sync, **sizes)

    monkeypatch.setattr(cal, "measure_device", broken)
    monkeypatch.setattr(cal, "BARRIER_TIMEOUT_S", 30.0)
    with pytest.raises(RuntimeError, match="device lost"):
        cal.calibrate(["/cpu:0", "/cpu:1"], backend="reference", repeats=2, **TINY)


def test_calibrate_needs_a_run():
    with pytest.raises(TfcError, match="at least one run"):
        cal.calibrate(["/cpu:0"], repeats=0)
