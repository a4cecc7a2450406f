"""memory: a schedule that lowers peak live bytes, then buffer assignment into one arena.

Backends run a graph's ops in ``graph.ops`` order over one block of memory per step
(the arena). This pass chooses that order and where each intermediate value lives, and
stores the result as ``module.memory_plans[graph.name]`` (a ``MemoryPlan``).

Which values live in the arena: results of the graph's own ops, except
- graph arguments (feeds: the caller's arrays),
- ``var.read`` results (the variables' storage) and ``constant`` results (module data),
- graph results (fetches: written straight into the caller's output arrays; later ops
  that use a fetched value read it from there, except a fetched view, below),
- with ``gemm_updates`` (``memory{gemm_updates=true}``: the llvm backend's pipeline), the
  values a weight update folded into its GEMM stands for (``tfc.passes.gemm_update``:
  the weight gradient and its scaled copy, which that backend never writes; each was
  live from its product to the variable writes at the end of the step: issue 21's MLP
  at L=256 planned 84 MB, of which a step wrote 34, and plans 21 MB without them, all
  written). ``MemoryPlan.unplanned`` lists them, so a backend that computes them anyway
  (CUDA) gives them storage of their own.
Values whose size is not known before the run (a ``?`` dim, e.g. ``split`` of a batch
``B``) are in the arena too, in *dynamic* buffers (``MemoryPlan.dynamic`` lists them):
a backend knows every ``?`` dim once it has the feeds' shapes (shape inference on the
concrete shapes: a *binding*), so a dynamic buffer is sized per binding as the largest
of its values (``value_bytes``). Dynamic values share dynamic buffers by liveness only
(never a static buffer, never in place: two ``?`` dims need not be equal).
Values inside regions (fusion, cond, scan bodies) are the kernel's own business.

Aliases share another value's storage rather than a buffer of their own:
- views: results of VIEW ops (``reshape``, ``reshape_like``, ``expand_dims``, ``squeeze``,
  ``identity``, ``stop_gradient``) are their (contiguous) input reinterpreted: no copy. A view
  of a value outside the arena aliases that outside value. A fetched view is an alias
  too: it is copied to its output array when defined, but later ops read it from its
  input's storage, which must stay live until the view's last use.
- in place: an element-wise op (or a ``fusion`` of kind ``loop``) writes its result over
  an input that dies at that op, lives in the arena, and has the result's dtype and
  shape (so it is not broadcast).
``alias_of`` maps every alias to its root (chains resolved); ``in_place`` maps an
in-place result to the operand it overwrites.

Schedule: a greedy list scheduler picks, among the ops whose inputs are ready, the one
that frees the most arena bytes net of what it allocates (sizes at a nominal binding of
every symbol to ``NOMINAL_SYMBOL``), ties broken by the original order. Variable
writes (``var.assign*``, ``var.scatter_*``) run last, as variables are updated by copy
at the end of the step; other ops with effects keep their relative order. With
``gemm_updates`` a folded matmul is its variable's write: the greedy order runs it after
the variable's other readers, so the backend can make the update in its own array. The
plan keeps whichever of the greedy order and the original order has the lower peak. Both
this and the buffer assignment below run in O(n log n) for n values (a heap of ready ops
whose gains are kept current; buffers searched by size class, busy ones skipped, those
free until a later interval found in a segment tree by id), so planning time grows
with the graph, not its square (a 256-layer MLP: 2,560 ops, tens of milliseconds).

Buffer assignment: each root value is live from the op defining it to the last op using
it or any of its aliases (closed intervals over the schedule). Best fit: a value takes
the smallest buffer it fits in whose values are not live at the same time, else grows
the largest such buffer that fits in it, else opens a new buffer. Values are visited in
order of definition and, separately, largest first; the smaller arena wins. Sizes may
be symbolic (``B``): one size fits another for every binding when both have the same
symbols, counted with multiplicity, and a static factor no larger; sizes with other
symbols never share a buffer.
Buffer offsets are laid out in id order (dynamic buffers after the others), each rounded
up to ``MemoryPlan.ALIGN``, and evaluated per binding at run time. Where a size must be
estimated without a binding (the schedule, the report), ``?`` counts as ``NOMINAL_SYMBOL``
like any symbol.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from itertools import accumulate, chain
from typing import AbstractSet, Any, Callable, ClassVar, Iterable, Mapping, Sequence

from tfc.devices import parse_device
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.registry import ELEMENTWISE, VIEW, lookup, writes_variable
from tfc.ir.types import UNKNOWN, TensorType
from tfc.passes import gemm_update
from tfc.passes.dce import has_effect
from tfc.passes.manager import parse_bytes, parse_flag, register_pass
from tfc.units import format_bytes

# Results of these ops live outside the arena.
EXTERNAL_OPS = frozenset({"var.read", "constant"})
# Symbols count as this much when the scheduler compares sizes and the report shows them.
NOMINAL_SYMBOL = 128
# A binding's concrete byte count of a value (the backend's, for values with '?' dims).
ValueBytes = Callable[[Value], int]


@dataclass(frozen=True)
class Size:
    """Bytes of a tensor: ``itemsize * prod(dims)``; dims are ints or symbol names."""

    itemsize: int
    dims: tuple[int | str, ...]

    @staticmethod
    def of(t: TensorType) -> "Size":
        """The size of a ``t`` (one shared object per type, so that its cached factor
        and symbols are worked out once per type, not once per value and use)."""
        key = (id(t.dtype), t.shape)  # (dtypes are enum members: one object each)
        size = _SIZES.get(key)
        if size is None:
            if len(_SIZES) >= MAX_SIZES:
                _SIZES.clear()
            size = _SIZES[key] = Size.made(t.dtype.itemsize, tuple(t.shape))
        return size

    @staticmethod
    def made(itemsize: int, dims: tuple[int | str, ...]) -> "Size":
        """``Size(itemsize, dims)``, one shared object per (itemsize, dims) (``of`` gives
        these too: a plan read back holds the objects its values' types give)."""
        key = (itemsize, *dims)
        size = _MADE.get(key)
        if size is None:
            if len(_MADE) >= MAX_SIZES:
                _MADE.clear()
            size = _MADE[key] = Size(itemsize, dims)
        return size

    @cached_property
    def static_factor(self) -> int:
        """The product of the itemsize and the int dims."""
        return self.itemsize * math.prod(d for d in self.dims if isinstance(d, int))

    @cached_property
    def symbols(self) -> tuple[str, ...]:
        """The symbolic dims, sorted (with repeats: ``B*B`` is ``("B", "B")``)."""
        return tuple(sorted(d for d in self.dims if isinstance(d, str)))

    def bytes(self, bindings: Mapping[str, int]) -> int:
        n = self.static_factor
        for s in self.symbols:
            if s not in bindings:
                if s == UNKNOWN:
                    raise TfcError(f"size {self}: a '?' dim has no size before the run")
                raise TfcError(f"size {self} needs a value for symbol '{s}' "
                               f"(given: {', '.join(sorted(bindings)) or 'none'})")
            n *= int(bindings[s])
        return n

    @cached_property
    def nominal_bytes(self) -> int:
        """The bytes with every symbol (and '?') at ``NOMINAL_SYMBOL``."""
        return self.static_factor * NOMINAL_SYMBOL ** len(self.symbols)

    def fits_in(self, other: "Size") -> bool:
        """Whether ``self.bytes(b) <= other.bytes(b)`` for every binding ``b``."""
        return self.symbols == other.symbols and self.static_factor <= other.static_factor

    def __str__(self) -> str:
        """The byte count as a formula: ``2048*B``, ``64``, ``4*B*T``."""
        parts = [str(self.static_factor)] if self.static_factor != 1 or not self.symbols \
            else []
        return "*".join(parts + list(self.symbols))


MAX_SIZES = 1 << 16
_SIZES: dict[tuple[int, tuple[int | str, ...]], Size] = {}
_MADE: dict[tuple[int | str, ...], Size] = {}


@dataclass
class Buffer:
    """One slot of the arena and the values that take turns in it (root values only:
    views and in-place results use their root's slot, see ``MemoryPlan.alias_of``)."""

    id: int
    # Large enough for every value placed in it, for every binding; for a dynamic buffer
    # only its first value's size (the buffer is as large as its largest value, per
    # binding: see ``MemoryPlan.buffer_bytes``).
    size: Size
    values: list[Value]  # the values it holds during the step, in schedule order
    dynamic: bool = False  # holds values with '?' dims: sized per binding

    def size_text(self) -> str:
        """The size as a formula (``max(...)`` of the values' for a dynamic buffer)."""
        if not self.dynamic:
            return str(self.size)
        sizes = list(dict.fromkeys(str(Size.of(v.type)) for v in self.values))
        return sizes[0] if len(sizes) == 1 else f"max({', '.join(sizes)})"


@dataclass
class MemoryPlan:
    """Where each arena value of one graph lives; ``graph.ops`` is the schedule."""

    graph: str
    buffers: list[Buffer]
    buffer_of: dict[Value, int]  # every arena root value -> its buffer id
    alias_of: dict[Value, Value]  # view / in-place result -> the root whose storage it uses
    in_place: dict[Value, Value]  # in-place result -> the operand whose storage it overwrites
    # Root value -> (first, last) positions in the schedule where its storage is live.
    live: dict[Value, tuple[int, int]] = field(default_factory=dict, repr=False)
    # Arena values whose size is unknown before the run ('?'): in dynamic buffers.
    dynamic: list[Value] = field(default_factory=list)
    # The graph's args and its ops in schedule order, as planned: what ``names`` are
    # worked out from (when asked: only the report and its readers need them).
    named: tuple[Sequence[Value], Sequence[Op]] = field(default=((), ()), repr=False)
    # Values of the graph's ops that are not in the arena although they would be: those a
    # weight update folded into its GEMM absorbs (``gemm_updates``), in schedule order.
    unplanned: list[Value] = field(default_factory=list)
    # ``gemm_update.find`` of the graph as planned, where the plan asked it
    # (``gemm_updates``): in this process only (not stored), for the llvm lowering of the
    # same graph to reuse (``kernels.lower``: 2% of a deep model's edited first step)
    gemm_updates: dict[Op, Any] | None = field(default=None, repr=False, compare=False)
    ALIGN: ClassVar[int] = 64

    @cached_property
    def names(self) -> dict[Value, str]:
        """Printed names of the graph's values (as `tfc ir` shows them), for the report."""
        return _names(*self.named)

    def root(self, v: Value) -> Value:
        """The value whose storage ``v`` uses (``v`` itself unless it is an alias)."""
        return self.alias_of.get(v, v)

    def buffer(self, v: Value) -> int | None:
        """The buffer holding ``v`` (through aliases), or None when it lives outside."""
        return self.buffer_of.get(self.root(v))

    def aligned(self, size: Size, bindings: Mapping[str, int]) -> int:
        return _align(size.bytes(bindings))

    def value_bytes(self, v: Value, bindings: Mapping[str, int],
                    value_bytes: ValueBytes | None = None) -> int:
        """Bytes of ``v`` rounded up to ALIGN: ``value_bytes(v)`` (a binding's concrete
        size) when given and ``v`` has a '?' dim, else from its type and ``bindings``."""
        if value_bytes is not None and UNKNOWN in v.type.shape:
            return _align(value_bytes(v))
        return self.aligned(Size.of(v.type), bindings)

    def buffer_bytes(self, b: Buffer, bindings: Mapping[str, int],
                     value_bytes: ValueBytes | None = None) -> int:
        """Bytes of buffer ``b`` (rounded up to ALIGN) at a binding; a dynamic buffer
        needs ``value_bytes`` (or ``'?'`` in ``bindings``, as an estimate)."""
        if not b.dynamic:
            return self.aligned(b.size, bindings)
        return max((self.value_bytes(v, bindings, value_bytes) for v in b.values), default=0)

    def offsets(self, bindings: Mapping[str, int],
                value_bytes: ValueBytes | None = None) -> list[int]:
        """Byte offset of each buffer in the arena, in id order."""
        out, at = [], 0
        for b in self.buffers:
            out.append(at)
            at += self.buffer_bytes(b, bindings, value_bytes)
        return out

    def arena_bytes(self, bindings: Mapping[str, int],
                    value_bytes: ValueBytes | None = None) -> int:
        return sum(self.buffer_bytes(b, bindings, value_bytes) for b in self.buffers)

    def peak_live_bytes(self, bindings: Mapping[str, int],
                        value_bytes: ValueBytes | None = None) -> int:
        """Max over the schedule of the bytes of root values live at once (each rounded
        up to ALIGN, so ``arena_bytes >= peak_live_bytes`` always)."""
        return _peak(self.live, {v: self.value_bytes(v, bindings, value_bytes)
                                 for v in self.live})

    def no_reuse_bytes(self, bindings: Mapping[str, int],
                       value_bytes: ValueBytes | None = None) -> int:
        """The baseline: every arena value in a buffer of its own (in-place results
        included; views excluded, as they never copy), each rounded up to ALIGN."""
        values = [v for v in self.buffer_of] + [v for v in self.in_place]
        return sum(self.value_bytes(v, bindings, value_bytes) for v in values)

    def report(self, bindings: Mapping[str, int] | None = None) -> str:
        """A readable table of the buffers, their values, and the totals."""
        return _report(self, bindings)

    def to_json(self, graph: Graph) -> dict[str, Any]:
        """The plan as JSON data, for an artifact. ``graph`` is the planned graph: values
        are its positions (args, then op results in schedule order), which survive
        printing and parsing and the bytecode (``from_json`` takes them back)."""
        number = _value_numbers(graph)
        n = number.__getitem__
        return {"graph": self.graph, "values": len(number),
                "buffers": [{"size": {"itemsize": b.size.itemsize, "dims": list(b.size.dims)},
                             "values": [n(v) for v in b.values], "dynamic": b.dynamic}
                            for b in self.buffers],
                "alias_of": [[n(v), n(r)] for v, r in self.alias_of.items()],
                "in_place": [[n(v), n(s)] for v, s in self.in_place.items()],
                "live": [[n(v), a, b] for v, (a, b) in self.live.items()],
                "dynamic": [n(v) for v in self.dynamic],
                **({"unplanned": [n(v) for v in self.unplanned]} if self.unplanned else {})}

    @staticmethod
    def from_json(graph: Graph, data: Any) -> "MemoryPlan":
        """The plan ``to_json`` wrote for ``graph`` (as parsed or decoded again), checked
        as far as that is cheap: every value one of the graph's, buffer by buffer the
        values fitting it and never live at the same time; ``ValueError`` saying what is
        wrong otherwise."""
        return _plan_from_json(graph, data)


def _align(n: int) -> int:
    return -(-n // MemoryPlan.ALIGN) * MemoryPlan.ALIGN


# ---- plans as JSON (artifacts) ------------------------------------------------------------

def _graph_values(graph: Graph) -> list[Value]:
    """The graph's values by position: its args, then each op's results in op order."""
    return [*graph.args, *(r for op in graph.ops for r in op.results)]


def _value_numbers(graph: Graph) -> dict[Value, int]:
    return {v: k for k, v in enumerate(_graph_values(graph))}


def _plan_from_json(graph: Graph, data: Any) -> MemoryPlan:
    values = _graph_values(graph)
    n_values = len(values)

    def value(k: Any) -> Value:
        if type(k) is not int or not 0 <= k < n_values:
            raise ValueError(f"{k!r} is not a value of @{graph.name}")
        return values[k]

    def numbers(ks: list[Any]) -> bool:
        """Whether every one of ``ks`` is a value number (``value``'s check, in bulk)."""
        return {*map(type, ks)} <= {int} and (not ks or 0 <= min(ks) and max(ks) < n_values)

    def all_values(ks: list[Any]) -> list[Value]:
        """``[value(k) for k in ks]``."""
        return [values[k] for k in ks] if numbers(ks) else [value(k) for k in ks]

    def pairs(key: str) -> dict[Value, Value]:
        items = data.get(key)
        if not isinstance(items, list) or not all(isinstance(p, list) and len(p) == 2
                                                  for p in items):
            raise ValueError(f"'{key}' should be a list of value pairs")
        firsts, seconds = [p[0] for p in items], [p[1] for p in items]
        if numbers(firsts) and numbers(seconds):
            return dict(zip([values[k] for k in firsts], [values[k] for k in seconds]))
        return {value(a): value(b) for a, b in items}

    if not isinstance(data, dict):
        raise ValueError("not an object")
    if data.get("graph") != graph.name or data.get("values") != n_values:
        raise ValueError(f"it is the plan of a graph @{data.get('graph')} with "
                         f"{data.get('values')!r} values, not of @{graph.name} with "
                         f"{n_values}")
    buffers: list[Buffer] = []
    buffer_of: dict[Value, int] = {}
    raw = data.get("buffers")
    if not isinstance(raw, list):
        raise ValueError("'buffers' should be a list")
    for i, b in enumerate(raw):
        size = b.get("size") if isinstance(b, dict) else None
        if (not isinstance(size, dict) or type(size.get("itemsize")) is not int
                or size["itemsize"] < 1 or not isinstance(size.get("dims"), list)
                or not all((type(d) is int and d >= 0) or isinstance(d, str)
                           for d in size["dims"])):
            raise ValueError(f"buffer {i} is not a buffer: {b!r}")
        got = Size.made(size["itemsize"], tuple(size["dims"]))  # (one object per size)
        held, dyn = b.get("values"), b.get("dynamic")
        if not isinstance(held, list) or not isinstance(dyn, bool):
            raise ValueError(f"buffer {i} is not a buffer: {b!r}")
        buf = Buffer(i, got, all_values(held), dynamic=dyn)
        for v in buf.values:
            if v in buffer_of:
                raise ValueError(f"value {values.index(v)} is in two buffers")
            buffer_of[v] = i
        buffers.append(buf)
    alias_of, in_place = pairs("alias_of"), pairs("in_place")
    if not in_place.keys() <= alias_of.keys():
        raise ValueError("an in-place result should be an alias")
    spans = data.get("live")
    n_ops = len(graph.ops)
    if not isinstance(spans, list) or not all(
            isinstance(s, list) and len(s) == 3 and type(s[1]) is int and type(s[2]) is int
            and 0 <= s[1] <= s[2] < n_ops for s in spans):
        raise ValueError("'live' should list (value, first, last) positions in the schedule")
    live = dict(zip(all_values([s[0] for s in spans]), [(s[1], s[2]) for s in spans]))
    dynamic = all_values(data.get("dynamic") or [])
    unplanned = all_values(data.get("unplanned") or [])
    if unplanned and not set(unplanned) <= _absorbed(graph):
        raise ValueError("it leaves out a value that no GEMM update absorbs")
    # what the pass would decide regardless of the schedule: which values are in the
    # arena, which are dynamic, which are views of what
    info = _Info(graph, set(unplanned))
    if buffer_of.keys() != {v for v in info.arena if v not in alias_of} or set(
            dynamic) != info.dynamic_set:
        raise ValueError("its buffers do not hold exactly the graph's arena values")
    static_view = info.static_view
    for v, root in alias_of.items():
        src = static_view.get(v)
        if src is None and v in in_place:
            src, op = in_place[v], v.op  # (the op defining v: v is one of the graph's)
            if (op is None or src not in op.inputs or (src.type is not v.type
                                                       and src.type != v.type)
                    or not _can_write_in_place(op, v)):
                raise ValueError(f"value {values.index(v)} cannot be written in place")
        if src is None or alias_of.get(src, src) is not root or root in alias_of:
            raise ValueError(f"value {values.index(v)} is no view or in-place result of "
                             f"value {values.index(root)}")
    # (id of a value's size, id of a buffer's size) -> whether it fits, and that size
    fits: dict[tuple[int, int], tuple[bool, Size]] = {}
    for buf in buffers:
        _check_buffer(buf, live, info.dynamic_set, fits)
    return MemoryPlan(graph.name, buffers, buffer_of, alias_of, in_place, live=live,
                      dynamic=dynamic, named=(tuple(graph.args), tuple(graph.ops)),
                      unplanned=unplanned)


def _check_buffer(buf: Buffer, live: Mapping[Value, tuple[int, int]],
                  dynamic: set[Value],
                  fits: dict[tuple[int, int], tuple[bool, Size]] | None = None) -> None:
    """``ValueError`` unless ``buf``'s values fit it (every binding) and take turns
    (``fits``: ``fits_in`` worked out so far, by the sizes' ids; each entry holds the
    value's size, so that no id is reused while it is there)."""
    spans = []
    if fits is None:
        fits = {}
    for v in buf.values:
        span = live.get(v)
        if span is None:
            raise ValueError(f"buffer {buf.id} holds a value without a live interval")
        if (v in dynamic) != buf.dynamic:
            raise ValueError(f"buffer {buf.id} ({buf.size}) cannot hold a {v.type}")
        if not buf.dynamic and (size := Size.of(v.type)) is not buf.size:
            key = (id(size), id(buf.size))
            known = fits.get(key)
            if known is None:
                known = fits[key] = (size.fits_in(buf.size), size)
            if not known[0]:
                raise ValueError(f"buffer {buf.id} ({buf.size}) cannot hold a {v.type}")
        spans.append(span)
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:]):
        if start <= end:
            raise ValueError(f"buffer {buf.id} holds two values live at once")


