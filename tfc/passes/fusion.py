"""fusion: group element-wise chains, broadcasts and reductions into ``fusion`` ops.

Runs last, after canonicalize, cse, dce and autodiff (its ops have no gradients). Like
XLA's instruction fusion it is greedy, producer into consumer, in topological order:
each fusible op joins the group of one of its producers when the shapes agree and no
cycle appears, and may then merge the groups of its other producers into that one. What
is left alone, as ops of its own: matmul, conv, pooling, gather and every other op that
is not element-wise; STATEFUL and RANDOM ops; ops owning regions. Every fusible op ends
in a ``fusion`` (one element-wise op alone is a one-op ``loop``), so a backend needs
kernels only for fusions. See ``tfc.ops.fusion`` for the kinds (loop, reduce, row).

Fusible (by the ops' traits, ``tfc.ir.registry.Trait``): ELEMENTWISE ops (``where``,
``cast``, comparisons too), BROADCAST ops, VIEW ops (``expand_dims``/``squeeze``/
``reshape`` ...) that only add or remove size-1 dims, ``one_hot``, the REDUCTION ops but
``prod`` (``tfc.ops.fusion.fused_reduction``), and COMPOSITE ops, which are expanded in
the region by their registry entry's ``expand`` rule (``tfc.ir.expand``):
``zeros_like``/``ones_like``/``bias_add`` into a broadcast scalar and an ``add``;
softmax, log_softmax and the cross-entropies into max, sub, exp, sum, log... exactly as
their numpy references compute (subtract the max first), so a fused graph gives the same
numbers. A composite takes part as its expansion does: element-wise, or as a reduction
when the expansion reduces (one axis set of one shape).

Rules for a group (its iteration shape S is the domain of its ops: an element-wise op's
result shape, a reduction's input shape; shapes equal up to size-1 dims count as one):

- every op's domain is S, or, after a reduction, S with the reduced axes removed (the
  epilogue); a group of scalars, or of broadcasts and reshapes only, whose values no
  one else uses, may grow into a bigger consumer (its work is loop-invariant or free);
- all reductions of a group reduce the same axes of S (others start a new group);
- one device per group; no op outside the group on a path between two members, where a
  path may pass through groups formed so far as single nodes (a group runs as one
  kernel, so it is convex in the graph of groups, and that graph stays acyclic: two
  groups each feeding the other through different members would be a cycle, though
  each is convex in the ops' graph; checked with ancestor bitsets of that graph);
- nothing is computed twice: a value needed outside becomes a result of its fusion. Only
  splat constants (scalars, ``zeros``, ``ones``, ``fill``) are copied into every region
  that uses them, as scalars (broadcast when not rank 0).

Regions are named ``@fused_N`` (numbered through the module in order, after any
existing ones) and cleaned with cse and dce; the outer graph is re-sorted
topologically, stably. Every graph is fused, the regions of control-flow ops (``cond``,
``while``, ``scan``) included, but never the region of a ``fusion``. Memory plans of
changed graphs are dropped (stale). A region remembers the ops it was fused from
(``Graph.sources``, ``source_results``; ``fused_ops``), so a profile can charge its
kernel's time to them.

Cost: linear in the graph for a deep model. A region is built once per content (its
members' kinds, attrs and types, how they are wired, the constants' values and the
outputs) and copied for every group of that content with the group's own names and
locations (``_template``); composites are classified once per kind, attrs and types.
Both are kept in this process only: a new process builds each distinct region once
(6 to 8 for a 256-layer MLP's training step: under 2 ms), no more than reading them back
would cost.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from tfc.errors import Location, TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op, Value, assembled_op
from tfc.ir.expand import expand_into, expansion
from tfc.ir.registry import (BROADCAST, COMPOSITE, ELEMENTWISE, GENERATOR, PURE, RANDOM,
                             STATEFUL, VIEW, OpDef, lookup, make_op)
from tfc.ir.types import Dim, TensorType, broadcast_shapes
from tfc.ops.fusion import (INDEXED, core_shape, fused_reduction, fusion_kind, is_splat,
                            loop_op_problem, reduction_axes, unit_view)
from tfc.passes.cse import cse_graph
from tfc.passes.dce import dce_graph
from tfc.passes.manager import register_pass, type_key
from tfc.passes.replicate import strip_module_markers

_FUSED_NAME = re.compile(r"^fused_(\d+)$")
PENDING = "fused_?"  # a new region's name until the graph is re-sorted


@register_pass("fusion")
def fusion(module: Module) -> Module:
    """Fuse every graph of ``module`` (control-flow regions included) but the
    partitioned entries, whose stage graphs run instead (``tfc.passes.partition``).
    The ``optimizer.grad`` markers go first (identities: ``tfc.ops.optimizer``)."""
    strip_module_markers(module)  # optimizer.grad markers are identities: gone here
    names = _Names(module)
    for name, graph in module.graphs.items():
        if name not in module.partitions and _fuse_tree(graph, names):
            module.memory_plans.pop(name, None)
    return module


def fused_ops(op: Op) -> tuple[Op, ...]:
    """The ops of the unfused graph that ``op`` computes: a ``fusion``'s sources (the
    ops it was made of, in this process), else ``op`` itself (a fusion read back from an
    artifact too: its sources are not known, so it is its own unit)."""
    if op.kind == "fusion" and op.regions and op.regions[0].sources:
        return op.regions[0].sources
    return (op,)


def _fuse_tree(graph: Graph, names: "_Names") -> bool:
    changed = False
    for op in _with_regions(graph):
        if op.kind != "fusion":
            for r in op.regions:
                changed |= _fuse_tree(r, names)
    return fuse_graph(graph, names) > 0 or changed


def _with_regions(graph: Graph) -> list[Op]:
    """The ops of ``graph`` that own regions (most own none: found in C)."""
    return list(compress(graph.ops, map(_REGIONS, graph.ops)))


_REGIONS = attrgetter("regions")


class _Names:
    """``fused_N`` names, unique in the module, after those it already has."""

    def __init__(self, module: Module) -> None:
        self.next = 0
        for g in module.graphs.values():
            self.see(g)

    def see(self, graph: Graph) -> None:
        for op in _with_regions(graph):
            for r in op.regions:
                m = _FUSED_NAME.match(r.name)
                if m:
                    self.next = max(self.next, int(m.group(1)) + 1)
                self.see(r)

    def __call__(self) -> str:
        self.next += 1
        return f"fused_{self.next - 1}"


# ---- what can be fused ---------------------------------------------------------------------

class _Info(NamedTuple):
    """How an op takes part: ``ew`` (element-wise), ``reduce`` or ``const`` (copied in)."""

    role: str
    dom: tuple[Dim, ...]  # the iteration shape
    axes: tuple[int, ...] | None = None


# What the registry says of a kind, for ``classify``: its traits read once per definition
# in this process (a definition's traits do not change), not once per op.
_NEVER, _OTHER, _EW, _VIEW, _REDUCE, _COMPOSITE = range(6)
_KIND_CLASSES: dict[OpDef, tuple[bool, int]] = {}  # -> (constant-like, class)


def _kind_class(kind: str, opdef: OpDef) -> tuple[bool, int]:
    """Whether ``kind`` is constant-like (a ``constant``, a GENERATOR: without inputs it
    is copied in), and how else an op of that kind may take part."""
    if opdef.has(RANDOM) or opdef.has(STATEFUL) or not opdef.has(PURE):
        return False, _NEVER
    const = kind == "constant" or opdef.has(GENERATOR)
    if fused_reduction(kind):
        return const, _REDUCE
    if opdef.has(COMPOSITE):
        return const, _COMPOSITE
    if opdef.has(ELEMENTWISE) or opdef.has(BROADCAST) or kind in INDEXED:
        return const, _EW
    return const, (_VIEW if opdef.has(VIEW) else _OTHER)


def _known_class(kind: str) -> tuple[bool, int]:
    """``_kind_class`` of ``kind``, remembered per definition."""
    opdef = lookup(kind)
    known = _KIND_CLASSES.get(opdef)
    if known is None:
        known = _KIND_CLASSES[opdef] = _kind_class(kind, opdef)
    return known


def classify(op: Op) -> _Info | None:
    """How ``op`` can be fused, or None when it stays an op of its own."""
    if op.regions or len(op.results) != 1:
        return None
    return _classify(op, _known_class(op.kind))


def _classified(ops: list[Op]) -> tuple[list[_Info | None], list[bool]]:
    """``classify`` of each of ``ops`` (the class of each kind looked up once), and
    whether each is a splat constant (its role ``const``)."""
    kinds: dict[str, tuple[bool, int] | None] = {}
    infos: list[_Info | None] = [None] * len(ops)
    shared = [False] * len(ops)
    ew = _EW_INFOS
    for i, op in enumerate(ops):
        if op.regions:
            continue
        kind = op.kind
        if kind in kinds:
            known = kinds[kind]
        else:
            try:
                known = kinds[kind] = _known_class(kind)
            except TfcError:  # an unknown kind: ``classify`` decides, op by op (it
                known = kinds[kind] = None  # raises for one with a single result)
        if known is None:
            info = infos[i] = classify(op)
        else:
            const, c = known
            if c == _NEVER or (c == _OTHER and not const) or len(op.results) != 1:
                continue
            if c == _EW and not const:  # most ops: one info per shape
                shape = op.results[0].type.shape
                infos[i] = ew[shape] if shape in ew else _ew_info(shape)
                continue
            info = infos[i] = _classify(op, known)
        if info is not None and info.role == "const":
            shared[i] = True
    return infos, shared


def _classify(op: Op, known: tuple[bool, int]) -> _Info | None:
    kind = op.kind
    const, c = known
    if c == _NEVER:
        return None
    if const and (kind == "constant" or not op.inputs):
        value = splat_value(op)
        return None if value is None else _Info("const", op.results[0].type.shape)
    if c == _EW:
        return _ew_info(op.results[0].type.shape)
    if c == _REDUCE:
        return _Info("reduce", op.inputs[0].type.shape, reduction_axes(op))
    if c == _COMPOSITE:
        return _composite_info(op)
    if c == _VIEW and unit_view(op):
        return _ew_info(op.results[0].type.shape)
    return None


_EW_INFOS: dict[tuple[Dim, ...], _Info] = {}  # by shape: one per shape in this process


def _ew_info(shape: tuple[Dim, ...]) -> _Info:
    info = _EW_INFOS.get(shape)
    if info is None:
        if len(_EW_INFOS) >= MAX_TEMPLATES:
            _EW_INFOS.clear()
        info = _EW_INFOS[shape] = _Info("ew", shape)
    return info


_COMPOSITES: dict[tuple, _Info | None] = {}  # by kind, attrs and types: see _composite_info


def _composite_info(op: Op) -> _Info | None:
    """A composite takes part as its expansion does: element-wise when it has no
    reduction, else as the reduction its reductions share (one axis set of one shape;
    labels of another symbolic shape than the logits would make the sums differ).
    Remembered in this process by everything the expansion depends on (kind, attrs,
    input and result types): a deep model expands the same few composites each layer."""
    key = (op.kind, op.attrs_key(),  # (the types by type_key: hashed without a call)
           tuple([(v.type.dtype._name_, v.type.shape) for v in op.inputs]),
           tuple([(r.type.dtype._name_, r.type.shape) for r in op.results]))
    if key not in _COMPOSITES:
        if len(_COMPOSITES) >= MAX_TEMPLATES:
            _COMPOSITES.clear()
        _COMPOSITES[key] = _expanded_info(op)
    return _COMPOSITES[key]


def _expanded_info(op: Op) -> _Info | None:
    trial = _trial_expansion(op)
    if trial is None or any(loop_op_problem(r) is not None and not fused_reduction(r.kind)
                            for r in trial.ops):
        return None
    reductions = [r for r in trial.ops if fused_reduction(r.kind)]
    if not reductions:
        return _Info("ew", op.result.type.shape)
    dom, axes = reductions[0].inputs[0].type.shape, reduction_axes(reductions[0])
    if any(r.inputs[0].type.shape != dom or reduction_axes(r) != axes for r in reductions):
        return None
    return _Info("reduce", dom, axes)


def cheap(op: Op) -> bool:
    """Whether a group of such ops may be copied into a bigger consumer: no arithmetic
    worth sharing (broadcasts, views, generators, ``one_hot``, ``cast``). By kind
    (the traits of a definition read once in this process)."""
    opdef = lookup(op.kind)
    known = _CHEAP_KINDS.get(opdef)
    if known is None:
        known = _CHEAP_KINDS[opdef] = (
            opdef.has(BROADCAST) or opdef.has(VIEW) or opdef.has(GENERATOR)
            or op.kind in INDEXED or op.kind == "cast")
    return known


_CHEAP_KINDS: dict[OpDef, bool] = {}


def splat_value(op: Op) -> np.ndarray | None:
    """The value of a constant-like op (a ``constant``, a GENERATOR without inputs) when it
    is a non-empty splat (else None)."""
    if op.kind == "constant":
        value = op.attrs["value"]
        return value if value.size and is_splat(value) else None
    opdef = lookup(op.kind)
    if not opdef.has(GENERATOR) or op.inputs:
        return None
    fill = opdef.fill_value(op.attrs)
    shape = op.result.type.shape
    if fill is None or 0 in shape or not all(isinstance(d, int) for d in shape):
        return None
    # a view: nothing of the size of the result
    return np.broadcast_to(fill, tuple(int(d) for d in shape))


def _trial_expansion(op: Op) -> Graph | None:
    """``op`` expanded into primitives on a scratch graph, or None when the expansion does
    not build or does not give exactly its types (then ``op`` is not fused)."""
    try:
        return expansion(op)
    except TfcError:
        return None


# ---- grouping ------------------------------------------------------------------------------

@dataclass(eq=False)  # (one group is one node: compared by identity)
class _Group:
    members: list[int]
    bits: int  # members as a bitset of op positions
    anc: int  # every op some member depends on, in the graph of groups
    shape: tuple[Dim, ...]
    axes: tuple[int, ...] | None
    device: str | None
    cheap: bool
    late: set[Value]  # values computed from the group's reductions


def _same_space(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    return a == b or core_shape(a) == core_shape(b)


def _grows(small: tuple[Dim, ...], big: tuple[Dim, ...]) -> bool:
    """Whether ``small`` broadcasts to ``big`` (and is a different iteration space)."""
    return broadcast_shapes(small, big) == big and not _same_space(small, big)


def _reduced(shape: tuple[Dim, ...], axes: tuple[int, ...]) -> tuple[Dim, ...]:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _broadcast_back(small: Sequence[Dim], shape: Sequence[Dim], axes: tuple[int, ...],
                    out: Sequence[Dim]) -> bool:
    """Whether ``small``, broadcast as numpy does into ``out`` (which is ``shape``), has
    size 1 on the reduced ``axes`` and the full size on the others."""
    if tuple(out) != tuple(shape) or len(small) > len(shape):
        return False
    off = len(shape) - len(small)
    for k, d in enumerate(shape):
        sd = small[k - off] if k >= off else 1
        if sd != 1 and (k in axes or sd != d):
            return False
    return True


def _one_element(shape: Sequence[Dim]) -> bool:
    return all(d == 1 for d in shape)


class _Grouper:
    """Greedy grouping of one graph's ops (positions index ``graph.ops``)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.ops = ops = graph.ops
        self.pos = pos = {op: i for i, op in enumerate(ops)}
        # per op: how it takes part (``classify``; what the registry says read once per
        # kind), and whether it is a splat constant (copied into the regions using it)
        self.infos, self.shared = infos, shared = _classified(ops)
        self.constants = [i for i, c in enumerate(shared) if c]  # their positions
        # Per visited op: the ops it depends on in the graph whose nodes are the groups so
        # far (and the ops in none); grown by ``contract`` as groups gain members.
        self.anc: list[int] = []
        # per op: the positions of the ops using one of its results, ascending (a fusible
        # op has one result: they are that value's users; a splat constant's users
        # decide whether it stays)
        self.uses: list[list[int]] = [[] for _ in ops]
        # per op: the positions of the ops defining its inputs, in input order, graph
        # arguments and splat constants left out: splat constants have no inputs, so
        # none lies on a path between two members of a group, and each group copies
        # them in; counted, every group reading the learning rate at the end of a
        # training step brought an ancestor its members lacked, and ``contract`` walked
        # the whole backward pass once per layer
        none: list[int] = []
        self.producers: list[list[int]] = [none] * len(ops)
        uses, producers = self.uses, self.producers
        for i, op in enumerate(ops):
            if not op.inputs:
                continue
            mine = producers[i] = []
            for v in op.inputs:
                p = v.op
                if p in pos:  # (not an argument)
                    j = pos[p]
                    u = uses[j]
                    if not u or u[-1] != i:
                        u.append(i)
                    if not shared[j]:
                        mine.append(j)
        self.escaping = set(graph.results)
        self.group_of: list[_Group | None] = [None] * len(ops)
        self.groups: dict[int, _Group] = {}  # by id (merged groups leave)
        # per splat constant copied into a region: its part of the region's key
        self.constant_keys: dict[Op, tuple[tuple[str, tuple[Dim, ...]], bytes]] = {}
        self.cheap_kinds: dict[str, bool] = {}  # by kind: ``cheap``

    def run(self) -> list[_Group]:
        groups, group_of, infos, anc = self.groups, self.group_of, self.infos, self.anc
        for i, op in enumerate(self.ops):
            # op i's ancestors: its producers' (every op before it has been visited)
            producers = self.producers[i]
            a = 0
            for j in producers:
                a |= anc[j] | (1 << j)
            anc.append(a)
            info = infos[i]
            if info is None or info.role == "const":
                continue
            current: _Group | None = None
            tried: list[_Group] = []  # those that would not join or merge
            for j in producers:
                g = group_of[j]
                if g is None or g is current or g in tried:  # (groups: by identity)
                    continue
                if current is None:
                    if self.join(g, i, info):
                        current = g
                    else:
                        tried.append(g)
                elif self.merge(current, g):  # (its members are current's now)
                    del groups[id(g)]
                else:
                    tried.append(g)
            if current is None:
                late = set(op.results) if info.role == "reduce" else set()
                current = _Group([i], 1 << i, anc[i], info.dom, info.axes, op.device,
                                 self.cheap_op(op), late)
                group_of[i] = current
                groups[id(current)] = current
        return list(groups.values())

    def cheap_op(self, op: Op) -> bool:
        """``cheap(op)``, asked once per kind of this graph."""
        kinds = self.cheap_kinds
        kind = op.kind
        if kind not in kinds:
            kinds[kind] = cheap(op)
        return kinds[kind]

    def contract(self, g: _Group) -> None:
        """``g`` gained members: it is one node, so each op that depends on a member (the
        members too) depends on every ancestor of every member; giving them all of
        ``g``'s keeps the sets closed.

        Those ops are found by walking from the members along uses, among the visited
        ops, and through every group met (a path may enter a group through a later
        member and leave through an earlier one): every op whose set holds a member was
        reached so, since a set only gains what such paths bring. Each op reached is
        tested as before, so the sets come out as a pass over every visited op from the
        first member on would leave them, at the cost of what depends on ``g`` instead
        of what comes after it (seeded 4400-op graphs: 1.2 M ops tested, now 0.18 M)."""
        new = g.anc | g.bits
        anc, uses, group_of, visited = self.anc, self.uses, self.group_of, len(self.anc)
        seen = set(g.members)
        walked: set[int] = {id(g)}
        stack = list(g.members)
        while stack:
            j = stack.pop()
            if (anc[j] | (1 << j)) & g.bits:
                anc[j] |= new
            for u in uses[j]:
                if u >= visited:
                    break  # (ascending)
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
            z = group_of[j]
            if z is not None and id(z) not in walked:
                walked.add(id(z))
                for u in z.members:
                    if u not in seen:
                        seen.add(u)
                        stack.append(u)
        g.anc = new

    def only_used_by(self, g: _Group, allowed: int) -> bool:
        """Whether every use of ``g``'s values is by an op in the bitset ``allowed``."""
        ops, escaping, uses = self.ops, self.escaping, self.uses
        for m in g.members:
            if ops[m].results[0] in escaping:  # (a member has one result)
                return False
            for u in uses[m]:
                if not (allowed >> u) & 1:
                    return False
        return True

    def absorbable(self, g: _Group, into: int) -> bool:
        """A smaller group may grow into a bigger consumer when its work is trivial or
        loop-invariant and nothing else needs its values (they would be results)."""
        return (g.axes is None and (g.cheap or _one_element(g.shape))
                and self.only_used_by(g, into | g.bits))

    def join(self, g: _Group, i: int, info: _Info) -> bool:
        op = self.ops[i]
        if op.device != g.device:
            return False
        shape = self.joined_shape(g, i, info)
        if shape is None:
            return False
        bits, anc = g.bits | (1 << i), g.anc | self.anc[i]
        late = self.late_step(g.late, i, *shape)
        if late is None or self.cycle(bits, anc, g.members[0]):
            return False
        # i is the last op visited, so only its own set can lack the group's ancestors;
        # when i brings none the group lacked, no other op's set changes (contracting
        # anyway made fusion quadratic: 8000 ops 0.15 -> 6 s)
        closed = self.anc[i] & ~(g.anc | g.bits) == 0
        g.members.append(i)
        g.bits, g.anc = bits, anc
        g.late |= late
        g.shape, g.axes = shape
        g.cheap = g.cheap and self.cheap_op(op)
        self.group_of[i] = g
        if closed:
            self.anc[i] |= g.anc | g.bits
        else:
            self.contract(g)
        return True

    def joined_shape(self, g: _Group, i: int, info: _Info
                     ) -> tuple[tuple[Dim, ...], tuple[int, ...] | None] | None:
        """The group's (iteration shape, reduced axes) with op ``i`` in it, or None."""
        s, axes, d = g.shape, g.axes, info.dom
        if info.role == "ew":
            if _same_space(d, s):
                return s, axes
            if axes is not None and _same_space(d, _reduced(s, axes)):
                return s, axes  # the epilogue, after the reductions
            if _grows(s, d) and self.absorbable(g, 1 << i):
                return d, None
            return None
        if axes is None:
            if _same_space(d, s) or (_grows(s, d) and self.absorbable(g, 1 << i)):
                return d, info.axes
            return None
        return (s, axes) if d == s and info.axes == axes else None

    def merge(self, cur: _Group, g: _Group) -> bool:
        """Merge producer group ``g`` into ``cur`` (which holds their consumer)."""
        if g.device != cur.device:
            return False
        shape = self.merged_shape(cur, g)
        if shape is None:
            return False
        bits, anc = cur.bits | g.bits, cur.anc | g.anc
        late = self.late_values(bits, *shape) if shape[1] is not None else set()
        if late is None or self.cycle(bits, anc, min(cur.members[0], g.members[0])):
            return False
        cur.members = sorted(cur.members + g.members)
        cur.bits, cur.anc, cur.late = bits, anc, late
        cur.shape, cur.axes = shape
        cur.cheap = cur.cheap and g.cheap
        for m in g.members:
            self.group_of[m] = cur
        self.contract(cur)
        return True

    def merged_shape(self, cur: _Group, g: _Group
                     ) -> tuple[tuple[Dim, ...], tuple[int, ...] | None] | None:
        if _same_space(cur.shape, g.shape):
            if cur.axes is not None and g.axes is not None:
                ok = cur.shape == g.shape and cur.axes == g.axes
                return (cur.shape, cur.axes) if ok else None
            return (g.shape, g.axes) if g.axes is not None else (cur.shape, cur.axes)
        if g.axes is not None:
            return None
        if cur.axes is not None and _same_space(g.shape, _reduced(cur.shape, cur.axes)):
            return cur.shape, cur.axes
        if _grows(g.shape, cur.shape) and self.absorbable(g, cur.bits):
            return cur.shape, cur.axes
        return None

    def late_values(self, bits: int, shape: tuple[Dim, ...],
                    axes: tuple[int, ...] | None) -> set[Value] | None:
        """The values of members ``bits`` computed from a reduction, or None when one
        of them reaches the iteration shape other than broadcast back over the reduced
        axes (see ``late_step``)."""
        late: set[Value] = set()
        rest = bits
        while rest:
            low = rest & -rest
            rest ^= low
            new = self.late_step(late, low.bit_length() - 1, shape, axes)
            if new is None:
                return None
            late |= new
        return late

    def late_step(self, late: set[Value], m: int, shape: tuple[Dim, ...],
                  axes: tuple[int, ...] | None) -> set[Value] | None:
        """The results of member ``m`` that are computed from a reduction, given those of
        the members before it; None when ``m`` reads such a value into the iteration
        shape other than broadcast back over the reduced axes (``[B,1]`` into ``[B,10]``
        after a max over axis 1, never ``[B]`` aligned with the reduced axis), since a
        row kernel must have each row's reductions done before the row reads them."""
        op, info = self.ops[m], self.infos[m]
        if info is not None and info.role == "reduce":
            return set(op.results)
        if late.isdisjoint(op.inputs):
            return set()
        reads = [v for v in op.inputs if v in late]
        out = op.results[0].type.shape
        if axes is not None and _same_space(out, shape) and any(
                not _same_space(v.type.shape, shape)
                and not _broadcast_back(v.type.shape, shape, axes, out) for v in reads):
            return None
        return set(op.results)

    def cycle(self, bits: int, anc: int, lo: int) -> bool:
        """Whether an op outside ``bits`` (or a group it is in) lies on a path between two
        of its members (``anc``: their ancestors in the graph of groups; ``lo``: the
        first member)."""
        outside = (anc & ~bits) >> lo << lo
        while outside:
            low = outside & -outside
            if self.anc[low.bit_length() - 1] & bits:
                return True
            outside ^= low
        return False


