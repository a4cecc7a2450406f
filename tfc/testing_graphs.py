"""Seeded random graphs for differential tests (llvm against the reference, a pass's
graph before against after).

``random_graph(seed)`` builds a random DAG over a few f32 inputs: element-wise ops (unary,
and binary with numpy broadcasting), views and movement (``reshape``, ``transpose``,
``slice``, ``expand_dims``, ``squeeze``, ``broadcast_to``; where none fits, a ``cumsum``
or ``sort`` along an axis), reductions (``sum``/``mean``/
``max``/``min`` over random axes, keepdims or not) and softmax-like rows (a value combined
with a reduction of itself broadcast back, often reduced again over the same axes).
Operands are drawn from every value made so far, recent ones more often, so diamonds and
paths that leave a would-be fusion and come back are common; random intermediates are
fetched besides the last value, views more often (a fetched view has storage of its own
that later ops read), and some are assigned (``var.assign``/``var.assign_add``) to
variables of their type, which the step updates at its end. Three graphs in ten have a
symbolic leading dim ``B`` on some inputs (reshapes keep it leading, slices and static
``broadcast_to`` avoid it); ``RandomGraph.feeds_for`` makes feeds at another size of it.

Every value carries a bound on the magnitudes it is computed from (inputs are uniform in
[-2, 2]; ops that would push a bound past ``MAX_BOUND`` are not chosen), so a comparison
can allow float error at the size of the terms a sum cancels: see ``RandomGraph.bounds``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Value, VariableDecl
from tfc.ir.types import Dim, DType, TensorType

MAX_BOUND = 100.0
INPUT_BOUND = 2.0
UNARY = ("neg", "abs", "tanh", "sigmoid", "relu", "exp", "square", "sin", "softplus",
         "expm1", "tan", "atan", "asin", "acos", "erf", "erfc")
BINARY = ("add", "sub", "mul", "maximum", "minimum", "atan2", "squared_difference")
# (floordiv, floormod, ceil, round are left out: a step of theirs turns the backends'
# last-ulp differences upstream into differences of a whole unit)
# The operand magnitudes the generator keeps these ops to: tan away from its poles, asin
# and acos inside their domain where their slope is at most 2.3 (a larger operand is
# scaled down first), so the backends' rounding differences stay within the tolerance.
DOMAIN = {"tan": 1.2, "asin": 0.9, "acos": 0.9}
# The REDUCTION ops whose results this generator can bound (a prod's bound is the input's
# to the power of the count: left out), and the VIEW ops ``movement`` builds. Choices of
# the generator (a seed's graph depends on the order), not the registry's categories.
REDUCTIONS = ("sum", "mean", "max", "min")
VIEWS = ("reshape", "expand_dims", "squeeze")
# Scans and sorts along one axis (``scan_or_sort``), drawn only where ``movement`` had no
# other choice left (so the graphs of most seeds stay as they were).
ALONG_AXIS = ("cumsum", "sort")
BATCH = "B"  # the symbolic dim of a symbolic graph's inputs (leading, as a batch)
SYMBOLIC = 0.3  # the share of symbolic graphs
MAX_BATCH = 5  # B is bound to 1 ... MAX_BATCH


@dataclass
class RandomGraph:
    """A one-graph module (entry ``f``), feeds for it, and each fetch's magnitude bound."""

    module: Module
    feeds: list[np.ndarray]
    bounds: list[float]
    batch: int | None = None  # the size of ``B`` in ``feeds`` (None: no symbolic dim)
    variables: dict[str, np.ndarray] = field(default_factory=dict)  # start-of-step values
    update_bounds: dict[str, float] = field(default_factory=dict)  # per assigned variable

    def feeds_for(self, batch: int, seed: int = 0) -> list[np.ndarray]:
        """Other feeds, with ``B`` of size ``batch``."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-INPUT_BOUND, INPUT_BOUND, [batch if d == BATCH else int(d)
                                                        for d in a.type.shape]
                            ).astype(np.float32) for a in self.module.graphs["f"].args]


def random_graph(seed: int, ops: tuple[int, int] = (3, 17)) -> RandomGraph:
    """The graph of ``seed``, with ``ops[0]`` to ``ops[1] - 1`` construction steps (a step
    adds one to four ops)."""
    return _Builder(np.random.default_rng(seed), ops).build()


@dataclass
class _Builder:
    """A graph under construction: values with their magnitude bounds."""

    rng: np.random.Generator
    steps: tuple[int, int]
    graph: Graph = field(default_factory=lambda: Graph("f"))
    values: list[Value] = field(default_factory=list)
    bound: dict[Value, float] = field(default_factory=dict)
    batch: int | None = None  # the run-time size of the symbol ``B``, in a symbolic graph
    update_bounds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.b = Builder(self.graph)

    def add(self, v: Value, bound: float) -> Value:
        self.values.append(v)
        self.bound[v] = bound
        return v

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        r = int(self.rng.integers(1, 5)) if rank is None else rank
        return tuple(int(self.rng.choice([1, 2, 3, 4, 5])) for _ in range(r))

    def size(self, d: Dim) -> int:
        """``d``'s size for bounds: ``B`` at its largest, for every binding."""
        return MAX_BATCH if d == BATCH else int(d)

    def count(self, shape: Sequence[Dim]) -> int:
        return math.prod(self.size(d) for d in shape)

    def pick(self) -> Value:
        """An operand: recent values more often, any earlier one too (diamonds)."""
        n = len(self.values)
        k = n - 1 - min(int(self.rng.geometric(0.45)) - 1, n - 1) \
            if self.rng.random() < 0.7 else int(self.rng.integers(n))
        return self.values[k]

    # ---- ops ------------------------------------------------------------------------------

    def unary(self, x: Value) -> Value:
        m = self.bound[x]
        kinds = [k for k in UNARY if not (k in ("exp", "expm1") and m > 3) and not (
                 k == "square" and m * m > MAX_BOUND) and not (k == "sin" and m > 10)]
        kind = str(self.rng.choice(kinds))
        lim = DOMAIN.get(kind, math.inf)
        if m > lim:  # scaled into [-lim, lim] first (a multiply by lim / m)
            scale = self.b("constant", value=np.asarray(lim / m, x.type.dtype.np))
            x, m = self.b("mul", x, scale), lim
        bound = {"tanh": 1.0, "sigmoid": 1.0, "sin": 1.0, "exp": math.exp(m),
                 "expm1": math.exp(m), "softplus": m + 1.0, "square": m * m,
                 "tan": math.tan(m), "atan": min(m, math.pi / 2),
                 "asin": math.pi / 2, "acos": math.pi, "erf": 1.0, "erfc": 2.0}.get(kind, m)
        return self.add(self.b(kind, x), bound)

    def broadcast_partner(self, x: Value) -> Value:
        """A value that broadcasts with ``x``: an existing one if any does, else a new
        input, a reduction of ``x`` with keepdims, or a scalar constant."""
        shape = x.type.shape
        ok = [v for v in self.values if v is not x and _broadcasts(v.type.shape, shape)]
        r = self.rng.random()
        if ok and r < 0.55:
            return ok[int(self.rng.integers(len(ok)))]
        if r < 0.8:
            keep = len(shape) - int(self.rng.integers(0, len(shape) + 1))
            sub = tuple(d if self.rng.random() < 0.6 else 1 for d in shape[len(shape) - keep:])
            return self.input(sub)
        if r < 0.9 and shape:
            axes = self.axes(len(shape))
            return self.reduce(x, axes, keepdims=True)
        c = np.asarray(self.rng.uniform(-2, 2), np.float32)
        return self.add(self.b("constant", value=c), abs(float(c)))

    def binary(self, x: Value) -> Value:
        y = self.broadcast_partner(x)
        if self.rng.random() < 0.5:
            x, y = y, x
        mx, my = self.bound[x], self.bound[y]
        kinds = [k for k in BINARY if not (k == "mul" and mx * my > MAX_BOUND)
                 and not (k in ("add", "sub") and mx + my > MAX_BOUND)
                 and not (k == "squared_difference" and (mx + my) ** 2 > MAX_BOUND)]
        if not kinds:
            kinds = ["maximum", "minimum"]
        kind = str(self.rng.choice(kinds))
        bound = mx * my if kind == "mul" else mx + my if kind in ("add", "sub") \
            else math.pi if kind == "atan2" \
            else (mx + my) ** 2 if kind == "squared_difference" else max(mx, my)
        if kind == "atan2":
            # atan2 jumps by 2 pi across the negative x axis, where a zero's sign or a
            # tiny value of either sign (a sum that cancels) would decide it: the angle of
            # a point kept in the upper (y -> |y| + 1/2) or right (x -> |x| + 1/2) half
            # plane instead, where it moves by at most 2x its operands' rounding.
            half = self.b("constant", value=np.asarray(0.5, x.type.dtype.np))
            if self.rng.random() < 0.5:
                x = self.b("add", self.b("abs", x), half)
            else:
                y = self.b("add", self.b("abs", y), half)
        return self.add(self.b(kind, x, y), bound)

    def other(self, x: Value) -> Value:
        """A select, a division, a round trip through f64, or a ``broadcast_like``."""
        r = self.rng.random()
        if r < 0.3:
            y = self.broadcast_partner(x)
            cond = self.b(str(self.rng.choice(["greater", "less_equal"])), x, y)
            return self.add(self.b("where", cond, x, y), max(self.bound[x], self.bound[y]))
        if r < 0.55:
            y = self.broadcast_partner(x)
            one = self.b("constant", value=np.asarray(1.0, np.float32))
            return self.add(self.b("div", x, self.b("add", one, self.b("abs", y))),
                            self.bound[x])
        if r < 0.8:
            wide = self.b("cast", x, dtype=DType.f64)
            self.bound[wide] = self.bound[x]
            u = self.unary(wide)
            self.values.pop()  # f64 values stay out of the pool: operands are f32
            return self.add(self.b("cast", u, dtype=DType.f32), self.bound[u])
        big = [v for v in self.values if v is not x and v.type.dtype == x.type.dtype
               and _broadcasts(x.type.shape, v.type.shape)]
        if not big:
            return self.unary(x)
        like = big[int(self.rng.integers(len(big)))]
        return self.add(self.b("broadcast_like", x, like), self.bound[x])

    def axes(self, rank: int) -> tuple[int, ...]:
        n = int(self.rng.integers(1, rank + 1))
        return tuple(sorted(int(a) for a in self.rng.choice(rank, n, replace=False)))

    def reduce(self, x: Value, axes: tuple[int, ...] | None = None,
               keepdims: bool | None = None) -> Value:
        rank = x.type.rank
        if axes is None:
            axes = self.axes(rank)
        if keepdims is None:
            keepdims = bool(self.rng.random() < 0.4)
        count = self.count([x.type.shape[a] for a in axes])
        kinds = [k for k in REDUCTIONS if not (k == "sum" and self.bound[x] * count > MAX_BOUND)]
        kind = str(self.rng.choice(kinds))
        # every axis, written as no axes at all, now and then
        attrs = {"axes": None if len(axes) == rank and self.rng.random() < 0.3 else axes,
                 "keepdims": keepdims}
        bound = self.bound[x] * (count if kind == "sum" else 1)
        return self.add(self.b(kind, x, **attrs), bound)

    def normalize(self, x: Value) -> Value:
        """``x`` combined with a reduction of itself broadcast back (softmax's ``x -
        max(x)``), then often reduced again over the same axes (a row fusion whose
        reductions read earlier ones: log_softmax then a sum)."""
        axes = self.axes(x.type.rank)
        r = self.reduce(x, axes, keepdims=True)
        kind = str(self.rng.choice(["sub", "add", "mul", "maximum"]))
        m = self.bound[x] + self.bound[r]
        if kind == "mul" or m > MAX_BOUND:
            kind, m = "maximum", max(self.bound[x], self.bound[r])
        y = self.add(self.b(kind, x, r), m)
        if self.rng.random() < 0.5:
            y = self.unary(y)
        if self.rng.random() < 0.6:
            y = self.reduce(y, axes)
        return y

    def movement(self, x: Value) -> Value:
        """A view or a movement of ``x``; of a symbolic value, a reshape only keeps a
        leading ``B`` (as ``-1``), a slice only cuts the axes before its first ``B``, and
        ``broadcast_to`` (static shapes only) is left out."""
        shape = x.type.shape
        rank = len(shape)
        m = self.bound[x]
        static = BATCH not in shape
        choice = self.rng.random()
        if choice < 0.3 and (static or shape[0] == BATCH and BATCH not in shape[1:]):
            return self.add(self.b("reshape", x, shape=self.reshaped(shape)), m)
        if choice < 0.5 and rank >= 2:
            perm = [int(p) for p in self.rng.permutation(rank)]
            return self.add(self.b("transpose", x, perm=perm), m)
        if choice < 0.65 and rank >= 1 and shape[0] != BATCH:
            return self.add(self.slice(x), m)
        if choice < 0.8 and rank < 4:
            axis = int(self.rng.integers(-rank - 1, rank + 1))
            return self.add(self.b("expand_dims", x, axis=axis), m)
        if choice < 0.9 and 1 in shape and rank > 1:
            ones = [a for a, d in enumerate(shape) if d == 1]
            axes = [int(a) for a in self.rng.choice(ones, int(self.rng.integers(1, len(ones)
                                                                             + 1)),
                                                     replace=False)]
            return self.add(self.b("squeeze", x, axes=sorted(axes)), m)
        if rank < 4 and static:
            big = tuple(int(self.rng.choice([2, 3])) if d == 1 and self.rng.random() < 0.7
                        else d for d in shape)
            lead = self.shape(int(self.rng.integers(0, 4 - rank + 1)))[:1]
            return self.add(self.b("broadcast_to", x, shape=lead + big), m)
        if rank >= 1:
            return self.scan_or_sort(x)
        return self.add(self.b("expand_dims", x, axis=0), m)

    def scan_or_sort(self, x: Value) -> Value:
        """A ``cumsum`` (when its bound allows) or the values of a ``sort`` (a top k of a
        static axis now and then) along a random axis, ``B`` included."""
        shape = x.type.shape
        axis = int(self.rng.integers(len(shape)))
        m, n = self.bound[x], self.size(shape[axis])
        kind = str(self.rng.choice([k for k in ALONG_AXIS
                                    if not (k == "cumsum" and m * n > MAX_BOUND)]))
        if kind == "cumsum":
            return self.add(self.b("cumsum", x, axis=axis, exclusive=bool(self.rng.random() < 0.3),
                                   reverse=bool(self.rng.random() < 0.3)), m * n)
        k = int(self.rng.integers(1, n + 1)) if shape[axis] != BATCH and \
            self.rng.random() < 0.5 else -1
        values = self.b.op("sort", x, axis=axis, descending=bool(self.rng.random() < 0.5),
                           k=k).results[0]
        return self.add(values, m)

    def reshaped(self, shape: tuple[Dim, ...]) -> list[int]:
        """A random shape with as many elements (one dim written as -1 now and then; a
        leading ``B`` stays first, as -1)."""
        if shape and shape[0] == BATCH:
            return [-1] + self.factored(math.prod(int(d) for d in shape[1:]),
                                        int(self.rng.integers(0, 4)))
        dims = self.factored(math.prod(int(d) for d in shape), int(self.rng.integers(1, 5)))
        if self.rng.random() < 0.3:
            dims[int(self.rng.integers(len(dims)))] = -1
        return dims

    def factored(self, n: int, rank: int) -> list[int]:
        """``rank`` dims whose product is ``n`` (``n`` itself, with rank 0, as ``[]``
        when ``n`` is 1; else at least one dim)."""
        if rank == 0 and n != 1:
            rank = 1
        factors = _prime_factors(n)
        self.rng.shuffle(factors)
        dims = [1] * rank
        for f in factors:
            dims[int(self.rng.integers(rank))] *= f
        return dims

    def slice(self, x: Value) -> Value:
        begin, end, strides = [], [], []
        shape = x.type.shape
        for dim in shape[:shape.index(BATCH)] if BATCH in shape else shape:
            d = int(dim)  # the dims before the batch dim are static
            lo = int(self.rng.integers(0, d))
            hi = int(self.rng.integers(lo + 1, d + 1))
            step = int(self.rng.choice([1, 1, 2])) if hi - lo > 1 else 1
            if self.rng.random() < 0.2 and d > 1:
                lo, hi, step = hi - 1, (lo - 1 if lo > 0 else -d - 1), -1
            begin.append(lo)
            end.append(hi)
            strides.append(step)
        return self.b("slice", x, begin=begin, end=end, strides=strides)

    def input(self, shape: tuple[Dim, ...]) -> Value:
        return self.add(self.graph.add_arg(TensorType(DType.f32, shape),
                                           f"x{len(self.graph.args)}"), INPUT_BOUND)

    # ---- the graph ------------------------------------------------------------------------

    def build(self) -> RandomGraph:
        if self.rng.random() < SYMBOLIC:
            self.batch = int(self.rng.integers(1, MAX_BATCH + 1))
        for k in range(int(self.rng.integers(1, 4))):
            shape: tuple[Dim, ...] = self.shape()
            if self.batch is not None and (k == 0 or self.rng.random() < 0.5):
                shape = (BATCH,) + shape[:3]
            self.input(shape)
        for _ in range(int(self.rng.integers(*self.steps))):
            x = self.pick()
            r = self.rng.random()
            if r < 0.22:
                self.unary(x)
            elif r < 0.45:
                self.binary(x)
            elif r < 0.62:
                v = self.movement(x)
                if v.op is not None and v.op.kind in VIEWS and v.type.rank and \
                        self.rng.random() < 0.4:
                    self.reduce(v)  # a view read by a reduction (fetched: issue 14 item 1)
            elif r < 0.72 and x.type.rank:
                self.normalize(x)
            elif r < 0.8:
                self.other(x)
            elif x.type.rank:
                self.reduce(x)
        made = [v for v in self.values if v.op is not None and v.op.kind != "constant"]
        fetched = [made[-1]] if made else [self.values[-1]]
        for v in made[:-1]:  # views more often: a fetched view has storage of its own
            if self.rng.random() < (0.6 if v.op is not None and v.op.kind in VIEWS else 0.25):
                fetched.append(v)
        self.rng.shuffle(fetched)
        variables: dict[str, VariableDecl] = {}
        values: dict[str, np.ndarray] = {}
        for v in made:  # assigned at the end of the step, read from their storage then
            if BATCH not in v.type.shape and self.rng.random() < 0.15:
                name = f"v{len(variables)}"
                kind = str(self.rng.choice(["var.assign", "var.assign_add"]))
                self.b.op(kind, v, var=name)
                variables[name] = VariableDecl(name, v.type)
                values[name] = self.rng.uniform(-1, 1, [int(d) for d in v.type.shape]
                                                ).astype(np.float32)
                self.update_bounds[name] = self.bound[v] + (kind == "var.assign_add")
        self.graph.set_results(fetched)
        feeds = [self.rng.uniform(-INPUT_BOUND, INPUT_BOUND,
                                  [self.batch if d == BATCH and self.batch is not None
                                   else int(d)
                                   for d in a.type.shape]).astype(np.float32)
                 for a in self.graph.args]
        return RandomGraph(Module({"f": self.graph}, variables), feeds,
                           [self.bound[v] for v in fetched], self.batch, values,
                           dict(self.update_bounds))


def _broadcasts(small: tuple, big: tuple) -> bool:
    """Whether ``small`` broadcasts to exactly ``big`` (numpy rules)."""
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])