# ---- the pass ---------------------------------------------------------------------------

@register_pass("memory", options={"budget": parse_bytes, "gemm_updates": parse_flag})
def memory(module: Module, budget: int | None = None, gemm_updates: bool = False) -> Module:
    """Schedule and plan every graph of ``module`` (regions are not planned) but the
    partitioned entries, whose stage graphs run instead (``tfc.passes.partition``).

    ``budget`` (bytes, ``memory{budget=64MiB}``): a graph whose planned arena is larger
    fails the pass, so a model that would not fit its device is refused at compile time.
    Graphs with symbolic dims are measured at the plan's nominal size (each symbol
    ``NOMINAL_SYMBOL``), as its report shows them.

    ``gemm_updates`` (``memory{gemm_updates=true}``, what the llvm backend runs): the
    backend folds weight updates into their GEMMs (``tfc.passes.gemm_update``), so the
    values those absorb get no buffer (``MemoryPlan.unplanned``), except in a graph
    placed on a GPU (of a module for CPUs and GPUs, whose pipeline runs this pass once
    for both: ``tfc.pipeline.lowering_passes``), which CUDA runs, computing them."""
    for g in module.graphs.values():
        if g.name in module.partitions:
            continue
        fold = gemm_updates and not (module.devices and _on_gpu(g))
        plan = module.memory_plans[g.name] = plan_memory(g, fold)
        if budget is not None:
            check_budget(plan, g, budget)
    return module


