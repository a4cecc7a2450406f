"""The cost model: op costs by class, size and threads; fusion; transfers; measured costs.

Every test builds its profile explicitly: nothing depends on this machine."""

import numpy as np
import pytest

from tfc.devices import Curve, DeviceProfile, DeviceRates, LinkRates
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
from tfc.ir.types import DType, TensorType
from tfc.passes import run_passes
from tfc.passes.cost_model import CostModel, MeasuredCosts, op_signature
from tfc.passes.placement import estimate_placed


def two_core_host(**fixed):
    """A 2-core host whose GEMM and stream rates double from 1 thread to 2."""
    costs = {"step_s": 1e-6, "executor_step_s": 1e-5, "stage_s": 1e-6, "handoff_s": 1e-5,
             "transfer_s": 1e-6, **fixed}
    return DeviceProfile({}, {}, LinkRates(1e9, 1e-4), source="test", cores=2,
                         cpu=DeviceRates.flat(1e11, 1e10, 1e-6, cores=2), **costs)


def matmul_graph(m=64, k=256, n=256, batch=None):
    g = Graph("g")
    x = g.add_arg(TensorType(DType.f32, (batch or m, k)), "x")
    w = g.add_arg(TensorType(DType.f32, (k, n)), "w")
    g.set_results([Builder(g)("matmul", x, w)])
    return g


def test_op_signature_counts_symbols_as_the_batch_and_keys_big_arrays_by_shape():
    g = matmul_graph(batch="B")
    op = g.ops[0]
    assert op_signature(op, 64) == ("matmul(f32[64,256],f32[256,256])->(f32[64,256])"
                                    "{transpose_a=False,transpose_b=False}")
    assert op_signature(op, 64) != op_signature(op, 128)
    assert op_signature(op, 64) == op_signature(matmul_graph(m=64).ops[0], 64)
    c = Graph("c")
    big = np.arange(1000, dtype=np.float32)
    c.set_results([Builder(c)("constant", value=big), Builder(c)("constant", value=big + 1)])
    a, b = (op_signature(o, 1) for o in c.ops)
    assert a == b and "<float32[1000]>" in a  # same shape and dtype: same cost


def test_a_matmul_costs_its_flops_on_the_gemm_curve_and_an_add_its_bytes_on_the_stream():
    model = CostModel(two_core_host(), symbol_size=64)
    mm = matmul_graph().ops[0]
    assert model.op_seconds(mm, 2) == pytest.approx(2 * 64 * 256 * 256 / 1e11)
    g = Graph("e")
    t = TensorType(DType.f32, (1024,))
    x = g.add_arg(t, "x")
    g.set_results([Builder(g)("add", x, x)])
    assert model.op_seconds(g.ops[0], 2) == pytest.approx(12 * 1024 / 1e10)


def test_two_logical_cpus_of_a_two_core_host_each_get_half_the_rate():
    model = CostModel(two_core_host())
    assert model.threads(["/cpu:0", "/cpu:1"]) == {"/cpu:0": 1, "/cpu:1": 1}
    assert model.threads(["/cpu:0"]) == {"/cpu:0": 2}
    mm = matmul_graph().ops[0]
    assert model.op_seconds(mm, 1) == pytest.approx(2 * model.op_seconds(mm, 2))
    # four devices on two cores: one thread each, and the host's work bounds the step
    assert CostModel(two_core_host()).threads([f"/cpu:{i}" for i in range(4)]) == {
        f"/cpu:{i}": 1 for i in range(4)}


def test_measured_costs_replace_the_curves_and_scale_with_threads():
    mm = matmul_graph().ops[0]
    sig = op_signature(mm, 128)
    measured = MeasuredCosts(threads=2, seconds={sig: 7e-5}, handoff_s=3e-6, step_s=9e-6)
    model = CostModel(two_core_host(), measured=measured)
    assert model.op_seconds(mm, 2) == 7e-5
    assert model.op_seconds(mm, 1) == pytest.approx(1.4e-4)  # the curve's 1-thread ratio
    assert model.handoff_s == 3e-6 and model.step_s == 9e-6
    other = matmul_graph(n=128).ops[0]
    assert model.op_seconds(other, 2) == pytest.approx(2 * 64 * 256 * 128 / 1e11)


