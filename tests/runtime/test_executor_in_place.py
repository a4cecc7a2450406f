"""Sparse updates made in place on the multi-device executor (``in_place_stages``): a
sharded embedding's shards are updated in their own arrays (no copy of the table per
step), with the numbers of the reference backend; a step that fails after such an
update says so and its variables are refused until assigned."""

import time

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError
from tfc.passes.replicate import ClusterSpec
from tfc.pipeline import Target, lower
from tfc.runtime import Program

SPEC = ClusterSpec(2, 2, "ps-sync")
VOCAB, DIM, WORDS = 5000, 8, 6


def embedding_graph() -> tfc.Graph:
    """A bag of words: an embedding in 2 shards (sparse SGD), a dense layer."""
    g = tfc.Graph()
    with g.as_default():
        tfc.set_random_seed(0)
        ids = tfc.placeholder(tfc.int32, [None, WORDS], name="ids")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        emb = tfc.Variable(tfc.random.normal([VOCAB, DIM], stddev=0.1), name="E",
                           partitioner=tfc.fixed_size_partitioner(2))
        w = tfc.Variable(tfc.random.normal([DIM, 3], stddev=0.1), name="W")
        logits = tfc.matmul(tfc.reduce_mean(tfc.gather(emb, ids), axis=1), w)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        train = tfc.train.GradientDescentOptimizer(2.0).minimize(loss)
        tfc.entry("train", feeds={"ids": ids, "y": y}, fetches={"loss": loss},
                  targets=[train])
    return g


def batch(i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    return {"ids": rng.integers(0, VOCAB, (8, WORDS)).astype(np.int32),
            "y": rng.integers(0, 3, 8).astype(np.int32)}


def cluster_program(backend: str) -> Program:
    module = lower(embedding_graph().as_module(),
                   Target(backend, tuple(SPEC.devices), False, SPEC))
    return Program(module, backend=backend, cluster="inprocess")


def test_a_sharded_embedding_is_updated_in_place_with_the_reference_numbers():
    llvm, ref = cluster_program("llvm"), cluster_program("reference")
    shards = ["E/part_0", "E/part_1"]
    arrays = []
    for i in range(8):
        got, want = llvm.run("train", **batch(i)), ref.run("train", **batch(i))
        np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)
        arrays.append([id(llvm.variables[n]) for n in shards])
    for name, value in ref.variables.items():
        np.testing.assert_allclose(llvm.variables[name], value, rtol=1e-5, atol=1e-6)
    # after the first steps, each shard is one array, updated where it is
    assert all(ids == arrays[2] for ids in arrays[2:]), arrays
    # each shard is read by the stage that gathers from it, not handed there as a copy of
    # the whole table (a stage's outputs are fresh arrays)
    exe = llvm._executable("train")
    for st in (st for plan in exe.plans for st in plan.stages if st.graph is not None):
        for r in st.graph.results:
            assert not (r.op is not None and r.op.kind == "var.read"
                        and r.op.attrs["var"] in shards), st.graph.name


def two_device_graph() -> tfc.Graph:
    """cpu:0 trains an embedding (a sparse update, in place); cpu:1 independently gathers
    from another table with ids that may be out of range."""
    g = tfc.Graph()
    with g.as_default():
        ids = tfc.placeholder(tfc.int32, [4], name="ids")
        bad = tfc.placeholder(tfc.int32, [2], name="bad")
        with tfc.device("/cpu:0"):
            emb = tfc.Variable(np.ones((50, 4), np.float32), name="E")
            loss = tfc.reduce_sum(tfc.gather(emb, ids))
            train = tfc.train.GradientDescentOptimizer(0.5).minimize(loss)
        with tfc.device("/cpu:1"):
            other = tfc.Variable(np.ones((10, 4), np.float32), name="T")
            rows = tfc.gather(other, bad) * 2.0
        tfc.entry("train", feeds={"ids": ids, "bad": bad},
                  fetches={"loss": loss, "rows": rows}, targets=[train])
    return g


def test_a_step_failing_after_an_in_place_update_refuses_that_variable_until_assigned():
    devices = ("/cpu:0", "/cpu:1")
    module = lower(two_device_graph().as_module(), Target("llvm", devices, False),
                   passes="", place=False)
    p = Program(module, backend="llvm")
    ids = np.array([1, 2, 3, 1], np.int32)
    for _ in range(4):  # the first steps fill the update pools: E is one array from here
        p.run("train", ids=ids, bad=np.array([0, 1], np.int32))
    exe = p._executable("train")
    for plan in exe.plans:  # cpu:1 fails only once cpu:0's update is made
        for st in plan.stages:
            if plan.device == "/cpu:1" and st.call is not None:
                def late(*args, inner=st.call):
                    time.sleep(0.3)
                    return inner(*args)
                st.call = late
    before = p.variables["E"].copy()
    with pytest.raises(ExecutionError, match=r"already updated @E in place"):
        p.run("train", ids=ids, bad=np.array([0, 99], np.int32))
    assert p.step == 4
    assert not np.array_equal(p.variables["E"], before)  # what the error says
    with pytest.raises(ExecutionError, match=r"@E: a failed step had already updated"):
        p.run("train", ids=ids, bad=np.array([0, 1], np.int32))
    p.set_variable("E", before)  # restored: runs again, from there
    out = p.run("train", ids=ids, bad=np.array([0, 1], np.int32))
    np.testing.assert_allclose(out["loss"], before[ids].sum())
    assert p.step == 5