def _on_gpu(graph: Graph) -> bool:
    """Whether an op of ``graph`` is placed on a GPU."""
    kinds: dict[str, bool] = {}
    for op in graph.ops:
        d = op.device
        if d is not None:
            gpu = kinds.get(d)
            if gpu is None:
                try:
                    gpu = kinds[d] = parse_device(d).kind == "gpu"
                except TfcError:
                    gpu = kinds[d] = False  # (not a device placement made: not a GPU)
            if gpu:
                return True
    return False


def check_budget(plan: MemoryPlan, graph: Graph, budget: int) -> None:
    """A ``TfcError`` naming the graph and both sizes when ``plan``'s arena exceeds
    ``budget`` bytes."""
    nominal = _nominal(graph)
    arena = plan.arena_bytes(nominal)
    if arena <= budget:
        return
    symbols = sorted(s for s in nominal if any(s in v.type.shape for b in plan.buffers
                                               for v in b.values))
    at = (f" (at the nominal size {', '.join(f'{s}={NOMINAL_SYMBOL}' for s in symbols)} "
          f"of its symbolic dims)") if symbols else ""
    raise TfcError(f"memory: the arena of @{graph.name} needs {arena} bytes "
                   f"({format_bytes(arena)}){at}, over the budget of {budget} bytes "
                   f"({format_bytes(budget)})")


