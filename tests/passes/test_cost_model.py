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


def test_a_scan_costs_its_body_once_per_step():
    """An LSTM's step is nearly all scans: costed by the registry's bytes moved, the
    two-tower example's scans came out ~1/30 of their measured time."""
    import tfc
    from tfc.ir.registry import lookup
    g = tfc.Graph()
    with g.as_default():
        xs = tfc.placeholder(tfc.float32, [32, 64, 256], name="xs")
        w = tfc.constant(np.ones((256, 256), np.float32))
        ys = tfc.scan(lambda h, x: tfc.nn.relu(tfc.matmul(h + x, w)), xs,
                      initializer=tfc.zeros([64, 256]))
        tfc.entry("f", feeds={"xs": xs}, fetches={"ys": ys})
    graph = g.as_module().entries["f"]
    (scan,) = [op for op in graph.ops if op.kind == "scan"]
    model = CostModel(two_core_host())
    body = scan.regions[0]
    device_of = {o: "/cpu:0" for o in body.ops}
    one_step = sum(model.op_seconds_in(o, body, 2, "/cpu:0", device_of) for o in body.ops)
    assert one_step >= 2 * 64 * 256 * 256 / 1e11  # the body's matmul, at least
    assert model.op_seconds(scan, 2) == pytest.approx(32 * (one_step + 1e-6))
    registry = lookup("scan").cost([v.type for v in scan.inputs],
                                   [r.type for r in scan.results], scan.attrs, 1)
    assert model.op_seconds(scan, 2) > 5 * registry.bytes / 1e10  # what it was costed


def test_a_cpu_gpu_edge_costs_the_host_link_copy_of_its_bytes():
    """The CUDA backend takes and returns host arrays: an edge into or out of a GPU is a
    host<->device copy (latency plus bytes over the measured link), f16 bytes when
    compressed; GPU to GPU crosses the host twice. CPU to CPU stays a hand-off."""
    profile = two_core_host(handoff_s=2e-5)
    profile.links["host->/gpu:0"] = LinkRates(1e10, 1e-5)
    profile.links["/gpu:0->host"] = LinkRates(5e9, 2e-5)
    model = CostModel(profile)
    big = matmul_graph(m=1024, k=8, n=1024).ops[0].result
    nbytes = 1024 * 1024 * 4
    assert model.transfer_seconds(big, "/cpu:0", "/gpu:0", False) == pytest.approx(
        2e-5 + 1e-5 + nbytes / 1e10)
    assert model.transfer_seconds(big, "/gpu:0", "/cpu:1", False) == pytest.approx(
        2e-5 + 2e-5 + nbytes / 5e9)
    assert model.transfer_seconds(big, "/gpu:0", "/cpu:1", True) == pytest.approx(
        2e-5 + 2e-5 + nbytes / 2 / 5e9)
    # an unmeasured GPU takes the default PCIe link, both copies
    from tfc.devices import DEFAULT_HOST_LINK as L
    assert model.transfer_seconds(big, "/gpu:0", "/gpu:1", False) == pytest.approx(
        2e-5 + 2e-5 + nbytes / 5e9 + L.latency_s + nbytes / L.bytes_per_s)
    assert model.transfer_seconds(big, "/cpu:0", "/cpu:1", False) == 2e-5


def test_a_gpu_costs_ops_on_its_own_curves_with_no_share_of_the_cores():
    """A GPU's matmul runs at its own GEMM rate (the profile's, else the H100-class
    defaults), not the host's, and its work is not spread over the host's cores."""
    gpu = DeviceRates.flat(1e13, 1e12, 1e-5)
    profile = two_core_host()
    profile.devices["/gpu:0"] = gpu
    model = CostModel(profile)
    g = matmul_graph(m=1024, k=1024, n=1024)
    flops = 2.0 * 1024 ** 3
    assert model.op_seconds(g.ops[0], 1, "/gpu:0") == pytest.approx(flops / 1e13)
    assert model.op_seconds(g.ops[0], 1, "/cpu:0") == pytest.approx(flops / 5e10)
    default = CostModel(two_core_host()).op_seconds(g.ops[0], 1, "/gpu:1")
    assert flops / default > 10e12  # the default card: tens of TFLOP/s at this size


def test_a_gpus_kernels_do_not_count_as_the_hosts_work():
    """A CPU and a GPU working at once: the step is the longer of the two, not the sum of
    their work spread over the host's cores (a GPU's kernels use none of them)."""
    profile = two_core_host()
    profile.devices["/gpu:0"] = DeviceRates.flat(1e11, 1e12, 1e-6)  # as fast as the host
    g = Graph("g")
    t = TensorType(DType.f32, (512, 512))
    a, c = g.add_arg(t, "a"), g.add_arg(t, "c")
    b = Builder(g)
    x, y = b("matmul", a, a), b("matmul", c, c)
    g.set_results([b("add", x, y)])
    x.op.device, y.op.device = "/cpu:0", "/gpu:0"
    g.ops[-1].device = "/cpu:0"
    kernel = 2.0 * 512 ** 3 / 1e11  # each matmul, on its device (the CPU with both cores)
    est = estimate_placed(g, ["/cpu:0", "/gpu:0"], profile=profile)
    assert kernel < est < 1.2 * kernel  # GPU work counted on the host: >= 1.5 * kernel


