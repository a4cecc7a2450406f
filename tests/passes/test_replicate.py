"""The ``replicate`` pass: N workers give the losses of one process on the same global
batch (ps-sync and allreduce, SGD / Momentum / Adam, both backends), variables placed on
the PS tasks, bad cluster specs as one-line errors, and the gradient markers."""

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError, TfcError
from tfc.ir.core import Module
from tfc.passes.replicate import (ClusterSpec, place_variables, replicate_module,
                                  strip_module_markers)
from tfc.pipeline import Target, lower
from tfc.runtime import Program

RNG = np.random.default_rng(7)
X = RNG.normal(size=(12, 5))
Y = RNG.integers(0, 3, 12).astype(np.int32)
W0 = RNG.normal(0, 0.5, (5, 7))
W1 = RNG.normal(0, 0.5, (7, 3))
IDS = RNG.integers(0, 6, 12).astype(np.int32)
EMB = RNG.normal(0, 0.5, (6, 5))

OPTIMIZERS = {
    "sgd": lambda: tfc.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tfc.train.MomentumOptimizer(0.1, 0.9),
    "adam": lambda: tfc.train.AdamOptimizer(0.05),
}


def inprocess(module: Module, backend: str) -> Program:
    """The one place the tests build a program of a cluster module: every task's devices
    as threads of this process."""
    return Program(module, backend=backend, cluster="inprocess")


def mlp(optimizer="adam", dtype=np.float64, sparse=False) -> Module:
    """A two-layer classifier with a global step (an embedding lookup first: sparse)."""
    tf_dtype = tfc.float64 if dtype == np.float64 else tfc.float32
    with tfc.Graph().as_default() as g:
        if sparse:
            ids = tfc.placeholder(tfc.int32, [None], name="ids")
            emb = tfc.Variable(EMB.astype(dtype), name="emb")
            x = tfc.gather(emb, ids)
            feeds = {"ids": ids}
        else:
            x = tfc.placeholder(tf_dtype, [None, 5], name="x")
            feeds = {"x": x}
        y = tfc.placeholder(tfc.int32, [None], name="y")
        w0 = tfc.Variable(W0.astype(dtype), name="w0")
        w1 = tfc.Variable(W1.astype(dtype), name="w1")
        step = tfc.Variable(np.asarray(0, np.int64), name="global_step", trainable=False)
        logits = tfc.matmul(tfc.nn.relu(tfc.matmul(x, w0)), w1)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        train = OPTIMIZERS[optimizer]().minimize(loss, global_step=step)
        tfc.entry("train", feeds={**feeds, "y": y}, fetches={"loss": loss, "logits": logits},
                  targets=[train])
        tfc.entry("predict", feeds=feeds, fetches={"logits": logits})
    return g.as_module()


def feeds(sparse=False, dtype=np.float64):
    return {"ids": IDS, "y": Y} if sparse else {"x": X.astype(dtype), "y": Y}


def replicated(spec: ClusterSpec, **kw) -> Module:
    """``mlp(**kw)`` through the optimizations, then replicated for ``spec``."""
    m = mlp(**kw)
    m = lower(m, Target("reference"))  # canonicalize, cse, dce: the markers survive them
    replicate_module(m, spec)
    m.lowered_for = None
    return m


def train(program: Program, steps: int, **kw) -> list[dict[str, np.ndarray]]:
    return [program.run("train", **feeds(**kw)) for _ in range(steps)]