# ---- rewriting -----------------------------------------------------------------------------

def fuse_graph(graph: Graph, names: Callable[[], str] | None = None) -> int:
    """Fuse one graph (not its regions); returns how many fusion ops it made."""
    names = names or _Names(Module({graph.name: graph}))
    grouper = _Grouper(graph)
    groups = sorted(grouper.run(), key=lambda g: g.members[0])
    if not groups:
        return 0
    # The new graph in order of priority (one op per place: an op left alone at its
    # position, a fusion at its group's first member's), the fusions at theirs.
    placed: list[Op | None] = list(graph.ops)
    fused: dict[Op, int] = {}
    subst: dict[Value, Value] = {}
    for g in groups:
        for m in g.members:
            placed[m] = None
        outputs = _outputs(grouper, g)
        if not outputs:
            continue  # nothing of it is used: dead
        fop = _build(grouper, g, outputs)
        placed[g.members[0]] = fop
        fused[fop] = g.members[0]
        subst.update(zip(outputs, fop.results))
    # uses of the groups' values now use their fusions' results; the splat constants
    # copied into regions and now used by no one go away
    # (one step: a fusion's results are no group's values)
    new = subst.get
    graph.results = [new(v, v) for v in graph.results]
    used = set(graph.results)
    replaced = subst.keys()
    for op in placed:
        if op is not None:
            inputs = op.inputs
            if not replaced.isdisjoint(inputs):
                op.inputs = inputs = [new(v, v) for v in inputs]
            used.update(inputs)
    for c in grouper.constants:
        op = placed[c]
        if op is not None and used.isdisjoint(op.results):
            placed[c] = None
    ops = [op for op in placed if op is not None]
    if _in_order(fused, grouper.pos):
        graph.ops = ops
    else:
        graph.ops = _topological(ops, {op: k for k, op in enumerate(placed) if op is not None})
        fused = {op: 0 for op in graph.ops if op in fused}
    for op in fused:  # numbered in the order they run
        op.regions[0].name = names()
    return len(fused)


