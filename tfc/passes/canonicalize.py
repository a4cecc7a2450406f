"""canonicalize: constant folding and algebraic identities, to a fixed point.

- Folding: a PURE op (never RANDOM or STATEFUL, never one owning regions) whose inputs
  are all ``constant`` results is evaluated with its registry ``reference`` and replaced
  by ``constant`` ops that keep its location, device and result names. Only small
  results are folded (at most ``FOLD_LIMIT`` elements) unless the result is no larger
  than its inputs together, so folding never blows up a module. An op whose reference
  fails (integer division by zero, say) is left for the run to report.
- Identities, applied only when the op's result type equals ``x``'s exactly (dtype and
  shape, so no broadcast is lost): ``x+0``, ``0+x``, ``x-0``, ``x*1``, ``1*x``, ``x/1``
  -> ``x``; ``identity(x)`` -> ``x`` (unless the identity is placed on another device
  than ``x``'s producer: then it is a copy); ``neg(neg(x))`` -> ``x``; ``cast`` to
  ``x``'s dtype -> ``x``; ``reshape`` to ``x``'s shape -> ``x``; ``reshape(reshape(x))``
  -> one reshape; ``transpose`` by the identity permutation -> ``x``;
  ``transpose(transpose(x))`` -> one transpose (or ``x``).
- Shapes known from types: ``shape(x)`` of a static type, and ``rank(x)``, become
  constants.
- Ops without inputs (``zeros``, ``fill``, ``range``) fold like the others, but a
  result of more than ``GENERATOR_LIMIT`` elements only when it is a splat: a large
  ``range`` is smaller as an op than as a constant in the module.
- ``x*0`` folds to zeros only for integers: for floats ``inf*0`` and ``nan*0`` are NaN,
  so folding would change results. ``x+0`` is folded for floats although ``-0.0+0.0``
  is ``+0.0``: the sign of a zero is not something tfc preserves (as TensorFlow's
  arithmetic optimizer does not).
- Like MLIR's greedy rewriter, ops left without uses that are PURE (the constants
  folding consumed, say) are erased; ``dce`` handles the rest.

Every graph is rewritten, region graphs included.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.interpret import ExecContext
from tfc.ir.registry import PURE, RANDOM, STATEFUL, lookup, make_op
from tfc.ir.types import TensorType
from tfc.passes.dce import erase_unused
from tfc.passes.manager import for_each_graph, register_pass, resolve

FOLD_LIMIT = 1 << 20  # elements a folded result may have when it grows its inputs
GENERATOR_LIMIT = 1024  # elements of a non-splat result an op without inputs folds to
MAX_ITERATIONS = 64


@register_pass("canonicalize")
def canonicalize(module: Module) -> Module:
    """Fold constants and simplify identities in every graph, to a fixed point."""
    return for_each_graph(module, canonicalize_graph)


def canonicalize_graph(graph: Graph) -> bool:
    """Rewrite one graph (not its regions) until nothing changes; whether anything did."""
    changed_any = False
    rules: dict[str, tuple[Any, Any]] = {}  # by kind (see ``_Rewriter.rule``)
    erasable: dict[str, bool] = {}  # by kind (``_erasable``)
    for iteration in range(MAX_ITERATIONS):
        before = len(graph.ops)
        changed = _Rewriter(graph, rules).run()
        # A sweep that replaced nothing and added nothing left the graph as the last
        # erasing left it, without a dead erasable op (erasing goes backwards: an op kept
        # is used by one kept after it), so erasing again would find none: skipped.
        if iteration == 0 or changed or len(graph.ops) != before:
            changed |= erase_unused(graph, _erasable, erasable) > 0
        changed_any |= changed
        if not changed:
            break
    return changed_any


def constant_value(v: Value) -> np.ndarray | None:
    """The array of a ``constant`` op's result, else None."""
    if v.op is not None and v.op.kind == "constant":
        return v.op.attrs["value"]
    return None


def is_splat(v: Value, x: float | int) -> bool:
    """Whether ``v`` is a constant all of whose elements equal ``x``."""
    c = constant_value(v)
    if c is None:
        return False
    if c.size == 1:  # (np.all's answer, without its overhead: the one element's)
        return bool(c.item() == x)
    return bool(np.all(c == x))


