"""Cost-model placement: constraints, colocation, the greedy choice, the report."""

import numpy as np
import pytest

import tfc
from tfc.devices import DeviceProfile, DeviceRates, LinkRates
from tfc.errors import TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, VariableDecl
from tfc.ir.types import DType, TensorType
from tfc.passes import run_passes
from tfc.passes.placement import place_graph
from tfc.testing import split_mlp_module

DEVICES = ["/cpu:0", "/cpu:1"]


def profile(link_bw=1e10, latency=1e-6, fast=None, cores=2):
    """A 2-core host whose kernels are single-threaded work (a second thread adds nothing:
    splitting independent work over the logical CPUs is what can pay), hand-offs between
    its devices taking ``latency``."""
    rates = DeviceRates.flat(1e10, 1e10, 1e-6)
    devices = {fast: DeviceRates.flat(1e12, 1e12, 1e-6)} if fast else {}
    return DeviceProfile(devices, {}, LinkRates(link_bw, latency), source="test",
                         cores=cores, cpu=rates, step_s=1e-6, stage_s=1e-6,
                         handoff_s=latency)


def two_branches():
    """Two independent matmul chains joined at the end: parallel work for two devices."""
    g = Graph("g")
    t = TensorType(DType.f32, (256, 256))
    a, c = g.add_arg(t, "a"), g.add_arg(t, "c")
    b = Builder(g)
    x, y = a, c
    for _ in range(4):
        x, y = b("matmul", x, x), b("matmul", y, y)
    g.set_results([b("add", x, y)])
    return g


def test_independent_branches_spread_over_devices_and_beat_one_device():
    g = two_branches()
    report = place_graph(g, DEVICES, profile(), {})
    assert {op.device for op in g.ops if op.kind == "matmul"} == set(DEVICES)
    assert report.estimated_s < 0.7 * report.single_device_s
    assert report.ops_per_device["/cpu:0"] + report.ops_per_device["/cpu:1"] == len(g.ops)


def test_when_greedy_loses_to_a_baseline_the_baseline_is_placed():
    # greedy cannot foresee the join, so it splits the branches and then pays one
    # latency of the slow link (> 1 s); one device needs no transfer: it must win
    g = two_branches()
    report = place_graph(g, DEVICES, profile(link_bw=1e3, latency=1.0), {})
    assert report.greedy_s > 1.0
    assert report.chosen == "single device" and report.single_device == "/cpu:0"
    assert report.estimated_s == report.single_device_s < 0.1
    assert report.estimated_s <= min(report.candidates.values())
    assert report.transfers == 0 and {op.device for op in g.ops} == {"/cpu:0"}
    assert "by single device on /cpu:0 (greedy: " in report.summary()


def test_baselines_keep_scopes_and_colocation_and_never_win_by_breaking_them():
    """A worker device behind a slow link, a scope pinning the first layer there: every
    candidate keeps the pin and the variables' colocation, and the chosen estimate is at
    most each candidate's (``tfc compile --devices cpu:0,/job:worker/task:1/cpu:0``)."""
    devices = ["/cpu:0", "/job:worker/task:1/cpu:0"]
    slow = DeviceProfile({}, {}, LinkRates(1e6, 1e-3), cpu=DeviceRates.flat(1e10, 1e10, 1e-6))
    m = split_mlp_module(["/job:worker/task:1/cpu:0", None])
    m.devices = devices
    for g in m.graphs.values():
        report = place_graph(g, devices, slow, m.variables)
        assert report.estimated_s <= min(report.candidates.values())
        assert report.estimated_s == report.candidates[report.chosen]
        for op in g.ops:
            if op.kind.startswith("var."):
                assert op.device == m.variables[op.attrs["var"]].device
    assert m.variables["w0"].device == "/job:worker/task:1/cpu:0"  # its scope, kept


