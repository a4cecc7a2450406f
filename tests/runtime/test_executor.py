"""The local multi-device executor: partitions run concurrently and match one device."""

import numpy as np
import pytest

from tfc.errors import ExecutionError
from tfc.ir.types import DType
from tfc.passes.partition import device_graphs
from tfc.runtime import Program
from tfc.testing import split_mlp_module

RNG = np.random.default_rng(0)
X = RNG.normal(size=(16, 6)).astype(np.float32)
Y = RNG.integers(0, 3, 16).astype(np.int32)
BACKENDS = ["reference", "llvm"]


def train(module, backend, steps=5):
    p = Program(module, backend=backend)
    losses = [float(p.run("train", x=X, y=Y)["loss"]) for _ in range(steps)]
    return p, losses


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dropout", [False, True])
def test_model_parallel_training_matches_one_device(backend, dropout):
    one, want = train(split_mlp_module([None], dropout=dropout), backend)
    m = split_mlp_module(["/cpu:0", "/cpu:1"], dropout=dropout)
    m.devices = ["/cpu:0", "/cpu:1"]
    two, got = train(m, backend)
    # the same ops in the same order on each value: equal up to the summation order of
    # BLAS calls made on different threads (bitwise on the reference backend)
    tol = 0 if backend == "reference" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=0)
    for name, v in one.variables.items():
        np.testing.assert_allclose(two.variables[name], v, rtol=tol, atol=tol)
    assert two.step == 5
    logits = two.run("predict", x=X)["logits"]
    np.testing.assert_allclose(logits, one.run("predict", x=X)["logits"], rtol=tol, atol=tol)


def test_three_devices_and_fp16_transfers_stay_close():
    one, want = train(split_mlp_module([None], sizes=(6, 8, 8, 8, 3)), "llvm")
    m = split_mlp_module(["/cpu:0", "/cpu:1", "/cpu:2"], sizes=(6, 8, 8, 8, 3))
    m.devices = ["/cpu:0", "/cpu:1", "/cpu:2"]
    m.fp16_transfers = True
    p, got = train(m, "llvm")
    exe = p._executable("train")
    sent = [s.inputs[0] for part in device_graphs(p.module, "train").values()
            for s in part.sends]
    weights = [v for v in sent if v.op.kind == "var.read"]  # for backprop: state, kept f32
    assert weights and all(v.dtype is DType.f32 for v in weights)
    assert exe.compression.compressed == exe.compression.transfers - len(weights) > 0
    np.testing.assert_allclose(got, want, rtol=2e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failing_device_fails_the_step_without_hanging_or_updating(backend):
    m = split_mlp_module(["/cpu:0", "/cpu:1"])
    m.devices = ["/cpu:0", "/cpu:1"]
    p = Program(m, backend=backend)
    # llvm: the Program's hot path (the executor's fast_step), as a single-device entry's
    assert (p._runner("train").fast is not None) == (backend == "llvm")
    before = {k: v.copy() for k, v in p.variables.items()}
    bad_labels = np.full(16, 7, np.int32)  # out of range for 3 classes: cpu:1 raises
    with pytest.raises(ExecutionError):
        p.run("train", x=X, y=bad_labels)
    assert p.step == 0
    for k, v in before.items():
        np.testing.assert_array_equal(p.variables[k], v)
    p.run("train", x=X, y=Y)  # and the executor still works
    assert p.step == 1


def lowered(backend, devices=("/cpu:0", "/cpu:1"), fp16=False):
    """The split MLP on ``devices`` (placed by hand) after the partition (and compress)
    passes and the backend's own."""
    from tfc.pipeline import Target, lower
    m = split_mlp_module(list(devices))
    return lower(m, Target(backend, tuple(devices), fp16), passes="", place=False)


def no_passes(monkeypatch):
    """Make running a pass fail the test."""
    import tfc.passes.manager as manager

    def refuse(self, module):
        raise AssertionError(f"a pass ran: {self.passes}")
    monkeypatch.setattr(manager.PassManager, "run", refuse)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_executor_runs_the_table_and_no_pass(backend, monkeypatch):
    """A lowered module runs as its table says, without a pass, with the results of one
    device (bitwise on the reference backend)."""
    initial = dict(Program(split_mlp_module([None]), backend=backend).variables)
    one, want = train(split_mlp_module([None]), backend)
    m = lowered(backend)
    no_passes(monkeypatch)
    two = Program(m, initial, backend=backend)  # (so the __init__ graph needs no compile)
    got = [float(two.run("train", x=X, y=Y)["loss"]) for _ in range(5)]
    assert two.module is m  # nothing to lower: the program runs the module it was given
    exe = two._executable("train")
    assert exe.table is m.partitions["train"]
    compiled = {st.graph.name for plan in exe.plans for st in plan.stages
                if st.executable is not None}
    assert compiled == set(m.partitions["train"].graph_names())
    tol = 0 if backend == "reference" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=0)
    for name, v in one.variables.items():
        np.testing.assert_allclose(two.variables[name], v, rtol=tol, atol=tol)


