"""The automatic row split, a pass over a model's IR module: what ``tfc compile --cluster
ps=P --min-slice-size S`` does to a model of any frontend (``.py``, ``.tfm``, ``.tfir``).

The module has its variables, its gradients and its optimizer's updates already, so the
split is made on the IR: each variable that ``automatic_blocks`` splits into k > 1 blocks
(TF's ``min_max_variable_partitioner`` rule) becomes k variables ``NAME/part_0`` ...
``NAME/part_{k-1}`` holding contiguous row blocks (``row_blocks``: TensorFlow's split),
and so does each of its optimizer slots of the same type (``NAME/Momentum`` becomes
``NAME/part_i/Momentum``, as ``tfc.Variable(..., partitioner=...)`` names them), so
checkpoints name them alike and the replicate pass puts a slot on its block's PS. A
variable split by the user's own partitioner (its blocks ``NAME/part_i`` are in the
module already) is left as it is. Every use of a split variable is rewritten in place:

- a read (``var.read``) becomes a read of each block; a ``gather`` of rows from it
  (axis 0) becomes ``gather_blocks``, the Python path's sharded gather (each block gets
  every id shifted to its rows, answers on its own device, masked and added), and any
  other use reads the blocks concatenated;
- an ``assign``/``assign_add``/``assign_sub`` of the whole value assigns each block its
  rows (a ``slice``, as ``PartitionedVariable`` splits a value);
- a sparse update (``var.scatter_add``/``var.scatter_sub``: the sparse optimizers') goes
  to every block with its ids shifted (``block_ids``) and the rows it does not own
  scaled by 0, so each block adds exactly its own rows;
- the optimizer's update (its gradient marker, the ops from there to the writes of the
  variable and its slots) is copied for each block (``copy_update``), on that block's
  rows: a dense gradient's rows sliced, a sparse gradient's ids kept whole and shifted
  where a gather or scatter takes the block's rows. Each copy has its own marker, so the
  replicate pass sends each PS its workers' gradient (a sparse one: the batch's ids and
  their rows, never the table) and runs the copy there, as the Python partitioner's
  per-block gradients run. That needs an update that computes each row from that row
  alone (elementwise ops, gathers and scatters of rows: every tfc optimizer's); any
  other stays whole, its marker on the first block, reading and writing the blocks
  through the rewrites above. Every number is the unsplit model's either way (masks
  multiply by 1 and add 0).

Not split: variables that ``automatic_blocks`` keeps whole (small, non-trainable, pinned
to a device, one row), and variables an op inside a control-flow region names (a region
is isolated from above; rewriting its body is not done here).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

from tfc.api import ops
from tfc.api.graph import Graph as BuildGraph, Tensor, source_location
from tfc.api.partitioned import (Block, Partitioner, automatic_blocks, block_ids,
                                 gather_blocks, row_mask)
from tfc.errors import Location, TfcError
from tfc.ir import core as ir
from tfc.ir.registry import ELEMENTWISE, lookup, make_op, writes_variable
from tfc.ir.types import TensorType
from tfc.ops.optimizer import GRAD_MARKER
from tfc.runtime.logical import partitioned_variables, row_blocks

_WRITES = ("var.assign", "var.assign_add", "var.assign_sub")
_SCATTERS = ("var.scatter_add", "var.scatter_sub")


@dataclass(frozen=True)
class SplitVariable:
    """One variable split by rows: its blocks' names, first rows and row counts."""

    name: str
    type: TensorType
    shards: tuple[str, ...]
    offsets: tuple[int, ...]
    rows: tuple[int, ...]
    base: str  # the trainable variable (itself, or the one this is an optimizer slot of)

    def shard_type(self, i: int) -> TensorType:
        return TensorType(self.type.dtype, (self.rows[i], *self.type.shape[1:]))