def test_a_chain_stays_on_one_device():
    g = Graph("chain")
    t = TensorType(DType.f32, (128, 128))
    x = g.add_arg(t, "x")
    b = Builder(g)
    for _ in range(6):
        x = b("tanh", b("matmul", x, x))
    g.set_results([x])
    report = place_graph(g, DEVICES, profile(), {})
    assert len({op.device for op in g.ops}) == 1 and report.transfers == 0


def test_a_much_faster_device_takes_the_work():
    g = two_branches()
    place_graph(g, DEVICES, profile(fast="/cpu:1"), {})
    assert all(op.device == "/cpu:1" for op in g.ops if op.kind == "matmul")


def test_scopes_pin_and_variables_colocate_with_their_ops():
    m = split_mlp_module(["/cpu:1", None])
    m.devices = DEVICES
    run_passes(m, "placement")
    graph = m.graphs["train"]
    for op in graph.ops:
        if op.kind.startswith("var."):
            assert op.device == m.variables[op.attrs["var"]].device
    assert m.variables["w0"].device == "/cpu:1"  # its scope
    by_var = {}
    for op in graph.ops:
        if op.kind.startswith("var."):
            by_var.setdefault(op.attrs["var"], set()).add(op.device)
    assert all(len(ds) == 1 for ds in by_var.values())
    report = m.placement_reports["train"]
    assert "estimated step" in report.summary() and "round robin" in report.summary()


def test_a_scope_naming_a_device_the_module_lacks_is_a_located_error():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [2], name="x")
        with tfc.device("/cpu:5"):
            y = x * 2.0
        tfc.entry("f", feeds={"x": x}, fetches={"y": y})
    m = g.as_module()
    m.devices = DEVICES
    with pytest.raises(TfcError, match=r"/cpu:5.*compiled for /cpu:0, /cpu:1") as e:
        run_passes(m, "placement")
    assert "test_placement.py" in str(e.value)


def test_placed_modules_print_and_parse_with_their_devices():
    from tfc.ir.parser import parse_module
    m = split_mlp_module([None])
    m.devices = DEVICES
    run_passes(m, "canonicalize,cse,dce,placement")
    text = str(m)
    back = parse_module(text)
    assert str(back) == text
    assert {op.device for op in back.graphs["train"].ops} <= set(DEVICES)
    np.testing.assert_equal(len(back.graphs["train"].ops), len(m.graphs["train"].ops))


def two_core_scaling_host():
    """A 2-core host whose kernels use both cores well (BLAS and split loops): one device
    with 2 threads does what two devices with 1 thread each do, without hand-offs."""
    return DeviceProfile({}, {}, source="test", cores=2,
                         cpu=DeviceRates.flat(2e11, 2e10, 4e-7, cores=2), step_s=5e-6,
                         executor_step_s=3e-5, stage_s=2e-6, handoff_s=9e-6, transfer_s=1e-6)


def test_a_64_layer_chain_on_two_logical_cpus_of_two_cores_stays_on_one_device():
    """Issue 16: greedy split this chain 391/586 (each device modelled at the host's full
    rate, transfers as copies) and ran 2x slower. Two devices of a 2-core host have one
    thread each; one device alone has both, so nothing is gained by splitting."""
    m = run_passes(split_mlp_module([None], sizes=(256,) * 65, stddev=None),
                   "canonicalize,cse,dce")
    g = m.graphs["train"]
    report = place_graph(g, DEVICES, two_core_scaling_host(), m.variables)
    assert report.chosen == "single device" and report.transfers == 0
    assert len({op.device for op in g.ops}) == 1
    assert report.estimated_s < report.greedy_s
    assert report.estimated_s == min(report.candidates.values())


