"""Neural-network ops: softmax and losses, bias_add, 2-D convolution and pooling.

Layouts are TensorFlow's: images NHWC, convolution filters HWIO, and TensorFlow's
exact SAME padding (``pad_total = max((ceil(in/stride) - 1) * stride + k - in, 0)``,
the odd pixel at the end), so models and checkpoints port without surprises.
Softmax-like ops subtract the maximum first, so logits of 1000 stay finite. Half
precision is computed in f32 and rounded once.

The references are vectorized numpy: convolution is im2col (a strided window view)
followed by one matrix product; pooling reduces a strided window view. No Python
loop runs over pixels.

Gradient rules (reverse mode) sit beside each op. Softmax, the losses and bias_add
differentiate into element-wise ops and reductions; conv2d and pooling into the linear
backprop ops of ``tfc.ops.nn_grad`` (``conv2d_backprop_input``/``_filter``,
``max_pool_grad``, ``avg_pool_grad``), which have gradients of their own, so every op
here can be differentiated twice.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import (COMPOSITE, ELEMENTWISE, FLOAT, INT, NUMERIC, PURE, AttrSpec, Cost,
                             OpDef, expect_dtype, normalize_axis, register, same_dtype)
from tfc.ir.types import Dim, DType, TensorType, dims_compatible, shapes_compatible
from tfc.ops.array import check_labels
from tfc.ops.linalg import compute_dtype, dim_size, merge_dims

PURE_ONLY = frozenset({PURE})
PURE_COMPOSITE = frozenset({PURE, COMPOSITE})
AXIS_ATTR = {"axis": AttrSpec("int", -1, "the class axis")}


def merge_shapes(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...]:
    return tuple(merge_dims(x, y) for x, y in zip(a, b))


def moved_bytes(inputs: Sequence[TensorType], outputs: Sequence[TensorType],
                symbol_size: int) -> int:
    return sum(t.nbytes(symbol_size) for t in (*inputs, *outputs))


def elements(t: TensorType, symbol_size: int) -> int:
    return t.nbytes(symbol_size) // t.dtype.itemsize


# ---- expansions into primitives (``expand``; see ``tfc.ir.expand``) --------------------
# They compute as the references do: half precision in f32 (cast in, rounded once on the
# way out) and the max subtracted before ``exp``, so an expanded op gives the same numbers.

def scalar(b: Any, value: Any, dtype: DType) -> Any:
    """A rank-0 constant of ``dtype``."""
    return b("constant", value=np.asarray(value, dtype=dtype.np))


def widen(b: Any, x: Any) -> Any:
    """Half precision computes in f32, as the references do."""
    return b("cast", x, dtype=DType.f32) if x.dtype == DType.f16 else x


def narrow(b: Any, y: Any, dtype: DType) -> Any:
    return b("cast", y, dtype=dtype) if y.dtype != dtype else y


def shifted_by_max(b: Any, x: Any, axis: int) -> Any:
    """``x - max(x)`` along ``axis``: what keeps ``exp`` from overflowing."""
    return b("sub", x, b("max", x, axes=(axis,), keepdims=True))


def aligned(b: Any, x: Any, shape: Sequence[Dim]) -> Any:
    """``x`` reshaped to ``shape``, the merged shape of an op's operands, where they differ
    only as a symbolic dim against a static one (logits ``[B, C]`` with labels ``[5]``).
    An expansion then reduces one shape: the llvm backend lowers the reductions of one
    kernel over one iteration space and would otherwise send the graph to the reference
    backend. The reshape checks the sizes at run time, as the op does. ``x`` is returned
    as it is when the shapes agree or more than one dim of ``shape`` is unknown."""
    if tuple(x.type.shape) == tuple(shape):
        return x
    unknown = [d for d in shape if not isinstance(d, int)]
    if len(unknown) > 1:
        return x
    return b("reshape", x, shape=tuple(d if isinstance(d, int) else -1 for d in shape))


def expand_log_softmax(b: Any, x: Any, axis: int) -> Any:
    s = shifted_by_max(b, x, axis)
    return b("sub", s, b("log", b("sum", b("exp", s), axes=(axis,), keepdims=True)))


def expand_softmax(b: Any, x: Any, axis: int) -> Any:
    ex = b("exp", shifted_by_max(b, x, axis))
    return b("div", ex, b("sum", ex, axes=(axis,), keepdims=True))


# ---- softmax family -------------------------------------------------------------------

def log_softmax_np(x: np.ndarray, axis: int) -> np.ndarray:
    """``x - logsumexp(x)`` along ``axis``, shifted by the max so that nothing overflows."""
    shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax_np(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True, initial=-np.inf))
    return e / np.sum(e, axis=axis, keepdims=True)


class SoftmaxLike(OpDef):
    """``softmax`` / ``log_softmax`` along ``axis``: same type in and out."""

    num_inputs = 1
    traits = PURE_COMPOSITE
    attrs = AXIS_ATTR
    flops_per_element = 15.0  # max, subtract, exp, sum, divide (or log)

    def __init__(self, name: str, fn: Any, summary: str, grad: Any, expansion: Any) -> None:
        self.name, self.fn, self.summary, self.grad = name, fn, summary, grad
        self.expansion = expansion

    def expand(self, b: Any, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[Any]:
        x = inputs[0]
        axis = normalize_axis(self.name, attrs["axis"], x.type.rank)
        return [narrow(b, self.expansion(b, widen(b, x), axis), x.dtype)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        axis = normalize_axis(self.name, op.attrs["axis"], op.result.type.rank)
        return [self.grad(b, op.result, grads[0], axis)]

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        expect_dtype(self.name, x, FLOAT)
        if x.rank == 0:
            raise TypeMismatch(f"{self.name}: input {x} must have rank >= 1")
        normalize_axis(self.name, attrs["axis"], x.rank)
        return [x]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axis = normalize_axis(self.name, attrs["axis"], x.ndim)
        out = self.fn(x.astype(compute_dtype(x.dtype), copy=False), axis)
        return [out.astype(x.dtype, copy=False)]


def softmax_grad(b: Any, y: Any, dy: Any, axis: int) -> Any:
    """``y = softmax(x)``: ``dx = (dy - sum(dy * y)) * y``, the sum along ``axis``."""
    dot = b("sum", b("mul", dy, y), axes=(axis,), keepdims=True)
    return b("mul", b("sub", dy, dot), y)


def log_softmax_grad(b: Any, y: Any, dy: Any, axis: int) -> Any:
    """``y = log_softmax(x)``: ``dx = dy - exp(y) * sum(dy)``, the sum along ``axis``."""
    total = b("sum", dy, axes=(axis,), keepdims=True)
    return b("sub", dy, b("mul", b("exp", y), total))


register(SoftmaxLike("softmax", softmax_np, "exp(x) / sum(exp(x)) along axis", softmax_grad,
                     expand_softmax))
register(SoftmaxLike("log_softmax", log_softmax_np, "x - log(sum(exp(x))) along axis",
                     log_softmax_grad, expand_log_softmax))


def logits_labels_type(op: str, inputs: Sequence[TensorType]) -> TensorType:
    """The common type of float ``logits`` and ``labels`` of one dtype and shape."""
    logits, labels = inputs
    dtype = same_dtype(op, inputs)
    expect_dtype(op, logits, FLOAT, "logits")
    if not shapes_compatible(logits.shape, labels.shape):
        raise TypeMismatch(f"{op}: logits {logits} and labels {labels} must have the same shape")
    return TensorType(dtype, merge_shapes(logits.shape, labels.shape))


def expect_logits_labels(op: str, logits: np.ndarray, labels: np.ndarray) -> None:
    if logits.shape != labels.shape:
        raise ExecutionError(f"{op}: logits of shape {list(logits.shape)} and labels of "
                             f"shape {list(labels.shape)} differ")


class XentCost(OpDef):
    """Cost of the losses: about 16 flops per logit."""

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        return Cost(16.0 * elements(inputs[0], symbol_size),
                    moved_bytes(inputs, outputs, symbol_size))


@register
class SoftmaxCrossEntropy(XentCost):
    """``-sum(labels * log_softmax(logits))`` along ``axis``; labels are probabilities.

    Logits and labels have the same shape and dtype; the result drops the class axis.
    """

    name = "softmax_cross_entropy"
    num_inputs = 2
    traits = PURE_COMPOSITE
    attrs = AXIS_ATTR

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        logits, _ = inputs
        if logits.rank == 0:
            raise TypeMismatch(f"{self.name}: logits {logits} must have rank >= 1")
        t = logits_labels_type(self.name, inputs)
        axis = normalize_axis(self.name, attrs["axis"], logits.rank)
        return [t.with_shape(t.shape[:axis] + t.shape[axis + 1:])]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        logits, labels = inputs
        expect_logits_labels(self.name, logits, labels)
        axis = normalize_axis(self.name, attrs["axis"], logits.ndim)
        acc = compute_dtype(logits.dtype)
        logp = log_softmax_np(logits.astype(acc, copy=False), axis)
        loss = -np.sum(labels.astype(acc, copy=False) * logp, axis=axis)
        return [np.asarray(loss, dtype=logits.dtype)]

    def expand(self, b: Any, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[Any]:
        logits, labels = inputs
        axis = normalize_axis(self.name, attrs["axis"], logits.type.rank)
        shape = merge_shapes(logits.type.shape, labels.type.shape)
        logits, labels = aligned(b, logits, shape), aligned(b, labels, shape)
        logp = expand_log_softmax(b, widen(b, logits), axis)
        loss = b("neg", b("sum", b("mul", widen(b, labels), logp), axes=(axis,)))
        return [narrow(b, loss, logits.dtype)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Both inputs get a gradient, as in TensorFlow: labels ``-log_softmax * dy``,
        logits ``(softmax * sum(labels) - labels) * dy``. TensorFlow drops the
        ``sum(labels)`` factor (1 for probability labels); keeping it makes the rule exact
        for any labels (and the second derivative w.r.t. labels right)."""
        logits, labels = op.inputs
        axis = normalize_axis(self.name, op.attrs["axis"], logits.type.rank)
        dy = b("expand_dims", grads[0], axis=axis)
        mass = b("sum", labels, axes=(axis,), keepdims=True)
        probs = b("softmax", logits, axis=axis)
        d_logits = b("mul", b("sub", b("mul", probs, mass), labels), dy)
        d_labels = b("mul", b("neg", b("log_softmax", logits, axis=axis)), dy)
        return [d_logits, d_labels]