class _Rewriter:
    """One forward sweep: each op's inputs are first updated by earlier replacements."""

    def __init__(self, graph: Graph,
                 rules: dict[str, tuple[Any, Any]] | None = None) -> None:
        self.graph = graph
        self.subst: dict[Value, Value] = {}
        # the new op list, made at the first change (``started``): ops before ``at``
        # are kept as they are
        self.ops: list[Op] = []
        self.started = False
        self.at = 0
        self.changed = False
        self.rules = {} if rules is None else rules

    def run(self) -> bool:
        g = self.graph
        subst, rules = self.subst, self.rules
        replaced = subst.keys()
        for i, op in enumerate(g.ops):
            inputs = op.inputs
            if subst and not replaced.isdisjoint(inputs):
                op.inputs = inputs = [resolve(subst, v) for v in inputs]
            if not op.regions:
                kind = op.kind
                if kind in rules:
                    opdef, simplify = rules[kind]
                else:
                    opdef, simplify = rules[kind] = self.rule(kind)
                # an op is folded when its inputs are all constants, else simplified by the
                # rule of its kind: an op of a kind that has neither is left as it is (the
                # first input decides for most: not a constant)
                if opdef is not None:
                    first = inputs[0].op if inputs else None
                    self.at = i
                    if (not inputs or (first is not None and first.kind == "constant"
                                       and _all_constant(inputs))) and self.fold(op, opdef):
                        continue
                    if simplify is not None and simplify(self, op):
                        continue
            if self.started:
                self.ops.append(op)
        if self.started:
            g.ops = self.ops
        g.results = [resolve(subst, v) for v in g.results]
        return self.changed

    def rule(self, kind: str) -> tuple[Any, Any]:
        """How ops of ``kind`` may be rewritten, read from the registry once per kind: its
        definition (None when it never is: constants, ops not PURE, RANDOM or STATEFUL
        ones) and its ``simplify_`` method (None when it has none)."""
        opdef = lookup(kind)
        if kind == "constant" or not opdef.has(PURE):
            return None, None
        if opdef.has(RANDOM) or opdef.has(STATEFUL):
            return None, None
        simplify = getattr(type(self), "simplify_" + kind, None)
        return opdef, simplify if callable(simplify) else None

    def start(self) -> None:
        """The new op list, at the first change: the ops before the current one."""
        if not self.started:
            self.started = True
            self.ops = self.graph.ops[:self.at]

    # ---- rewrites: each returns True when ``op`` was replaced (and so dropped) ----------

    def replace(self, op: Op, values: list[Value]) -> bool:
        self.start()
        for r, v in zip(op.results, values):
            self.subst[r] = v
        self.changed = True
        return True

    def emit(self, op: Op) -> Op:
        self.start()
        self.ops.append(op)
        return op

    def fold(self, op: Op, opdef: Any) -> bool:
        types = [r.type for r in op.results]
        if not all(t.is_static for t in types):
            return False
        out_elems = sum(t.num_elements() or 0 for t in types)
        ins = [cast(np.ndarray, constant_value(v)) for v in op.inputs]  # all constants (rewrite)
        in_elems = sum(x.size for x in ins)
        if out_elems > max(in_elems, FOLD_LIMIT):
            return False
        generator = not op.inputs and out_elems > GENERATOR_LIMIT
        try:
            with np.errstate(all="ignore"):
                outs = opdef.reference(ExecContext({}, 0), ins, op.attrs)
        except (TfcError, ArithmeticError, ValueError, IndexError, TypeError,
                np.linalg.LinAlgError):
            return False
        if isinstance(outs, np.ndarray):
            outs = [outs]
        if len(outs) != len(types):
            return False
        consts = []
        for r, arr in zip(op.results, outs):
            arr = np.asarray(arr)
            if arr.dtype != r.type.dtype.np or arr.shape != r.type.shape:
                return False  # a registry bug: leave it for the interpreter to report
            if generator and arr.size and not np.all(arr == arr.flat[0]):
                return False  # a large range(): smaller as an op than as a constant
            consts.append(self.constant(arr, op, r.name))
        return self.replace(op, [c.result for c in consts])

    def constant(self, arr: np.ndarray, like: Op, name: str | None = None) -> Op:
        return self.emit(make_op("constant", [], {"value": arr}, device=like.device,
                                 loc=like.loc, names=[name] if name else ()))

    def same_type(self, op: Op, x: Value) -> bool:
        return op.results[0].type == x.type

    # ---- shapes known from types ---------------------------------------------------

    def simplify_shape(self, op: Op) -> bool:
        (x,) = op.inputs
        if not x.type.is_static:
            return False
        arr = np.array(x.type.shape, dtype=op.results[0].type.dtype.np)
        return self.replace(op, [self.constant(arr, op, op.results[0].name).result])

    def simplify_rank(self, op: Op) -> bool:
        arr = np.array(op.inputs[0].type.rank, dtype=op.results[0].type.dtype.np)
        return self.replace(op, [self.constant(arr, op, op.results[0].name).result])

    # ---- algebraic identities, by op kind --------------------------------------------

    def drop_unit(self, op: Op, unit: int, either_side: bool = False) -> bool:
        """``x op unit`` (and ``unit op x`` when ``either_side``) -> ``x``."""
        a, b = op.inputs
        if (b.op is None or b.op.kind != "constant") and (
                not either_side or a.op is None or a.op.kind != "constant"):
            return False  # (most ops: no constant, no unit)
        if is_splat(b, unit) and self.same_type(op, a):
            return self.replace(op, [a])
        if either_side and is_splat(a, unit) and self.same_type(op, b):
            return self.replace(op, [b])
        return False

    def simplify_add(self, op: Op) -> bool:
        return self.drop_unit(op, 0, either_side=True)

    def simplify_sub(self, op: Op) -> bool:
        return self.drop_unit(op, 0)

    def simplify_mul(self, op: Op) -> bool:
        if self.drop_unit(op, 1, either_side=True):
            return True
        a, b = op.inputs
        t: TensorType = op.results[0].type
        if t.dtype.is_int and t.is_static and (is_splat(a, 0) or is_splat(b, 0)):
            zeros = np.zeros(t.static_shape, dtype=t.dtype.np)
            return self.replace(op, [self.constant(zeros, op, op.results[0].name).result])
        return False

    def simplify_div(self, op: Op) -> bool:
        return self.drop_unit(op, 1)

    def simplify_identity(self, op: Op) -> bool:
        (x,) = op.inputs
        if op.device is not None and (x.op is None or x.op.device != op.device):
            return False  # an identity on another device is a copy there
        return self.replace(op, [x])

    def simplify_neg(self, op: Op) -> bool:
        (x,) = op.inputs
        if x.op is not None and x.op.kind == "neg":
            return self.replace(op, [x.op.inputs[0]])
        return False

    def simplify_cast(self, op: Op) -> bool:
        (x,) = op.inputs
        if op.attrs["dtype"] == x.type.dtype:
            return self.replace(op, [x])
        return False

    def simplify_reshape(self, op: Op) -> bool:
        (x,) = op.inputs
        # Equal types mean equal shapes unless two '?' dims could trade sizes.
        if self.same_type(op, x) and list(x.type.shape).count("?") <= 1:
            return self.replace(op, [x])
        if x.op is not None and x.op.kind == "reshape" and "shape" in x.op.attrs:
            inner = x.op.inputs[0]
            new = self.emit(make_op("reshape", [inner], dict(op.attrs), device=op.device,
                                    loc=op.loc, names=[r.name for r in op.results]))
            if new.results[0].type != op.results[0].type:
                self.ops.pop()
                return False
            return self.replace(op, new.results)
        return False

    def simplify_transpose(self, op: Op) -> bool:
        (x,) = op.inputs
        perm = _perm(op, x.type.rank)
        if perm is None:
            return False
        if perm == tuple(range(x.type.rank)):
            return self.replace(op, [x])
        if x.op is not None and x.op.kind == "transpose":
            inner = x.op.inputs[0]
            p1 = _perm(x.op, inner.type.rank)
            if p1 is None:
                return False
            composed = tuple(p1[i] for i in perm)
            if composed == tuple(range(inner.type.rank)):
                return self.replace(op, [inner])
            attrs = dict(op.attrs)
            attrs["perm"] = composed
            new = self.emit(make_op("transpose", [inner], attrs, device=op.device, loc=op.loc,
                                    names=[r.name for r in op.results]))
            return self.replace(op, new.results)
        return False


def _perm(op: Op, rank: int) -> tuple[int, ...] | None:
    """The permutation a transpose applies (None in the attr reverses the axes)."""
    if "perm" not in op.attrs:
        return None
    perm = op.attrs["perm"]
    if perm is None:
        return tuple(reversed(range(rank)))
    return tuple(p % rank if rank else p for p in perm)


def _all_constant(inputs: list[Value]) -> bool:
    """Whether every value of ``inputs`` is a ``constant``'s result (``constant_value``)."""
    for v in inputs:
        if v.op is None or v.op.kind != "constant":
            return False
    return True


def _erasable(op: Op) -> bool:
    """Whether canonicalize may erase ``op`` when unused: PURE, not random, not stateful,
    without regions (``dce`` decides the rest)."""
    if op.regions:
        return False
    opdef = lookup(op.kind)
    return opdef.has(PURE) and not opdef.has(RANDOM) and not opdef.has(STATEFUL)