def test_two_towers_of_single_threaded_work_split_only_when_it_pays():
    """Kernels that gain nothing from a second thread: two devices run the towers side by
    side. Kernels that scale with threads: one device with both cores does as well
    without the executor's costs, so the towers stay together."""
    g = two_branches()
    split = place_graph(g, DEVICES, profile(), {})
    assert {op.device for op in g.ops if op.kind == "matmul"} == set(DEVICES)
    assert split.chosen == "greedy" and split.estimated_s < 0.7 * split.single_device_s
    g = two_branches()
    together = place_graph(g, DEVICES, two_core_scaling_host(), {})
    assert together.chosen == "single device" and len({op.device for op in g.ops}) == 1


def test_more_devices_than_cores_compete_with_greedy_on_as_many_devices_as_cores():
    g = two_branches()
    devices = [f"/cpu:{i}" for i in range(4)]
    report = place_graph(g, devices, profile(), {})
    assert set(report.candidates) == {"greedy", "greedy on 2 devices", "single device",
                                      "round robin"}
    assert report.estimated_s == min(report.candidates.values())
    text = report.summary()
    for name in report.candidates:
        assert name in text
    assert "calibrated rates (test, 2 cores)" in text


def test_the_summary_says_when_the_rates_are_defaults():
    g = two_branches()
    report = place_graph(g, DEVICES, DeviceProfile(), {})
    assert "default rates" in report.summary() and "run `tfc calibrate`" in report.summary()


def test_a_split_the_model_calls_a_little_faster_stays_on_one_device():
    """The model predicts splits too fast (the executor's stages, hand-offs and the
    kernels' contention), so a split must beat one device by SPLIT_MARGIN; with measured
    op times (profile-guided placement, which then measures the result) by any amount."""
    from tfc.passes.cost_model import MeasuredCosts
    from tfc.passes.placement import SPLIT_MARGIN
    g = two_branches()
    host = profile()
    base = place_graph(two_branches(), DEVICES, host, {})  # the split: 2 stages a device
    host.stage_s += 1e-4  # each stage's Python work takes its turn on the interpreter lock:
    slope = (place_graph(two_branches(), DEVICES, host, {}).greedy_s - base.greedy_s) / 1e-4
    host.stage_s += (0.85 * base.single_device_s - base.greedy_s) / slope - 1e-4
    report = place_graph(g, DEVICES, host, {})  # a split, but by less than the margin
    assert (1 - SPLIT_MARGIN) * report.single_device_s < report.greedy_s \
        < report.single_device_s
    assert report.chosen == "single device" and len({op.device for op in g.ops}) == 1
    g = two_branches()
    measured = place_graph(g, DEVICES, host, {}, measured=MeasuredCosts(1, {}))
    assert measured.chosen == "greedy" and len({op.device for op in g.ops}) == 2