def check_matches_one_process(spec, backend, steps=3, rtol=1e-10, dtype=np.float64, **kw):
    one = Program(mlp(dtype=dtype, **kw), backend=backend)
    want = train(one, steps, dtype=dtype, sparse=kw.get("sparse", False))
    many = inprocess(replicated(spec, dtype=dtype, **kw), backend)
    got = train(many, steps, dtype=dtype, sparse=kw.get("sparse", False))
    for w, g in zip(want, got):
        np.testing.assert_allclose(g["loss"], w["loss"], rtol=rtol, atol=rtol)
        np.testing.assert_allclose(g["logits"], w["logits"], rtol=rtol, atol=rtol)
    for name, value in one.variables.items():
        np.testing.assert_allclose(many.variables[name], value, rtol=rtol, atol=rtol,
                                   err_msg=name)
    x = {k: v for k, v in feeds(dtype=dtype, sparse=kw.get("sparse", False)).items()
         if k != "y"}
    np.testing.assert_allclose(many.run("predict", **x)["logits"],
                               one.run("predict", **x)["logits"], rtol=rtol, atol=rtol)
    return many


@pytest.mark.parametrize("backend", ["reference", "llvm"])
@pytest.mark.parametrize("strategy", ["ps-sync", "allreduce"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_workers_give_the_losses_of_one_process(optimizer, strategy, backend):
    spec = ClusterSpec(2 if strategy == "ps-sync" else 0, 3, strategy)
    many = check_matches_one_process(spec, backend, optimizer=optimizer)
    assert int(many.variables["global_step"]) == 3
    if strategy == "allreduce":  # the mirrored copies stay bitwise equal
        for i in (1, 2):
            for name in ("w0", "w1", "global_step"):
                np.testing.assert_array_equal(many.variables[f"{name}/replica_{i}"],
                                              many.variables[name])


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("strategy", ["ps-sync", "allreduce"])
def test_any_number_of_workers(workers, strategy):
    spec = ClusterSpec(1 if strategy == "ps-sync" else 0, workers, strategy)
    check_matches_one_process(spec, "reference", optimizer="adam")


@pytest.mark.parametrize("backend", ["reference", "llvm"])
@pytest.mark.parametrize("strategy", ["ps-sync", "allreduce"])
def test_float32_within_1e_5(strategy, backend):
    spec = ClusterSpec(2 if strategy == "ps-sync" else 0, 2, strategy)
    check_matches_one_process(spec, backend, steps=4, rtol=1e-5, dtype=np.float32,
                              optimizer="momentum")


@pytest.mark.parametrize("backend", ["reference", "llvm"])
@pytest.mark.parametrize("strategy", ["ps-sync", "allreduce"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_sparse_gradients_are_gathered(optimizer, strategy, backend):
    spec = ClusterSpec(2 if strategy == "ps-sync" else 0, 3, strategy)
    check_matches_one_process(spec, backend, optimizer=optimizer, sparse=True)


def test_ps_sync_places_variables_with_their_slots():
    m = replicated(ClusterSpec(2, 2, "ps-sync"))
    dev = {n: d.device for n, d in m.variables.items()}
    # greedy by bytes, in creation order: w0 (+ its two Adam slots) on ps 0, w1 on ps 1
    assert dev["w0"] == dev["w0/Adam"] == dev["w0/Adam_1"] == "/job:ps/task:0/cpu:0"
    assert dev["w1"] == dev["w1/Adam"] == dev["w1/Adam_1"] == "/job:ps/task:1/cpu:0"
    assert m.devices == ["/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0",
                         "/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0"]
    graph = m.graphs["train"]
    assert not [op for op in graph.ops if op.kind == "optimizer.grad"]
    for op in graph.ops:  # every read and update of a variable is on its PS
        if "var" in op.attrs:
            assert op.device == dev[op.attrs["var"]], op
    # workers compute on their shards: each forward matmul twice, once per worker
    first = [op.device for op in graph.ops if op.kind == "matmul" and op.inputs[1].name == "w0"
             and not op.attrs.get("transpose_a")]
    assert first == ["/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0"]


def test_greedy_and_round_robin_placements():
    decls = mlp().variables
    # creation order: emb-less mlp has w0 (35 elems), w1 (21), global_step, beta powers...
    greedy = place_variables(decls, ClusterSpec(2, 1, "ps-sync", "greedy"))
    rr = place_variables(decls, ClusterSpec(2, 1, "ps-sync", "round-robin"))
    assert greedy["w0"] != greedy["w1"]
    # greedy: every small scalar goes to the lighter PS (w1's, 21*8*3 bytes < w0's)
    assert greedy["global_step"] == greedy["w1"] == "/job:ps/task:1/cpu:0"
    assert rr["w0"] == "/job:ps/task:0/cpu:0" and rr["w1"] == "/job:ps/task:1/cpu:0"
    assert rr["global_step"] == "/job:ps/task:0/cpu:0"


def test_user_pins_on_the_ps_are_honoured():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float64, [None, 2], name="x")
        with tfc.device("/job:ps/task:1"):
            w = tfc.Variable(np.ones((2,)), name="w")
        v = tfc.Variable(np.ones((2,)), name="v")
        loss = tfc.reduce_mean(tfc.reduce_sum(x * w * v, axis=1))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss}, targets=[train])
    m = g.as_module()
    replicate_module(m, ClusterSpec(2, 2, "ps-sync"))
    assert m.variables["w"].device == "/job:ps/task:1/cpu:0"
    assert m.variables["v"].device == "/job:ps/task:0/cpu:0"  # ps 1 carries w's bytes
    with pytest.raises(TfcError, match="has 1 PS task"):
        m = g.as_module()
        replicate_module(m, ClusterSpec(1, 2, "ps-sync"))


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_a_batch_that_does_not_split_is_a_clear_error(backend):
    p = inprocess(replicated(ClusterSpec(1, 2, "ps-sync")), backend)
    with pytest.raises(ExecutionError, match="split"):
        p.run("train", x=X[:5], y=Y[:5])


@pytest.mark.parametrize("text, message", [
    ("ps=x,workers=2", "ps='x' must be a whole number"),
    ("ps=1,workers=0", "at least one worker"),
    ("ps=1", "give the number of worker tasks"),
    ("ps=1,gpus=2", "expected ps=P,workers=W"),
    ("ps=1,ps=2,workers=1", "ps is given twice"),
])
def test_bad_cluster_specs_are_one_line_errors(text, message):
    with pytest.raises(TfcError, match=message) as e:
        ClusterSpec.parse(text)
    assert "\n" not in str(e.value)


def test_bad_strategies_are_one_line_errors():
    with pytest.raises(TfcError, match="unknown strategy 'downpour'"):
        ClusterSpec.parse("ps=1,workers=2", strategy="downpour")
    with pytest.raises(TfcError, match="ps-sync keeps the variables on parameter servers"):
        ClusterSpec.parse("ps=0,workers=2", strategy="ps-sync")
    with pytest.raises(TfcError, match="unknown PS placement"):
        ClusterSpec.parse("ps=1,workers=2", ps_placement="random")
    assert ClusterSpec.parse("ps=0,workers=2").strategy == "allreduce"
    assert ClusterSpec.parse("ps=1,workers=2").strategy == "ps-sync"


def test_a_model_without_an_optimizer_is_a_clear_error():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float64, [None, 2], name="x")
        w = tfc.Variable(np.ones((2,)), name="w")
        tfc.entry("predict", feeds={"x": x}, fetches={"y": x * w})
    for spec in (ClusterSpec(1, 2, "ps-sync"), ClusterSpec(0, 2, "allreduce")):
        with pytest.raises(TfcError, match="no entry applies an optimizer"):
            replicate_module(g.as_module(), spec)


