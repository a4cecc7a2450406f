"""The Horovod-style API for users who bring their own training loop::

    import tfc, tfc.distributed as hvd

    def train(batches):
        hvd.init()
        ...build the model; loss = ...
        train_op = hvd.DistributedOptimizer(tfc.train.AdamOptimizer(1e-3)).minimize(loss)
        with tfc.Session() as sess:
            hvd.broadcast_variables(sess, root=0)  # every rank starts from rank 0's values
            for x, y in batches[hvd.rank()]:   # each rank its part of the global batch
                sess.run(train_op, {"x": x, "y": y})

    hvd.run(train, np=2, cluster="local", args=(batches,))

``run`` (``tfc.distributed.ranks``) starts the ranks; in a plain script the group is one
rank and every collective is the identity.

tfc's steps are compiled to native code, so a collective cannot run inside one: a
``DistributedOptimizer``'s train op makes ``Session.run`` take two native calls with the
all-reduce between them (``tfc.api.session.SplitStep``): the gradients (with the user's
feeds and fetches), then one fused all-reduce of all of them (Horovod's tensor fusion: the
flat gradients of one dtype concatenated), then the wrapped optimizer's apply step fed with
the averages. Sparse gradients (``IndexedSlices``) are densified before the all-reduce.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tfc.api.gradients import IndexedSlices
from tfc.api.graph import Operation, Tensor, Variable
from tfc.api.session import Session, SplitStep
from tfc.api.tensor import convert_to_tensor
from tfc.distributed.ranks import current_group


def init() -> None:
    """Join this process's group (idempotent): in a rank of ``run``, the group ``run`` set
    up; elsewhere a group of one."""
    current_group()


def rank() -> int:
    """This process's rank, 0 .. size() - 1."""
    return current_group().rank


def size() -> int:
    """The number of ranks."""
    return current_group().size


def local_rank() -> int:
    """This rank's index among the ranks on its host."""
    return current_group().local_rank


def local_size() -> int:
    """The number of ranks on this rank's host."""
    return current_group().local_size


def allreduce(array: Any, average: bool = True) -> np.ndarray:
    """The sum (``average``: the mean) of ``array`` over the ranks, bitwise the same on
    every rank (a ring all-reduce, ``Group.allreduce``)."""
    return current_group().allreduce(array, average)


def broadcast(array: Any, root: int = 0) -> np.ndarray:
    """``root``'s ``array`` on every rank."""
    return current_group().broadcast(array, root)


def allgather(array: Any) -> np.ndarray:
    """The ranks' arrays concatenated along the first axis, in rank order."""
    return current_group().allgather(array)


def fused_allreduce(arrays: Sequence[np.ndarray], average: bool = True) -> list[np.ndarray]:
    """Each of ``arrays`` all-reduced, in one all-reduce per dtype (the flat arrays of a
    dtype concatenated: Horovod's tensor fusion), in the order given."""
    group = current_group()
    out: list[np.ndarray | None] = [None] * len(arrays)
    by_dtype: dict[np.dtype, list[int]] = {}
    for i, a in enumerate(arrays):
        by_dtype.setdefault(np.asarray(a).dtype, []).append(i)
    for dtype, indices in by_dtype.items():
        flat = np.concatenate([np.asarray(arrays[i], dtype).reshape(-1) for i in indices])
        reduced = group.allreduce(flat, average)
        start = 0
        for i in indices:
            a = np.asarray(arrays[i])
            out[i] = reduced[start:start + a.size].reshape(a.shape)
            start += a.size
    return [a for a in out if a is not None]


class ReducingTrainOp(Operation):
    """The train op of a ``DistributedOptimizer``: a group of the wrapped optimizer's apply
    op whose ``split_step`` tells ``Session.run`` to all-reduce the gradients first."""

    def __init__(self, apply: Operation, split_step: SplitStep) -> None:
        super().__init__(apply.graph, None, [apply], name=apply.name)
        self.split_step = split_step


class DistributedOptimizer:
    """``optimizer`` (a ``tfc.train`` optimizer) applying the gradients averaged over the
    ranks (``horovod.tensorflow.DistributedOptimizer``). ``apply_gradients`` (and so
    ``minimize``) returns a train op whose ``Session.run`` computes this rank's gradients,
    all-reduces them (one fused ring all-reduce per dtype) and applies the averages with
    the wrapped optimizer; sparse gradients are densified first. Other attributes are the
    wrapped optimizer's."""

    def __init__(self, optimizer: Any, average: bool = True) -> None:
        self._optimizer = optimizer
        self._average = average

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Variable]]:
        return list(self._optimizer.compute_gradients(*args, **kwargs))

    def apply_gradients(self, grads_and_vars: Sequence[tuple[Any, Variable]],
                        global_step: Variable | None = None, name: str | None = None
                        ) -> Operation:
        pairs = [(g, v) for g, v in grads_and_vars]
        live = [(g, v) for g, v in pairs if g is not None]
        gradients: list[Tensor] = []
        fed: list[tuple[Tensor, Variable]] = []
        for g, v in live:
            with v.graph.as_default(), v.graph.device(v.device):
                dense = g.to_dense() if isinstance(g, IndexedSlices) else convert_to_tensor(g)
                placeholder = v.graph.placeholder(dense.dtype, v.shape,
                                                  name=f"{v.name}/averaged_gradient")
            gradients.append(dense)
            fed.append((placeholder, v))
        # the wrapped optimizer checks the rest (no gradient at all, bad variables)
        apply = self._optimizer.apply_gradients(
            fed + [(g, v) for g, v in pairs if g is None], global_step, name)
        average = self._average
        return ReducingTrainOp(apply, SplitStep(
            gradients=gradients, placeholders=[p for p, _ in fed],
            between=lambda values: fused_allreduce(values, average)))

    def minimize(self, loss: Any, global_step: Variable | None = None,
                 var_list: Sequence[Variable] | None = None, name: str | None = None,
                 grad_loss: Any = None, colocate_gradients_with_ops: bool = False
                 ) -> Operation:
        """``apply_gradients(compute_gradients(loss, var_list), global_step)``."""
        grads_and_vars = self.compute_gradients(loss, var_list, grad_loss,
                                                colocate_gradients_with_ops)
        return self.apply_gradients(grads_and_vars, global_step, name)


def broadcast_variables(session: Session, root: int = 0) -> None:
    """Give every variable of ``session``'s graph ``root``'s value on every rank (Horovod's
    ``broadcast_global_variables``): one broadcast per dtype of all the variables fused,
    in the graph's order; slots and the global step included."""
    group = current_group()
    group._check_root(root)
    values = session.variable_values()
    names = [n for n in session.graph.variables if n in values]
    if group.size == 1 or not names:
        return
    by_dtype: dict[np.dtype, list[str]] = {}
    for n in names:
        by_dtype.setdefault(values[n].dtype, []).append(n)
    for dtype, group_names in by_dtype.items():
        flat = np.concatenate([np.asarray(values[n]).reshape(-1) for n in group_names])
        got = group.broadcast(flat, root)
        start = 0
        for n in group_names:
            shape = values[n].shape
            size = int(np.prod(shape, dtype=np.int64))
            session.variables[n] = got[start:start + size].reshape(shape).copy()
            start += size