@register
class SparseSoftmaxCrossEntropy(XentCost):
    """``-log_softmax(logits)[..., label]``: logits ``[..., C]``, integer labels ``[...]``.

    A label outside ``[0, C)`` is a run-time error (TensorFlow's CPU behaviour), never a
    silent NaN.
    """

    name = "sparse_softmax_cross_entropy"
    num_inputs = 2
    traits = PURE_COMPOSITE

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        logits, labels = inputs
        expect_dtype(self.name, logits, FLOAT, "logits")
        expect_dtype(self.name, labels, INT, "labels")
        if logits.rank == 0:
            raise TypeMismatch(f"{self.name}: logits {logits} must have rank >= 1 ([..., C])")
        if not shapes_compatible(logits.shape[:-1], labels.shape):
            raise TypeMismatch(
                f"{self.name}: labels {labels} must have the shape of logits {logits} "
                f"without its class axis, [{','.join(str(d) for d in logits.shape[:-1])}]")
        return [TensorType(logits.dtype, merge_shapes(logits.shape[:-1], labels.shape))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        logits, labels = inputs
        if logits.shape[:-1] != labels.shape:
            raise ExecutionError(f"{self.name}: labels of shape {list(labels.shape)} do not "
                                 f"match logits of shape {list(logits.shape)}")
        check_labels(self.name, labels, logits.shape[-1])
        logp = log_softmax_np(logits.astype(compute_dtype(logits.dtype), copy=False), -1)
        picked = np.take_along_axis(logp, labels[..., None].astype(np.intp), axis=-1)
        return [np.asarray(-picked[..., 0], dtype=logits.dtype)]

    def expand(self, b: Any, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[Any]:
        """The label is picked with ``one_hot`` and ``where`` (not a product with the
        one-hot: ``-inf * 0`` is NaN); the one-hot checks the labels in this op's name
        (``labels_of``), so a label out of range raises this op's error."""
        logits, labels = inputs
        classes, axis = logits.type.shape[-1], logits.type.rank - 1
        if not isinstance(classes, int):
            raise TypeMismatch(f"{self.name}: the expansion needs a static number of "
                               f"classes, but logits are {logits.type}")
        rows = merge_shapes(logits.type.shape[:-1], labels.type.shape)
        logits, labels = aligned(b, logits, (*rows, classes)), aligned(b, labels, rows)
        logp = expand_log_softmax(b, widen(b, logits), axis)
        hot = b("one_hot", labels, depth=classes, dtype=DType.bool, labels_of=self.name)
        picked = b("sum", b("where", hot, logp, scalar(b, 0, logp.dtype)), axes=(axis,))
        return [narrow(b, b("neg", picked), logits.dtype)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Logits: ``(softmax - one_hot(labels)) * dy``; integer labels get None. The
        one-hot needs the class count, so it must be a static dim. It checks the labels
        as the op does (``labels_of``): a gradient fetched without the loss must not
        train on a label that does not exist."""
        logits, labels = op.inputs
        classes = logits.type.shape[-1]
        if not isinstance(classes, int):
            raise TypeMismatch(f"{self.name}: the gradient needs a static number of classes, "
                               f"but logits are {logits.type}")
        hot = b("one_hot", labels, depth=classes, dtype=logits.dtype, labels_of=self.name)
        dy = b("expand_dims", grads[0], axis=-1)
        return [b("mul", b("sub", b("softmax", logits, axis=-1), hot), dy), None]


@register
class SigmoidCrossEntropy(OpDef):
    """Element-wise logistic loss ``-z log(sigmoid(x)) - (1-z) log(1 - sigmoid(x))``,
    computed as ``max(x, 0) - x z + log(1 + exp(-|x|))``, which never overflows."""

    name = "sigmoid_cross_entropy"
    num_inputs = 2
    traits = frozenset({PURE, ELEMENTWISE, COMPOSITE})
    flops_per_element = 16.0

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        return [logits_labels_type(self.name, inputs)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, z = inputs
        expect_logits_labels(self.name, x, z)
        acc = compute_dtype(x.dtype)
        x, z = x.astype(acc, copy=False), z.astype(acc, copy=False)
        out = np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))
        return [np.asarray(out, dtype=inputs[0].dtype)]

    def expand(self, b: Any, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[Any]:
        """The reference's terms in its order; ``log1p(u)`` is ``log(w) * u / (w - 1)``
        with ``w = 1 + u`` (Goldberg), or ``u`` where ``w`` rounds to 1: a few ulps, with
        no ``log1p`` primitive."""
        x, z = widen(b, inputs[0]), widen(b, inputs[1])
        zero, one = scalar(b, 0, x.dtype), scalar(b, 1, x.dtype)
        a = b("sub", b("maximum", x, zero), b("mul", x, z))
        u = b("exp", b("neg", b("abs", x)))
        w = b("add", one, u)
        exact = b("equal", w, one)
        ratio = b("div", b("mul", b("log", w), u), b("where", exact, one, b("sub", w, one)))
        return [narrow(b, b("add", a, b("where", exact, u, ratio)), inputs[0].dtype)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Logits ``(sigmoid(x) - z) * dy``, labels ``-x * dy`` (both, as TensorFlow)."""
        x, z = op.inputs
        (dy,) = grads
        return [b("mul", b("sub", b("sigmoid", x), z), dy), b("neg", b("mul", x, dy))]


# ---- bias_add -------------------------------------------------------------------------

DATA_FORMATS = ("NHWC", "NCHW")


@register
class BiasAdd(OpDef):
    """``x + bias`` along the channel axis: the last for NHWC (any rank >= 1), axis 1 for
    NCHW (rank >= 2). NHWC also covers ``[B, C]`` activations of dense layers."""

    name = "bias_add"
    num_inputs = 2
    traits = PURE_COMPOSITE
    attrs = {"data_format": AttrSpec("str", "NHWC",
                                     "NHWC: channels last; NCHW: channels on axis 1")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x, bias = inputs
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, x, NUMERIC)
        fmt = attrs["data_format"]
        if fmt not in DATA_FORMATS:
            raise TypeMismatch(f"{self.name}: data_format must be 'NHWC' or 'NCHW', got {fmt!r}")
        if bias.rank != 1:
            raise TypeMismatch(f"{self.name}: bias {bias} must have rank 1")
        min_rank = 1 if fmt == "NHWC" else 2
        if x.rank < min_rank:
            raise TypeMismatch(f"{self.name}: input {x} must have rank >= {min_rank} ({fmt})")
        axis = x.rank - 1 if fmt == "NHWC" else 1
        c = x.shape[axis]
        if not dims_compatible(c, bias.shape[0]):
            raise TypeMismatch(f"{self.name}: bias {bias} has {bias.shape[0]} elements but "
                               f"input {x} has {c} channels ({fmt})")
        shape = list(x.shape)
        shape[axis] = merge_dims(c, bias.shape[0])
        return [TensorType(dtype, tuple(shape))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, bias = inputs
        axis = x.ndim - 1 if attrs["data_format"] == "NHWC" else 1
        if x.shape[axis] != bias.shape[0]:
            raise ExecutionError(f"{self.name}: bias of {bias.shape[0]} elements for "
                                 f"{x.shape[axis]} channels")
        b = bias.reshape((-1,) + (1,) * (x.ndim - 1 - axis))
        return [np.asarray(x + b, dtype=x.dtype)]

    def expand(self, b: Any, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[Any]:
        """An ``add`` of the bias, given trailing size-1 dims for NCHW."""
        x, bias = inputs
        if attrs["data_format"] == "NCHW":
            for _ in range(x.type.rank - 2):
                bias = b("expand_dims", bias, axis=-1)
        return [b("add", x, bias)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """``dy`` for the input; for the bias, ``dy`` summed over every axis but the
        channel axis (TensorFlow's BiasAddGrad)."""
        x, bias = op.inputs
        (dy,) = grads
        rank = x.type.rank
        channel = rank - 1 if op.attrs["data_format"] == "NHWC" else 1
        d_bias = b("sum", dy, axes=tuple(a for a in range(rank) if a != channel))
        if d_bias.type.shape != bias.type.shape:  # e.g. a symbol where the bias is static
            d_bias = b("reshape_like", d_bias, bias)
        return [dy, d_bias]


# ---- windows: shared by conv2d and pooling --------------------------------------------

PADDINGS = ("SAME", "VALID")


def spatial_attr(op: str, name: str, v: Sequence[int]) -> tuple[int, int]:
    """(h, w) from 2 ints, or from 4 ints NHWC-style ``[1, h, w, 1]`` as TensorFlow takes."""
    if len(v) == 4:
        if v[0] != 1 or v[3] != 1:
            raise TypeMismatch(f"{op}: {name}={list(v)} must be 1 in the batch and channel "
                               f"dims (only spatial {name} are supported)")
        v = v[1:3]
    if len(v) != 2:
        raise TypeMismatch(f"{op}: {name}={list(v)} must have 2 ints [h, w] (or 4, NHWC)")
    if any(x < 1 for x in v):
        raise TypeMismatch(f"{op}: {name}={list(v)} must be positive")
    return int(v[0]), int(v[1])


def check_padding(op: str, padding: str) -> None:
    if padding not in PADDINGS:
        raise TypeMismatch(f"{op}: padding must be 'SAME' or 'VALID', got {padding!r}")


def window_out_dim(op: str, x: TensorType, axis: int, k: Dim, stride: int, dilation: int,
                   padding: str, what: str) -> Dim:
    """Output size along one spatial axis (TensorFlow rules); ``?`` where unknowable."""
    n = x.shape[axis]
    eff = (k - 1) * dilation + 1 if isinstance(k, int) else None
    if padding == "SAME":
        if isinstance(n, int):
            return -(-n // stride)
        return n if stride == 1 else "?"
    if isinstance(n, int) and eff is not None:
        if n < eff:
            side = "height" if axis == 1 else "width"
            dil = f" (size {k} with dilation {dilation})" if dilation != 1 else ""
            raise TypeMismatch(f"{op}: {what} of {eff}{dil} is larger than the input "
                               f"{side} {n} of {x} with VALID padding")
        return (n - eff) // stride + 1
    return n if eff == 1 and stride == 1 else "?"


def window_padding(op: str, n: int, k: int, stride: int, dilation: int,
                   padding: str) -> tuple[int, int, int]:
    """(output size, pad before, pad after) along one axis; SAME pads more at the end."""
    eff = (k - 1) * dilation + 1
    if padding == "VALID":
        if n < eff:
            raise ExecutionError(f"{op}: window of {eff} is larger than the input size {n} "
                                 f"with VALID padding")
        return (n - eff) // stride + 1, 0, 0
    out = -(-n // stride)
    total = max((out - 1) * stride + eff - n, 0)
    return out, total // 2, total - total // 2


def windows(xp: np.ndarray, eff: tuple[int, int], stride: tuple[int, int],
            dilation: tuple[int, int], out: tuple[int, int]) -> np.ndarray:
    """A strided view ``[N, Ho, Wo, C, kh, kw]`` of the windows of padded NHWC ``xp``."""
    v = sliding_window_view(xp, eff, axis=(1, 2))
    v = v[:, ::stride[0], ::stride[1], :, ::dilation[0], ::dilation[1]]
    return v[:, :out[0], :out[1]]


# ---- conv2d ---------------------------------------------------------------------------

@register
class Conv2D(OpDef):
    """2-D convolution (cross-correlation, as in TensorFlow): input NHWC, filter HWIO."""

    name = "conv2d"
    num_inputs = 2
    traits = PURE_ONLY
    attrs = {
        "strides": AttrSpec("ints", (1, 1), "[sh, sw], or [1, sh, sw, 1] as TensorFlow"),
        "padding": AttrSpec("str", "VALID", "SAME (output ceil(in/stride)) or VALID"),
        "dilations": AttrSpec("ints", (1, 1), "[dh, dw], or [1, dh, dw, 1]"),
    }

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x, w = inputs
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, x, FLOAT)
        if x.rank != 4:
            raise TypeMismatch(f"{self.name}: input {x} must have rank 4 (NHWC)")
        if w.rank != 4:
            raise TypeMismatch(f"{self.name}: filter {w} must have rank 4 "
                               f"(height, width, in channels, out channels)")
        strides = spatial_attr(self.name, "strides", attrs["strides"])
        dilations = spatial_attr(self.name, "dilations", attrs["dilations"])
        check_padding(self.name, attrs["padding"])
        if not dims_compatible(x.shape[3], w.shape[2]):
            raise TypeMismatch(f"{self.name}: input {x} has {x.shape[3]} channels but "
                               f"filter {w} expects {w.shape[2]}")
        hw = [window_out_dim(self.name, x, 1 + i, w.shape[i], strides[i], dilations[i],
                             attrs["padding"], "filter") for i in range(2)]
        return [TensorType(dtype, (x.shape[0], *hw, w.shape[3]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, w = inputs
        strides = spatial_attr(self.name, "strides", attrs["strides"])
        dil = spatial_attr(self.name, "dilations", attrs["dilations"])
        n, _, _, c = x.shape
        kh, kw, ci, co = w.shape
        if c != ci:
            raise ExecutionError(f"{self.name}: input has {c} channels, filter expects {ci}")
        geo = [window_padding(self.name, x.shape[1 + i], w.shape[i], strides[i], dil[i],
                              attrs["padding"]) for i in range(2)]
        (ho, ph0, ph1), (wo, pw0, pw1) = geo
        if ho == 0 or wo == 0:  # SAME on an empty image
            return [np.zeros((n, ho, wo, co), dtype=x.dtype)]
        acc = compute_dtype(x.dtype)
        xp = np.pad(x.astype(acc, copy=False), ((0, 0), (ph0, ph1), (pw0, pw1), (0, 0)))
        eff = ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1)
        win = windows(xp, eff, strides, dil, (ho, wo))  # [N, Ho, Wo, C, kh, kw]
        # im2col: one row per output pixel, columns in the filter's (kh, kw, C) order.
        cols = win.transpose(0, 1, 2, 4, 5, 3).reshape(n * ho * wo, kh * kw * c)
        out = cols @ w.astype(acc, copy=False).reshape(kh * kw * ci, co)
        return [out.reshape(n, ho, wo, co).astype(x.dtype, copy=False)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """The two backprop ops (``tfc.ops.nn_grad``), with this op's window attrs; each
        takes the shape to produce from a ``like`` input, so a symbolic batch works."""
        x, w = op.inputs
        (dy,) = grads
        win = {k: op.attrs[k] for k in ("strides", "padding", "dilations")}
        return [b("conv2d_backprop_input", w, dy, x, **win),
                b("conv2d_backprop_filter", x, dy, w, **win)]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        w, out = inputs[1], outputs[0]
        count = 2.0
        for d in (*out.shape, *w.shape[:3]):  # N Ho Wo Co, Kh Kw Ci
            count *= dim_size(d, symbol_size)
        return Cost(count, moved_bytes(inputs, outputs, symbol_size))


# ---- pooling --------------------------------------------------------------------------

POOL_ATTRS = {
    "ksize": AttrSpec("ints", doc="window [kh, kw] (or [1, kh, kw, 1])"),
    "strides": AttrSpec("ints", None, "[sh, sw] (or [1, sh, sw, 1]); none means ksize"),
    "padding": AttrSpec("str", "VALID", "SAME or VALID"),
}


class Pool(OpDef):
    """Max or average over ``ksize`` windows of an NHWC input, channel by channel."""

    num_inputs = 1
    traits = PURE_ONLY
    attrs = POOL_ATTRS

    def __init__(self, name: str, dtypes: frozenset, summary: str) -> None:
        self.name, self.dtypes, self.summary = name, dtypes, summary

    def window(self, attrs: Mapping[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
        k = spatial_attr(self.name, "ksize", attrs["ksize"])
        s = k if attrs["strides"] is None else spatial_attr(self.name, "strides",
                                                            attrs["strides"])
        return k, s

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        expect_dtype(self.name, x, self.dtypes)
        if x.rank != 4:
            raise TypeMismatch(f"{self.name}: input {x} must have rank 4 (NHWC)")
        k, s = self.window(attrs)
        check_padding(self.name, attrs["padding"])
        hw = [window_out_dim(self.name, x, 1 + i, k[i], s[i], 1, attrs["padding"], "window")
              for i in range(2)]
        return [x.with_shape((x.shape[0], *hw, x.shape[3]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        k, s = self.window(attrs)
        geo = [window_padding(self.name, x.shape[1 + i], k[i], s[i], 1, attrs["padding"])
               for i in range(2)]
        (ho, ph0, ph1), (wo, pw0, pw1) = geo
        if ho == 0 or wo == 0:  # SAME on an empty image
            return [np.zeros((x.shape[0], ho, wo, x.shape[3]), dtype=x.dtype)]
        pads = ((0, 0), (ph0, ph1), (pw0, pw1), (0, 0))
        out = self.pool(x, pads, k, s, (ho, wo))
        return [np.asarray(out, dtype=x.dtype)]

    def pool(self, x: np.ndarray, pads: tuple, k: tuple[int, int], s: tuple[int, int],
             out: tuple[int, int]) -> np.ndarray:
        raise NotImplementedError

    def window_attrs(self, op: Any) -> dict[str, Any]:
        return {k: op.attrs[k] for k in ("ksize", "strides", "padding")}

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        k, _ = self.window(attrs)
        return Cost(float(elements(outputs[0], symbol_size) * k[0] * k[1]),
                    moved_bytes(inputs, outputs, symbol_size))


class MaxPool(Pool):
    """Padding never wins: SAME pads with the lowest value (-inf for floats).

    Gradient: each window's gradient goes to its maximum, the first one on ties
    (``max_pool_grad``)."""

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        return [b("max_pool_grad", op.inputs[0], op.result, grads[0], **self.window_attrs(op))]

    def pool(self, x: np.ndarray, pads: tuple, k: tuple[int, int], s: tuple[int, int],
             out: tuple[int, int]) -> np.ndarray:
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        xp = np.pad(x, pads, constant_values=low)
        return np.max(windows(xp, k, s, (1, 1), out), axis=(-2, -1))


class AvgPool(Pool):
    """SAME divides each window's sum by its count of real (non-padding) elements.

    Gradient: each window's gradient, divided by that count, spread over the window
    (``avg_pool_grad``)."""

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        return [b("avg_pool_grad", grads[0], op.inputs[0], **self.window_attrs(op))]

    def pool(self, x: np.ndarray, pads: tuple, k: tuple[int, int], s: tuple[int, int],
             out: tuple[int, int]) -> np.ndarray:
        acc = compute_dtype(x.dtype)
        xp = np.pad(x.astype(acc, copy=False), pads)
        sums = np.sum(windows(xp, k, s, (1, 1), out), axis=(-2, -1))
        return sums / window_counts(x.shape[1:3], pads, k, s, out, acc)


def window_counts(hw: Sequence[int], pads: tuple, k: tuple[int, int], s: tuple[int, int],
                  out: tuple[int, int], dtype: Any) -> np.ndarray:
    """``[1, Ho, Wo, 1]``: how many real (non-padding) elements each window covers."""
    ones = np.pad(np.ones((1, *hw, 1), dtype=dtype), pads)
    return np.sum(windows(ones, k, s, (1, 1), out), axis=(-2, -1))


register(MaxPool("max_pool", NUMERIC, "max over each window (NHWC)"))
register(AvgPool("avg_pool", FLOAT, "mean over each window's real elements (NHWC)"))