def test_a_module_not_lowered_for_devices_is_a_clear_error():
    from tfc.errors import TfcError
    from tfc.backends.base import get_backend
    from tfc.runtime.executor import PartitionedExecutable
    m = split_mlp_module(["/cpu:0", "/cpu:1"])
    m.devices = ["/cpu:0", "/cpu:1"]
    with pytest.raises(TfcError, match="not lowered for several devices"):
        PartitionedExecutable(m, "train", get_backend("reference"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_saved_multi_device_program_loads_its_tables_and_runs_the_same(backend, tmp_path,
                                                                        monkeypatch):
    from tfc.runtime import load
    p = Program(lowered(backend, fp16=True), backend=backend)
    p.run("train", x=X, y=Y)
    path = tmp_path / "split.tfc"
    p.save(path)
    no_passes(monkeypatch)  # the artifact keeps the tables and the stages' memory plans
    q = load(path)
    assert q.module.partitions.keys() == {"train", "predict"}
    for entry, table in p.module.partitions.items():
        assert q.module.partitions[entry] == table
    assert list(q.entries) == ["train", "predict"] and q.step == 1
    # bitwise on the reference backend; llvm recompiles the stages (float tolerance)
    tol = 0 if backend == "reference" else 1e-5
    for _ in range(2):
        a, b = p.run("train", x=X, y=Y), q.run("train", x=X, y=Y)
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=tol, atol=0)
    np.testing.assert_allclose(p.run("predict", x=X)["logits"],
                               q.run("predict", x=X)["logits"], rtol=tol, atol=tol)


def test_a_corrupt_partition_table_in_an_artifact_is_a_clear_error(tmp_path):
    import json
    import zipfile
    from tfc.runtime import load
    from tfc.runtime.artifact import ArtifactError
    path = tmp_path / "split.tfc"
    Program(lowered("reference"), backend="reference").save(path)
    bad = tmp_path / "bad.tfc"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "manifest.json":
                manifest = json.loads(data)
                manifest["partitions"]["train"]["devices"][0]["stages"][0]["graph"] = "gone"
                data = json.dumps(manifest).encode()
            dst.writestr(item, data)
    with pytest.raises(ArtifactError, match="bad.tfc: manifest.json: .*no graph @gone"):
        load(bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_entry_on_one_device_runs_as_a_single_device_program(backend, tmp_path, monkeypatch):
    """``predict``'s ops all sit on /cpu:1 (``train``'s loss and gradients on /cpu:0):
    ``predict`` is not partitioned (fp16 transfers compress only ``train``'s) and runs
    as one program (every core, no executor), through save/load (its native code kept)
    and checkpoints, with one device's results."""
    from tfc.backends.base import get_backend
    from tfc.runtime import load
    from tfc.runtime.executor import PartitionedExecutable
    one, _ = train(split_mlp_module([None]), backend, steps=0)
    from tfc.pipeline import Target, lower
    m = lower(split_mlp_module(["/cpu:1"]), Target(backend, ("/cpu:0", "/cpu:1"), True),
              passes="", place=False)
    assert list(m.partitions) == ["train"]  # predict has no table (nor compression)
    assert m.partitions["train"].compressed  # train's transfers are compressed
    two = Program(m, dict(one.variables), backend=backend)
    exe = two._executable("predict")
    assert not isinstance(exe, PartitionedExecutable)
    assert type(exe) is type(get_backend(backend).compile(m, "predict"))
    tol = 0 if backend == "reference" else 1e-5
    np.testing.assert_allclose(two.run("predict", x=X)["logits"],
                               one.run("predict", x=X)["logits"], rtol=tol, atol=tol)
    two.run("train", x=X, y=Y)
    ckpt, step = two.save_checkpoint(tmp_path / "ckpt"), two.step
    path = tmp_path / "m.tfc"
    two.save(path)
    no_passes(monkeypatch)  # the artifact holds the entry's final IR and memory plan
    q = load(path)
    assert not isinstance(q._executable("predict"), PartitionedExecutable)
    assert list(q.module.partitions) == ["train"]
    want = two.run("predict", x=X)["logits"]
    np.testing.assert_allclose(q.run("predict", x=X)["logits"], want, rtol=tol, atol=tol)
    q.run("train", x=X, y=Y)
    q.restore_checkpoint(ckpt)
    assert q.step == step
    np.testing.assert_array_equal(q.run("predict", x=X)["logits"], want)


def test_a_device_without_compute_gets_no_share_of_the_cores(monkeypatch):
    """A table whose /cpu:0 only hands a feed back as a fetch: /cpu:1, the one device
    that computes, gets every core."""
    import tfc.devices
    from tfc.backends.base import get_backend
    from tfc.passes.partition import install_partitions, partition_graph
    from tfc.runtime.executor import PartitionedExecutable
    m = split_mlp_module(["/cpu:1"])
    graph = m.graphs["predict"]
    graph.results.append(graph.args[0])  # fetch x too: the default device hands it back
    graph.result_names.append("x_again")
    m.devices = ["/cpu:0", "/cpu:1"]
    install_partitions(m, "predict", partition_graph(graph.clone(), "/cpu:0"))
    table = m.partitions["predict"]
    assert [d.device for d in table.devices] == ["/cpu:0", "/cpu:1"]
    assert not any(st.graph for st in table.device("/cpu:0").stages)
    monkeypatch.setattr(tfc.devices, "cpu_count", lambda: 4)
    exe = PartitionedExecutable(m, "predict", get_backend("reference"))
    assert exe.threads == {"/cpu:1": 4}
    p = Program(m, backend="reference")
    out = p.run("predict", x=X)
    np.testing.assert_array_equal(out["x_again"], X)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_transfer_hands_the_senders_array_to_the_receiving_stage(backend, monkeypatch):
    """Nothing copies a transferred tensor: the array a stage computed is the very array
    the other device's stage is called with (rendezvous, executor and the stage's own
    binding: the llvm executable's ``fast_step`` takes its data pointer as it is), and
    the rendezvous counts it as a hand-off of its bytes."""
    from tfc.backends.llvm.runtime.executable import LLVMExecutable
    from tfc.backends.reference.backend import ReferenceExecutable
    bound: list[int] = []  # ids of the arrays the executables were called with
    if backend == "llvm":
        fast = LLVMExecutable.fast_step

        def fast_step(self, feeds, *args, **kwargs):
            bound.extend(map(id, feeds))
            return fast(self, feeds, *args, **kwargs)
        monkeypatch.setattr(LLVMExecutable, "fast_step", fast_step)
    else:
        call = ReferenceExecutable.__call__

        def called(self, feeds, *args):
            bound.extend(map(id, feeds))
            return call(self, feeds, *args)
        monkeypatch.setattr(ReferenceExecutable, "__call__", called)
    p = Program(lowered(backend), backend=backend)
    exe = p._executable("train")
    produced: dict[tuple, np.ndarray] = {}
    received: list[tuple[str, np.ndarray]] = []
    for plan in exe.plans:
        for st in plan.stages:
            if st.call is None:
                continue

            def recording(inputs, variables, step, *in_place, inner=st.call, st=st,
                          device=plan.device):
                received.extend((s, a) for s, a in zip(st.inputs, inputs) if isinstance(s, str))
                fetches, updates = inner(inputs, variables, step, *in_place)
                produced.update(((device, s), a) for s, a in zip(st.outputs, fetches))
                return fetches, updates
            st.call = recording
    p.run("train", x=X, y=Y)
    sent = {s.key: (device, (s.value.stage, s.value.output))
            for device, _, s in exe.table.sends()}
    assert received and {key for key, _ in received} <= set(sent)
    for key, array in received:
        assert array is produced[sent[key]], key  # the sender's array itself
        assert id(array) in bound, key            # bound by the receiving stage as it is
    rendezvous = exe.last_rendezvous
    assert rendezvous.handoffs == len(exe.table.sends())
    assert rendezvous.bytes_sent == sum(produced[sent[k]].nbytes for k in sent)


def test_the_executor_checks_feeds_and_variables_once_for_its_stages():
    """Called directly (the ``Executable`` interface), the executor converts what it can
    (a non-contiguous feed or variable) and names what it cannot, before any stage
    takes the arrays as they are (``fast_step``)."""
    from tfc.errors import FeedError
    p = Program(lowered("llvm"), backend="llvm")
    exe = p._executable("predict")
    variables = dict(p.variables)
    want = exe([X], variables, 0).fetches[0]
    wide = np.zeros((16, 12), np.float32)
    wide[:, ::2] = X
    np.testing.assert_array_equal(exe([wide[:, ::2]], variables, 0).fetches[0], want)
    fortran = {**variables, "w0": np.asfortranarray(variables["w0"])}
    np.testing.assert_array_equal(exe([X], fortran, 0).fetches[0], want)
    with pytest.raises(FeedError, match="feed 'x' of @predict has dtype float64"):
        exe([X.astype(np.float64)], variables, 0)
    with pytest.raises(ExecutionError, match=r"variable @w0 is float32\[6,7\]"):
        exe([X], {**variables, "w0": np.zeros((6, 7), np.float32)}, 0)
    with pytest.raises(ExecutionError, match="variable @b0 is not initialized"):
        exe([X], {k: v for k, v in variables.items() if k != "b0"}, 0)


def test_a_native_stage_checks_the_inputs_a_fallback_stage_computed(monkeypatch):
    """A stage that fell back to the interpreter may return arrays of any layout; the
    native stages that take them (directly or received) get C-contiguous arrays."""
    from tfc.backends.llvm.backend import LLVMBackend
    from tfc.backends.reference import ReferenceBackend
    from tfc.backends.base import StepResult

    class Fallback:  # what an llvm executable with unsupported ops runs: the interpreter
        fallback_ops = ["(test)"]

        def __init__(self, module, name):
            self.exe = ReferenceBackend().compile(module, name)

        def __call__(self, feeds, variables, step):
            r = self.exe(feeds, variables, step)
            return StepResult([np.asfortranarray(f) for f in r.fetches], r.updates)

    m = lowered("llvm")
    want = Program(m, backend="llvm").run("predict", x=X)["logits"]
    compile_ = LLVMBackend.compile
    monkeypatch.setattr(LLVMBackend, "compile", lambda self, module, name: (
        Fallback(module, name) if name.endswith(".cpu0.s0") else compile_(self, module, name)))
    p = Program(m, backend="llvm")
    exe = p._executable("predict")
    assert any(isinstance(st.executable, Fallback) for pl in exe.plans for st in pl.stages)
    np.testing.assert_allclose(p.run("predict", x=X)["logits"], want, rtol=1e-6)


def test_partitioned_programs_stepping_at_once_give_openblas_its_thread_count_back():
    """OpenBLAS's thread count is process-wide: each step limits it to the devices' share,
    and two programs whose steps overlap (in any order) leave it where it was."""
    import threading

    from tfc.backends.llvm.runtime.symbols import get_num_threads, set_num_threads, small_gemms

    small_gemms(False)  # (a small step run earlier would hold OpenBLAS at one thread)
    before = get_num_threads()
    set_num_threads(3)  # above any device's share on a 2-core host: a leaked limit shows
    try:
        programs = []
        for _ in range(2):
            m = split_mlp_module(["/cpu:0", "/cpu:1"])
            m.devices = ["/cpu:0", "/cpu:1"]
            programs.append(Program(m, backend="llvm"))
        start = threading.Barrier(2)
        errors = []

        def loop(p):
            try:
                start.wait()
                for _ in range(300):
                    p.run("train", x=X, y=Y)
            except BaseException as e:  # re-raised on the test's thread
                errors.append(e)

        threads = [threading.Thread(target=loop, args=(p,)) for p in programs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        small_gemms(False)  # the MLP's GEMMs are small: one thread, by design (blas_policy)
        assert get_num_threads() == 3
    finally:
        set_num_threads(before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_value_fetched_twice_on_two_devices_comes_back_as_two_arrays(backend):
    """Two fetches of one value are two arrays (as on one device): changing one leaves the
    other as it was."""
    import tfc

    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 6], name="x")
        with g.device("/cpu:0"):
            w0 = tfc.Variable(RNG.normal(size=(6, 8)).astype(np.float32), name="w0")
            h = tfc.nn.relu(tfc.matmul(x, w0))
        with g.device("/cpu:1"):
            w1 = tfc.Variable(RNG.normal(size=(8, 3)).astype(np.float32), name="w1")
            o = tfc.matmul(h, w1)
        tfc.entry("f", feeds={"x": x}, fetches={"a": o, "b": o, "h": h, "h2": h})
    m = g.as_module()
    m.devices = ["/cpu:0", "/cpu:1"]
    p = Program(m, backend=backend)
    want = Program(g.as_module(), backend=backend).run("f", x=X)
    for _ in range(2):  # the first step and the hot path after it
        r = p.run("f", x=X)
        for one, other in (("a", "b"), ("h", "h2")):
            assert not np.shares_memory(r[one], r[other])
            np.testing.assert_allclose(r[one], want[one], rtol=1e-5, atol=1e-5)
            r[one][...] = 0
            np.testing.assert_allclose(r[other], want[other], rtol=1e-5, atol=1e-5)


@pytest.fixture
def stand_in_cuda(monkeypatch):
    from tfc.testing import use_stand_in_cuda
    return use_stand_in_cuda(monkeypatch)


@pytest.mark.parametrize("backend", ["reference", "llvm", "cuda"])
def test_gpu_stages_run_on_the_cuda_backend_and_cpu_stages_on_a_cpu_one(backend,
                                                                         stand_in_cuda):
    """cpu:0/gpu:0: the GPU's stages compile on the CUDA backend, the CPU's on the
    program's backend (llvm when that is cuda), and the step equals one device's."""
    one, want = train(split_mlp_module([None]), "reference")
    m = split_mlp_module(["/cpu:0", "/gpu:0"])
    m.devices = ["/cpu:0", "/gpu:0"]
    p, got = train(m, backend)
    exe = p._executable("train")
    ran = {plan.device: {type(st.executable).__module__.split(".")[2]
                         + ("(cuda)" if getattr(st.executable, "ran_on", None) else "")
                         for st in plan.stages if st.executable is not None}
           for plan in exe.plans}
    cpu = "llvm" if backend == "cuda" else backend
    assert ran == {"/cpu:0": {cpu}, "/gpu:0": {"reference(cuda)"}}
    assert stand_in_cuda.compiled  # the gpu stages were fused and planned for it:
    gpu_stages = [st.graph for plan in exe.plans if plan.device == "/gpu:0"
                  for st in plan.stages if st.graph is not None]
    assert any(op.kind == "fusion" for g in gpu_stages for op in g.ops)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_module_on_gpus_alone_runs_on_cuda_and_initializes_on_the_cpu(stand_in_cuda):
    """GPUs alone: the program's backend is cuda whatever the CPU backend named; the
    ``__init__`` graph (host arrays) computes on the CPU backend, so making the program
    needs no GPU."""
    m = split_mlp_module(["/gpu:0"])
    m.devices = ["/gpu:0"]
    p = Program(m, backend="llvm")
    assert p.backend.name == "cuda" and stand_in_cuda.compiled == []
    one, want = train(split_mlp_module([None]), "reference")
    got = [float(p.run("train", x=X, y=Y)["loss"]) for _ in range(5)]
    assert stand_in_cuda.compiled == ["train"]
    np.testing.assert_allclose(got, want, rtol=1e-5)
