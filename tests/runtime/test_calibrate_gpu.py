"""``tfc calibrate``'s GPU part: the measuring code (run here with numpy as its array
module: the same code cupy runs on a GPU), what it stores in the profile, and the
machine without a GPU."""

from pathlib import Path

import numpy as np
import pytest

from tfc.cli import main
from tfc.devices import DeviceProfile, LinkRates, load_profile
from tfc.errors import TfcError
from tfc.runtime.calibrate_gpu import GpuCalibration, measure_gpu, measure_rates


def measured_with_numpy():
    return measure_rates(np, lambda: None, np.array, np.array, repeats=2,
                         gemm_sizes=(8, 32), stream_bytes=(4096, 65536), link_bytes=65536)


def test_the_measurements_are_curves_and_links_the_cost_model_reads():
    rates, up, down = measured_with_numpy()
    (gemm,) = rates.gemm.values()
    (stream,) = rates.stream.values()
    assert gemm.sizes == [2.0 * 8 ** 3, 2.0 * 32 ** 3]
    assert stream.sizes == [2.0 * 4096, 2.0 * 65536]  # a copy: read and written
    assert all(s > 0 for s in gemm.seconds + stream.seconds) and rates.kernel_s > 0
    for link in (up, down):
        assert link.bytes_per_s > 0 and link.latency_s >= 0
    profile = DeviceProfile()
    GpuCalibration("/gpu:1", rates, up, down).apply(profile)
    assert profile.rates("/gpu:1") is rates
    assert profile.host_copies("/cpu:0", "/gpu:1") == [up]
    assert profile.host_copies("/gpu:1", "/cpu:0") == [down]


def test_a_link_is_its_big_copy_less_its_latency():
    from tfc.runtime.calibrate_gpu import _link
    link = _link(10 ** 9, 0.1 + 1e-5, 1e-5)
    assert link.bytes_per_s == pytest.approx(1e10) and link.latency_s == 1e-5
    # a noisy latency never exceeds half the big copy (the bandwidth stays finite)
    assert _link(10 ** 6, 1e-4, 1.0).latency_s == 5e-5


def test_measuring_a_gpu_that_is_not_there_is_a_clear_error(monkeypatch):
    monkeypatch.setattr("tfc.runtime.calibrate_gpu.gpu_count", lambda: 0)
    with pytest.raises(TfcError, match=r"/gpu:0: no such CUDA device here \(0 GPUs visible"):
        measure_gpu("/gpu:0")


def test_calibrate_without_a_gpu_keeps_the_default_gpu_rates(tmp_path, capsys, monkeypatch):
    """``tfc calibrate --devices cpu:0,gpu:0`` on a machine without a GPU measures the
    host, says the GPU keeps default rates, and shows them."""
    import tfc.runtime.calibrate as cal
    real = cal.calibrate
    monkeypatch.setattr(cal, "calibrate", lambda devices, **kw: real(
        devices, repeats=1, gemm_sizes=(32,), gemm_skinny=None, stream_sizes=(4096,), **kw))
    monkeypatch.setattr("tfc.devices.gpu_count", lambda: 0)
    path = tmp_path / "devices.json"
    code = main(["calibrate", "--devices", "cpu:0,gpu:0", "--backend", "reference",
                 "-o", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "/gpu:0: no CUDA device here (0 visible to cupy): the profile keeps the default" in err
    assert "/gpu:0 (default, H100-class)" in out and "host->device 12.0 GB/s" in out
    assert Path(path).exists() and "/gpu:0" not in load_profile(path).devices


def test_calibrate_with_a_gpu_stores_what_it_measured(tmp_path, capsys, monkeypatch):
    """With a GPU there (cupy stood in for by the numpy measurement), its rates and host
    link go into the profile placement reads."""
    import tfc.runtime.calibrate as cal
    real = cal.calibrate
    monkeypatch.setattr(cal, "calibrate", lambda devices, **kw: real(
        devices, repeats=1, gemm_sizes=(32,), gemm_skinny=None, stream_sizes=(4096,), **kw))
    monkeypatch.setattr("tfc.devices.gpu_count", lambda: 1)
    rates, up, down = measured_with_numpy()
    monkeypatch.setattr("tfc.runtime.calibrate_gpu.measure_gpu",
                        lambda d: GpuCalibration(d, rates, up, down))
    path = tmp_path / "devices.json"
    assert main(["calibrate", "--devices", "gpu:0", "--backend", "reference",
                 "-o", str(path)]) == 0
    out, _ = capsys.readouterr()
    assert "/gpu:0 (measured)" in out
    profile = load_profile(path)
    assert profile.rates("/gpu:0").to_dict() == rates.to_dict()
    assert profile.host_link("/gpu:0", to_gpu=True) == up
