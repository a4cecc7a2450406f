"""Profile-guided placement (``tfc.runtime.pgo``, ``tfc compile --profile-runs``).

The mapping from kernels to the ops of the unfused graph is exact bookkeeping: every op
gets a time (0 when it has no kernel), a kernel that computes several ops (a fusion, a
GEMM that also updates its weight) is split over them in proportion to the estimates,
and the times add up to the kernels'. No test here asserts a speed.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

import tfc
from tfc.backends.llvm import LLVMBackend
from tfc.cli import main
from tfc.devices import DeviceProfile, DeviceRates, LinkRates, load_profile
from tfc.ir.core import Module
from tfc.passes.cost_model import CostModel, MeasuredCosts, op_signature
from tfc.passes.fusion import fused_ops
from tfc.pipeline import Target, lower, run_pipeline
from tfc.runtime import Program, load
from tfc.runtime.executor import PartitionedExecutable
from tfc.passes.placement import estimate_placed
from tfc.passes.replicate import strip_module_markers
from tfc.runtime.pgo import (EntryProfile, measured_costs, op_times, pin_unplaced,
                             profile_entry, unfused_graph, unfused_ops)

RNG = np.random.default_rng(7)
FEEDS = {"x": RNG.normal(size=(16, 6)).astype(np.float32),
         "y": RNG.integers(0, 3, 16).astype(np.int32)}


def _module(devices: tuple[str, str] | None = None) -> Module:
    """A two-layer classifier trained by SGD; with ``devices``, layer 1 and its update
    pinned to the first and layer 2 to the second (so the step is partitioned)."""
    scopes = devices or (None, None)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 6], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        with tfc.device(scopes[0]):
            w0 = tfc.Variable(RNG.normal(0, 0.5, (6, 8)).astype(np.float32), name="w0")
            h = tfc.nn.relu(tfc.matmul(x, w0) + 0.1)
        with tfc.device(scopes[1]):
            w1 = tfc.Variable(RNG.normal(0, 0.5, (8, 3)).astype(np.float32), name="w1")
            loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=tfc.matmul(h, w1)))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(
            loss, colocate_gradients_with_ops=True)
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    return g.as_module()


def _optimized(devices: tuple[str, str] | None = None) -> tuple[Module, list]:
    """The module after the optimization passes, and its entry's ops then (the unfused
    ops a profile maps kernels back to), without the optimizer's gradient markers: the
    identities lowering removes first (``fusion``), which have no kernel to map."""
    m = run_pipeline(_module(devices), "canonicalize,cse,dce")
    strip_module_markers(m)
    return m, list(m.graphs["train"].ops)


def _weight(op) -> float:
    return 1.0 + len(op.inputs)  # any positive estimate: the split must follow it


def test_every_op_gets_a_time_and_the_times_add_up_to_the_kernels():
    m, before = _optimized()
    lowered = lower(m, Target("llvm"), passes="")
    program = Program(lowered, None, backend=LLVMBackend(profile=True))
    for _ in range(2):
        program.run("train", FEEDS)
    exe = program._executable("train")
    steps, spans, kernel_ops = exe.step_times(), exe.kernel_times(), exe.kernel_ops()
    assert len(spans) == len(kernel_ops) == exe.report.kernels
    # the kernels are among the steps, with the same ops and times; the rest are copies
    kernels = [(ops, a, b) for (_, a, b), ops in zip(spans, kernel_ops)]
    assert all(k in steps for k in kernels) and len(steps) > len(kernels)
    times = op_times(steps, _weight, exe.graph)

    assert set(before) <= set(times)  # every op of the unfused graph, fused or not
    assert set(times) == set(unfused_ops(exe.graph))
    assert math.isclose(sum(times.values()), sum(e - s for ops, s, e in steps if ops),
                        rel_tol=1e-9, abs_tol=1e-12)
    fusions = [ops for ops in kernel_ops if ops[0].kind == "fusion"]
    assert fusions and any(len(fused_ops(ops[0])) > 1 for ops in fusions)
    # a step working for several ops is split in proportion to the estimates
    covering: dict = {}
    for ops, _, _ in steps:
        for s in {x for o in ops for x in fused_ops(o)}:
            covering[s] = covering.get(s, 0) + 1
    checked = 0
    for ops, start, end in steps:
        members = list(dict.fromkeys(s for op in ops for s in fused_ops(op)))
        if len(members) > 1 and all(covering[s] == 1 for s in members):
            total = sum(_weight(s) for s in members)
            for s in members:
                assert math.isclose(times[s], (end - start) * _weight(s) / total,
                                    rel_tol=1e-9, abs_tol=1e-15)
            checked += 1
    assert checked
    # ops that emit no kernel (reads of variables) cost nothing
    reads = [op for op in before if op.kind == "var.read"]
    assert reads and all(times[op] == 0.0 for op in reads)


def test_a_fused_entry_is_estimated_as_the_placer_saw_it():
    """The estimates of a lowered entry simulate its unfused graph: fusions' sources,
    the other ops wired back from the fusions' results to the values they stand for."""
    m, before = _optimized()
    estimate = estimate_placed(m.graphs["train"], ["/cpu:0"], 16)
    lowered = lower(m, Target("llvm"), passes="")
    graph = lowered.graphs["train"]
    assert any(op.kind == "fusion" for op in graph.ops)
    unfused, copy_of = unfused_graph(graph)
    assert sorted(op.kind for op in unfused.ops) == sorted(op.kind for op in before)
    assert set(copy_of) == set(unfused_ops(graph)) and "fusion" not in \
        {op.kind for op in unfused.ops}
    assert estimate_placed(unfused, ["/cpu:0"], 16) == estimate