def _in_order(fused: dict[Op, int], pos: dict[Op, int]) -> bool:
    """Whether the order of priorities is topological: every fusion (at its place in
    ``fused``) after the producers of its inputs (fusions at theirs, other ops at their
    positions ``pos``). An op left alone is after its producers: at its position, and a
    producer fused is at its group's first member's, before it."""
    for op, k in fused.items():
        for v in op.inputs:
            p = v.op
            if p is not None:
                j = fused.get(p)
                if (pos.get(p, -1) if j is None else j) >= k:
                    return False
    return True


def _outputs(grouper: _Grouper, g: _Group) -> list[Value]:
    """Member results used outside the group, in member order."""
    out = []
    uses, escaping, group_of = grouper.uses, grouper.escaping, grouper.group_of
    ops = grouper.ops
    for m in g.members:
        r = ops[m].results[0]  # (a member has one result)
        if r in escaping:
            out.append(r)
            continue
        for u in uses[m]:
            if group_of[u] is not g:
                out.append(r)
                break
    return out


def _build(grouper: _Grouper, g: _Group, outputs: list[Value]) -> Op:
    """The fusion op of a group computing ``outputs``: its region is the group's template
    (``_template``, built once per content) with the group's values, locations and names."""
    members = [grouper.ops[m] for m in g.members]
    shape = _GroupShape.of(grouper, members, outputs)
    template = _TEMPLATES.get(shape.key)
    if template is None:
        template = _template(shape)
        if len(_TEMPLATES) >= MAX_TEMPLATES:
            _TEMPLATES.clear()  # (one call: threads may fuse at once)
        if MAX_TEMPLATES:
            _TEMPLATES[shape.key] = template
    region = _instantiate(template, shape)
    region.sources, region.source_results = tuple(members), tuple(outputs)
    names, types = [v.name for v in outputs], [v.type for v in outputs]
    if template.attrs is None:  # its attrs checked once per content
        op = make_op("fusion", shape.args, {"kind": template.kind}, device=g.device,
                     loc=members[0].loc, regions=[region], names=names, result_types=types)
        template.attrs = op.attrs
        return op
    return assembled_op("fusion", shape.args, template.attrs, types, names,
                        device=g.device, loc=members[0].loc, regions=[region])