def _with_vector(profile, vector_flops_per_s=None, serial_flops_per_s=None):
    """``profile`` with measured vector and serial rates (flops per second at 1 and 2
    threads alike)."""
    rates = profile.cpu
    if vector_flops_per_s is not None:
        rates.vector = {1: Curve.rate(vector_flops_per_s)}
    if serial_flops_per_s is not None:
        rates.serial = {1: Curve.rate(serial_flops_per_s)}
    return profile


def unary_graph(kind, shape=(1024,)):
    g = Graph("u")
    x = g.add_arg(TensorType(DType.f32, shape), "x")
    g.set_results([Builder(g)(kind, x)])
    return g


def test_a_compute_heavy_op_costs_its_flops_at_the_vector_rate_when_that_is_slower():
    """An exp counts 10 flops an element in the registry: at 1 GFLOP/s, 1024 of them take
    10.24 us, longer than their 8 KB take to stream at 10 GB/s (0.82 us); an add stays
    costed by its bytes. Without a measured vector rate (an older profile) both are
    costed by bytes, as before."""
    model = CostModel(_with_vector(two_core_host(), 1e9), symbol_size=64)
    exp = unary_graph("exp").ops[0]
    assert model.op_seconds(exp, 1) == pytest.approx(10 * 1024 / 1e9)
    neg = unary_graph("neg").ops[0]
    assert model.op_seconds(neg, 1) == pytest.approx(8 * 1024 / 1e10 * 2)  # 1 of 2 threads
    plain = CostModel(two_core_host(), symbol_size=64)
    assert plain.op_seconds(unary_graph("exp").ops[0], 1) == pytest.approx(8 * 1024 / 5e9)


def test_a_fusion_counts_the_flops_of_the_ops_it_fuses():
    """The fused kernel of an exp/tanh/neg chain is costed by its region's flops (not the
    registry's default of one flop per result element) when they take longer than its
    bytes."""
    g = elementwise_chain(n=4)
    m = Module()
    m.add_graph(g.clone())
    (fusion,) = run_passes(m, "fusion").graphs["f"].ops
    model = CostModel(_with_vector(two_core_host(), 1e9))
    region_flops = sum(model.cost(op).flops for op in fusion.regions[0].ops)
    assert region_flops > 20 * 256  # tanh 20, exp 10 an element
    assert model.cost(fusion).flops == region_flops
    assert model.op_seconds(fusion, 1) == pytest.approx(region_flops / 1e9)


def test_an_unfused_op_joining_a_kernel_still_pays_its_compute():
    """As placed (before fusion) the chain's exps and tanhs join the first op's kernel:
    their bytes are the kernel's, but each one's flops still take their time."""
    g = elementwise_chain(n=4)
    model = CostModel(_with_vector(two_core_host(), 1e9))
    device_of = {op: "/cpu:0" for op in g.ops}
    tanh = [op for op in g.ops if op.kind == "tanh"][1]  # the second: inside the kernel
    assert model.op_seconds_in(tanh, g, 1, "/cpu:0", device_of) == \
        pytest.approx(20 * 256 / 1e9)


def test_an_arg_reduction_costs_its_comparisons_at_the_serial_rate():
    """argmax is one dependent loop per result, which the backend does not vectorize:
    its 64x10 comparisons at the measured serial rate, not its 64 results."""
    g = Graph("a")
    x = g.add_arg(TensorType(DType.f32, (64, 10)), "x")
    g.set_results([Builder(g)("argmax", x, axis=1)])
    model = CostModel(_with_vector(two_core_host(), 1e11, 1e8))
    assert model.cost(g.ops[0]).flops == 640
    assert model.op_seconds(g.ops[0], 1) == pytest.approx(640 / 1e8)