def test_a_gemm_that_updates_its_weight_stands_for_the_update_ops():
    m, before = _optimized()
    lowered = lower(m, Target("llvm"), passes="")
    exe = Program(lowered, None, backend=LLVMBackend(profile=True))
    exe.run("train", FEEDS)
    kernel_ops = exe._executable("train").kernel_ops()
    folded = [ops for ops in kernel_ops if len(ops) > 1]
    assert folded, "the SGD updates fold into their GEMMs (gemm_update)"
    for ops in folded:
        assert ops[0].kind == "matmul"
        assert ops[-1].kind in ("var.assign_sub", "var.assign_add")
    assigns = [op for op in before if op.kind == "var.assign_sub"]
    covered = {s for ops in kernel_ops for op in ops for s in fused_ops(op)}
    assert assigns and set(assigns) <= covered


def test_profile_of_a_partitioned_step_covers_every_stage():
    devices = ("/cpu:0", "/cpu:1")
    m, before = _optimized(devices)
    lowered = lower(m, Target("llvm", devices), passes="")
    program = Program(lowered, None, backend=LLVMBackend(profile=True))
    exe = program._executable("train")
    assert isinstance(exe, PartitionedExecutable)
    model = CostModel(load_profile(), symbol_size=16)
    prof = profile_entry(program, "train", FEEDS, 3, model, warmup=1)

    assert prof.executor and len(prof.step_s) == 3
    assert prof.threads == min(exe.threads.values())  # what the executor gave the devices
    stage_ops = {op for plan in exe.plans for st in plan.stages if st.graph is not None
                 for op in unfused_ops(st.graph)}
    assert set(prof.op_seconds) == stage_ops
    assert {op.kind for op in stage_ops} >= {op.kind for op in before}
    for i in range(3):  # per step, the ops' times add up to the kernels'
        step = sum(v[i] for v in prof.op_seconds.values())
        assert math.isclose(step, prof.kernel_s[i], rel_tol=1e-9, abs_tol=1e-12)
        assert prof.kernel_s[i] <= prof.step_s[i]
    # values cross devices: every transfer was received (waited for, or already there)
    assert prof.lookup_s and len(prof.lookup_s) >= len(prof.handoff_s)

    costs = measured_costs([prof], 16)
    assert costs.symbol_size == 16 and costs.threads == prof.threads
    assert costs.handoff_s is not None and costs.handoff_s >= 0
    # wall less the native span, a fixed cost of the executor's step, not a one-device one
    assert costs.executor_step_s is not None and costs.executor_step_s >= 0
    assert costs.step_s is None
    sigs = {op_signature(op, 16) for op in stage_ops}
    assert set(costs.seconds) == sigs