def plan_memory(graph: Graph, gemm_updates: bool = False) -> MemoryPlan:
    """Reorder ``graph.ops`` into a low-peak schedule and assign arena buffers (none for
    the values that weight updates folded into their GEMMs absorb, with
    ``gemm_updates``: the backend never writes them)."""
    found = gemm_update.find(graph) if gemm_updates else {}
    info = _Info(graph, gemm_update.absorbed_values(found),
                 {u.matmul: u.assign.attrs["var"] for u in found.values()})
    # the sizes of the arena values that may be roots (views take none of their own), and
    # their bytes at the nominal binding (``_nominal``: every symbol NOMINAL_SYMBOL)
    sizes: dict[Value, Size] = {}
    size: dict[Value, int] = {}
    of_type: dict[int, Size] = {}  # id of a type -> its size (values share a few types)
    static_view = info.static_view
    for v in info.arena:
        if v not in static_view:
            s = of_type.get(id(v.type))
            if s is None:
                s = of_type[id(v.type)] = Size.of(v.type)
            sizes[v] = s
            size[v] = s.nominal_bytes
    best: tuple[int, list[Op], _Aliases] | None = None
    for order in (_greedy_schedule(graph, info, size), _original_schedule(info)):
        aliases = _Aliases(graph, order, info, size)
        peak = aliases.peak
        if best is None or peak < best[0]:
            best = (peak, order, aliases)
    assert best is not None
    _, order, aliases = best
    graph.ops = order
    buffers, buffer_of = _assign_buffers(aliases.live, sizes, info.dynamic_set)
    return MemoryPlan(graph.name, buffers, buffer_of, aliases.alias_of, aliases.in_place,
                      gemm_updates=found if gemm_updates else None, live=aliases.live,
                      dynamic=[r for op in order for r in op.results if r in info.dynamic_set]
                      if info.dynamic_set else [],
                      named=(tuple(graph.args), tuple(order)),
                      unplanned=[r for op in order for r in op.results if r in info.unplanned]
                      if info.unplanned else [])


def _absorbed(graph: Graph) -> set[Value]:
    """The values of ``graph`` that its weight updates folded into GEMMs absorb."""
    return gemm_update.absorbed_values(gemm_update.find(graph))


# ---- what lives where -------------------------------------------------------------------

class _Info:
    """Facts about the graph's values that do not depend on the schedule."""

    def __init__(self, graph: Graph, unplanned: AbstractSet[Value] = frozenset(),
                 folded: Mapping[Op, str] | None = None) -> None:
        fetched = set(graph.results)
        self.unplanned = unplanned  # results left out of the arena (``gemm_updates``)
        # matmul -> the variable its kernel updates, for a weight update folded into its
        # GEMM (``gemm_updates``): a write of the variable, as far as the schedule goes
        self.folded: Mapping[Op, str] = folded or {}
        self.arena: set[Value] = set()  # arena values (roots and aliases alike)
        self.dynamic: list[Value] = []  # arena values with a '?' dim (not views)
        self.static_view: dict[Value, Value] = {}  # view result -> its input
        # the graph's ops in order, the variable writes (which run last) apart
        self.ops: list[Op] = []
        self.writes: list[Op] = []
        # per kind: (a VIEW op, a variable write), each asked of the registry once
        traits: dict[str, tuple[bool, bool]] = {}
        for op in graph.ops:
            kind = op.kind
            known = traits.get(kind)
            if known is None:
                known = traits[kind] = (lookup(kind).has(VIEW), writes_variable(op))
            (self.writes if known[1] else self.ops).append(op)
            if known[0] and op.results:
                # A fetched view too: backends read it, as any view, from its input's
                # storage (its copy into the output array is made when it is defined),
                # so its later uses keep that storage live.
                self.static_view[op.results[0]] = op.inputs[0]
            if kind in EXTERNAL_OPS:
                continue
            for r in op.results:
                if r in fetched or r in unplanned:
                    continue
                if UNKNOWN in r.type.shape and r not in self.static_view:
                    self.dynamic.append(r)
                self.arena.add(r)
        self.dynamic_set = set(self.dynamic)
        # view result -> the storage it reads (its input's, through chains of views)
        self.storage: dict[Value, Value] = {v: self.storage_key(v) for v in self.static_view}
        self._in_place: dict[Value, bool] = {}
        self.effects: dict[str, bool] = {}  # kind -> has_effect of its ops without regions
        self._pure_owners: set[str] = set()  # kinds of ops with regions that had no effect
        self._candidates: dict[Value, Sequence[Value]] | None = None

    def can_write_in_place(self, op: Op, r: Value) -> bool:
        """``_can_write_in_place``, worked out once per result (both schedules ask)."""
        known = self._in_place.get(r)
        if known is None:
            known = self._in_place[r] = _can_write_in_place(op, r)
        return known

    def has_effect(self, op: Op) -> bool:
        """``dce.has_effect(op)``, asked once per kind of the ops without regions; an op
        with regions is asked about itself until one of its kind has no effect (then
        its kind has none of its own, and its regions' ops decide)."""
        effects = self.effects
        if not op.regions:
            known = effects.get(op.kind)
            if known is None:
                known = effects[op.kind] = has_effect(op)
            return known
        if op.kind not in self._pure_owners:
            known = has_effect(op)
            if not known:
                self._pure_owners.add(op.kind)
            return known
        for region in op.regions:
            for o in region.ops:
                inner = None if o.regions else effects.get(o.kind)
                if inner is None:
                    inner = self.has_effect(o)
                if inner:
                    return True
        return False

    def storage_key(self, v: Value) -> Value:
        """``v``'s storage as far as views tell (in-place is decided per schedule)."""
        while v in self.static_view:
            v = self.static_view[v]
        return v

    def candidates(self) -> dict[Value, Sequence[Value]]:
        """The static arena values that may be written in place, each with its op's
        operands (among which ``_Aliases`` looks for one to overwrite), worked out once
        for both schedules: ``_can_write_in_place`` is asked here, except of loop
        fusions, whose answer walks their region (``_Aliases`` asks it of those where an
        operand qualifies)."""
        if self._candidates is None:
            candidates: dict[Value, Sequence[Value]] = {}
            arena, dynamic = self.arena, self.dynamic_set
            for op in chain(self.ops, self.writes):
                if len(op.results) != 1:  # (never in place)
                    continue
                r = op.results[0]
                if r in arena and r not in dynamic and (
                        op.kind == "fusion" and op.attrs.get("kind") == "loop"
                        or self.can_write_in_place(op, r)):
                    candidates[r] = op.inputs
            self._candidates = candidates
        return self._candidates


