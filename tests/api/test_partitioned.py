"""Partitioned variables (``tfc.fixed_size_partitioner``) and the sharded ``gather``: the
logical variable is seen whole, a gather matches numpy, training matches the same model
unpartitioned (f64, every optimizer, one process and across PS tasks), and in a cluster
the bytes a step moves depend on the batch's ids, not on the table's size."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError
from tfc.passes.replicate import ClusterSpec, cluster_report
from tfc.pipeline import Target, lower
from tfc.runtime import Program

TOL = 1e-10
RNG = np.random.default_rng(11)
TABLE = RNG.normal(size=(7, 3))
W = RNG.normal(size=(3, 2))
IDS = np.array([[6, 0, 3], [3, 5, 1], [2, 2, 4], [0, 6, 6]], np.int32)
Y = np.array([0, 1, 1, 0], np.int32)

OPTIMIZERS = {
    "sgd": lambda: tfc.train.GradientDescentOptimizer(0.5),
    "momentum": lambda: tfc.train.MomentumOptimizer(0.5, 0.9),
    "adagrad": lambda: tfc.train.AdagradOptimizer(0.5),
    "rmsprop": lambda: tfc.train.RMSPropOptimizer(0.05, momentum=0.5),
    "adam": lambda: tfc.train.AdamOptimizer(0.1),
}


def test_shards_hold_row_blocks_and_the_variable_reads_whole():
    e = tfc.Variable(TABLE, name="E", partitioner=tfc.fixed_size_partitioner(3))
    assert isinstance(e, tfc.PartitionedVariable) and isinstance(e, tfc.Variable)
    assert [s.name for s in e.shards] == ["E/part_0", "E/part_1", "E/part_2"]
    assert [s.shape for s in e.shards] == [(3, 3), (2, 3), (2, 3)]  # TF: first 7 % 3 longer
    assert e.shape == (7, 3) and e.offsets == [0, 3, 5]
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(e), TABLE)
        np.testing.assert_array_equal(sess.run(e.shards[1]), TABLE[3:5])
        sess.run(e.assign(TABLE * 2))
        np.testing.assert_array_equal(sess.run(e), TABLE * 2)


def test_sharded_gather_matches_numpy():
    e = tfc.Variable(TABLE, name="E", partitioner=tfc.fixed_size_partitioner(2))
    ids = tfc.placeholder(tfc.int32, [None, 3], name="ids")
    rows = tfc.gather(e, ids)
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(rows, {ids: IDS}), TABLE[IDS])


def test_min_max_partitioner_and_errors():
    p = tfc.min_max_variable_partitioner(max_partitions=4, min_slice_size=7 * 3 * 8 // 2)
    e = tfc.Variable(TABLE, name="E", partitioner=p)
    assert len(e.shards) == 2
    with pytest.raises(TfcError, match="8 shards of 7 rows"):
        tfc.Variable(TABLE, name="F", partitioner=tfc.fixed_size_partitioner(8))
    with pytest.raises(TfcError, match="rank >= 1"):
        tfc.Variable(1.0, name="G", partitioner=tfc.fixed_size_partitioner(2))


def model(optimizer: str, shards: int, table: np.ndarray = TABLE) -> tfc.ir.core.Module:
    """A bag of embeddings and a linear classifier; ``shards`` = 0: not partitioned."""
    with tfc.Graph().as_default() as g:
        ids = tfc.placeholder(tfc.int32, [None, 3], name="ids")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        part = tfc.fixed_size_partitioner(shards) if shards else None
        e = tfc.Variable(table, name="E", partitioner=part)
        w = tfc.Variable(W, name="W")
        bag = tfc.reduce_sum(tfc.gather(e, ids), axis=1)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=tfc.matmul(bag, w)))
        train = OPTIMIZERS[optimizer]().minimize(loss)
        tfc.entry("train", feeds={"ids": ids, "y": y}, fetches={"loss": loss},
                  targets=[train])
    return g.as_module()


def logical(program: Program, shards: int) -> np.ndarray:
    v = program.variables
    return (np.concatenate([v[f"E/part_{i}"] for i in range(shards)]) if shards else v["E"])


def run(program: Program, shards: int, steps: int = 3) -> tuple[list[float], np.ndarray]:
    losses = [float(program.run("train", ids=IDS, y=Y)["loss"]) for _ in range(steps)]
    return losses, logical(program, shards)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_training_a_partitioned_variable_matches_the_whole_one(optimizer):
    want_losses, want = run(Program(model(optimizer, 0)), 0)
    got_losses, got = run(Program(model(optimizer, 3)), 3)
    np.testing.assert_allclose(got_losses, want_losses, rtol=TOL)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    assert not np.allclose(got, TABLE)  # it trained


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "rmsprop", "adam"])
@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_shards_on_two_ps_tasks_train_as_one_process(optimizer, backend):
    spec = ClusterSpec(2, 2, "ps-sync")
    want_losses, want = run(Program(model(optimizer, 0), backend=backend), 0)
    m = lower(model(optimizer, 2), Target(backend, tuple(spec.devices), False, spec))
    assert {m.variables[f"E/part_{i}"].device for i in (0, 1)} == {
        "/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0"}
    # each slot lives with its shard
    assert m.variables["E/part_1/Momentum" if optimizer == "momentum" else "E/part_1"
                       ].device == m.variables["E/part_1"].device
    many = Program(m, backend=backend, cluster="inprocess")
    got_losses, got = run(many, 2)
    np.testing.assert_allclose(got_losses, want_losses, rtol=TOL)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("optimizer", ["momentum", "adagrad"])
def test_shards_mirrored_on_allreduce_workers_train_as_one_process(optimizer):
    spec = ClusterSpec(0, 2, "allreduce")
    want_losses, want = run(Program(model(optimizer, 0), backend="reference"), 0)
    m = lower(model(optimizer, 2), Target("reference", tuple(spec.devices), False, spec))
    got_losses, got = run(Program(m, backend="reference", cluster="inprocess"), 2)
    np.testing.assert_allclose(got_losses, want_losses, rtol=TOL)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def test_a_steps_bytes_do_not_grow_with_the_table():
    """The shards' gathers run on their PS tasks: a step sends ids and rows, so a table
    100 times larger moves the same bytes (it would move the table otherwise)."""
    spec = ClusterSpec(2, 2, "ps-sync")
    small = RNG.normal(size=(8, 3))
    big = RNG.normal(size=(20000, 3))
    sent = []
    for table in (small, big):
        m = lower(model("momentum", 2, table), Target("reference", tuple(spec.devices),
                                                      False, spec))
        sent.append(cluster_report(m, spec).transfers["train"][1])
    assert sent[0] == sent[1]
    assert sent[1] < big.nbytes // 2  # not even one shard of the big table travels


@pytest.mark.parametrize("save_shards, restore_shards", [(3, 2), (2, 0), (0, 3)])
def test_checkpoints_hold_the_logical_variable(tmp_path, save_shards, restore_shards):
    def build(shards):
        g = tfc.Graph()
        with g.as_default():
            part = tfc.fixed_size_partitioner(shards) if shards else None
            e = tfc.Variable(np.zeros_like(TABLE), name="E", partitioner=part)
        return g, e

    g, e = build(save_shards)
    with g.as_default(), tfc.Session() as sess:
        sess.run(e.assign(TABLE))
        path = tfc.train.Saver().save(sess, tmp_path / "model")
    from tfc.runtime.checkpoint import read_checkpoint
    assert sorted(read_checkpoint(path).values) == ["E"]
    g, e = build(restore_shards)
    with g.as_default(), tfc.Session() as sess:
        tfc.train.Saver().restore(sess, path)
        np.testing.assert_array_equal(sess.run(e), TABLE)


def test_a_partitioner_scope_splits_only_the_large_variables():
    """``min_max_variable_partitioner`` in a ``variable_partitioner`` scope: blocks of at
    least 1 KiB, at most 2: the 56-byte bias stays one block, the table is split; the
    optimizer's slots are shaped like the shards they belong to."""
    with tfc.variable_partitioner(tfc.min_max_variable_partitioner(2, min_slice_size=1024)):
        e = tfc.Variable(np.zeros((100, 4)), name="E")
        b = tfc.Variable(np.zeros(7), name="b")
        loss = tfc.reduce_sum(tfc.gather(e, [1, 99])) + tfc.reduce_sum(b)
        opt = tfc.train.MomentumOptimizer(0.1, 0.9)
        opt.minimize(loss)
    assert [s.shape for s in e.shards] == [(50, 4), (50, 4)]
    assert [s.name for s in b.shards] == ["b/part_0"]
    slot = opt.get_slot(e.shards[1], "momentum")
    assert slot.name == "E/part_1/Momentum" and not isinstance(slot, tfc.PartitionedVariable)
