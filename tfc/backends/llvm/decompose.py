"""Composite ops as small graphs of primitives, lowered by the reduction kernels.

``softmax``, ``log_softmax`` and the cross-entropies are reductions along one axis with
element-wise work around them. Written as primitives (``max``, ``sub``, ``exp``,
``sum`` ...) they become one *row* kernel: per row, a max phase, a sum-of-exp phase,
then the outputs, all in registers (see ``kernels_loop``). The ``fusion`` pass performs
the same decomposition inside its regions; this covers graphs that did not go through it.

Each function returns a ``Graph`` whose arguments stand for the op's inputs and whose
results are the op's results, with the op's dtype (f16 is computed in f32 by the
kernels anyway).
"""

from __future__ import annotations

from typing import Callable

from tfc.ir.core import Graph, Op, Value
from tfc.ir.registry import make_op, normalize_axis


class _B:
    def __init__(self, op: Op) -> None:
        self.g = Graph(f"{op.kind}_decomposed")
        self.args = [self.g.add_arg(v.type) for v in op.inputs]
        self.loc = op.loc

    def __call__(self, kind: str, *inputs: Value, **attrs) -> Value:
        return self.g.append(make_op(kind, list(inputs), attrs, loc=self.loc)).result

    def done(self, *results: Value) -> Graph:
        self.g.set_results(list(results))
        return self.g


def _logsumexp(b: _B, x: Value, axis: int) -> tuple[Value, Value]:
    """(``x - max``, ``log(sum(exp(x - max)))``) with the reduced values kept as dims."""
    m = b("max", x, axes=(axis,), keepdims=True)
    shifted = b("sub", x, m)
    s = b("sum", b("exp", shifted), axes=(axis,), keepdims=True)
    return shifted, b("log", s)


def softmax(op: Op) -> Graph:
    b = _B(op)
    (x,) = b.args
    axis = normalize_axis(op.kind, op.attrs["axis"], x.type.rank)
    e = b("exp", b("sub", x, b("max", x, axes=(axis,), keepdims=True)))
    return b.done(b("div", e, b("sum", e, axes=(axis,), keepdims=True)))


def log_softmax(op: Op) -> Graph:
    b = _B(op)
    (x,) = b.args
    axis = normalize_axis(op.kind, op.attrs["axis"], x.type.rank)
    shifted, lse = _logsumexp(b, x, axis)
    return b.done(b("sub", shifted, lse))


def softmax_cross_entropy(op: Op) -> Graph:
    b = _B(op)
    x, labels = b.args
    axis = normalize_axis(op.kind, op.attrs["axis"], x.type.rank)
    shifted, lse = _logsumexp(b, x, axis)
    # -sum(labels * (shifted - lse)) = sum(labels * (lse - shifted))
    return b.done(b("sum", b("mul", labels, b("sub", lse, shifted)), axes=(axis,)))


def sparse_softmax_cross_entropy(op: Op) -> Graph:
    """``lse - x[label]``; the one-hot checks the labels' range in the op's name."""
    b = _B(op)
    x, labels = b.args
    axis = x.type.rank - 1
    classes = x.type.shape[axis]
    if not isinstance(classes, int):
        from tfc.backends.llvm.kernels_scalar import Unsupported
        raise Unsupported("a symbolic number of classes")
    shifted, lse = _logsumexp(b, x, axis)
    hot = b("one_hot", labels, depth=classes, dtype=x.dtype, labels_of=op.kind)
    picked = b("sum", b("mul", shifted, hot), axes=(axis,), keepdims=True)
    return b.done(b("squeeze", b("sub", lse, picked), axes=(axis,)))


DECOMPOSE: dict[str, Callable[[Op], Graph]] = {
    "softmax": softmax,
    "log_softmax": log_softmax,
    "softmax_cross_entropy": softmax_cross_entropy,
    "sparse_softmax_cross_entropy": sparse_softmax_cross_entropy,
}