# ---- regions built once per content ------------------------------------------------------
#
# The regions of a deep model are the same few over and over (a 256-layer MLP's 769
# groups are 6 different ones). A group's region depends only on its *shape*: each
# member's kind, attrs and result types, where each member input comes from (an
# earlier member's result, a splat constant, or the k-th value from outside), the
# constants' values and the outputs. So the region is built once per shape, as a
# template, from stand-ins: their names and locations say which member, constant or
# outside value each one stands for; every group of that shape gets a copy with its
# own. The shape is the whole input of ``_template`` (``_GroupShape.key``), so a copy is
# exactly the region building it anew would give (tests/passes/test_fusion_memo.py:
# the same printed IR with templates as without).

MAX_TEMPLATES = 4096  # regions kept in this process (all dropped when full)
_MEMBER, _CONSTANT, _ARG = "\0member", "\0constant", "\0arg"


@dataclass
class _Template:
    """A region built from stand-ins (``region``: their names and locations say which
    member, constant or outside value each one stands for) and, read off it once, how
    to copy it for a group (``_instantiate``): per op of the region, ``steps`` holds its
    kind, attrs (shared: they are immutable), inputs (positions in the list of the
    region's values: its arguments, then each op's results in order), result types,
    location (``(1, k)``: member k's, ``(2, c)``: constant c's, else ``(0, loc)``: this
    one) and result names (positions in the group's name table: the template's own
    names ``names``, then the members' result names, then the outside values' names)."""

    region: Graph
    kind: str  # its fusion kind (loop, reduce, row)
    names: list[str | None]
    steps: list[tuple[str, Mapping[str, Any], tuple[int, ...], list[TensorType],
                      tuple[int, Any], list[int]]]
    results: tuple[int, ...]  # the region's results, as positions in its values
    attrs: Mapping[str, Any] | None = None  # the fusion op's, checked (``_build``)