def plan_split(module: ir.Module, partitioner: Partitioner) -> dict[str, SplitVariable]:
    """The variables of ``module`` the split makes blocks of (see the module docstring),
    by name: each variable ``automatic_blocks`` splits, and its slots of the same type."""
    in_regions = {op.attrs.get("var") for g in module.graphs.values() for top in g.ops
                  for r in top.regions for op in r.walk()}
    users_blocks = {s for v in partitioned_variables(module.variables).values()
                    for s in v.shards}
    out: dict[str, SplitVariable] = {}
    for name, decl in module.variables.items():
        k = automatic_blocks(partitioner, decl.type, decl.trainable, decl.device)
        if k < 2 or name in in_regions or name in users_blocks:
            continue
        slots = [n for n, d in module.variables.items() if n.startswith(name + "/")
                 and not d.trainable and d.type == decl.type and n not in in_regions
                 and "/" not in n[len(name) + 1:]]
        rows = row_blocks(int(decl.type.shape[0]), k)
        offsets = tuple(sum(rows[:i]) for i in range(k))
        names = {v: tuple(f"{name}/part_{i}" + v[len(name):] for i in range(k))
                 for v in [name, *slots]}
        if any(s in module.variables for shards in names.values() for s in shards):
            continue  # a name the blocks would take is in use: leave it whole
        for v, shards in names.items():
            out[v] = SplitVariable(v, decl.type, shards, offsets, tuple(rows), name)
    return out


def split_variables(module: ir.Module, partitioner: Partitioner) -> list[str]:
    """Split ``module``'s large variables by rows in place (see the module docstring);
    the names of the variables split (slots included), in declaration order."""
    if module.lowered_for is not None or module.partitions:
        raise TfcError("internal: split_variables runs on a model's module, before lowering")
    plan = plan_split(module, partitioner)
    if not plan:
        return []
    for graph in module.graphs.values():
        _Rewrite(graph, plan, module.variables).run()
    variables: dict[str, ir.VariableDecl] = {}
    for name, decl in module.variables.items():
        split = plan.get(name)
        if split is None:
            variables[name] = decl
            continue
        for i, shard in enumerate(split.shards):
            variables[shard] = ir.VariableDecl(shard, split.shard_type(i), decl.device,
                                               decl.trainable, decl.loc)
    names = [name for name in module.variables if name in plan]
    module.variables = variables
    module.memory_plans.clear()
    return names


class _NotRowLocal(Exception):
    """An update op whose rows the per-block copy cannot compute block by block."""


@dataclass
class _Update:
    """The optimizer's update of one split variable in one graph (its markers, the ops
    between them and its writes, the writes), and the copy of it for each block."""

    markers: list[ir.Op]
    ops: list[ir.Op]
    writes: list[ir.Op]
    copies: list[list[ir.Op]]

    def members(self) -> set[ir.Op]:
        return {*self.markers, *self.ops, *self.writes}