def test_an_update_that_depends_on_the_batch_is_refused():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float64, [None, 2], name="x")
        w = tfc.Variable(np.ones((2,)), name="w")
        seen = tfc.Variable(np.zeros((2,)), name="seen", trainable=False)
        loss = tfc.reduce_mean(tfc.reduce_sum(x * w, axis=1))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        track = seen.assign(tfc.reduce_sum(x, axis=0))
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss}, targets=[train, track])
    with pytest.raises(TfcError, match="update of variable 'seen'.*depends on the batch"):
        replicate_module(g.as_module(), ClusterSpec(1, 2, "ps-sync"))


# ---- the gradient markers -------------------------------------------------------------

def test_markers_survive_the_optimizations_and_lowering_strips_them():
    m = lower(mlp(), Target("reference"))  # canonicalize, cse, dce
    marks = [op for op in m.graphs["train"].ops if op.kind == "optimizer.grad"]
    assert sorted(op.attrs["var"] for op in marks) == ["w0", "w1"]
    llvm = lower(mlp(), Target("llvm"))  # fusion strips them
    assert "optimizer.grad" not in str(llvm)


@pytest.mark.parametrize("sparse", [False, True])
def test_markers_change_no_number(sparse):
    """The reference runs a marker as the identity: bitwise the same as without it."""
    marked, plain = mlp(sparse=sparse), mlp(sparse=sparse)
    assert strip_module_markers(plain) == 2 + sparse
    a, b = Program(marked, backend="reference"), Program(plain, backend="reference")
    for _ in range(2):
        ra, rb = a.run("train", **feeds(sparse)), b.run("train", **feeds(sparse))
        np.testing.assert_array_equal(ra["loss"], rb["loss"])
    for name in a.variables:
        np.testing.assert_array_equal(a.variables[name], b.variables[name])