def _doubling_model(symbol_size: int = 64) -> CostModel:
    """A 2-core host whose rates double from 1 thread to 2 (no kernel-start floor)."""
    return CostModel(DeviceProfile({}, {}, LinkRates(1e9, 1e-4), source="test", cores=2,
                                   cpu=DeviceRates.flat(1e11, 1e10, 1e-15, cores=2)),
                     symbol_size)


def test_measured_costs_take_medians_by_signature():
    m, ops = _optimized()
    a, b = [op for op in ops if op.kind == "matmul"][:2]
    one = EntryProfile("f", threads=1, executor=False,
                       op_seconds={a: [1.0, 5.0, 3.0], b: [2.0, 2.0, 2.0]},
                       fixed_s=[4e-6, 6e-6, 5e-6], lookup_s=[1e-6])
    two = EntryProfile("g", threads=1, executor=True, op_seconds={a: [7.0]},
                       fixed_s=[1.0], handoff_s=[3e-5, 1e-5, 2e-5])
    costs = measured_costs([one, two], 64, model=_doubling_model())
    sa, sb = op_signature(a, 64), op_signature(b, 64)
    if sa == sb:
        assert costs.seconds == {sa: 2.5}  # median of 1, 5, 3, 2, 2, 2, 7
    else:
        assert costs.seconds == {sa: 4.0, sb: 2.0}
    assert costs.threads == 1
    assert costs.handoff_s == 2e-5  # transfers that were waited for
    only_lookups = measured_costs([one], 64, model=_doubling_model())
    assert only_lookups.handoff_s == 1e-6 and only_lookups.threads == 1


def test_measured_costs_scale_op_times_to_one_thread_count():
    """A split entry's ops ran at one thread each, a one-device entry's at two: a sample
    at two threads is scaled by the curves (here 2x) to one thread before the median,
    not pooled as if both were taken at one."""
    m, ops = _optimized()
    a = next(op for op in ops if op.kind == "matmul")
    split = EntryProfile("train", threads=1, executor=True, op_seconds={a: [3.0, 3.0]})
    alone = EntryProfile("predict", threads=2, executor=False, op_seconds={a: [1.0, 1.0]})
    costs = measured_costs([split, alone], 64, model=_doubling_model())
    assert costs.threads == 1
    assert costs.seconds == {op_signature(a, 64): pytest.approx(2.5)}  # of 3, 3, 2, 2
    assert costs.threads == 1


def test_measured_fixed_costs_are_kept_apart_for_one_device_and_the_executor():
    """The fixed cost of a one-device step (ms on a big model: Program.run, updates)
    replaces the model's ``step_s`` only; the executor's its ``executor_step_s``."""
    m, ops = _optimized()
    one = EntryProfile("predict", threads=2, executor=False, kernel_s=[1.0] * 3,
                       fixed_s=[4e-3, 6e-3, 5e-3])
    split = EntryProfile("train", threads=1, executor=True, kernel_s=[1.0] * 3,
                         fixed_s=[2e-5, 3e-5, 1e-5])
    costs = measured_costs([one, split], 64, model=_doubling_model())
    assert costs.step_s == pytest.approx(5e-3) and costs.executor_step_s == pytest.approx(2e-5)
    model = CostModel(_doubling_model().profile, 64, measured=costs)
    assert model.step_s == pytest.approx(5e-3)
    assert model.executor_step_s == pytest.approx(2e-5)
    only_split = measured_costs([split], 64, model=_doubling_model())
    assert only_split.step_s is None
    model = CostModel(_doubling_model().profile, 64, measured=only_split)
    assert model.step_s == _doubling_model().profile.step_s  # the profile's: not measured


def test_the_cost_model_scales_measured_times_to_its_batch():
    m, ops = _optimized()
    matmul = next(op for op in ops if op.kind == "matmul" and op.inputs[0].type.shape[0] == "B")
    profile = load_profile()
    measured = MeasuredCosts(threads=1, seconds={op_signature(matmul, 64): 1e-3},
                             symbol_size=64)
    at_64 = CostModel(profile, symbol_size=64, measured=measured)
    at_128 = CostModel(profile, symbol_size=128, measured=measured)
    assert at_64.op_seconds(matmul, 1) == 1e-3
    curves = CostModel(profile, 128).op_seconds(matmul, 1) / \
        CostModel(profile, 64).op_seconds(matmul, 1)
    assert curves > 1
    assert math.isclose(at_128.op_seconds(matmul, 1), 1e-3 * curves, rel_tol=1e-9)
    # a signature measured at another batch is not taken for this one's
    assert CostModel(profile, 128, MeasuredCosts(1, {op_signature(matmul, 128): 9.0},
                                                 symbol_size=64)).op_seconds(
        matmul, 1) != 9.0