class _Rewrite:
    """One graph's rewrite: its top-level ops in order, each use of a split variable
    replaced by ops on its blocks (built with ``tfc.api``'s ops, so they are the Python
    path's), values renamed as they go."""

    def __init__(self, graph: ir.Graph, plan: dict[str, SplitVariable],
                 variables: dict[str, ir.VariableDecl]) -> None:
        self.graph = graph
        self.plan = plan
        self.variables = variables
        self.ops: list[ir.Op] = []
        self.subst: dict[ir.Value, ir.Value] = {}
        self.builder = BuildGraph()
        # each read of a split variable: its blocks' reads, and their concat once needed
        self.block_reads: dict[ir.Op, list[ir.Op]] = {}
        self.reads: dict[ir.Value, tuple[SplitVariable, list[ir.Value]]] = {}
        self.whole: dict[ir.Value, ir.Value] = {}
        for op in graph.ops:
            if op.kind == "var.read" and op.attrs["var"] in plan:
                split = plan[op.attrs["var"]]
                self.block_reads[op] = [self.block_read(op, split, i)
                                        for i in range(len(split.shards))]
                self.reads[op.result] = (split, [r.result for r in self.block_reads[op]])
        # the updates copied per block, by each of their ops; the op after which they go
        self.updates: dict[ir.Op, _Update] = {}
        self.last: dict[ir.Op, _Update] = {}
        position = {op: k for k, op in enumerate(graph.ops)}
        for base in dict.fromkeys(s.base for s in plan.values()):
            update = self.plan_update(base)
            if update is not None:
                self.updates.update((op, update) for op in update.members())
                self.last[max(update.members(), key=position.__getitem__)] = update

    @staticmethod
    def block_read(op: ir.Op, split: SplitVariable, i: int) -> ir.Op:
        read = make_op("var.read", [], {"var": split.shards[i]}, device=op.device,
                       loc=op.loc, result_types=[split.shard_type(i)])
        read.result.name = split.shards[i]
        return read

    def run(self) -> None:
        for op in self.graph.ops:
            op.inputs = [self.subst.get(x, x) for x in op.inputs]
            update = self.last.get(op)
            if update is not None:
                for copy in update.copies:
                    for new in copy:
                        new.inputs = [self.outside(x, new.loc) for x in new.inputs]
                    self.ops.extend(copy)
            if op in self.updates:
                continue  # its block's copy does it
            var = op.attrs.get("var") if op.kind.startswith("var.") else None
            if var in self.plan:
                self.variable_op(op, self.plan[var])
            elif op.kind == GRAD_MARKER and op.attrs["var"] in self.plan:
                op.attrs = {**op.attrs, "var": self.plan[op.attrs["var"]].shards[0]}
                self.keep(op)
            elif op.kind == "gather" and op.inputs and op.inputs[0] in self.reads \
                    and op.attrs.get("axis", 0) == 0 and len(op.inputs) == 2:
                self.gather(op)
            else:
                self.keep(op)
        results = [self.outside(v, None) for v in self.graph.results]
        self.graph.ops = self.ops
        self.graph.results = results

    def outside(self, v: ir.Value, loc: Location | None) -> ir.Value:
        """What a use of ``v`` takes now: its replacement, or a split variable's blocks
        concatenated for a read used whole."""
        v = self.subst.get(v, v)
        return self.whole_value(v, loc) if v in self.reads else v

    def keep(self, op: ir.Op) -> None:
        op.inputs = [self.outside(x, op.loc) for x in op.inputs]
        self.ops.append(op)

    def whole_value(self, read: ir.Value, loc: Location | None) -> ir.Value:
        """The blocks of ``read`` concatenated (made at the first use that needs it)."""
        if read not in self.whole:
            split, blocks = self.reads[read]
            with self.building(loc) as b:
                value = ops.concat([Tensor(b, v) for v in blocks], axis=0)
            self.whole[read] = value.value
        return self.whole[read]

    @contextlib.contextmanager
    def building(self, loc: Location | None, into: list[ir.Op] | None = None
                 ) -> Iterator[BuildGraph]:
        """Build ops with ``tfc.api``'s functions (located at ``loc``) into a scratch
        graph, then append them to ``into`` (default: the rewritten graph's ops)."""
        b = self.builder
        b.ir.ops = []
        with b.as_default(), source_location(loc):
            yield b
        (self.ops if into is None else into).extend(b.ir.ops)
        b.ir.ops = []

    def variable_op(self, op: ir.Op, split: SplitVariable) -> None:
        if op.kind == "var.read":
            self.ops.extend(self.block_reads[op])
        elif op.kind in _WRITES:
            with self.building(op.loc) as b:
                value = Tensor(b, op.inputs[0])
                for i, shard in enumerate(split.shards):
                    start = split.offsets[i]
                    part = value[start:start + split.rows[i]] if len(split.shards) > 1 \
                        else value
                    b.create_op(op.kind, [part], {"var": shard}, loc=op.loc,
                                device=op.device)
        elif op.kind in _SCATTERS:
            with self.building(op.loc) as b:
                ids, updates = (Tensor(b, x) for x in op.inputs)
                for i, shard in enumerate(split.shards):
                    safe, weight = owned_rows(ids, updates, split, i)
                    b.create_op(op.kind, [safe, updates * weight], {"var": shard},
                                loc=op.loc, device=op.device)
        else:
            raise TfcError(f"cannot split variable '{split.name}' by rows: {op.kind} "
                           f"names it (only reads, assigns, gathers and scatters are split)",
                           op.loc)

    def gather(self, op: ir.Op) -> None:
        split, reads = self.reads[op.inputs[0]]
        with self.building(op.loc) as b:
            blocks = [Block(Tensor(b, v), split.offsets[i], split.rows[i],
                            self.variables[split.name].device)
                      for i, v in enumerate(reads)]
            out, _ = gather_blocks(blocks, Tensor(b, op.inputs[1]))
        self.subst[op.result] = out.value
        out.value.name = op.result.name

    # ---- the optimizer's update, one copy per block -------------------------------------

    def plan_update(self, base: str) -> _Update | None:
        """The update of ``base`` and its slots copied for each block, or None (no
        optimizer marks it here, or an op of it needs rows of other blocks, or a value of
        it is used elsewhere): then the update stays whole and reads and writes the
        blocks through the rewrites above."""
        g = self.graph
        family = {n for n, s in self.plan.items() if s.base == base}
        markers = [op for op in g.ops if op.kind == GRAD_MARKER and op.attrs["var"] == base]
        if not markers:
            return None
        reads = [op for op in g.ops if op in self.block_reads and op.attrs["var"] in family]
        writes = [op for op in g.ops if writes_variable(op) and op.attrs["var"] in family]
        stop = {*markers, *reads}
        needed: set[ir.Op] = set()
        todo = [x.op for w in writes for x in w.inputs if x.op is not None]
        while todo:
            op = todo.pop()
            if op not in needed and op not in stop:
                needed.add(op)
                todo.extend(x.op for x in op.inputs if x.op is not None)
        dep = {r for op in stop for r in op.results}
        between = []
        for op in g.ops:
            if op in needed and any(x in dep for x in op.inputs):
                between.append(op)
                dep.update(op.results)
        inside = {*between, *writes}
        users = g.uses()
        copied = [r for op in (*markers, *between) for r in op.results]
        if any(u not in inside for r in copied for u in users.get(r, ())) \
                or any(r in g.results for r in copied):
            return None  # a value of the update is used elsewhere: it stays whole
        split = self.plan[base]
        try:
            copies = [self.copy_update(split, i, markers, between, writes)
                      for i in range(len(split.shards))]
        except (_NotRowLocal, TfcError):
            return None
        return _Update(markers, between, writes, copies)

    def copy_update(self, split: SplitVariable, i: int, markers: list[ir.Op],
                    between: list[ir.Op], writes: list[ir.Op]) -> list[ir.Op]:
        """Block ``i``'s copy of an update (``_BlockCopy``), as ops to append."""
        out: list[ir.Op] = []
        members = {*markers, *between, *writes}
        with self.building(None, out) as b:
            copy = _BlockCopy(b, self.plan, split, i)
            for read, blocks in self.block_reads.items():
                if self.plan[read.attrs["var"]].base == split.base:
                    copy.mapped[read.result] = blocks[i].result
                    copy.rows.add(read.result)
            for op in self.graph.ops:
                if op in members:
                    with source_location(op.loc):
                        copy.copy(op)
        return out