def test_a_one_device_step_pays_for_each_feed_fetch_variable_and_update():
    """The fixed cost of a step grows with what crosses into and out of the native
    program: 2 feeds, 1 fetch, 2 variables used (one read, one written)."""
    from tfc.ir.core import VariableDecl
    profile = two_core_host(step_s=1e-6, feed_s=1e-7, fetch_s=2e-7, variable_s=3e-7,
                            update_s=4e-7)
    g = Graph("s")
    t = TensorType(DType.f32, (4,))
    x, y = g.add_arg(t, "x"), g.add_arg(t, "y")
    b = Builder(g)
    w = b("var.read", var="w", result_types=[t])
    s = b("add", b("add", x, y), w)
    b.op("var.assign_sub", s, var="v")
    g.set_results([s])
    m = Module()
    m.variables.update(w=VariableDecl("w", t), v=VariableDecl("v", t))
    m.add_graph(g)
    model = CostModel(profile)
    want = 1e-6 + 2 * 1e-7 + 1 * 2e-7 + 2 * 3e-7 + 1 * 4e-7
    assert model.step_seconds(g) == pytest.approx(want)
    kernels = estimate_placed(g, ["/cpu:0"], profile=two_core_host(step_s=0.0))
    assert estimate_placed(g, ["/cpu:0"], profile=profile) == pytest.approx(want + kernels)
    measured = CostModel(profile, measured=MeasuredCosts(threads=2, seconds={}, step_s=9e-6))
    assert measured.step_seconds(g) == 9e-6  # a profiling run's fixed cost holds them all


def test_a_scan_body_costs_the_fused_kernels_it_lowers_to():
    """The placer sees the scan before fusion; its body runs as the fused kernels the
    fusion pass makes of it, each reading its inputs once. Costed op by op, each
    element-wise op of an LSTM-like cell read ``h`` and ``x`` again."""
    import tfc
    g = tfc.Graph()
    with g.as_default():
        xs = tfc.placeholder(tfc.float32, [16, 64, 256], name="xs")
        w = tfc.constant(np.ones((256, 256), np.float32))

        def cell(h, x):
            z = tfc.matmul(h, w) + x
            return tfc.tanh(z) * tfc.sigmoid(z + h) + h * x - x

        ys = tfc.scan(cell, xs, initializer=tfc.zeros([64, 256]))
        tfc.entry("f", feeds={"xs": xs}, fetches={"ys": ys})
    module = g.as_module()
    (scan,) = [op for op in module.entries["f"].ops if op.kind == "scan"]
    profile = _with_vector(two_core_host(), 1e11)
    placed = CostModel(profile).op_seconds(scan, 2)
    fused_module = run_passes(module, "fusion")
    (fused_scan,) = [op for op in fused_module.entries["f"].ops if op.kind == "scan"]
    assert any(op.kind == "fusion" for op in fused_scan.regions[0].ops)
    assert placed == pytest.approx(CostModel(profile).op_seconds(fused_scan, 2), rel=1e-6)


def _square(kind, n=8, dtype=DType.f64):
    g = Graph("l")
    x = g.add_arg(TensorType(dtype, (n, n)), "x")
    g.set_results([Builder(g)(kind, x)])
    return g.ops[0]


def test_a_matrix_inverse_costs_its_flops_on_the_linalg_curve():
    """A small inverse is LAPACK calls (8x8: 0.7 us here) whose bytes stream in 0.02 us:
    with a measured linalg curve it costs its registry flops (2 n^3) there; without one
    (an older profile) by its bytes, as before. A determinant takes the same curve."""
    profile = two_core_host()
    profile.cpu.linalg = {1: Curve.rate(2e9)}
    model = CostModel(profile)
    assert model.op_seconds(_square("matrix_inverse", 32), 1) == pytest.approx(
        2 * 32 ** 3 / 2e9)
    assert model.op_seconds(_square("matrix_determinant", 32), 1) == pytest.approx(
        2 / 3 * 32 ** 3 / 2e9)
    plain = CostModel(two_core_host())
    assert plain.op_seconds(_square("matrix_inverse", 32), 1) == pytest.approx(
        2 * 32 * 32 * 8 / 1e10 * 2)  # bytes in and out at 1 of 2 threads' stream rate


def test_an_f64_matmul_costs_its_flops_on_the_f64_gemm_curve():
    """f64 products run on half the SIMD lanes: with a measured f64 GEMM curve they take
    it, an f32 product keeps the f32 curve; without one both take the f32 curve."""
    def product(dtype):
        g = Graph("m")
        x = g.add_arg(TensorType(dtype, (64, 64)), "x")
        g.set_results([Builder(g)("matmul", x, x)])
        return g.ops[0]

    profile = two_core_host()
    profile.cpu.gemm_f64 = {1: Curve.rate(2.5e10), 2: Curve.rate(5e10)}
    model = CostModel(profile)
    flops = 2 * 64 ** 3
    assert model.op_seconds(product(DType.f64), 2) == pytest.approx(flops / 5e10)
    assert model.op_seconds(product(DType.f32), 2) == pytest.approx(flops / 1e11)
    plain = CostModel(two_core_host())
    assert plain.op_seconds(product(DType.f64), 2) == pytest.approx(flops / 1e11)