def _keeps_order(op: Op) -> bool:
    """Ops with effects other than variable writes (which go last) keep their order."""
    return not writes_variable(op) and has_effect(op)


def _can_write_in_place(op: Op, r: Value) -> bool:
    """Element-wise ops, and loop fusions for results at the loop's iteration shape (a
    smaller result is written again for each broadcast copy, which would read inputs
    it already overwrote). Only ops with one result: a kernel storing its first result
    may overwrite an input that its second result still has to read."""
    if len(op.results) != 1:
        return False
    if op.kind == "fusion":
        if op.attrs.get("kind") != "loop":
            return False
        shape = r.type.shape
        for region in op.regions:
            for u in region.args:
                s = u.type.shape
                if s is not shape and s != shape and not _no_larger(s, shape):
                    return False
            for o in region.ops:
                for u in o.results:
                    s = u.type.shape
                    if s is not shape and s != shape and not _no_larger(s, shape):
                        return False
        return True
    return lookup(op.kind).has(ELEMENTWISE)


@lru_cache(maxsize=1 << 12)
def _no_larger(u: tuple[int | str, ...], r: tuple[int | str, ...]) -> bool:
    """Whether shape ``u`` has at most shape ``r``'s element count for every binding
    (symbols >= 1)."""
    if u == r:
        return True
    a, b = Size(1, tuple(u)), Size(1, tuple(r))
    return not Counter(a.symbols) - Counter(b.symbols) and a.static_factor <= b.static_factor


class _Aliases:
    """Views, in-place results and live intervals of the roots, for one schedule (``live``
    lists the roots in order of definition: each is added where it is defined)."""

    peak: int  # the peak of the roots' live bytes (when their sizes are given)

    def __init__(self, graph: Graph, order: Sequence[Op], info: _Info,
                 size: Mapping[Value, int] | None = None) -> None:
        """(``size``: the roots' bytes, for ``peak``: the peak live bytes.)"""
        alias_of: dict[Value, Value] = {}
        self.alias_of = alias_of
        self.in_place: dict[Value, Value] = {}
        last_use = {v: t for t, op in enumerate(order) for v in op.inputs}
        # arena root -> where it is defined, and the last use of it or of an alias of it
        # so far (the aliases defined up to the op at hand: their uses are all known)
        first: dict[Value, int] = {}
        last: dict[Value, int] = {}
        arena, dynamic, static_view = info.arena, info.dynamic_set, info.static_view
        candidates = info.candidates().get
        alias_get, last_get, use_get = alias_of.get, last.get, last_use.get
        for t, op in enumerate(order):
            taken: set[Value] | None = None
            for r in op.results:
                if r in static_view:
                    viewed = static_view[r]
                    root = alias_of[r] = alias_get(viewed, viewed)
                    if root not in arena:  # (a view of a value outside the arena)
                        continue
                elif r in arena:
                    root = r
                    # the first operand r may overwrite: in the arena, dying here (it and
                    # its aliases used last by op, at t), of r's type
                    srcs = candidates(r)
                    if srcs is not None:
                        rt = r.type
                        for src in srcs:
                            home = alias_get(src, src)
                            if (home in arena and last_get(home, -1) <= t
                                    and (taken is None or home not in taken)
                                    and home not in dynamic
                                    and (src.type is rt or src.type == rt)):
                                if info.can_write_in_place(op, r):
                                    root = alias_of[r] = home
                                    self.in_place[r] = src
                                    if taken is None:
                                        taken = set()
                                    taken.add(home)
                                break
                else:
                    continue
                used = use_get(r, -1)
                if root in first:
                    if used > last[root]:
                        last[root] = used
                else:
                    first[root], last[root] = t, used
        if size is None:
            self.live = {root: (t, last[root] if last[root] > t else t)
                         for root, t in first.items()}
            return
        # and the peak of the roots' ``size`` (``_peak``), in the same walk
        live: dict[Value, tuple[int, int]] = {}
        events = [0] * (len(order) + 1)
        for root, t in first.items():
            end = last[root]
            if end < t:
                end = t
            live[root] = (t, end)
            n = size[root]
            events[t] += n
            events[end + 1] -= n
        self.live = live
        self.peak = max(accumulate(events, initial=0))


def _peak(live: Mapping[Value, tuple[int, int]], size: Mapping[Value, int],
          length: int | None = None) -> int:
    """Max over positions of the summed ``size[v]`` of the values live there (``length``:
    a bound on the positions, such as the schedule's length, if known)."""
    if length is None:
        length = max((b for _, b in live.values()), default=-1) + 1
    events = [0] * (length + 1)  # per position, the bytes coming live there less those freed
    for v, (a, b) in live.items():
        n = size[v]
        events[a] += n
        events[b + 1] -= n
    return max(accumulate(events, initial=0))


def _nominal(graph: Graph) -> dict[str, int]:
    """Every symbol of the graph's top-level types (and '?') bound to ``NOMINAL_SYMBOL``."""
    symbols: set[str] = {UNKNOWN}
    for v in [*graph.args, *(r for op in graph.ops for r in op.results)]:
        symbols.update(d for d in v.type.shape if isinstance(d, str))
    return {s: NOMINAL_SYMBOL for s in symbols}


# ---- scheduling -------------------------------------------------------------------------

def _original_schedule(info: _Info) -> list[Op]:
    """The given order with the variable writes moved to the end."""
    return info.ops + info.writes