_TEMPLATES: dict[tuple, _Template] = {}


@dataclass
class _GroupShape:
    """A group as its region sees it: ``key`` (hashable) is everything the region is
    built from; ``members``, ``constants`` (splat constant ops copied in) and ``args``
    (the values from outside, in order of first use) fill in a template's stand-ins."""

    key: tuple
    members: list[Op]
    constants: list[Op]
    args: list[Value]
    outputs: list[Value]

    @staticmethod
    def of(grouper: _Grouper, members: list[Op], outputs: list[Value]) -> "_GroupShape":
        # An input's reference: an earlier member's result (its position and the
        # result's index, as a pair), a constant copied in (-1 - its position) or the
        # n-th value from outside (n).
        index = {op: k for k, op in enumerate(members)}
        pos, shared = grouper.pos, grouper.shared
        constants: dict[Op, int] = {}
        args: dict[Value, int] = {}
        parts = []
        for op in members:
            refs: list[object] = []
            for v in op.inputs:
                p = v.op
                if p in index:
                    refs.append((index[p], v.index))
                elif p in pos and shared[pos[p]]:
                    if p not in constants:
                        constants[p] = len(constants)
                    refs.append(-1 - constants[p])
                else:
                    if v not in args:
                        args[v] = len(args)
                    refs.append(args[v])
            t = op.results[0].type  # (a member has one result; its type_key:)
            parts.append((op.kind, op.attrs_key() if op.attrs else (),
                          ((t.dtype._name_, t.shape),), tuple(refs)))
        const_keys, const_parts = grouper.constant_keys, []
        for const in constants:
            part = const_keys.get(const)
            if part is None:
                value = splat_value(const)
                assert value is not None
                scalar = np.asarray(value.flat[0], dtype=const.result.dtype.np)
                part = const_keys[const] = (type_key(const.result.type), scalar.tobytes())
            const_parts.append(part)
        out = tuple([(index[v.op], v.index) for v in outputs if v.op is not None])
        key = (tuple(parts), tuple(const_parts), tuple([type_key(v.type) for v in args]), out)
        return _GroupShape(key, members, list(constants), list(args), outputs)