def test_model_and_runtime_agree_on_which_devices_run_the_step():
    """A variable pinned to /cpu:1 with every matmul on /cpu:0: the runtime partitions the
    entry and runs the executor with one thread per device; the model must simulate the
    same (it used to skip devices whose ops are all free and simulate one program)."""
    from tfc.passes.cost_model import CostModel
    from tfc.passes.placement import simulate
    from tfc.pipeline import Target, lower
    from tfc.runtime import Program
    rng = np.random.default_rng(0)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 64], name="x")
        with g.device("/cpu:1"):
            w = tfc.Variable(rng.normal(size=(64, 64)).astype(np.float32), name="w")
        with g.device("/cpu:0"):
            h = tfc.matmul(x, w)
            for _ in range(3):
                h = tfc.nn.relu(tfc.matmul(h, w))
        tfc.entry("predict", feeds={"x": x}, fetches={"h": h})
    low = lower(g.as_module(), Target("llvm", tuple(DEVICES)))
    graph = low.graphs["predict"]
    assign = {op: op.device for op in graph.ops}
    assert set(assign.values()) == set(DEVICES)
    from tfc.devices import cpu_count
    # the model's host is this one (the runtime shares this machine's cores): both devices
    # compute, so each gets half of them (1 on 2 cores, 8 on 16)
    sim = simulate(CostModel(profile(cores=cpu_count())), graph, assign, DEVICES)
    exe = Program(low, backend="reference")._executable("predict")
    assert ("predict" in low.partitions) == sim.executor == True  # noqa: E712
    share = max(1, cpu_count() // 2)
    assert sim.threads == exe.threads == {"/cpu:0": share, "/cpu:1": share}


def test_assign_places_as_the_baselines_keeping_the_constraints():
    """``assign`` is what the benchmark forces (round robin, all on one device): the
    placer's own baselines, a variable's ops kept on one device."""
    from pathlib import Path
    from tfc.compiler.driver import load_source
    from tfc.passes.placement import ROUND_ROBIN, assign
    ridge = Path(__file__).resolve().parents[2] / "examples" / "ridge_gd.py"
    module = load_source(ridge)
    graph = module.entries["train_step"]
    assign(graph, DEVICES, ROUND_ROBIN, module.variables)
    assert {op.device for op in graph.ops} == set(DEVICES)
    homes: dict[str, set[str]] = {}
    for op in graph.ops:
        if op.kind.startswith("var."):
            homes.setdefault(op.attrs["var"], set()).add(op.device)
    assert homes and all(len(d) == 1 for d in homes.values())  # a variable's ops together
    assert all(module.variables[v].device in d for v, d in homes.items())
    fresh = load_source(ridge)
    assign(fresh.entries["train_step"], DEVICES, "/cpu:1", fresh.variables)
    assert {op.device for op in fresh.entries["train_step"].ops} == {"/cpu:1"}
    with pytest.raises(TfcError, match="no placement 'sideways'"):
        assign(fresh.entries["train_step"], DEVICES, "sideways", fresh.variables)


def wide_mlp_train(batch=1024, sizes=(784, 2048, 2048, 10)):
    """A training step of a wide MLP at a fixed batch: GEMM-heavy work."""
    m = split_mlp_module([None], sizes=sizes)
    g = m.entries["train"]
    return m, g


def test_cpu_and_gpu_by_the_cost_model_dense_layers_go_to_the_gpu():
    """``--devices cpu:0,gpu:0`` with the default rates (an H100-class card on PCIe,
    a 4-core host): a wide MLP's GEMMs belong on the GPU."""
    m, g = wide_mlp_train()
    report = place_graph(g, ["/cpu:0", "/gpu:0"], DeviceProfile(), m.variables)
    on = {op.device for op in g.ops if op.kind == "matmul"}
    assert on == {"/gpu:0"}, report.summary()


def test_a_tiny_graph_stays_on_the_cpu_rather_than_pay_the_gpus_launches_and_copies():
    """A few small ops: each GPU kernel costs a launch and the feeds a PCIe copy, more
    than the CPU's whole work."""
    g = Graph("g")
    x = g.add_arg(TensorType(DType.f32, (8, 8)), "x")
    b = Builder(g)
    g.set_results([b("add", b("matmul", x, x), x)])
    place_graph(g, ["/cpu:0", "/gpu:0"], DeviceProfile(), {})
    assert {op.device for op in g.ops} == {"/cpu:0"}


def scan_graph():
    g = tfc.Graph()
    with g.as_default():
        xs = tfc.placeholder(tfc.float32, [64, 256, 256], name="xs")
        w = tfc.constant(np.ones((256, 256), np.float32))
        ys = tfc.scan(lambda h, x: tfc.nn.relu(tfc.matmul(h + x, w)), xs,
                      initializer=tfc.zeros([256, 256]))
        tfc.entry("f", feeds={"xs": xs}, fetches={"ys": ys})
    return g.as_module().entries["f"]


def test_control_flow_stays_off_the_gpu_when_a_cpu_is_there():
    """The CUDA backend runs a graph with a scan on the reference backend: placement
    keeps the scan on the CPU, and on GPUs alone lets the backend deal with it."""
    gpu_fast = DeviceProfile()
    gpu_fast.devices["/gpu:0"] = DeviceRates.flat(1e15, 1e14, 1e-7)  # would win anything
    graph = scan_graph()
    place_graph(graph, ["/cpu:0", "/gpu:0"], gpu_fast, {})
    assert [op.device for op in graph.ops if op.kind == "scan"] == ["/cpu:0"]
    graph = scan_graph()
    place_graph(graph, ["/gpu:0"], gpu_fast, {})
    assert {op.device for op in graph.ops} == {"/gpu:0"}


def test_what_placement_gives_a_gpu_the_cuda_backend_runs():
    """Every op kind placement may put on a GPU beside a CPU is one the CUDA backend runs
    (a fusion member, a view, a variable op, or its own ``how_to_run``): else the whole
    graph would fall back to the reference backend. ``GPU_HOST_ONLY`` holds every kind
    it does not run (and the linear-algebra ops, which it runs on the host)."""
    pytest.importorskip("tfc.backends.cuda.backend")
    from tfc.backends.cuda.backend import how_to_run
    from tfc.ir import registry
    from tfc.ir.registry import BROADCAST, COMPOSITE, ELEMENTWISE, REDUCTION, VIEW, lookup
    from tfc.ops.fusion import INDEXED
    from tfc.passes.placement import GPU_HOST_ONLY, can_run
    not_placed = {"send", "recv", "fusion"}  # made by partition and fusion, after placement
    not_placed.add("optimizer.grad")  # an identity the fusion pass removes: no backend runs it
    fused = (ELEMENTWISE, BROADCAST, REDUCTION, COMPOSITE, VIEW)
    runs = {k for k in registry._REGISTRY
            if how_to_run(k) is not None or k in INDEXED
            or any(lookup(k).has(t) for t in fused)}
    placed = set(registry._REGISTRY) - not_placed
    assert {k for k in placed if can_run(k, "/gpu:0")} <= runs
    assert placed - runs <= GPU_HOST_ONLY <= placed


def three_stages():
    """Two devices, three stages with feeds, fetches, a variable read and one updated;
    the graph and its placement."""
    t = TensorType(DType.f32, (4,))
    g = Graph("g")
    x, y = g.add_arg(t, "x"), g.add_arg(t, "y")
    b = Builder(g)
    w = b("var.read", var="w", result_types=[t])
    a = b("add", x, w)           # /cpu:0 stage 0: feed x, variable w; a leaves it
    yy = b("add", y, y)          # /cpu:1 stage 0: feed y; yy is sent
    s = b("add", a, yy)          # /cpu:0 stage 1: a, yy in; s fetched
    b.op("var.assign_sub", s, var="v")  # ... and v updated
    g.set_results([s])
    return g, {op: "/cpu:1" if op is yy.op else "/cpu:0" for op in g.ops}


def test_each_executor_stage_pays_for_its_feeds_fetches_variables_and_updates():
    """A stage is a compiled graph the executor calls, so it pays what a one-device step
    pays for what crosses its boundary (``CostModel.boundary_seconds``): without it a
    split into many stages looked cheaper than it ran once a kernel cost ~0."""
    from tfc.passes.cost_model import CostModel
    from tfc.passes.placement import simulate
    g, assign = three_stages()

    def host(**io):
        return DeviceProfile({}, {}, source="test", cores=2,
                             cpu=DeviceRates.flat(1e10, 1e10, 1e-7), step_s=1e-6,
                             executor_step_s=1e-5, stage_s=1e-6, handoff_s=1e-3,
                             transfer_s=1e-6, **io)

    costs = dict(feed_s=1e-5, fetch_s=2e-5, variable_s=3e-5, update_s=4e-5)
    sim = simulate(CostModel(host(**costs)), g, assign, DEVICES)
    assert sim.executor
    assert sim.stage_boundary_seconds() == pytest.approx({
        ("/cpu:0", 0): 1e-5 + 2e-5 + 3e-5,
        ("/cpu:1", 0): 1e-5 + 2e-5,
        ("/cpu:0", 1): 2 * 1e-5 + 2e-5 + 3e-5 + 4e-5})
    free = simulate(CostModel(host()), g, assign, DEVICES)
    # the critical path: /cpu:1's stage after /cpu:0's first (their Python work takes
    # turns on the interpreter lock), the 1 ms hand-off, /cpu:0's second stage
    assert sim.makespan - free.makespan == pytest.approx(6e-5 + 3e-5 + 1.1e-4)


def test_the_simulated_stage_boundaries_are_those_of_the_stage_graphs_the_executor_runs():
    """The simulation counts each stage's feeds, fetches and variables as
    ``tfc.passes.partition.cut_stages`` builds the stage graphs."""
    from tfc.ir.core import Module
    from tfc.passes.cost_model import CostModel, variables_of
    from tfc.passes.partition import cut_stages, partition_module, stage_numbers
    from tfc.passes.placement import simulate
    g, assign = three_stages()
    t = TensorType(DType.f32, (4,))
    m = Module()
    m.variables.update(w=VariableDecl("w", t, device="/cpu:0"),
                       v=VariableDecl("v", t, device="/cpu:0"))
    m.add_graph(g)
    m.devices = list(DEVICES)
    for op, device in assign.items():
        op.device = device
    profile = DeviceProfile({}, {}, source="test", cores=2,
                            cpu=DeviceRates.flat(1e10, 1e10, 1e-7), feed_s=1.0, fetch_s=1e3,
                            variable_s=1e6, update_s=1e9)
    want = simulate(CostModel(profile), g, assign, DEVICES).stage_boundary_seconds()
    parts = partition_module(m, g.name)
    stage_of = stage_numbers(parts)
    got = {}
    for device, part in parts.items():
        for st in cut_stages(part, stage_of):
            if st.graph.ops:
                used, written = variables_of(st.graph.ops)
                got[(device, st.index)] = (len(st.graph.args) + 1e3 * len(st.graph.results)
                                           + 1e6 * len(used) + 1e9 * len(written))
    assert got == want and len(got) == 3  # whole numbers of seconds: exact


def test_the_stages_python_work_takes_turns_on_the_interpreter_lock():
    """Each device's executor thread runs its stage's Python work (the call, its
    arguments and results, sends and receives) holding the interpreter lock, and only
    the stage's kernels (native code) side by side: two independent stages of 1 ms of
    Python work take 2 ms on two devices, not 1; two of 6.7 ms of kernels still overlap."""
    from tfc.passes.cost_model import CostModel
    from tfc.passes.placement import simulate

    def two_independent(kind, shape):
        g = Graph("g")
        t = TensorType(DType.f32, shape)
        a, c = g.add_arg(t, "a"), g.add_arg(t, "c")
        b = Builder(g)
        x, y = b(kind, a, a), b(kind, c, c)
        g.set_results([x, y])
        return g, {x.op: DEVICES[0], y.op: DEVICES[1]}

    def host(stage_s):
        return DeviceProfile({}, {}, source="test", cores=2,
                             cpu=DeviceRates.flat(1e10, 1e10, 1e-7, cores=2), step_s=1e-6,
                             executor_step_s=1e-5, stage_s=stage_s, handoff_s=1e-6,
                             transfer_s=1e-6)

    g, assign = two_independent("add", (4,))
    sim = simulate(CostModel(host(1e-3)), g, assign, DEVICES)
    assert sim.staged_finish() == pytest.approx(2e-3 + 1e-7)
    g, assign = two_independent("matmul", (256, 256))
    sim = simulate(CostModel(host(1e-6)), g, assign, DEVICES)
    kernel = 2 * 256 ** 3 / 5e9  # one matmul at one thread of two
    assert sim.staged_finish() == pytest.approx(2e-6 + kernel)