def _greedy_schedule(graph: Graph, info: _Info, size: Mapping[Value, int]) -> list[Op]:
    """List scheduling: among ready ops, the one freeing the most arena bytes net
    (``size``: the arena roots' bytes at the nominal binding)."""
    ops, writes = info.ops, info.writes
    n = len(ops)
    producer = {r: i for i, op in enumerate(ops) for r in op.results}
    waiting = [0] * n  # per op, its dependencies not yet scheduled
    dependents: list[list[int]] = [[] for _ in ops]
    # The storage keys (views resolved) that have an arena size (the roots ``size``
    # gives), by number: per op, its inputs' keys; per key, its bytes, the ops and
    # variable writes still to use it, and the ops that use it (in order).
    keyed = list(size)
    key_bytes = list(size.values())
    number = {k: key for key, k in enumerate(keyed)}  # (views: their storage's number)
    for v, k in info.storage.items():
        if k in number:
            number[v] = number[k]
    keys_of: list[list[int]] = []
    remaining = [0] * len(keyed)
    users: list[list[int]] = [[] for _ in keyed]
    number_get, producer_get = number.get, producer.get

    previous_ordered = -1
    effect, effects_get = info.has_effect, info.effects.get
    for i, op in enumerate(ops):
        deps: list[int] = []
        keys: list[int] = []
        for v in op.inputs:
            p = producer_get(v)
            if p is not None and p not in deps:
                deps.append(p)
            key = number_get(v, -1)
            if key >= 0 and key not in keys:
                keys.append(key)
        ordered = None if op.regions else effects_get(op.kind)
        if ordered is None:
            ordered = effect(op)
        if ordered:  # (``_keeps_order``: the writes are not among ``ops``)
            if previous_ordered >= 0 and previous_ordered not in deps:
                deps.append(previous_ordered)
            previous_ordered = i
        waiting[i] = len(deps)
        for d in deps:
            dependents[d].append(i)
        keys_of.append(keys)
        for key in keys:
            remaining[key] += 1
            users[key].append(i)
    for op in writes:
        keys = []
        for v in op.inputs:
            key = number_get(v, -1)
            if key >= 0 and key not in keys:
                keys.append(key)
                remaining[key] += 1
    if info.folded:
        _after_reads(ops, info, waiting, dependents)

    # An op's gain: the bytes of its inputs' storage that it is the last to use (freed),
    # less those of its results that are used (alloc); ``cost`` is alloc - freed. What it
    # allocates stays fixed until it runs (its results' users depend on it), and what it
    # frees only grows: a key's count of users to come drops to 1 once, and then the one
    # op left gains its bytes.
    cost = [0] * n
    for key, left in enumerate(remaining):
        if left:  # (used)
            i = producer_get(keyed[key], -1)
            if i >= 0:
                cost[i] += key_bytes[key]
            if left == 1:
                for j in users[key]:
                    cost[j] -= key_bytes[key]

    # So the ready ops sit in a heap by (cost, index), each entry one int (cost * n +
    # index, which orders as the pair does), and an op is pushed again when its gain
    # grows; an entry whose cost is no longer current is skipped. The op taken is the one
    # ``max(ready, key=(gain, -index))`` would take, in O(log n).
    state = [0] * n  # 0: waiting, 1: ready, 2: scheduled
    heap: list[int] = []
    for i, w in enumerate(waiting):
        if w == 0:
            state[i] = 1
            heap.append(cost[i] * n + i)
    heapq.heapify(heap)
    heappush, heappop = heapq.heappush, heapq.heappop
    order: list[Op] = []
    while heap:
        e = heappop(heap)
        i = e % n
        if state[i] != 1 or e != cost[i] * n + i:
            continue
        state[i] = 2
        order.append(ops[i])
        for key in keys_of[i]:
            left = remaining[key] = remaining[key] - 1
            if left == 1:
                for j in users[key]:
                    if state[j] != 2:  # the one op still to use k (else a variable write)
                        cost[j] -= key_bytes[key]
                        if state[j] == 1:
                            heappush(heap, cost[j] * n + j)
                        break
        for j in dependents[i]:
            w = waiting[j] = waiting[j] - 1
            if w == 0:
                state[j] = 1
                heappush(heap, cost[j] * n + j)
    if len(order) != n:
        raise TfcError(f"memory: graph @{graph.name} has a cycle or uses a value before "
                       f"defining it; cannot schedule it")
    return order + writes


def _after_reads(ops: Sequence[Op], info: _Info, waiting: list[int],
                 dependents: list[list[int]]) -> None:
    """Make each matmul that updates a variable (``_Info.folded``) wait for every other op
    reading that variable: its kernel is the variable's write, and the backend makes it
    in the variable's own array (no copy of the weight, no update array) only when no
    later step reads the variable (``GraphCompiler.in_place_updates`` on llvm), as it
    may when the writes run last. (No cycle: the matmul's result is used once, by the
    update it stands for, so no reader depends on it.)"""
    variable_of = {op.result: op.attrs["var"] for op in ops if op.kind == "var.read"}
    index = {op: i for i, op in enumerate(ops)}
    folded = {name: index[mm] for mm, name in info.folded.items() if mm in index}
    readers: dict[str, list[int]] = {}
    unplanned = info.unplanned
    for i, op in enumerate(ops):
        if any(r in unplanned for r in op.results):  # (a scale the update absorbs)
            continue
        names = {variable_of[k] for k in map(info.storage_key, op.inputs) if k in variable_of}
        for name in names:
            if name in folded and folded[name] != i:
                readers.setdefault(name, []).append(i)
    for name, found in readers.items():
        m = folded[name]
        for i in found:
            dependents[i].append(m)
            waiting[m] += 1


# ---- buffer assignment ------------------------------------------------------------------