def test_a_matmul_with_a_narrow_output_costs_whole_tiles():
    """A GEMM computes its output in register tiles: 64x64 @ 64x10 (10 classes) takes
    the time of 64x64 @ 64x16 (measured 1.5x its flops on the square curve), a
    matrix-vector product that of 8 columns; dims of whole tiles cost their flops."""
    model = CostModel(two_core_host(), symbol_size=64)
    narrow = matmul_graph(m=64, k=64, n=10).ops[0]
    assert model.op_seconds(narrow, 2) == pytest.approx(2 * 64 * 64 * 16 / 1e11)
    vector = matmul_graph(m=256, k=512, n=1).ops[0]
    assert model.op_seconds(vector, 2) == pytest.approx(2 * 256 * 512 * 8 / 1e11)
    batch = matmul_graph(batch="B", k=64, n=10).ops[0]  # the symbol counts as 64 rows
    assert model.op_seconds(batch, 2) == pytest.approx(2 * 64 * 64 * 16 / 1e11)


def _reduction(kind, shape, **attrs):
    g = Graph("r")
    x = g.add_arg(TensorType(DType.f32, shape), "x")
    g.set_results([Builder(g)(kind, x, **attrs)])
    return g


def test_a_reduction_over_short_rows_costs_its_flops_at_the_short_row_rate():
    """A softmax over 10 classes runs each row's phases in loops too short to vectorize
    (~5 GFLOP/s here against ~50 on a flat kernel; 0.2 and 2 in this test): its flops
    at the measured short-row rate, unfused as the placer sees it and as the fused
    kernel; a softmax over 64-wide rows keeps the vector rate. A sum over the batch of
    10-wide rows (a bias gradient) has a short inner loop too; over 256-wide rows it
    does not. Without a measured short-row rate (an older profile), the vector rate as
    before."""
    profile = _with_vector(two_core_host(), 2e9)
    profile.cpu.short_row = {1: Curve.rate(2e8)}
    model = CostModel(profile)
    short = _reduction("softmax", (64, 10), axis=1)
    flops = model.cost(short.ops[0]).flops
    assert model.short_rows(short.ops[0])
    assert model.op_seconds(short.ops[0], 1) == pytest.approx(flops / 2e8)
    m = Module()
    m.add_graph(_reduction("softmax", (64, 10), axis=1))
    (fusion,) = run_passes(m, "fusion").graphs["r"].ops
    assert model.short_rows(fusion)
    assert model.op_seconds(fusion, 1) == pytest.approx(model.cost(fusion).flops / 2e8)
    wide = _reduction("softmax", (64, 64), axis=1)
    assert not model.short_rows(wide.ops[0])
    assert model.op_seconds(wide.ops[0], 1) == pytest.approx(
        model.cost(wide.ops[0]).flops / 2e9)
    assert model.short_rows(_reduction("sum", (64, 10), axes=(0,)).ops[0])
    assert not model.short_rows(_reduction("sum", (64, 256), axes=(0,)).ops[0])
    plain = CostModel(_with_vector(two_core_host(), 2e9))
    assert plain.op_seconds(short.ops[0], 1) == pytest.approx(flops / 2e9)


def test_a_hand_off_costs_more_when_the_devices_outnumber_the_cores():
    """Round robin over four logical CPUs of a 2-core host: each hand-off finds its
    receiver's thread descheduled more often than not (measured 13-26 us against 7-8 us
    for two devices), so the model charges the crowded hand-off there, and the plain one
    over two devices."""
    model = CostModel(two_core_host(handoff_s=1e-5, crowded_handoff_s=4e-5))
    v = matmul_graph(m=1, k=1, n=1).ops[0].result
    assert model.transfer_seconds(v, "/cpu:0", "/cpu:1", False, devices=2) == 1e-5
    assert model.transfer_seconds(v, "/cpu:0", "/cpu:1", False, devices=4) == 4e-5
    g = Graph("chain")
    x = g.add_arg(TensorType(DType.f32, (4,)), "x")
    b = Builder(g)
    y = x
    for i in range(8):
        y = b("add", y, x)
        y.op.device = f"/cpu:{i % 4}"
    g.set_results([y])
    devices = [f"/cpu:{i}" for i in range(4)]
    plain = estimate_placed(g, devices, profile=two_core_host(handoff_s=1e-5))
    crowded = estimate_placed(g, devices, profile=two_core_host(handoff_s=1e-5,
                                                                crowded_handoff_s=4e-5))
    assert crowded == pytest.approx(plain + 7 * 3e-5)  # 7 hand-offs on the critical path
    two = [f"/cpu:{i % 2}" for i in range(8)]
    for op, d in zip(g.ops, two):
        op.device = d
    assert estimate_placed(g, devices[:2], profile=two_core_host(
        handoff_s=1e-5, crowded_handoff_s=4e-5)) == pytest.approx(
        estimate_placed(g, devices[:2], profile=two_core_host(handoff_s=1e-5)))