# ---- fp16 transfers across tasks ------------------------------------------------------

def compiled(spec: ClusterSpec, backend: str, fp16: bool, **kw) -> Module:
    """``mlp(**kw)`` lowered for ``spec`` as ``tfc compile --cluster`` lowers it."""
    return lower(mlp(**kw), Target(backend, tuple(spec.devices), fp16, spec))


@pytest.mark.parametrize("strategy", ["ps-sync", "allreduce"])
def test_fp16_transfers_compress_what_crosses_tasks(strategy):
    from tfc.passes.compress import compression_report
    spec = ClusterSpec(1 if strategy == "ps-sync" else 0, 3, strategy)
    m = compiled(spec, "llvm", True, dtype=np.float32, optimizer="momentum")
    report = compression_report(m, "train")
    assert report.compressed > 0 and report.bytes_after < report.bytes_before
    one = Program(mlp(dtype=np.float32, optimizer="momentum"), backend="llvm")
    many = inprocess(m, "llvm")
    want = train(one, 3, dtype=np.float32)
    got = train(many, 3, dtype=np.float32)
    # f16 gradients move the weights by ~1e-3 of a step each: the losses of 3 steps differ
    # from f32's by at most 2.4e-6 relative (measured), well inside 1e-4
    for w, g in zip(want, got):
        np.testing.assert_allclose(g["loss"], w["loss"], rtol=1e-4)
    if strategy == "allreduce":  # the ring's all-gather copies stay exact: copies agree
        for i in (1, 2):
            for name in ("w0", "w1", "w0/Momentum"):
                np.testing.assert_array_equal(many.variables[f"{name}/replica_{i}"],
                                              many.variables[name])


def test_transfers_inside_one_task_stay_f32():
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph
    from tfc.ir.types import DType, TensorType
    from tfc.passes.compress import compression_report
    a, b, c = ("/job:worker/task:0/cpu:0", "/job:worker/task:0/cpu:1",
               "/job:worker/task:1/cpu:0")
    g = Graph("step")
    x = g.add_arg(TensorType(DType.f32, (4, 8)), "x")
    y = Builder(g, device=a)("tanh", x)
    z = Builder(g, device=b)("exp", y)     # a -> b: one task
    w = Builder(g, device=c)("neg", z)     # b -> c: across tasks
    g.set_results([w])
    m = Module({"step": g}, devices=[a, b, c])
    m = lower(m, Target("reference", (a, b, c), True), place=False)
    report = compression_report(m, "step")
    assert (report.transfers, report.compressed) == (2, 1)
    (key,) = report.keys
    assert f"{b}->{c}" in key