def _assign_buffers(live: Mapping[Value, tuple[int, int]], sizes: Mapping[Value, Size],
                    dynamic: AbstractSet[Value] = frozenset()
                    ) -> tuple[list[Buffer], dict[Value, int]]:
    """Best fit over live intervals (``live``: of every root, in order of definition, as
    ``_Aliases`` gives them); the better (at the nominal binding) of two visiting
    orders: by definition (linear scan) and largest first (which packs big values
    tightly). Then the ``dynamic`` values, in dynamic buffers of their own after those.
    (``sizes``: the size of every root.)"""
    # the roots in order of definition (position in the schedule, then result index)
    defined = list(live)
    by_time = [v for v in defined if v not in dynamic] if dynamic else defined
    spans = [live[v] for v in by_time]
    needs = [sizes[v] for v in by_time]
    by_size = sorted(range(len(by_time)), key=[-s.nominal_bytes for s in needs].__getitem__)
    best: tuple[int, Sequence[int], _Fit] | None = None
    visits: tuple[Sequence[int], ...] = (range(len(by_time)), by_size)
    for visit in visits:
        fit = _fit(visit, spans, needs)
        total = sum(-(-s.nominal_bytes // MemoryPlan.ALIGN) for s in fit.sizes)
        if best is None or total < best[0]:
            best = (total, visit, fit)
    assert best is not None
    _, visit, fit = best
    # each buffer's values in order of definition (by index, as they were visited by time)
    buffers = [Buffer(b, size, [by_time[i] for i in held])
               for b, (size, held) in enumerate(zip(fit.sizes, fit.held(range(len(by_time)))))]
    where = fit.buffer_of
    buffer_of = {by_time[i]: where[i] for i in visit}
    if dynamic:
        _dynamic_fit([v for v in defined if v in dynamic], live, buffers, buffer_of)
    return buffers, buffer_of


def _dynamic_fit(values: Sequence[Value], live: Mapping[Value, tuple[int, int]],
                 buffers: list[Buffer], buffer_of: dict[Value, int]) -> None:
    """Dynamic values into dynamic buffers (appended to ``buffers``): a buffer is as
    large as its largest value at each binding, so sharing one never costs more than
    separate buffers; a value goes to a free buffer whose values have its type if
    there is one (sizes equal at every binding more often), else any free one."""
    first = len(buffers)
    spans: dict[int, list[tuple[int, int]]] = {}
    for v in values:
        start, end = live[v]
        free = [b for b in buffers[first:]
                if all(e < start or s > end for s, e in spans[b.id])]
        same = [b for b in free if any(u.type == v.type for u in b.values)]
        if same or free:
            buf = (same or free)[0]
        else:
            buf = Buffer(len(buffers), Size.of(v.type), [], dynamic=True)
            buffers.append(buf)
            spans[buf.id] = []
        buf.values.append(v)
        spans[buf.id].append((start, end))
        buffer_of[v] = buf.id


class _Waiting:
    """Buffers free from the queries' start until a known time (the start of their next
    interval), by id: the lowest id free past a given ``end`` in O(log n), as a segment
    tree over buffer ids holding the largest such time below each node (-1: none)."""

    __slots__ = ("tree", "cap")

    def __init__(self) -> None:
        self.tree = [-1, -1]
        self.cap = 1  # leaves: tree[cap + id]

    def set(self, b: int, until: int) -> None:
        """Buffer ``b`` free until ``until`` (-1: out of the search)."""
        if b >= self.cap:
            self._grow(b)
        tree = self.tree
        i = self.cap + b
        tree[i] = until
        i >>= 1
        while i:
            left, right = tree[2 * i], tree[2 * i + 1]
            top = left if left >= right else right
            if tree[i] == top:
                break
            tree[i] = top
            i >>= 1

    def first_after(self, end: int) -> int | None:
        """The lowest id free past ``end``, if any."""
        tree = self.tree
        if tree[1] <= end:
            return None
        i, cap = 1, self.cap
        while i < cap:
            i <<= 1
            if tree[i] <= end:
                i += 1
        return i - cap

    def clear(self) -> None:
        if self.tree[1] != -1:
            self.tree = [-1] * len(self.tree)

    def _grow(self, b: int) -> None:
        cap = self.cap
        while cap <= b:
            cap *= 2
        tree = [-1] * (2 * cap)
        tree[cap:cap + self.cap] = self.tree[self.cap:]
        for i in range(cap - 1, 0, -1):
            left, right = tree[2 * i], tree[2 * i + 1]
            tree[i] = left if left >= right else right
        self.tree, self.cap = tree, cap


class _SizeClass:
    """The buffers of one size (symbols and static factor) in ``_best_fit``'s search, in
    three sets relative to the queries' start, which does not decrease while queries come
    in time order (as they do in both orders the planner uses, within each size):
    - awake: may be free (not tested since they last changed), a heap by id;
    - asleep: busy until the end of an interval of theirs that began at or before the
      start, such as the one just given a value (a heap by that end: each wakes once the
      start passes it);
    - waiting: free from the start until their next interval begins, after the start
      (``_Waiting``, and a heap by that time: each wakes once the start reaches it).
      Such a buffer is free for a query exactly when the query ends before that time,
      so the lowest free id among them is one search, however many there are (they were
      tested and pushed back on every query, then put back and tested again: 33 k tests
      for a 256-layer MLP's activations against the buffers of its weight gradients,
      growing with the square of the layers).
    A buffer is in one set at a time: tested buffers move from awake to one of the
    others, and back to awake when the start passes the time they wait for, when one is
    chosen from waiting, or when a query starts before the previous one (a new run of
    queries: the sets no longer hold).
    Each interval moves its buffer at most a few times per run, so the search costs
    O(log n) per value, amortized. Heap entries are ints (a time and a buffer id: ``time
    * n + id`` for an ``n`` above every id, which orders as the pair does; the id alone in
    awake), and ``_fit`` knows where each buffer's one current entry is: one moved (woken,
    put to sleep, set waiting, grown into another size) leaves stale entries that are
    skipped. (Stale copies equal to the current entry are harmless: they pop with it,
    and once it has moved they are stale again.)"""

    __slots__ = ("awake", "asleep", "waiting", "soon", "last_start")

    def __init__(self) -> None:
        self.awake: list[int] = []  # buffer ids
        self.asleep: list[int] = []  # busy until, and id
        self.waiting = _Waiting()
        self.soon: list[int] = []  # busy from, and id
        self.last_start = -1


def _best_fit(values: Sequence[Value], live: Mapping[Value, tuple[int, int]],
              sizes: Mapping[Value, Size] | None = None, stats: dict[str, int] | None = None
              ) -> tuple[list[Buffer], dict[Value, int]]:
    """Put each value, in the order given, in the smallest buffer it fits in and whose
    values' intervals it does not overlap; else grow the largest such buffer that fits
    in it; else open a new buffer (``_fit``). (``sizes``: the values' sizes where known;
    ``stats``, when given, gets the count of ``interval_tests``: a buffer's intervals
    searched.)"""
    needs = [sizes[v] if sizes is not None else Size.of(v.type) for v in values]
    fit = _fit(range(len(values)), [live[v] for v in values], needs, stats)
    buffers = [Buffer(b, size, [values[i] for i in held])
               for b, (size, held) in enumerate(zip(fit.sizes, fit.held(range(len(values)))))]
    return buffers, dict(zip(values, fit.buffer_of))


@dataclass
class _Fit:
    """``_fit``'s buffers: each one's size, and each value's buffer (values as indices)."""

    sizes: list[Size]
    buffer_of: list[int]

    def held(self, values: Iterable[int]) -> list[list[int]]:
        """Each buffer's values among ``values``, in that order."""
        held: list[list[int]] = [[] for _ in self.sizes]
        buffer_of = self.buffer_of
        for x in values:
            held[buffer_of[x]].append(x)
        return held


def _fit(visit: Sequence[int], spans: Sequence[tuple[int, int]], needs: Sequence[Size],
         stats: dict[str, int] | None = None) -> _Fit:
    """Best fit of values given by index (``spans``: their live intervals; ``needs``: their
    sizes), visited in the order ``visit`` gives: each value goes to the smallest buffer
    it fits in and whose values' intervals it does not overlap; else grows the largest
    such buffer that fits in it; else opens a new buffer.

    Buffers are kept in size classes (one per symbols and static factor, which order
    them as their bytes at any binding do; see ``_SizeClass``), so the search visits
    buffers in the order of preference and skips the busy ones, instead of testing every
    buffer for every value (1.5 M interval tests for a 256-layer MLP)."""
    sizes: list[Size] = []
    buffer_of = [0] * len(needs)
    # Each buffer's intervals, sorted by start (they are disjoint, so their starts are
    # distinct): their starts and their ends, so whether a value overlaps a buffer is a
    # bisection rather than a scan of its values.
    starts: list[list[int]] = []
    ends: list[list[int]] = []
    # Where each buffer's current heap entry is (a class's asleep, soon or awake) and the
    # entry; any other entry of it is stale. An entry is ``time * n + id``.
    where: list[list[int]] = []
    entry: list[int] = []
    nowhere: list[int] = []  # (where a new buffer's entry is: no heap)
    n = len(needs) + 1  # (more than any buffer id)
    # symbols -> static factors in ascending order, and their classes in that order
    factors: dict[tuple[str, ...], list[int]] = {}
    ordered: dict[tuple[str, ...], list[_SizeClass]] = {}
    # id of a size -> the classes in the order a value of that size visits them (the
    # smallest that fit, then the largest of those that do not, grown if a buffer of
    # theirs is free); forgotten when a class is added
    visits: dict[int, list[_SizeClass]] = {}
    heappush, heappop, bisect_left = heapq.heappush, heapq.heappop, bisect.bisect_left
    tests = 0

    def home(size: Size, start: int) -> _SizeClass:
        """The class of the buffers of ``size`` (a new one as if queried at ``start``)."""
        group = factors.setdefault(size.symbols, [])
        k = bisect_left(group, size.static_factor)
        if k == len(group) or group[k] != size.static_factor:
            group.insert(k, size.static_factor)
            c = _SizeClass()
            c.last_start = start
            ordered.setdefault(size.symbols, []).insert(k, c)
            visits.clear()
        return ordered[size.symbols][k]

    def classes(size: Size) -> list[_SizeClass]:
        row = ordered.get(size.symbols)
        if not row:
            return []
        k = bisect_left(factors[size.symbols], size.static_factor)
        return row[k:] + row[k - 1::-1] if k else list(row)

    for x in visit:
        start, end = spans[x]
        need = needs[x]
        found = -1
        visiting = visits.get(id(need))
        if visiting is None:
            visiting = visits[id(need)] = classes(need)
        for c in visiting:
            asleep, soon, awake = c.asleep, c.soon, c.awake
            if start < c.last_start:  # a new run of queries: wake every buffer
                for heap in (asleep, soon):
                    for e in heap:
                        b = e % n
                        if where[b] is heap and entry[b] == e:
                            where[b], entry[b] = awake, b
                            heappush(awake, b)
                asleep.clear()
                soon.clear()
                c.waiting.clear()
            c.last_start = start
            ends_before = start * n  # (an entry of a time before start is below this)
            while asleep and asleep[0] < ends_before:
                e = heappop(asleep)
                b = e % n
                if where[b] is asleep and entry[b] == e:
                    where[b], entry[b] = awake, b
                    heappush(awake, b)
            later = None
            if soon:
                ends_before += n  # (of a time by start)
                while soon and soon[0] < ends_before:
                    e = heappop(soon)
                    b = e % n
                    if where[b] is soon and entry[b] == e:
                        c.waiting.set(b, -1)
                        where[b], entry[b] = awake, b
                        heappush(awake, b)
                if soon and c.waiting.tree[1] > end:  # (else none is free past end)
                    later = c.waiting.first_after(end)
            if not awake:
                if later is not None:
                    found = later
                    c.waiting.set(later, -1)
                    break
                continue
            while awake:
                b = awake[0]
                if later is not None and b > later:
                    break
                if where[b] is not awake:
                    heappop(awake)
                    continue
                # an interval of b overlapping [start, end], if any: the one holding
                # start, else the first after it if it begins by end
                tests += 1
                bs = starts[b]
                i = bisect_left(bs, start)
                if i and ends[b][i - 1] >= start:
                    i -= 1
                elif i == len(bs) or bs[i] > end:
                    found = b
                    break
                heappop(awake)
                if bs[i] <= start:  # busy until the interval's end: asleep
                    e = ends[b][i] * n + b
                    heappush(asleep, e)
                    where[b], entry[b] = asleep, e
                else:  # busy from its start, which is by ``end``: not free for this query
                    e = bs[i] * n + b
                    heappush(soon, e)
                    where[b], entry[b] = soon, e
                    c.waiting.set(b, bs[i])
            if found < 0 and later is not None:
                found = later
                c.waiting.set(later, -1)
            if found >= 0:
                break
        if found < 0:
            found = len(sizes)
            sizes.append(need)
            starts.append([])
            ends.append([])
            where.append(nowhere)
            entry.append(-1)
            c = home(need, start)
        elif sizes[found].static_factor < need.static_factor:  # grown
            sizes[found] = need
            c = home(need, start)
        # (else c is the class it was found in.) It is busy until ``end`` now: asleep in
        # its class, which was queried at ``start`` (the first class the search visits
        # is the one of ``need``), so its next queries start there or later, or begin a
        # new run. Its other entries are stale now.
        e = end * n + found
        heappush(c.asleep, e)
        where[found], entry[found] = c.asleep, e
        bs = starts[found]
        if not bs or bs[-1] < start:
            bs.append(start)
            ends[found].append(end)
        else:
            i = bisect_left(bs, start)
            bs.insert(i, start)
            ends[found].insert(i, end)
        buffer_of[x] = found
    if stats is not None:
        stats["interval_tests"] = stats.get("interval_tests", 0) + tests
    return _Fit(sizes, buffer_of)


# ---- the report -------------------------------------------------------------------------

def _names(args: Sequence[Value], ops: Sequence[Op]) -> dict[Value, str]:
    """Names as the printer gives them (``%x``, ``%0``...) to a graph with these args and
    ops in this order."""
    from tfc.ir.printer import _Namer  # the printer's own naming, so the names match

    namer = _Namer()
    for a in args:
        namer.define(a)
    for op in ops:
        for r in op.results:
            namer.define(r)
    return dict(namer.names)


def _report(plan: MemoryPlan, bindings: Mapping[str, int] | None) -> str:
    symbols = sorted({s for b in plan.buffers for v in b.values
                      for s in Size.of(v.type).symbols})
    given = dict(bindings) if bindings is not None else {}
    at = {s: int(given.get(s, NOMINAL_SYMBOL)) for s in symbols} | given
    where = ", ".join(f"{s}={at[s]}" for s in symbols)

    def name(v: Value) -> str:
        return plan.names.get(v, f"%<{v.type}>")

    lines = [f"memory plan @{plan.graph}" + (f" (sizes at {where})" if where else "")]
    offsets = plan.offsets(at)
    rows = [("buffer", "offset", "bytes", "size", "values")]
    for b, off in zip(plan.buffers, offsets):
        rows.append((f"#{b.id}", str(off), str(plan.buffer_bytes(b, at)), b.size_text(),
                     " ".join(name(v) for v in b.values)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
    arena, peak, base = plan.arena_bytes(at), plan.peak_live_bytes(at), plan.no_reuse_bytes(at)
    ratio = f" = {arena / base:.2f}x no reuse" if base else ""
    lines.append(f"arena {arena} bytes ({format_bytes(arena)}){ratio}; peak live {peak} bytes "
                 f"({format_bytes(peak)}); no reuse {base} bytes ({format_bytes(base)})")
    views = len(plan.alias_of) - len(plan.in_place)
    lines.append(f"{len(plan.buffer_of)} values in {len(plan.buffers)} buffers, "
                 f"{len(plan.in_place)} in place, {views} views"
                 + (f", {len(plan.dynamic)} dynamic" if plan.dynamic else ""))
    if plan.in_place:
        lines.append("in place: " + ", ".join(f"{name(r)} <- {name(s)}"
                                              for r, s in plan.in_place.items()))
    if plan.dynamic:
        lines.append("dynamic (sized per binding; '?' shown at its nominal size): "
                     + " ".join(name(v) for v in plan.dynamic))
    if plan.unplanned:
        lines.append("not planned (absorbed by weight updates folded into GEMMs): "
                     + " ".join(name(v) for v in plan.unplanned))
    return "\n".join(lines)