def _template(shape: _GroupShape) -> _Template:
    """The region of groups of ``shape``, built from stand-ins (cleaned with cse, dce)."""
    region = Graph(PENDING)
    mapping: dict[Value, Value] = {}
    constants = {op.result: c for c, op in enumerate(shape.constants)}
    for n, v in enumerate(shape.args):
        mapping[v] = region.add_arg(v.type, f"{_ARG}{n}")
    for k, op in enumerate(shape.members):
        for v in op.inputs:  # a constant goes where it is first used
            c = constants.get(v)
            if c is not None and v not in mapping:
                mapping[v] = _materialize(region, shape.constants[c], Location(_CONSTANT, c))
        stand_in = Op(op.kind, [], op.attrs, [r.type for r in op.results],
                      loc=Location(_MEMBER, k),
                      names=[f"{_MEMBER}{k}.{j}" for j in range(len(op.results))])
        outs = expand(stand_in, region, [mapping[v] for v in op.inputs])
        mapping.update(zip(op.results, outs))
    region.set_results([mapping[v] for v in shape.outputs])
    cse_graph(region)
    dce_graph(region)
    return _steps(region, shape)


def _steps(region: Graph, shape: _GroupShape) -> _Template:
    """``region`` as a template: how to copy it (see ``_Template``)."""
    stand_ins: dict[str | None, int] = {}  # a stand-in's name -> its place after own names
    for k, op in enumerate(shape.members):
        for j in range(len(op.results)):
            stand_ins[f"{_MEMBER}{k}.{j}"] = len(stand_ins)
    for n in range(len(shape.args)):
        stand_ins[f"{_ARG}{n}"] = len(stand_ins)
    own: dict[str | None, int] = {}  # the other names -> their place
    values: dict[Value, int] = {a: n for n, a in enumerate(region.args)}
    for op in region.ops:
        for r in op.results:
            if r.name not in stand_ins:
                own.setdefault(r.name, len(own))
    steps = []
    for op in region.ops:
        loc = op.loc
        where: tuple[int, Any] = (0, loc)
        if loc is not None and loc.file == _MEMBER:
            where = (1, loc.line)
        elif loc is not None and loc.file == _CONSTANT:
            where = (2, loc.line)
        names = [own[r.name] if r.name in own else len(own) + stand_ins[r.name]
                 for r in op.results]
        steps.append((op.kind, op.attrs, tuple([values[v] for v in op.inputs]),
                      [r.type for r in op.results], where, names))
        for r in op.results:
            values[r] = len(values)
    return _Template(region, fusion_kind(region), list(own), steps,
                     tuple([values[v] for v in region.results]))