class _BlockCopy:
    """Block ``i``'s copy of an update: every value of the variable's rows (a read of it
    or a slot, a dense gradient, what is computed from them row by row) becomes its
    block's rows; a sparse gradient's ids stay the whole variable's, shifted to the block
    where a gather or a scatter takes rows (``owned_rows``), its rows of other blocks
    scaled by 0 in a scatter. A gather of the block's rows for an id it does not own
    reads its row 0: that position's result is computed but scaled by 0 where it is
    added (as the Python path's padding). ``_NotRowLocal`` for an op that needs rows of
    other blocks."""

    def __init__(self, b: BuildGraph, plan: dict[str, SplitVariable], split: SplitVariable,
                 i: int) -> None:
        self.b = b
        self.plan = plan
        self.split = split
        self.i = i
        self.mapped: dict[ir.Value, ir.Value] = {}
        self.rows: set[ir.Value] = set()  # values (of the whole graph) of the rows

    def t(self, v: ir.Value) -> Tensor:
        return Tensor(self.b, self.mapped.get(v, v))

    def block_rows(self, v: ir.Value) -> Tensor:
        """The block's rows of ``v``, a value of the variable's whole rows."""
        start = self.split.offsets[self.i]
        return self.t(v)[start:start + self.split.rows[self.i]]

    def shard(self, var: str) -> str:
        return self.plan[var].shards[self.i]

    def copy(self, op: ir.Op) -> None:
        if op.regions:  # (its body is not copied)
            raise _NotRowLocal(op.kind)
        b, t, rows = self.b, self.t, self.rows
        is_row = [x in rows for x in op.inputs]
        attrs: dict[str, Any] = dict(op.attrs)
        inputs: list[Tensor]
        row_result = False
        if op.kind == GRAD_MARKER:  # the block's own, for the replicate pass
            dense = len(op.inputs) == 1
            inputs = [self.block_rows(op.inputs[0])] if dense else [t(x) for x in op.inputs]
            attrs["var"] = self.split.shards[self.i]
            row_result = dense
        elif op.kind in _WRITES:
            inputs = [t(op.inputs[0]) if is_row[0] else self.block_rows(op.inputs[0])]
            attrs["var"] = self.shard(op.attrs["var"])
        elif op.kind in _SCATTERS or (op.kind == "scatter_add" and is_row[0]):
            dense_input = [] if op.kind in _SCATTERS else [t(op.inputs[0])]
            ids, updates = op.inputs[len(dense_input):]
            if ids in rows or updates in rows:
                raise _NotRowLocal(op.kind)
            safe, weight = owned_rows(t(ids), t(updates), self.split, self.i)
            inputs = [*dense_input, safe, t(updates) * weight]
            if op.kind in _SCATTERS:
                attrs["var"] = self.shard(op.attrs["var"])
            row_result = bool(dense_input)
        elif op.kind == "gather" and len(op.inputs) == 2 and is_row[0] and not is_row[1] \
                and op.attrs.get("axis", 0) == 0:
            safe, _ = owned_rows(t(op.inputs[1]), t(op.inputs[0]), self.split, self.i)
            inputs = [t(op.inputs[0]), safe]
        elif any(is_row):
            inputs = self.row_inputs(op, is_row)
            row_result = True
        else:  # no rows of the variable: ids, scalars, a sparse gradient's rows
            inputs = [t(x) for x in op.inputs]
        new = b.create_op(op.kind, inputs, attrs, loc=op.loc, device=op.device)
        if row_result:
            rows.update(op.results)
        self.mapped.update(zip(op.results, new.results))

    def row_inputs(self, op: ir.Op, is_row: list[bool]) -> list[Tensor]:
        """The inputs of a copy of ``op``, an op on rows of the variable: only an
        elementwise op (or a ``*_like``) computes row r from rows r alone."""
        like = op.kind in ("zeros_like", "ones_like")
        if not (lookup(op.kind).has(ELEMENTWISE) or like) or len(op.results) != 1:
            raise _NotRowLocal(op.kind)
        out = op.result.type
        whole_rows = int(self.split.type.shape[0])
        if out.rank == 0 or out.shape[0] != whole_rows:
            raise _NotRowLocal(op.kind)
        inputs = []
        for x, row in zip(op.inputs, is_row):
            if row:
                if x.type.rank != out.rank:
                    raise _NotRowLocal(op.kind)
                inputs.append(self.t(x))
            elif x.type.rank == out.rank and x.type.shape[0] == whole_rows:
                inputs.append(self.block_rows(x))  # a whole value of as many rows
            elif x.type.rank == out.rank and x.type.shape[0] != 1:
                raise _NotRowLocal(op.kind)
            else:
                inputs.append(self.t(x))  # broadcast to every row
        return inputs


def owned_rows(ids: Tensor, updates: Tensor, split: SplitVariable, i: int
               ) -> tuple[Tensor, Tensor]:
    """``ids`` shifted to block ``i`` of ``split`` (``block_ids``) and the 0/1 weight
    that scales each of ``updates``' rows: 1 where the block owns the id."""
    safe, mine = block_ids(ids, split.offsets[i], split.rows[i])
    return safe, row_mask(ops.cast(mine, updates.dtype), updates.type.rank - ids.type.rank)


__all__ = ["SplitVariable", "plan_split", "split_variables"]
