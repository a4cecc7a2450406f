"""Partitioned variables: one logical variable stored as row blocks (TF1's
``PartitionedVariable``), and the sharded ``gather`` that reads only the rows it needs.

``tfc.Variable(init, partitioner=tfc.fixed_size_partitioner(k))`` makes k ordinary
variables ``NAME/part_0`` ... ``NAME/part_{k-1}`` holding contiguous row blocks (the first
``rows % k`` blocks one row longer, as TensorFlow splits), each initialized with its rows
of the one logical initial value. Reading the whole variable concatenates the blocks;
``assign`` splits the value. Each block is a variable of its own, so the ``replicate``
pass places each on a PS task as it places whole variables (round robin or greedy by
bytes), with its optimizer slots.

``tfc.gather(pv, ids)`` is TensorFlow's ``embedding_lookup`` with the ``div`` strategy
(contiguous blocks). TF sends each shard only the ids it owns (``dynamic_partition``, a
gather per shard, ``dynamic_stitch``); that needs a result whose length depends on the
ids' values, which tfc's IR has no op for (a ``?`` dim is sized from the inputs' shapes,
never from data, and every kernel is planned with static or batch-symbolic sizes). So the
static scheme: every shard gets all n ids, shifted to its block (``ids - offset``, an
id outside the block replaced by row 0), and answers n rows; the rows of ids it does not
own are zeroed by a mask and the k answers are added. In a cluster the per-shard gather
runs on the shard's PS (``tfc.passes.replicate``), so a step moves per shard n ids in and
n rows out, and n rows of gradient back: ``k * n * (4 + 2 * 4 * d)`` bytes for f32 rows
of width d with i32 ids, proportional to the batch's ids, not to the table.

The gradient of a shard is an ``IndexedSlices`` of its n indices whose padding entries
carry zero rows; ``tfc.gradients`` marks them with ``owned`` = 0 (``owned_weights``) so
that optimizers whose sparse update touches only the named rows (Momentum, RMSProp) leave
the padding's row 0 alone.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from tfc.api.graph import Graph, Operation, Tensor, Variable, as_dtype, get_default_graph, \
    user_location
from tfc.errors import TfcError, TypeMismatch
from tfc.ir import core as ir
from tfc.ir.types import DType, TensorType
from tfc.runtime.logical import row_blocks

Partitioner = Callable[[tuple[int, ...], DType], list[int]]


def fixed_size_partitioner(num_shards: int, axis: int = 0) -> Partitioner:
    """Split a variable into ``num_shards`` blocks along ``axis`` (only 0: rows), as
    ``tf.fixed_size_partitioner``. The partitioner returns the number of parts per axis."""
    if int(num_shards) < 1:
        raise TfcError(f"fixed_size_partitioner: num_shards must be >= 1, got {num_shards}")
    if axis != 0:
        raise TfcError(f"fixed_size_partitioner: only axis 0 (rows) is supported, got {axis}")

    def partitioner(shape: tuple[int, ...], dtype: DType) -> list[int]:
        return [int(num_shards)] + [1] * (len(shape) - 1)
    return partitioner


def min_max_variable_partitioner(max_partitions: int = 1, axis: int = 0,
                                 min_slice_size: int = 256 << 10) -> Partitioner:
    """As many row blocks as keep each at least ``min_slice_size`` bytes, at most
    ``max_partitions`` and at most one per row (``tf.min_max_variable_partitioner``)."""
    if axis != 0:
        raise TfcError(f"min_max_variable_partitioner: only axis 0 is supported, got {axis}")

    def partitioner(shape: tuple[int, ...], dtype: DType) -> list[int]:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        k = max(1, min(int(max_partitions), math.ceil(nbytes / min_slice_size), shape[0]))
        return [k] + [1] * (len(shape) - 1)
    return partitioner


# ``tfc compile --cluster``'s automatic split: TensorFlow's min_slice_size default
DEFAULT_MIN_SLICE_SIZE = 256 << 10


def automatic_partitioner(num_shards: int, min_slice_size: int = DEFAULT_MIN_SLICE_SIZE
                          ) -> Partitioner:
    """The row split ``tfc compile --cluster ps=P`` applies to every model, whatever its
    frontend (``--min-slice-size``; ``tfc.api.split_variables`` applies it to the built
    module): ``min_max_variable_partitioner(P, min_slice_size=S)``'s blocks, as many as
    keep each at least S bytes, at most P and one per row: at 256 KiB a 1,000,000 x 64
    f32 embedding goes to every PS task, a 64 x 128 layer stays whole. Which variables it
    applies to: ``automatic_blocks``."""
    return min_max_variable_partitioner(num_shards, 0, min_slice_size)


def automatic_blocks(partitioner: Partitioner, type: TensorType, trainable: bool,
                     device: str | None) -> int:
    """How many row blocks ``automatic_partitioner``'s ``partitioner`` splits a variable
    of ``type`` into (1: it stays whole): only a trainable variable of static shape and
    rank >= 1 with no device of its own is split (its optimizer slots follow it:
    ``tfc.api.split_variables``); a scalar, ``global_step`` or one pinned to a device
    stays whole, under its own name."""
    if not trainable or device is not None or not type.is_static or type.rank == 0:
        return 1
    return partitioner(type.static_shape, type.dtype)[0]


@contextlib.contextmanager
def variable_partitioner(partitioner: Partitioner | None) -> Iterator[None]:
    """Variables made inside without a ``partitioner`` of their own use this one (TF1's
    ``variable_scope(partitioner=...)``); None turns partitioning off inside. With
    ``min_max_variable_partitioner(max_partitions=P, min_slice_size=S)`` every variable
    of the scope is split into up to P row blocks of at least S bytes, so only the large
    ones (an embedding) are split, e.g. one block per PS task of a cluster. A variable
    the partitioner gives one block is a ``PartitionedVariable`` of one shard
    (``NAME/part_0``), as in TensorFlow; its checkpoints still name it ``NAME``."""
    g = get_default_graph()
    g.partitioners.append(partitioner)
    try:
        yield
    finally:
        g.partitioners.pop()


class PartitionedVariable(Variable):
    """A variable stored as row blocks (``shards``), seen whole by everything that reads,
    assigns or initializes it. Built by ``tfc.Variable(..., partitioner=...)``."""

    def __init__(self, initial_value: Any, trainable: bool = True, name: str | None = None,
                 dtype: Any = None, partitioner: Partitioner | None = None) -> None:
        from tfc.api import ops
        from tfc.api.session import group
        from tfc.api.tensor import convert_to_tensor
        g = get_default_graph()
        loc = user_location()
        self.graph = g
        self.name = g.unique_name(name or "Variable")
        device = g.current_device
        with g.name_scope(self.name + "/Initializer/"):
            value = initial_value() if callable(initial_value) else initial_value
            init = convert_to_tensor(value, dtype=as_dtype(dtype) if dtype is not None else None)
        if partitioner is None:  # the innermost variable_partitioner scope's
            partitioner = g.partitioners[-1] if g.partitioners else None
        if not init.type.is_static or init.type.rank == 0:
            raise TypeMismatch(f"partitioned variable '{self.name}' needs a static shape of "
                               f"rank >= 1, its initial value has type {init.type}", loc)
        shape = init.type.static_shape
        if partitioner is None:
            raise TfcError(f"partitioned variable '{self.name}' needs a partitioner", loc)
        parts = list(partitioner(shape, init.dtype))
        if len(parts) != len(shape) or any(p != 1 for p in parts[1:]) or parts[0] < 1:
            raise TfcError(f"partitioned variable '{self.name}': the partitioner asked for "
                           f"{parts} parts of {list(shape)}; only a split of the rows "
                           "(axis 0) is supported", loc)
        if parts[0] > shape[0]:
            raise TfcError(f"partitioned variable '{self.name}': {parts[0]} shards of "
                           f"{shape[0]} rows would leave a shard empty", loc)
        self.decl = ir.VariableDecl(self.name, init.type, device, trainable, loc)
        self.initial_value = init
        self.shards: list[Variable] = []
        self.offsets: list[int] = []
        start = 0
        for i, n in enumerate(row_blocks(shape[0], parts[0])):
            rows = init[start:start + n] if parts[0] > 1 else init
            with g.name_scope(self.name + "/"), variable_partitioner(None):
                shard = Variable(rows, trainable=trainable, name=f"part_{i}")
            shard.partition_of = self  # type: ignore[attr-defined]
            self.shards.append(shard)
            self.offsets.append(start)
            start += n
        with g.as_default():
            self._read = (ops.concat([s.value() for s in self.shards], axis=0)
                          if len(self.shards) > 1 else self.shards[0].value())
        self.initializer = group(*(s.initializer for s in self.shards),
                                 name=f"{self.name}/Assign")
        g.partitioned_variables[self.name] = self

    def _split(self, value: Any) -> list[Tensor]:
        from tfc.api.tensor import convert_to_tensor
        v = convert_to_tensor(value, dtype=self.dtype)
        if v.type.shape != self.decl.type.shape:
            raise TypeMismatch(f"cannot assign {v.type} to partitioned variable "
                               f"'{self.name}' {self.type}", user_location())
        return [v[o:o + s.shape[0]] for o, s in zip(self.offsets, self.shards)]

    def _update(self, kind: str, value: Any, name: str | None) -> Operation:
        from tfc.api.session import group
        with self.graph.as_default():
            parts = self._split(value)
            ops = [s._update(kind, p, None) for s, p in zip(self.shards, parts)]
        return group(*ops, name=name or f"{self.name}/{kind.split('.')[1]}")

    def gather(self, ids: Any) -> Tensor:
        """The rows ``ids`` of the logical variable (see the module docstring)."""
        return sharded_gather(self, ids)

    def __repr__(self) -> str:
        return f"<tfc.PartitionedVariable '{self.name}' {self.type} in {len(self.shards)} shards>"


def sharded_gather(pv: PartitionedVariable, ids: Any) -> Tensor:
    """Each shard's rows for ``ids`` (all of them, shifted to its block, padding row 0 for
    ids it does not own) on the shard's device, masked and added: see the module
    docstring for why every shard gets every id."""
    from tfc.api.tensor import convert_to_tensor
    g = pv.graph
    with g.as_default():
        idx = convert_to_tensor(ids, None if isinstance(ids, Tensor) else DType.i32)
        if not idx.dtype.is_int:
            raise TypeMismatch(f"gather from '{pv.name}': ids must be integers, got {idx.type}",
                               user_location())
        blocks = [Block(s.value(), o, s.shape[0], s.device)
                  for s, o in zip(pv.shards, pv.offsets)]
        out, owned = gather_blocks(blocks, idx)
        for safe, weight in owned:
            g.owned_weights[safe.value] = weight
    return out


@dataclass(frozen=True)
class Block:
    """One row block of a split variable as a gather sees it: its value (the block's
    read), its first row in the whole variable, its rows, and its device."""

    value: Tensor
    offset: int
    rows: int
    device: str | None


def block_ids(idx: Tensor, offset: int, rows: int) -> tuple[Tensor, Tensor]:
    """``idx`` shifted to the block of ``rows`` rows from row ``offset`` (an id outside
    it replaced by row 0) and whether the block owns each id (bool)."""
    from tfc.api import ops
    local = idx - offset if offset else idx
    owned = ops.logical_and(local >= 0, local < rows)
    safe = ops.where(owned, local, ops.zeros_like(local))
    return safe, owned


def row_mask(weight: Tensor, row_rank: int) -> Tensor:
    """``weight`` with ``row_rank`` trailing dims of 1, to scale whole rows."""
    from tfc.api import ops
    for _ in range(row_rank):
        weight = ops.expand_dims(weight, -1)
    return weight


def gather_blocks(blocks: Sequence[Block], idx: Tensor) -> tuple[Tensor, list[tuple[Tensor,
                                                                                    Tensor]]]:
    """The rows ``idx`` of the variable stored as ``blocks`` (in the default graph): each
    block's gather of every id on the block's device, masked, added (the module
    docstring); and each block's (shifted ids, owned weight), for the gradient. The one
    sharded gather of the Python partitioner and of ``tfc.passes.split_variables``."""
    from tfc.api import ops
    from tfc.api.graph import get_default_graph
    g = get_default_graph()
    out: Tensor | None = None
    owned: list[tuple[Tensor, Tensor]] = []
    for block in blocks:
        safe, mine = block_ids(idx, block.offset, block.rows)
        with g.device(block.device):
            rows = ops.gather(block.value, safe)
        weight = ops.cast(mine, block.value.dtype)
        owned.append((safe, weight))
        part = rows * row_mask(weight, block.value.type.rank - 1)
        out = part if out is None else out + part
    assert out is not None
    return out, owned


def owned_weights(graph: Graph, indices: ir.Value, dtype: DType) -> Tensor | None:
    """The 0/1 ``owned`` weight of each index of a sparse gradient (see the module
    docstring), following the reshapes and concats ``tfc.gradients`` adds when several
    gathers reach one variable; None when no index comes from a sharded gather."""
    from tfc.api import ops
    known = graph.owned_weights.get(indices)
    if known is not None:
        return known if known.dtype == dtype else ops.cast(known, dtype)
    op = indices.op
    if op is None:
        return None
    if op.kind == "reshape":
        inner = owned_weights(graph, op.inputs[0], dtype)
        return None if inner is None else ops.reshape(inner, list(op.attrs["shape"]))
    if op.kind == "concat":
        parts = [owned_weights(graph, x, dtype) for x in op.inputs]
        if all(p is None for p in parts):
            return None
        whole = [p if p is not None else ops.ones_like(ops.cast(Tensor(graph, x), dtype))
                 for p, x in zip(parts, op.inputs)]
        return ops.concat(whole, axis=op.attrs["axis"])
    return None


def logical_variables(graph: Graph) -> dict[str, Variable]:
    """The graph's variables as a user sees them, in creation order: each partitioned
    variable once, under its own name, in place of its shards (what a checkpoint holds, so
    one written with k shards restores with k' shards or none)."""
    out: dict[str, Variable] = {}
    for name, v in graph.variables.items():
        whole = getattr(v, "partition_of", None)
        if whole is None:
            out[name] = v
        elif whole.name not in out:
            out[whole.name] = whole
    return out


def logical_value(var: Variable, values: dict[str, np.ndarray]) -> np.ndarray:
    """``var``'s value from a session's values by variable name (a partitioned variable's:
    its shards' rows, concatenated)."""
    if isinstance(var, PartitionedVariable):
        return np.concatenate([values[s.name] for s in var.shards], axis=0)
    return values[var.name]


def stored_values(var: Variable, value: np.ndarray) -> dict[str, np.ndarray]:
    """The stored variables' values that make ``var`` hold ``value`` (a partitioned
    variable's: each shard's rows)."""
    if isinstance(var, PartitionedVariable):
        return {s.name: np.ascontiguousarray(value[o:o + s.shape[0]])
                for s, o in zip(var.shards, var.offsets)}
    return {var.name: value}


def expand_partitioned(var_list: Sequence[Any]) -> list[Any]:
    """``var_list`` with each partitioned variable replaced by its shards (what an
    optimizer trains)."""
    out: list[Any] = []
    for v in var_list:
        out.extend(v.shards if isinstance(v, PartitionedVariable) else [v])
    return out


__all__ = ["PartitionedVariable", "fixed_size_partitioner", "min_max_variable_partitioner",
           "variable_partitioner", "automatic_partitioner", "DEFAULT_MIN_SLICE_SIZE",
           "sharded_gather", "owned_weights", "row_blocks", "logical_variables",
           "logical_value", "stored_values", "expand_partitioned"]
