"""``tfc calibrate``: the host's curves by op class, size and threads, and its fixed costs."""

import pytest

from tfc.devices import Curve, DeviceProfile, cpu_count, load_profile, save_profile
from tfc.errors import TfcError
from tfc.runtime import calibrate as cal

TINY = {"gemm_sizes": (8, 16), "gemm_skinny": (4, 16), "stream_sizes": (256, 4096),
        "vector_elements": 1024, "gemm_f64_sizes": (4, 8), "linalg_sizes": (4, 8),
        "short_rows": (16,), "passes": 2}


def test_spread_is_min_median_max_of_the_runs():
    s = cal.Spread([3.0, 1.0, 2.0, 10.0, 2.0])
    assert (s.min, s.median, s.max) == (1.0, 2.0, 10.0)
    assert s.relative == pytest.approx(4.5)
    assert cal.Spread([2.0, 2.0]).relative == 0.0


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_calibrate_measures_curves_at_one_thread_and_all_cores(backend, tmp_path):
    result = cal.calibrate(["/cpu:0", "/cpu:1"], backend=backend, repeats=2, cores=2, **TINY)
    p = result.profile
    assert p.calibrated and p.cores == 2 and f"({backend})" in p.source
    assert set(p.cpu.gemm) == set(p.cpu.stream) == {1, 2}
    for curves in (p.cpu.gemm, p.cpu.stream):
        for c in curves.values():
            assert all(t > 0 for t in c.seconds) and c.sizes == sorted(c.sizes)
    # GEMM sizes are flops in whole 8x8 output tiles (two squares and the skinny product:
    # its 4 rows take a tile of 8), stream sizes bytes
    assert p.cpu.gemm[1].sizes == [2.0 * 8 ** 3, 2.0 * 8 * 16 * 16, 2.0 * 16 ** 3]
    # f64 products (a 4x4 one in whole tiles), f64 inverses by their registry flops
    # (2 n^3), a softmax over short rows by its fused kernel's flops
    assert p.cpu.gemm_f64 is not None and p.cpu.linalg is not None
    assert p.cpu.short_row is not None
    assert p.cpu.gemm_f64[1].sizes == [2.0 * 8 * 4 * 8, 2.0 * 8 ** 3]
    assert p.cpu.linalg[1].sizes == [2.0 * 4 ** 3, 2.0 * 8 ** 3]
    (flops,) = p.cpu.short_row[1].sizes
    assert 10 * 16 * cal.SHORT_ROW_WIDTH < flops < 30 * 16 * cal.SHORT_ROW_WIDTH
    for kind in ("gemm_f64", "linalg", "short_row"):
        assert set(getattr(p.cpu, kind)) == {1, 2}
    assert p.cpu.stream[1].sizes == [12.0 * 256, 12.0 * 4096]
    assert p.step_s > 0 and p.cpu.kernel_s > 0 and p.stage_s > 0 and p.handoff_s > 0
    assert p.executor_step_s > 0 and p.transfer_s > 0
    assert p.cpu.kernel_s < p.step_s * 10  # a kernel in a step, not a whole step each
    for name in ("feed_s", "fetch_s", "variable_s", "update_s"):
        assert getattr(p, name) >= 0
    for rate in (p.cpu.vector, p.cpu.serial):
        assert rate is not None and set(rate) == {1, 2}
    # the vector kernel's flops as the registry counts them: 4 x (mul 1 + exp 10) each
    assert p.cpu.vector[1].sizes == [1024 * cal.VECTOR_EXPS * 11.0]
    rows, width = cal.SERIAL_SHAPE
    assert p.cpu.serial[1].sizes == [float(rows * width)]  # a comparison per element
    assert "step 16 feeds" in result.spread_summary()
    assert "gemm 16x16@16x16" in result.spread_summary()
    assert "gemm f64 8x8@8x8" in result.spread_summary()
    assert "linalg inverse f64 8x8" in result.spread_summary()
    assert "short rows softmax 16x10" in result.spread_summary()
    assert "#2" in result.spread_summary()  # the second pass
    assert "executor 16 stages" in result.spread_summary()
    back = load_profile(save_profile(p, tmp_path / "p.json"))
    assert back == p


def test_fixed_costs_are_the_slopes_of_feeds_fetches_variables_and_kernels():
    """From typical runs (seconds): the step with one feed and one fetch, with IO_COUNT
    feeds, IO_COUNT fetches, IO_COUNT variables read, IO_COUNT updated, and TINY_KERNELS
    adds as separate kernels against the same adds fused (same feeds and fetches)."""
    n, k = cal.IO_COUNT, cal.TINY_KERNELS
    times = {"step": 3e-6, "feeds": 3e-6 + (n - 1) * 3e-7, "fetches": 3e-6 + (n - 1) * 1e-7,
             "variables": 3e-6 + n * 2e-7, "updates": 3e-6 + n * 7e-7,
             "fused": 40e-6, "kernels": 40e-6 + (k - 1) * 5e-8}
    f = cal.fixed_costs(times)
    assert f.feed_s == pytest.approx(3e-7) and f.fetch_s == pytest.approx(1e-7)
    assert f.step_s == pytest.approx(3e-6 - 4e-7)  # no feed, no fetch
    assert f.variable_s == pytest.approx(2e-7) and f.update_s == pytest.approx(5e-7)
    assert f.kernel_s == pytest.approx(5e-8)  # not (kernels - step) / k: 0.6 us here
    assert f.step(2, 1) == pytest.approx(f.step_s + 2 * 3e-7 + 1e-7)
    # noise that makes a slope negative reads as no cost, never a negative one
    f = cal.fixed_costs({**times, "feeds": 2e-6, "fused": 41e-6, "kernels": 40e-6})
    assert f.feed_s == 0.0 and f.kernel_s > 0 and f.step_s > 0