# ---- the predicted step per task ------------------------------------------------------

@pytest.mark.parametrize("strategy", ["ps-sync", "allreduce"])
def test_the_cluster_report_predicts_each_tasks_step(strategy):
    from tfc.passes.replicate import cluster_report, predict_tasks
    spec = ClusterSpec(1 if strategy == "ps-sync" else 0, 2, strategy)
    m = compiled(spec, "llvm", False, dtype=np.float32)
    report = cluster_report(m, spec)
    prediction = report.predicted["train"]
    tasks = ["worker:0", "worker:1"] + (["ps:0"] if strategy == "ps-sync" else [])
    assert sorted(prediction.tasks) == sorted(tasks)
    assert all(0 < s <= prediction.step_s for s in prediction.tasks.values())
    text = "\n".join(report.lines())
    assert "@train: predicted step" in text and "threads each" in text and "link" in text
    # the model responds to the work: a bigger batch per worker predicts a longer step
    small, big = predict_tasks(m, "train", 16), predict_tasks(m, "train", 4096)
    for worker in ("worker:0", "worker:1"):
        assert big.tasks[worker] > 1.5 * small.tasks[worker]
    assert big.step_s > small.step_s


def test_tasks_have_their_own_interpreters():
    """Two workers' stages run side by side (each task is a process, with its own
    interpreter lock); two devices of one process share its lock."""
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph
    from tfc.ir.types import DType, TensorType
    from tfc.passes.placement import simulate_placed

    def finish(a: str, b: str) -> dict[str, float]:
        g = Graph("step")
        x = g.add_arg(TensorType(DType.f32, (4, 8)), "x")
        g.set_results([Builder(g, device=a)("tanh", x), Builder(g, device=b)("exp", x)])
        return simulate_placed(g, [a, b]).device_finish()

    tasks = finish("/job:worker/task:0/cpu:0", "/job:worker/task:1/cpu:0")
    assert tasks["/job:worker/task:0/cpu:0"] == pytest.approx(tasks["/job:worker/task:1/cpu:0"])
    local = finish("/cpu:0", "/cpu:1")
    assert local["/cpu:1"] > local["/cpu:0"]  # its stage waited for /cpu:0's Python work


def test_a_serving_entrys_lookup_of_a_sharded_embedding_runs_on_the_ps_tasks():
    """predict's gather of each shard runs on the shard's PS (ids in, rows out), as the
    training step's does: not the whole shards sent to worker 0 each call."""
    with tfc.Graph().as_default() as g:
        ids = tfc.placeholder(tfc.int32, [None, 3], name="ids")
        emb = tfc.Variable(np.arange(4000, dtype=np.float32).reshape(1000, 4), name="E",
                           partitioner=tfc.fixed_size_partitioner(2))
        w = tfc.Variable(np.ones((4, 2), np.float32), name="W")
        logits = tfc.matmul(tfc.reduce_mean(tfc.gather(emb, ids), axis=1), w)
        loss = tfc.reduce_mean(logits * logits)
        tfc.entry("train", feeds={"ids": ids}, fetches={"loss": loss},
                  targets=[tfc.train.GradientDescentOptimizer(0.1).minimize(loss)])
        tfc.entry("predict", feeds={"ids": ids}, fetches={"logits": logits})
    spec = ClusterSpec(2, 2, "ps-sync")
    module = lower(g.as_module(), Target("reference", tuple(spec.devices), False, spec))
    gathers = [op for op in module.graphs["predict"].walk() if op.kind == "gather"]
    assert sorted(op.device for op in gathers) == spec.ps_devices
    x = np.array([[1, 999, 500], [0, 2, 7]], np.int32)
    got = Program(module, backend="reference", cluster="inprocess").run("predict", ids=x)
    want = Program(g.as_module(), backend="reference").run("predict", ids=x)
    np.testing.assert_array_equal(got["logits"], want["logits"])
