"""The Horovod-style API (tfc.distributed.run / init / rank / size / collectives /
DistributedOptimizer / broadcast_variables) on the 3-node loopback Ray cluster: ranks land
on distinct nodes, the ring all-reduce equals numpy's sum and is bitwise the same on every
rank, two ranks that each train on half of the global batch get one process's losses and
variables, and a failing rank fails run with one line, releasing the others."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pytest

import tfc
import tfc.distributed as hvd
from tfc.errors import ExecutionError

pytestmark = pytest.mark.distributed

SIZES = [1, 2, 3, 7, 10, 1000, 40_000]  # smaller than N, not divisible by N, large (by ref)


@pytest.fixture(scope="module")
def address(loopback_cluster: Any) -> str:
    import ray.cloudpickle
    # the ranks get this module's functions by value (they cannot import the test module)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return str(loopback_cluster.address)


def _collectives() -> dict[str, Any]:
    import ray
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    rng = np.random.default_rng(100 + r)
    sums = [hvd.allreduce(rng.standard_normal(s), average=False) for s in SIZES]
    means = [hvd.allreduce(rng.standard_normal((s, 1)).astype(np.float32)) for s in SIZES]
    ints = hvd.allreduce(np.arange(5, dtype=np.int64) * (r + 1), average=False)
    from tfc.distributed.ranks import current_group
    before = current_group().bytes_sent
    hvd.allreduce(np.ones(30_000))
    ring_bytes = current_group().bytes_sent - before
    return {"rank": r, "size": n, "node": ray.get_runtime_context().get_node_id(),
            "sums": sums, "means": means, "ints": ints,
            "bcast": hvd.broadcast(np.full(4, float(r)), root=1),
            "gather": hvd.allgather(np.array([r, r])),
            "local": (hvd.local_rank(), hvd.local_size()), "ring_bytes": ring_bytes,
            "threads": os.environ.get("TFC_NUM_THREADS")}


def test_ranks_on_distinct_nodes_and_collectives(address: str, loopback_cluster: Any) -> None:
    from tfc.distributed.cluster import RayCluster
    out = hvd.run(_collectives, np=3, cluster=address, timeout_s=60)
    with RayCluster.connect(address) as cluster:
        node_ids = [n.node_id for n in cluster.nodes]
    assert [o["rank"] for o in out] == [0, 1, 2] and {o["size"] for o in out} == {3}
    assert [o["node"] for o in out] == node_ids  # one rank per node, in order
    # the three nodes are one host (127.0.0.1): its ranks share it, and its cores
    assert [o["local"] for o in out] == [(0, 3), (1, 3), (2, 3)]
    from tfc.devices import cpu_count
    assert {o["threads"] for o in out} == {str(max(1, cpu_count() // 3))}
    # a ring: each rank sends 2 (N-1)/N of the array (3 chunks of 10,000 doubles)
    assert {o["ring_bytes"] for o in out} == {2 * 2 * 10_000 * 8}
    inputs = [np.random.default_rng(100 + r) for r in range(3)]  # (drawn as the ranks did)
    all_xs = [[rng.standard_normal(s) for s in SIZES] for rng in inputs]
    all_ys = [[rng.standard_normal((s, 1)).astype(np.float32) for s in SIZES] for rng in inputs]
    for i, s in enumerate(SIZES):
        xs, ys = [x[i] for x in all_xs], [y[i] for y in all_ys]
        np.testing.assert_allclose(out[0]["sums"][i], np.sum(xs, axis=0), rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(out[0]["means"][i], np.mean(ys, axis=0), rtol=1e-6,
                                   atol=1e-7)
        assert out[0]["means"][i].dtype == np.float32 and out[0]["means"][i].shape == (s, 1)
        for o in out[1:]:  # bitwise the same on every rank
            assert o["sums"][i].tobytes() == out[0]["sums"][i].tobytes()
            assert o["means"][i].tobytes() == out[0]["means"][i].tobytes()
    assert all(o["ints"].tolist() == [0, 6, 12, 18, 24] for o in out)
    assert all(o["bcast"].tolist() == [1.0] * 4 for o in out)
    assert all(o["gather"].tolist() == [0, 0, 1, 1, 2, 2] for o in out)


def _model(seed: int, dtype: Any = np.float64) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(seed)
    x = tfc.placeholder(dtype, [None, 4], name="x")
    y = tfc.placeholder(dtype, [None, 1], name="y")
    w = tfc.Variable(rng.standard_normal((4, 3)), name="w", dtype=dtype)
    b = tfc.Variable(np.zeros(3), name="b", dtype=dtype)
    v = tfc.Variable(rng.standard_normal((3, 1)), name="v", dtype=dtype)
    h = tfc.tanh(tfc.matmul(x, w) + b)
    return x, y, tfc.reduce_mean(tfc.square(tfc.matmul(h, v) - y))


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.standard_normal((5, 8, 4)), rng.standard_normal((5, 8, 1))


def _train(optimizer: str, seed: int | None = None, wrap: bool = True
           ) -> tuple[list[float], dict[str, Any]]:
    """Train 5 steps on this rank's part of each global batch of 8; a rank's start values
    differ by rank (seed) until broadcast_variables gives every rank rank 0's. ``wrap``
    False: the plain optimizer (the one-process reference, an unsplit step)."""
    hvd.init()
    xs, ys = _data()
    n, r = hvd.size(), hvd.rank()
    with tfc.Graph().as_default():
        x, y, loss = _model(seed if seed is not None else 1 + 10 * r)
        opt = (tfc.train.GradientDescentOptimizer(0.1) if optimizer == "sgd"
               else tfc.train.AdamOptimizer(0.05))
        train_op = (hvd.DistributedOptimizer(opt) if wrap else opt).minimize(
            loss, global_step=tfc.train.get_or_create_global_step())
        with tfc.Session() as sess:
            hvd.broadcast_variables(sess, root=0)
            part = slice(r * 8 // n, (r + 1) * 8 // n)
            losses = [float(sess.run([train_op, loss], {x: xb[part], y: yb[part]})[1])
                      for xb, yb in zip(xs, ys)]
            values = sess.variable_values()
            values["session steps"] = np.array(sess.step)  # a split step counts one
    return losses, {k: np.asarray(v) for k, v in values.items()}


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_distributed_optimizer_matches_one_process(address: str, optimizer: str) -> None:
    one_losses, one_values = _train(optimizer, seed=1, wrap=False)  # the whole batch
    out = hvd.run(_train, np=2, cluster=address, args=(optimizer,), timeout_s=90)
    # the loss a rank sees is that of its half: the global loss is their mean
    losses = np.mean([o[0] for o in out], axis=0)
    np.testing.assert_allclose(losses, one_losses, rtol=1e-10, atol=1e-12)
    assert one_losses[-1] < one_losses[0]
    for name, value in one_values.items():
        for _, values in out:
            np.testing.assert_allclose(values[name], value, rtol=1e-10, atol=1e-12,
                                       err_msg=name)


def test_distributed_optimizer_in_a_group_of_one() -> None:
    one_losses, one_values = _train("adam", seed=1, wrap=False)
    losses, values = _train("adam")  # rank 0 of 1: its seed is 1, its batch the whole one
    np.testing.assert_allclose(losses, one_losses, rtol=1e-12)
    for name, value in one_values.items():
        np.testing.assert_allclose(values[name], value, rtol=1e-12, err_msg=name)


def test_sparse_gradients_are_densified() -> None:
    def train(wrap: bool) -> Any:
        with tfc.Graph().as_default():
            table = tfc.Variable(np.arange(12.0).reshape(6, 2), name="table")
            rows = tfc.gather(table, np.array([0, 3, 3]))
            loss = tfc.reduce_sum(tfc.square(rows))
            opt = tfc.train.AdamOptimizer(0.1)
            train_op = (hvd.DistributedOptimizer(opt) if wrap else opt).minimize(loss)
            with tfc.Session() as sess:
                for _ in range(3):
                    sess.run(train_op)
                return sess.run(table)

    np.testing.assert_allclose(train(True), train(False), rtol=1e-12)


def test_size_one_without_run() -> None:
    hvd.init()
    hvd.init()
    assert (hvd.rank(), hvd.size(), hvd.local_rank()) == (0, 0 + 1, 0)
    a = np.arange(6.0).reshape(2, 3)
    assert hvd.allreduce(a).tolist() == a.tolist()
    assert hvd.broadcast(a, root=0).tolist() == a.tolist()
    assert hvd.allgather(a).tolist() == a.tolist()
    with pytest.raises(tfc.TfcError, match="root rank 1"):
        hvd.broadcast(a, root=1)


def _fail_on_rank_one(released: str) -> int:
    from pathlib import Path
    from tfc.distributed.ranks import CollectiveError
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("bad batch on this rank")
    try:
        hvd.allreduce(np.ones(3))  # ranks 0 and 2 wait here for rank 1 (timeout 60 s)
    except CollectiveError as e:  # released by run's abort
        (Path(released) / f"rank{hvd.rank()}").write_text(str(e))
        raise
    return hvd.rank()


def test_failing_rank_fails_run_with_one_line(address: str, tmp_path: Any) -> None:
    with pytest.raises(ExecutionError) as info:
        hvd.run(_fail_on_rank_one, np=3, cluster=address, args=(str(tmp_path),), timeout_s=60)
    assert str(info.value) == "rank 1 failed: ValueError: bad batch on this rank"
    # the other ranks' collective waits failed (run gives them 10 s, their timeout is 60 s)
    for r in (0, 2):
        assert "aborted: rank 1 failed" in (tmp_path / f"rank{r}").read_text()