def _instantiate(template: _Template, shape: _GroupShape) -> Graph:
    """A copy of ``template``'s region with ``shape``'s names and locations."""
    members, constants = shape.members, shape.constants
    # (a member has one result)
    names = template.names + [op.results[0].name for op in members] + [
        v.name for v in shape.args]
    args = [Value(a.type, None, n, v.name)
            for n, (a, v) in enumerate(zip(template.region.args, shape.args))]
    values = args[:]
    ops = []
    for kind, attrs, inputs, types, (at, where), names_at in template.steps:
        loc = members[where].loc if at == 1 else constants[where].loc if at == 2 else where
        new = assembled_op(kind, [values[i] for i in inputs], attrs, types,
                           [names[i] for i in names_at], loc=loc)
        ops.append(new)
        values += new.results
    return Graph(PENDING, args, ops, [values[i] for i in template.results],
                 template.region.result_names)


def _topological(ops: list[Op], priority: dict[Op, int]) -> list[Op]:
    """A topological order of ``ops``, each as early as its priority allows (stable).
    ``fuse_graph`` keeps the order of priorities when it is one already (``_in_order``:
    every producer placed before its users, as fusing a deep model leaves it): the heap
    below would pop the ops in that order."""
    producer = {r: op for op in ops for r in op.results}
    waiting: dict[Op, int] = {}
    users: dict[Op, list[Op]] = {}
    for op in ops:
        deps = {producer[v] for v in op.inputs if v in producer}
        waiting[op] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(op)
    ready = [(priority[op], id(op), op) for op in ops if waiting[op] == 0]
    heapq.heapify(ready)
    out: list[Op] = []
    while ready:
        _, _, op = heapq.heappop(ready)
        out.append(op)
        for u in users.get(op, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (priority[u], id(u), u))
    if len(out) != len(ops):
        raise TfcError("fusion: the fused graph has a cycle (a bug in the fusion pass)")
    return out


# ---- expansion into primitives ---------------------------------------------------------------

def _materialize(region: Graph, op: Op, loc: Location | None) -> Value:
    """A splat constant op as a scalar constant in ``region``, broadcast if not rank 0,
    located at ``loc``."""
    value = splat_value(op)
    assert value is not None
    b = Builder(region, loc=loc)
    v = b("constant", value=np.asarray(value.flat[0], dtype=op.result.dtype.np))
    if value.ndim:
        v = b("broadcast_to", v, shape=value.shape)
    return v


def expand(op: Op, region: Graph, inputs: Sequence[Value]) -> list[Value]:
    """Append ``op``, or the expansion of a COMPOSITE op into primitive ops, to ``region``
    on ``inputs``."""
    if lookup(op.kind).has(COMPOSITE):
        return expand_into(region, op, inputs)
    new = region.append(Op(op.kind, inputs, op.attrs, [r.type for r in op.results],
                           loc=op.loc, names=[r.name for r in op.results]))
    return new.results