def test_calibrate_defaults_to_this_hosts_cores():
    p = cal.calibrate(backend="reference", repeats=1, **TINY).profile
    assert p.cores == cpu_count() and set(p.cpu.gemm) >= {1, cpu_count()}


def test_calibrate_needs_a_run_and_local_cpus():
    with pytest.raises(TfcError, match="at least one run"):
        cal.calibrate(["/cpu:0"], repeats=0)
    with pytest.raises(TfcError, match="at least one pass"):
        cal.calibrate(["/cpu:0"], passes=0)
    with pytest.raises(TfcError, match="local CPU devices"):
        cal.calibrate(["/job:w/task:1/cpu:0"])


def test_handoff_is_a_ping_pong_between_two_threads():
    assert 0 < cal.measure_handoff(rounds=20) < 0.1


def test_a_default_profile_says_it_is_one():
    assert not DeviceProfile().calibrated
    assert "run `tfc calibrate`" in DeviceProfile().describe()


def test_a_curve_of_several_passes_is_their_median_point_by_point():
    """A pass that a neighbour's burst slowed moves no point of the curve."""
    passes = [Curve([1.0, 2.0], [1.0, 4.0]), Curve([1.0, 2.0], [9.0, 2.0]),
              Curve([1.0, 2.0], [2.0, 3.0])]
    assert cal.median_curve(passes) == Curve([1.0, 2.0], [2.0, 3.0])
    with pytest.raises(ValueError, match="same sizes"):
        cal.median_curve([Curve([1.0], [1.0]), Curve([2.0], [1.0])])


def test_threads_must_speed_up_a_big_gemm():
    one = Curve([1e3, 1e8], [1e-6, 1e-2])
    assert cal.threads_helped(one, Curve([1e3, 1e8], [1e-6, 0.55e-2]))
    assert not cal.threads_helped(one, Curve([1e3, 1e8], [1e-6, 1e-2]))  # one thread's rate
    assert not cal.threads_helped(one, Curve([1e3, 1e8], [1e-6, 2e-2]))  # slower


def test_a_threaded_pass_no_faster_than_one_thread_is_measured_again(monkeypatch):
    """The passes at 2 threads read a big GEMM at one thread's rate (a neighbour held the
    other core) until the third: calibrate measures again (within MAX_EXTRA_PASSES) and
    the 2-thread GEMM curve is that of the pass where the threads helped, not the median
    of passes that all said "no faster than one thread"."""
    measured = {1: 0, 2: 0}
    real = cal._ThreadJobs.measure

    def fake(self, base, fixed, tag):
        curves = real(self, base, fixed, tag)
        measured[self.threads] += 1
        sizes = self.passes["gemm"][-1].sizes
        per_flop = 0.5e-9 if self.threads == 2 and measured[2] >= 3 else 1e-9
        self.passes["gemm"][-1] = Curve(list(sizes), [per_flop * x for x in sizes])
        return curves

    monkeypatch.setattr(cal._ThreadJobs, "measure", fake)
    p = cal.calibrate(["/cpu:0", "/cpu:1"], backend="reference", repeats=1, cores=2,
                      **{**TINY, "passes": 2}).profile
    assert measured == {1: 2, 2: 3}  # one pass more at 2 threads
    big = p.cpu.gemm[1].sizes[-1]
    assert p.cpu.gemm[2].at(big) == pytest.approx(0.5 * p.cpu.gemm[1].at(big))


def test_the_hand_off_is_measured_in_the_executors_own_steps(monkeypatch):
    """The stage is what a link of the executor's chain leaves after its hand-off, so the
    hand-off is taken from the same runs (their trace), not from a ping-pong apart from
    them that a moment's load moved (calibrations a minute apart read the stage at
    0.1-12 us): a ping-pong that reads 1 ms changes neither; the crowded hand-off
    (twice as many devices as cores) is measured too, and is never the cheaper."""
    monkeypatch.setattr(cal, "measure_handoff", lambda rounds=200: 1e-3)
    p = cal.calibrate(["/cpu:0", "/cpu:1"], backend="llvm", repeats=2, cores=2,
                      **TINY).profile
    assert 0 < p.handoff_s < 1e-3
    assert p.crowded_handoff_s is not None and p.crowded_handoff_s >= p.handoff_s
    assert p.stage_s > 0


def test_executor_hand_offs_come_from_its_trace_and_need_the_executor():
    program = cal._hops_program(4, 2, cal.get_backend("llvm"))
    feeds = cal._feeds([(4,)])
    waits = cal.executor_handoffs(program, "hops", feeds, runs=3)
    assert waits and all(0 < w < 1.0 for w in waits)
    one = cal._hops_program(4, 1, cal.get_backend("llvm"))
    assert cal.executor_handoffs(one, "hops", feeds, runs=2) == []


def test_a_steps_fixed_costs_are_its_median_runs_not_its_fastest(monkeypatch):
    """The model predicts the median step (``tfc bench``): fixed costs of a few
    microseconds read at the runs' 10th percentile left the smallest models (ridge_gd,
    a 5 us step) predicted 0.75-0.9 of their median. Here every program's runs have a
    10th percentile of 1 us and a median of 3 us: the fixed costs are read at 3."""
    def measure(self, keep=False, median=False):
        out = {label: 3e-6 if median else 1e-6 for label in self.jobs}
        if not keep:
            self.jobs = {}
        return out

    monkeypatch.setattr(cal._Bench, "measure", measure)
    fixed = cal.measure_fixed(cal.get_backend("reference"), repeats=1, spreads={}, rounds=2)
    assert fixed.step_s == pytest.approx(3e-6)
    assert fixed.feed_s == fixed.fetch_s == 0.0