def test_a_local_transfer_costs_the_hand_off_whatever_its_size_a_remote_one_its_bytes():
    model = CostModel(two_core_host(handoff_s=2e-5))
    small = matmul_graph(m=1, k=1, n=1).ops[0].result
    big = matmul_graph(m=4096, k=8, n=4096).ops[0].result
    for v in (small, big):
        assert model.transfer_seconds(v, "/cpu:0", "/cpu:1", False) == 2e-5
        assert model.transfer_seconds(v, "/cpu:0", "/cpu:0", False) == 0.0
    hosts = ("/job:w/task:0/cpu:0", "/job:w/task:1/cpu:0")
    assert model.transfer_seconds(big, *hosts, False) == pytest.approx(1e-4 + 4096 * 4096 * 4 / 1e9)
    assert model.transfer_seconds(big, *hosts, True) == pytest.approx(1e-4 + 4096 * 4096 * 2 / 1e9)


def elementwise_chain(n=4096, length=6):
    g = Graph("f")
    t = TensorType(DType.f32, (n, 64))
    x = g.add_arg(t, "x")
    b = Builder(g)
    h = x
    for i in range(length):
        h = b(("tanh", "exp", "neg")[i % 3], h)
    g.set_results([b("add", h, x)])
    return g


def test_an_element_wise_chain_costs_what_its_fused_kernel_costs():
    """Placement runs before fusion; the backend runs the chain as one kernel reading x
    and writing the result once. The estimate of the chain as placed matches the
    estimate of the fused graph, where one op per kernel each moving all its bytes would
    charge ~3.5x."""
    profile = two_core_host()
    g = elementwise_chain()
    before = estimate_placed(g, ["/cpu:0"], profile=profile)
    m = Module()
    m.add_graph(g.clone())
    fused = run_passes(m, "fusion").graphs["f"]
    assert [op.kind for op in fused.ops] == ["fusion"]
    after = estimate_placed(fused, ["/cpu:0"], profile=profile)
    assert before == pytest.approx(after, rel=0.05)
    model = CostModel(profile)
    one_kernel_each = profile.step_s + sum(model.op_seconds(op, 2) for op in g.ops)
    assert one_kernel_each > 3 * before


def test_one_device_is_a_one_device_program_with_all_cores():
    profile = two_core_host(step_s=3e-6)
    g = matmul_graph()
    model = CostModel(profile)
    want = 3e-6 + model.op_seconds(g.ops[0], 2)
    assert estimate_placed(g, ["/cpu:0"], profile=profile) == pytest.approx(want)
    for op in g.ops:  # all on one of two devices: the same program, no executor costs
        op.device = "/cpu:1"
    assert estimate_placed(g, ["/cpu:0", "/cpu:1"], profile=profile) == pytest.approx(want)


def test_more_devices_than_cores_cannot_beat_the_hosts_work_over_its_cores():
    """Four towers on four logical CPUs of a 2-core host: each device has one thread,
    but four threads share two cores, so the step is at least the work over 2 cores."""
    profile = DeviceProfile({}, {}, source="test", cores=2, step_s=0, executor_step_s=0,
                            stage_s=0, handoff_s=0, transfer_s=0,
                            cpu=DeviceRates({1: Curve.rate(1e10)}, {1: Curve.rate(1e10)},
                                            1e-9))
    g = Graph("t")
    t = TensorType(DType.f32, (128, 128))
    b = Builder(g)
    outs = []
    for i in range(4):
        x = g.add_arg(t, f"x{i}")
        y = b("matmul", x, x)
        y.op.device = f"/cpu:{i}"
        outs.append(y)
    g.set_results(outs)
    devices = [f"/cpu:{i}" for i in range(4)]
    one = 2 * 128 ** 3 / 1e10
    assert estimate_placed(g, devices, profile=profile) == pytest.approx(4 * one / 2)