MODEL = textwrap.dedent("""
    import numpy as np
    import tfc
    rng = np.random.default_rng(3)
    x = tfc.placeholder(tfc.float32, [None, 12], name="x")
    y = tfc.placeholder(tfc.int32, [None], name="y")
    h = x
    for i in range(3):
        w = tfc.Variable(rng.normal(0, 0.3, (12, 12)).astype(np.float32), name=f"w{i}")
        h = tfc.nn.relu(tfc.matmul(h, w))
    v = tfc.Variable(rng.normal(0, 0.3, (12, 4)).astype(np.float32), name="v")
    logits = tfc.matmul(h, v)
    loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits))
    train = tfc.train.GradientDescentOptimizer(0.05).minimize(loss)
    tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss},
              targets=[train])
    tfc.entry("predict", feeds={"x": x}, fetches={"logits": logits})
""")


def test_compile_profile_runs_reports_and_writes_an_equivalent_artifact(tmp_path, capsys):
    src = tmp_path / "model.py"
    src.write_text(MODEL)
    out, plain = tmp_path / "pgo.tfc", tmp_path / "plain.tfc"
    assert main(["compile", str(src), "--backend", "llvm", "--devices", "cpu:0,cpu:1",
                 "--profile-runs", "2", "--profile-batch", "8", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "profile-guided placement: 2 profiled and 2 timed steps" in text
    assert "batch 8" in text and "ops with measured costs" in text
    for entry in ("@train_step", "@predict"):
        assert f"{entry}" in text
    assert "before" in text and "kept: the " in text
    assert main(["compile", str(src), "--backend", "llvm", "--devices", "cpu:0,cpu:1",
                 "-q", "-o", str(plain)]) == 0

    feeds = {"x": RNG.normal(size=(8, 12)).astype(np.float32),
             "y": RNG.integers(0, 4, 8).astype(np.int32)}
    a, b = load(str(out)), load(str(plain))
    assert a.module.devices == b.module.devices == ["/cpu:0", "/cpu:1"]
    for name in b.variables:  # the profile runs trained twins, not the artifact
        np.testing.assert_array_equal(a.variables[name], b.variables[name])
    for _ in range(3):
        la, lb = a.run("train_step", feeds)["loss"], b.run("train_step", feeds)["loss"]
        np.testing.assert_allclose(la, lb, rtol=1e-5, atol=1e-6)
    x = {"x": feeds["x"]}
    np.testing.assert_allclose(a.run("predict", x)["logits"], b.run("predict", x)["logits"],
                               rtol=1e-5, atol=1e-5)


def _error(capsys, argv) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_profile_runs_on_the_reference_backend_is_a_clear_error(tmp_path, capsys):
    src = tmp_path / "model.py"
    src.write_text(MODEL)
    err = _error(capsys, ["compile", str(src), "--backend", "reference", "--devices",
                          "cpu:0,cpu:1", "--profile-runs", "2", "-o",
                          str(tmp_path / "m.tfc")])
    assert "needs the llvm backend" in err
    assert not (tmp_path / "m.tfc").exists()


@pytest.mark.parametrize("extra, says", [
    (["--profile-runs", "2"], "two or more"),                     # one device
    (["--devices", "cpu:0,cpu:1", "--profile-runs", "0"], "at least 1"),
    (["--devices", "cpu:0,cpu:1", "--profile-runs", "1", "--profile-batch", "0"],
     "at least 1"),
    (["--devices", "cpu:0,cpu:1", "--profile-batch", "8"], "--profile-runs"),
])
def test_profile_options_are_checked_before_any_work(tmp_path, capsys, extra, says):
    src = tmp_path / "model.py"
    src.write_text(MODEL)
    err = _error(capsys, ["compile", str(src), "--backend", "llvm", *extra, "-o",
                          str(tmp_path / "m.tfc")])
    assert says in err


def test_profile_runs_want_the_model_not_an_artifact(tmp_path, capsys):
    src = tmp_path / "model.py"
    src.write_text(MODEL)
    art = tmp_path / "m.tfc"
    assert main(["compile", str(src), "--backend", "llvm", "-q", "-o", str(art)]) == 0
    err = _error(capsys, ["compile", str(art), "--backend", "llvm", "--devices",
                          "cpu:0,cpu:1", "--profile-runs", "1", "-o",
                          str(tmp_path / "again.tfc")])
    assert "model's source" in err


def test_a_fusion_read_back_from_ir_is_its_own_unit():
    """Sources live only in the process that fused: IR read back (an artifact) has none,
    and a fusion is then charged as one op (the placer sees it as one too)."""
    from tfc.ir.bytecode import module_from_bytes, module_to_bytes
    m, _ = _optimized()
    lowered = lower(m, Target("llvm"), passes="")
    again = module_from_bytes(module_to_bytes(lowered))
    fusions = [op for op in again.graphs["train"].ops if op.kind == "fusion"]
    assert fusions and all(fused_ops(op) == (op,) for op in fusions)
    assert unfused_ops(again.graphs["train"]) == list(again.graphs["train"].ops)


def test_placements_are_kept_by_measurement():
    """A split placement (each op pinned in turn to one of two devices) is measured
    against the placer's with the measured costs and against one device; the fastest
    by measurement is kept and runs as the one-device placement does."""
    from tfc.passes.placement import SINGLE_DEVICE
    from tfc.runtime.pgo import AFTER, BEFORE, ONE_DEVICE, fresh_copy, profile_guided_placement
    devices = ("/cpu:0", "/cpu:1")
    target = Target("llvm", devices)
    source = run_pipeline(_module(), "canonicalize,cse,dce")
    split = fresh_copy(source)
    for i, op in enumerate(split.graphs["train"].ops):
        op.device = devices[i % 2]
    before = lower(split, target, passes="")
    assert len({d for _, _, d in before.placement_reports["train"].placement}) == 2

    kept, report = profile_guided_placement(
        source, before, target, lambda m: lower(m, target, passes=""),
        lambda m: Program(m, None), runs=2, batch=16)
    names = [c.name for c in report.candidates]
    assert names[0] == BEFORE
    # one device is always measured: as the placer's choice, or on its own
    assert ONE_DEVICE in names or report.candidate(AFTER).made_by["train"] == SINGLE_DEVICE
    best = min(report.candidates, key=lambda c: c.total_s)
    assert report.kept == best.name
    for c in report.candidates:
        assert set(c.measured_s) == set(c.modelled_s) == set(c.remodelled_s) == {"train"}
    assert report.handoff_s is not None and report.handoffs > 0  # the split one's
    assert report.ops_measured["train"] > 0
    text = "\n".join(report.lines())
    assert f"kept: the {report.kept} placement" in text and "@train" in text
    assert len(report.rows()) == len(report.candidates)

    one = lower(pin_unplaced(fresh_copy(source), devices[0]), target, passes="")
    a, b = Program(kept, None), Program(one, None)
    for _ in range(2):
        np.testing.assert_allclose(a.run("train", FEEDS)["loss"], b.run("train", FEEDS)["loss"],
                                   rtol=1e-5, atol=1e-6)


def test_steps_a_neighbour_stalled_do_not_make_the_costs():
    """A busy host stalls whole steps in bursts; the op costs come from the quieter half
    of the steps (by their ops' total), each op's median over those."""
    m, ops = _optimized()
    a = next(op for op in ops if op.kind == "matmul")
    stalled = EntryProfile("f", threads=1, executor=False,
                           op_seconds={a: [1.0, 16.0, 1.2, 17.0, 0.8, 16.5]},
                           kernel_s=[1.0, 16.0, 1.2, 17.0, 0.8, 16.5])
    assert stalled.quiet_steps() == [0, 2, 4]
    assert measured_costs([stalled], 64).seconds == {op_signature(a, 64): 1.0}
