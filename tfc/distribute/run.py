"""``strategy.run(fn, args)`` and ``strategy.reduce(op, value, axis)``: custom training
loops under a strategy (``tf.distribute``'s).

``run`` traces ``fn`` once per argument signature into the default graph, on placeholders
whose leading dim is the batch (``B``), as ``tfc.function`` does; ``fn`` builds the
step's ops (a loss, ``optimizer.minimize(loss)``) and returns its values (one tensor, a
list, tuple or dict of them). Each call splits every argument of rank >= 1 (the global
batch: one leading dim for all, divisible by the replicas) into
``num_replicas_in_sync`` equal shards, one per replica, and returns what ``fn`` returned
with a ``PerReplica`` in place of each tensor: each replica's value on its shard.

- A step that applies gradients runs as ``fit``'s does (``tfc.distribute.fit``): the
  request is replicated by ``tfc.passes.replicate`` (the strategy's all-reduce or
  parameter servers), so the variables move as one device's would on the global batch,
  and they are in the graph's default session after the call. To get each replica's
  value of a scalar back through the replication (which would average it), the scalar is
  broadcast over the replica's examples and the first of them is read.
- A ``fn`` that writes no variable (an evaluation step) has nothing to all-reduce: it
  runs in the default session once per shard (the replicas' values, one after another).
  One that writes variables other than through an optimizer's gradients is an error (its
  replicas would disagree on the new value).

``reduce`` combines a ``PerReplica`` into one array: ``SUM`` or ``MEAN`` over the
replicas element by element (``axis=None``), or over the replicas and along ``axis``
(``MEAN`` then divides by the examples of all replicas together, as TensorFlow). A value
that is not a ``PerReplica`` is the same on every replica. With one replica ``run``
returns plain arrays, as TensorFlow's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.graph import Graph, Operation, Tensor, get_default_graph, user_location
from tfc.api.session import Session, default_session
from tfc.distribute.fit import ReplicatedStep
from tfc.distribute.strategy import Strategy
from tfc.errors import FeedError, TfcError
from tfc.ir.registry import writes_variable
from tfc.ir.types import DType
from tfc.ops.optimizer import GRAD_MARKER


@dataclass(frozen=True)
class PerReplica:
    """One value per replica, in replica order (``strategy.run``'s results)."""

    values: tuple[np.ndarray, ...]


class ReduceOp:
    """``strategy.reduce``'s operations (``tf.distribute.ReduceOp``)."""

    SUM = "SUM"
    MEAN = "MEAN"


@dataclass
class _Traced:
    """``fn`` traced for one argument signature, and how it runs."""

    feeds: list[Tensor]         # placeholders: the batch arguments first, then the others
    order: list[int]            # feeds[k] is argument order[k]
    leaves: list[Tensor]        # fn's tensors, in structure order
    rebuild: Callable[[list[Any]], Any]
    per_example: list[bool]     # a leaf whose leading dim is the batch
    train_op: Operation | None  # the writes (an optimizer's step), or None
    step: ReplicatedStep | None = None


def run(strategy: Strategy, fn: Callable[..., Any], args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None) -> Any:
    """``strategy.run`` (see the module docstring)."""
    kwargs = dict(kwargs or {})
    names = [f"arg{i}" for i in range(len(args))] + list(kwargs)
    arrays = [np.asarray(a) for a in [*args, *kwargs.values()]]
    what = f"{type(strategy).__name__}.run({getattr(fn, '__name__', 'fn')})"
    replicas = strategy.num_replicas_in_sync
    batch = {a.shape[0] for a in arrays if a.ndim >= 1}
    if len(batch) != 1:
        raise FeedError(f"{what}: the arguments of rank >= 1 are the global batch and must "
                        f"share their leading dim, got shapes "
                        f"{[list(a.shape) for a in arrays]}", user_location())
    size = batch.pop()
    if size % replicas:
        raise FeedError(f"{what}: a global batch of {size} does not split over "
                        f"{replicas} replicas", user_location())
    graph = get_default_graph()
    traced = _trace(strategy, graph, fn, names, len(args), arrays, what)
    session = default_session(graph)
    fed = [arrays[i] for i in traced.order]
    if traced.train_op is None:
        values = _shard_by_shard(session, traced, fed, replicas)
    else:
        values = _replicated(strategy, session, traced, fed, replicas, what)
    if replicas == 1:
        return traced.rebuild([v.values[0] for v in values])
    return traced.rebuild(values)


def _trace(strategy: Strategy, graph: Graph, fn: Callable[..., Any], names: list[str],
           positional: int, arrays: list[np.ndarray], what: str) -> _Traced:
    """``fn`` traced on placeholders like ``arrays`` (cached on the strategy per graph,
    function object and signature: a new lambda each call is traced again)."""
    cache: dict[tuple, _Traced] = strategy._runs
    key = (id(graph), fn, tuple(names), tuple((a.shape[1:] if a.ndim else None, a.dtype.str)
                                              for a in arrays))
    if key in cache:
        return cache[key]
    order = [i for i, a in enumerate(arrays) if a.ndim >= 1]
    order += [i for i, a in enumerate(arrays) if a.ndim == 0]
    with graph.as_default():
        start = len(graph.ir.ops)
        with graph.name_scope("run"):
            placeholders = [graph.placeholder(DType.from_numpy(a.dtype),
                                              [None, *a.shape[1:]] if a.ndim else [], name)
                            for a, name in zip(arrays, names)]
        result = fn(*placeholders[:positional],
                    **dict(zip(names[positional:], placeholders[positional:])))
        new_ops = graph.ir.ops[start:]
        inits = {id(v.initializer.op) for v in graph.variables.values()}
        writes = [op for op in new_ops if writes_variable(op) and id(op) not in inits]
        if writes and not any(op.kind == GRAD_MARKER for op in _walk(new_ops)):
            raise TfcError(f"{what}: fn writes variables other than by an optimizer's "
                           f"gradients ({writes[0].kind} of '{writes[0].attrs.get('var')}'); "
                           f"its replicas would disagree on the new value", user_location())
        leaves, rebuild = _flatten(result, what)
        batch_dim = placeholders[order[0]].type.shape[0]
        per_example = [t.type.rank >= 1 and t.type.shape[0] == batch_dim for t in leaves]
        for t, batched in zip(leaves, per_example):
            if not batched and t.type.rank != 0:
                raise TfcError(f"{what}: fn returned {t.type}; each value must be a scalar "
                               f"or have the batch as its leading dim", user_location())
        train_op = (Operation(graph, None, [Operation(graph, op) for op in writes])
                    if writes else None)
    traced = _Traced([placeholders[i] for i in order], order, leaves, rebuild, per_example,
                     train_op)
    cache[key] = traced
    return traced


def _walk(ops_: Sequence[Any]) -> Any:
    """The ops and their regions' ops."""
    for op in ops_:
        yield op
        for region in op.regions:
            yield from region.walk()


def _flatten(result: Any, what: str) -> tuple[list[Tensor], Callable[[list[Any]], Any]]:
    """The tensors of ``fn``'s result (one, a list/tuple or a dict of them) and how to put
    values back in its place."""
    if isinstance(result, Tensor):
        return [result], lambda values: values[0]
    if isinstance(result, dict) and all(isinstance(t, Tensor) for t in result.values()):
        keys = list(result)
        return list(result.values()), lambda values: dict(zip(keys, values))
    if isinstance(result, (list, tuple)) and all(isinstance(t, Tensor) for t in result):
        kind = type(result)
        return list(result), lambda values: kind(values)
    raise TfcError(f"{what}: fn must return a tensor, or a list, tuple or dict of tensors, "
                   f"not {type(result).__name__}", user_location())


def _shards(array: np.ndarray, replicas: int) -> list[np.ndarray]:
    return np.split(array, replicas) if array.ndim else [array] * replicas


def _shard_by_shard(session: Session, traced: _Traced, fed: list[np.ndarray],
                    replicas: int) -> list[PerReplica]:
    """A step without writes: each replica's shard through the session."""
    per_arg = [_shards(a, replicas) for a in fed]
    results = [session.run(traced.leaves, dict(zip(traced.feeds, [s[i] for s in per_arg])))
               for i in range(replicas)]
    return [PerReplica(tuple(np.asarray(r[k]) for r in results))
            for k in range(len(traced.leaves))]


def _replicated(strategy: Strategy, session: Session, traced: _Traced,
                fed: list[np.ndarray], replicas: int, what: str) -> list[PerReplica]:
    """A training step: replicated as fit's, each scalar broadcast over its replica's
    examples so that the replication hands back every replica's value."""
    train_op = traced.train_op
    assert train_op is not None
    if strategy.cluster_spec is None:  # one replica: the session's own step
        values = session.run([train_op, traced.leaves], dict(zip(traced.feeds, fed)))[1]
        return [PerReplica((np.asarray(v),)) for v in values]
    if traced.step is None or traced.step.session is not session:
        if traced.step is not None:
            traced.step.close()
        fetches = [_per_example(t, traced.feeds[0]) if not batched else t
                   for t, batched in zip(traced.leaves, traced.per_example)]

        def one_device(xb: Any, yb: Any) -> Any:  # a batch that does not split (not here)
            return session.run([train_op, fetches], dict(zip(traced.feeds, xb)))[1]
        with session.graph.as_default():
            traced.step = ReplicatedStep(strategy, session, traced.feeds, [], fetches,
                                         train_op, one_device, what)
    values = traced.step(list(fed), [])
    traced.step.finish_epoch()  # the session has the trained values after every call
    out = []
    for value, batched in zip(values, traced.per_example):
        chunks = np.split(np.asarray(value), replicas)
        out.append(PerReplica(tuple(chunks) if batched else tuple(c[0] for c in chunks)))
    return out


def _per_example(t: Tensor, batch: Tensor) -> Tensor:
    """The scalar ``t`` repeated over the examples of ``batch`` (``[B]``)."""
    zeros = ops.zeros_like(batch)
    if batch.type.rank > 1:
        zeros = ops.reduce_sum(zeros, axis=list(range(1, batch.type.rank)))
    if zeros.dtype != t.dtype:
        zeros = ops.cast(zeros, t.dtype)
    return zeros + t


def reduce(strategy: Strategy, op: Any, value: Any, axis: int | None = None) -> np.ndarray:
    """``strategy.reduce`` (see the module docstring)."""
    name = str(op).upper()
    if name not in (ReduceOp.SUM, ReduceOp.MEAN):
        raise TfcError(f"reduce: unknown reduce op {op!r} (SUM or MEAN)", user_location())
    values = (list(value.values) if isinstance(value, PerReplica)
              else [np.asarray(value)] * strategy.num_replicas_in_sync)
    values = [np.asarray(v) for v in values]
    if axis is None:
        shapes = {v.shape for v in values}
        if len(shapes) != 1:
            raise TfcError(f"reduce: the replicas' values have the shapes "
                           f"{sorted(shapes)}; give axis to reduce along", user_location())
        total = np.sum(values, axis=0)
        return total / len(values) if name == ReduceOp.MEAN else total
    if any(v.ndim == 0 or not -v.ndim <= axis < v.ndim for v in values):
        raise TfcError(f"reduce: axis {axis} is out of range for the replicas' values of "
                       f"shapes {[list(v.shape) for v in values]}", user_location())
    total = np.sum([v.sum(axis=axis) for v in values], axis=0)
    if name == ReduceOp.MEAN:
        return total / sum(v.shape[axis] for v in values)
    return total


__all__ = ["PerReplica", "ReduceOp", "run", "reduce"]
