"""Ops that gradients of convolution and pooling need (TensorFlow's backprop kernels).

``conv2d_backprop_input`` and ``conv2d_backprop_filter`` are the transposes of
``conv2d`` as a linear map of its input and of its filter; ``avg_pool_grad`` is the
transpose of ``avg_pool``; ``max_pool_grad`` routes each window's gradient to the
window's maximum and ``max_pool_grad_grad`` reads it back from there (the transpose of
``max_pool_grad`` in its gradient input). Being linear, each op's gradient is another
op of this family or the forward op itself, so networks built from them can be
differentiated twice (Hessian-vector products, gradient penalties).

The shape a backprop op produces is taken from a ``like`` input (the forward op's input
or filter, whose values are never read), not from a static attr, so a symbolic batch
``B`` flows through: the same approach as ``broadcast_like`` in ``tfc.ops.like``.

The references are vectorized: the input gradients are col2im, a loop over the
``kh * kw`` filter taps (never over pixels) adding each tap's contributions to a
strided slice of the padded image; the filter gradient is im2col followed by one matrix
product; max pooling scatters through ``np.bincount`` on the flat index of each
window's first maximum.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import FLOAT, PURE, AttrSpec, Cost, OpDef, expect_dtype, register, same_dtype
from tfc.ir.types import Dim, TensorType, dims_compatible
from tfc.ops.linalg import compute_dtype, dim_size
from tfc.ops.nn import (POOL_ATTRS, check_padding, elements, merge_shapes, spatial_attr,
                        window_counts, window_out_dim, window_padding, windows)

PURE_ONLY = frozenset({PURE})
CONV_ATTRS = {
    "strides": AttrSpec("ints", (1, 1), "the forward conv2d's strides"),
    "padding": AttrSpec("str", "VALID", "the forward conv2d's padding"),
    "dilations": AttrSpec("ints", (1, 1), "the forward conv2d's dilations"),
}

Geometry = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]  # out, pad before, after


# ---- shared shape checks and numpy helpers --------------------------------------------

def expect_rank4(op: str, t: TensorType, what: str) -> None:
    if t.rank != 4:
        raise TypeMismatch(f"{op}: {what} {t} must have rank 4")


def check_window_output(op: str, image: TensorType, out: TensorType, k: Sequence[Dim],
                        strides: tuple[int, int], dilations: tuple[int, int], padding: str,
                        what: str) -> tuple[Dim, Dim]:
    """Check that ``out``'s batch and spatial dims are those of a window op over ``image``
    (its channels are checked by the caller); the output's (H, W)."""
    hw = tuple(window_out_dim(op, image, 1 + i, k[i], strides[i], dilations[i], padding,
                              "window") for i in range(2))
    if not (dims_compatible(image.shape[0], out.shape[0])
            and all(dims_compatible(a, b) for a, b in zip(hw, out.shape[1:3]))):
        shown = f"[{image.shape[0]},{hw[0]},{hw[1]},...]"
        raise TypeMismatch(f"{op}: {what} {out} does not match the output {shown} of the "
                           f"window op over {image}")
    return hw  # type: ignore[return-value]


def geometry(op: str, hw: Sequence[int], k: Sequence[int], strides: tuple[int, int],
             dilations: tuple[int, int], padding: str) -> Geometry:
    """((Ho, Wo), (top, left), (bottom, right)) of a window op over an ``hw`` image."""
    (ho, t, b), (wo, l, r) = (window_padding(op, hw[i], k[i], strides[i], dilations[i],
                                             padding) for i in range(2))
    return (ho, wo), (t, l), (b, r)


def expect_shape(op: str, what: str, x: np.ndarray, shape: Sequence[int]) -> None:
    if tuple(x.shape) != tuple(shape):
        raise ExecutionError(f"{op}: {what} has shape {list(x.shape)}, expected "
                             f"{list(shape)}")


def col2im(cols: np.ndarray, padded_hw: tuple[int, int], strides: tuple[int, int],
           dilations: tuple[int, int]) -> np.ndarray:
    """The transpose of im2col: ``cols [N, Ho, Wo, kh, kw, C]`` (a broadcast view is fine)
    summed into a zero padded image ``[N, Hp, Wp, C]``. One strided-slice add per filter
    tap: within a tap the output pixels hit distinct positions, so ``+=`` is exact."""
    n, ho, wo, kh, kw, c = cols.shape
    out = np.zeros((n, *padded_hw, c), dtype=cols.dtype)
    (sh, sw), (dh, dw) = strides, dilations
    for a in range(kh):
        for b in range(kw):
            r0, c0 = a * dh, b * dw
            out[:, r0:r0 + (ho - 1) * sh + 1:sh, c0:c0 + (wo - 1) * sw + 1:sw, :] += \
                cols[:, :, :, a, b, :]
    return out


def crop(xp: np.ndarray, before: tuple[int, int], hw: Sequence[int]) -> np.ndarray:
    return xp[:, before[0]:before[0] + hw[0], before[1]:before[1] + hw[1], :]


def pads_of(before: tuple[int, int], after: tuple[int, int]) -> tuple:
    return ((0, 0), (before[0], after[0]), (before[1], after[1]), (0, 0))


# ---- convolution ------------------------------------------------------------------------

class ConvBackprop(OpDef):
    """Shared attrs, window arithmetic and cost of the two conv2d backprop ops."""

    num_inputs = 3
    traits = PURE_ONLY
    attrs = CONV_ATTRS

    def window(self, attrs: Mapping[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
        check_padding(self.name, attrs["padding"])
        return (spatial_attr(self.name, "strides", attrs["strides"]),
                spatial_attr(self.name, "dilations", attrs["dilations"]))

    def check_operands(self, x: TensorType, w: TensorType, dy: TensorType,
                       attrs: Mapping[str, Any]) -> None:
        """The forward input ``x``, filter ``w`` and output gradient ``dy`` (rank 4 each)
        must agree in channels and in the window arithmetic of the forward conv2d."""
        strides, dil = self.window(attrs)
        if not dims_compatible(x.shape[3], w.shape[2]):
            raise TypeMismatch(f"{self.name}: input {x} has {x.shape[3]} channels but "
                               f"filter {w} expects {w.shape[2]}")
        if not dims_compatible(dy.shape[3], w.shape[3]):
            raise TypeMismatch(f"{self.name}: gradient {dy} has {dy.shape[3]} channels but "
                               f"filter {w} makes {w.shape[3]}")
        check_window_output(self.name, x, dy, w.shape[:2], strides, dil, attrs["padding"],
                            "gradient")

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        """As many flops as the forward conv2d; the ``like`` input is not read."""
        dy, filt = inputs[1], self.filter_type(inputs, outputs)
        count = 2.0
        for d in (*dy.shape, *filt.shape[:3]):  # N Ho Wo Co, Kh Kw Ci
            count *= dim_size(d, symbol_size)
        moved = sum(t.nbytes(symbol_size) for t in (*inputs[:2], *outputs))
        return Cost(count, moved)

    def filter_type(self, inputs: Sequence[TensorType],
                    outputs: Sequence[TensorType]) -> TensorType:
        raise NotImplementedError


@register
class Conv2DBackpropInput(ConvBackprop):
    """The gradient of ``conv2d`` w.r.t. its input: ``(filter, dy, like)`` -> ``like``'s
    shape, where ``like`` is the forward input (only its shape is read). A transposed
    convolution; the attrs are the forward op's."""

    name = "conv2d_backprop_input"

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        w, dy, like = inputs
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, w, FLOAT)
        for t, what in ((w, "filter"), (dy, "gradient"), (like, "like input")):
            expect_rank4(self.name, t, what)
        self.check_operands(like, w, dy, attrs)
        shape = (*like.shape[:3], merge_shapes(like.shape[3:], w.shape[2:3])[0])
        return [TensorType(dtype, shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        w, dy, like = inputs
        strides, dil = self.window(attrs)
        n, h, wd, c = like.shape
        kh, kw, ci, co = w.shape
        if c != ci:
            raise ExecutionError(f"{self.name}: input has {c} channels, filter expects {ci}")
        (ho, wo), before, after = geometry(self.name, (h, wd), (kh, kw), strides, dil,
                                           attrs["padding"])
        expect_shape(self.name, "the gradient", dy, (n, ho, wo, co))
        if dy.size == 0:
            return [np.zeros(like.shape, dtype=w.dtype)]
        acc = compute_dtype(w.dtype)
        wm = w.astype(acc, copy=False).reshape(kh * kw * ci, co)
        cols = (dy.astype(acc, copy=False).reshape(-1, co) @ wm.T).reshape(n, ho, wo, kh, kw, ci)
        xp = col2im(cols, (h + before[0] + after[0], wd + before[1] + after[1]), strides, dil)
        return [crop(xp, before, (h, wd)).astype(w.dtype)]

    def filter_type(self, inputs: Sequence[TensorType],
                    outputs: Sequence[TensorType]) -> TensorType:
        return inputs[0]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Linear in filter and dy: ``<dx, g> = <dy, conv2d(g, w)>``."""
        w, dy, _ = op.inputs
        (g,) = grads
        return [b("conv2d_backprop_filter", g, dy, w, **op.attrs),
                b("conv2d", g, w, **op.attrs), None]


@register
class Conv2DBackpropFilter(ConvBackprop):
    """The gradient of ``conv2d`` w.r.t. its filter: ``(x, dy, like)`` -> ``like``'s shape,
    where ``like`` is the forward filter (only its shape is read); the attrs are the
    forward op's."""

    name = "conv2d_backprop_filter"

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x, dy, like = inputs
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, x, FLOAT)
        for t, what in ((x, "input"), (dy, "gradient"), (like, "like filter")):
            expect_rank4(self.name, t, what)
        self.check_operands(x, like, dy, attrs)
        shape = merge_shapes(like.shape, (*like.shape[:2], x.shape[3], dy.shape[3]))
        return [TensorType(dtype, shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, dy, like = inputs
        strides, dil = self.window(attrs)
        n, h, wd, c = x.shape
        kh, kw, ci, co = like.shape
        if c != ci:
            raise ExecutionError(f"{self.name}: input has {c} channels, filter expects {ci}")
        (ho, wo), before, after = geometry(self.name, (h, wd), (kh, kw), strides, dil,
                                           attrs["padding"])
        expect_shape(self.name, "the gradient", dy, (n, ho, wo, co))
        if dy.size == 0 or x.size == 0:
            return [np.zeros(like.shape, dtype=x.dtype)]
        acc = compute_dtype(x.dtype)
        xp = np.pad(x.astype(acc, copy=False), pads_of(before, after))
        eff = ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1)
        win = windows(xp, eff, strides, dil, (ho, wo))  # [N, Ho, Wo, C, kh, kw]
        cols = win.transpose(0, 1, 2, 4, 5, 3).reshape(n * ho * wo, kh * kw * c)
        dw = cols.T @ dy.astype(acc, copy=False).reshape(n * ho * wo, co)
        return [dw.reshape(kh, kw, ci, co).astype(x.dtype)]

    def filter_type(self, inputs: Sequence[TensorType],
                    outputs: Sequence[TensorType]) -> TensorType:
        return outputs[0]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Linear in x and dy: ``<dw, g> = <dy, conv2d(x, g)>``."""
        x, dy, _ = op.inputs
        (g,) = grads
        return [b("conv2d_backprop_input", g, dy, x, **op.attrs),
                b("conv2d", x, g, **op.attrs), None]


# ---- pooling ----------------------------------------------------------------------------

class PoolGrad(OpDef):
    """Shared attrs (the forward pool's), window arithmetic and cost of pooling gradients."""

    traits = PURE_ONLY
    attrs = POOL_ATTRS

    def window(self, attrs: Mapping[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
        check_padding(self.name, attrs["padding"])
        k = spatial_attr(self.name, "ksize", attrs["ksize"])
        s = k if attrs["strides"] is None else spatial_attr(self.name, "strides",
                                                            attrs["strides"])
        return k, s

    def check_output(self, image: TensorType, out: TensorType, attrs: Mapping[str, Any],
                     what: str) -> None:
        """``out`` must be shaped like the pool's output over ``image`` (channels too)."""
        expect_rank4(self.name, out, what)
        k, s = self.window(attrs)
        check_window_output(self.name, image, out, k, s, (1, 1), attrs["padding"], what)
        if not dims_compatible(image.shape[3], out.shape[3]):
            raise TypeMismatch(f"{self.name}: {what} {out} has {out.shape[3]} channels but "
                               f"the input {image} has {image.shape[3]}")

    def geometry(self, x_shape: Sequence[int], attrs: Mapping[str, Any]
                 ) -> tuple[tuple[int, int], tuple[int, int], Geometry]:
        k, s = self.window(attrs)
        return k, s, geometry(self.name, x_shape[1:3], k, s, (1, 1), attrs["padding"])

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        """About one flop per window element of the pooled side."""
        k, _ = self.window(attrs)
        pooled = min((t for t in (*inputs, *outputs) if t.rank == 4),
                     key=lambda t: elements(t, symbol_size))
        read = [t for i, t in enumerate(inputs) if i not in self.shape_only]
        moved = sum(t.nbytes(symbol_size) for t in (*read, *outputs))
        return Cost(float(elements(pooled, symbol_size) * k[0] * k[1]), moved)

    shape_only: tuple[int, ...] = ()  # inputs whose values are never read


def max_positions(x: np.ndarray, k: tuple[int, int], s: tuple[int, int],
                  geo: Geometry) -> tuple[np.ndarray, tuple[int, ...]]:
    """Flat index, into the padded image, of each window's first maximum ``[N, Ho, Wo,
    C]`` (first in the window's row-major order, as TensorFlow breaks ties), and the
    padded image's shape. Padding is the lowest value, so it never wins over a real
    element."""
    (ho, wo), before, after = geo
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = np.pad(x, pads_of(before, after), constant_values=low)
    win = windows(xp, k, s, (1, 1), (ho, wo))  # [N, Ho, Wo, C, kh, kw]
    first = np.argmax(win.reshape(*win.shape[:4], k[0] * k[1]), axis=-1)
    n, _, _, c = x.shape
    rows = np.arange(ho)[None, :, None, None] * s[0] + first // k[1]
    cols = np.arange(wo)[None, None, :, None] * s[1] + first % k[1]
    batch = np.arange(n)[:, None, None, None]
    chan = np.arange(c)[None, None, None, :]
    flat = np.ravel_multi_index(np.broadcast_arrays(batch, rows, cols, chan), xp.shape)
    return flat, xp.shape


class MaxPoolGradBase(PoolGrad):
    """``(x, y, g)`` with ``y = max_pool(x)``: x and y locate each window's maximum."""

    num_inputs = 3

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x, y, g = inputs
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, x, FLOAT)
        expect_rank4(self.name, x, "input")
        self.check_output(x, y, attrs, "pooled output")
        return [self.infer_result(x, y, g, attrs).with_dtype(dtype)]

    def infer_result(self, x: TensorType, y: TensorType, g: TensorType,
                     attrs: Mapping[str, Any]) -> TensorType:
        raise NotImplementedError


@register
class MaxPoolGrad(MaxPoolGradBase):
    """The gradient of ``max_pool`` w.r.t. its input: ``(x, y, dy)`` -> x's shape. Each
    window's ``dy`` goes to the window's maximum in ``x``, to the first one on ties (as
    TensorFlow); overlapping windows add up. ``y`` (the forward result) is taken for
    TensorFlow's signature and for backends that find the maximum by comparing with it;
    the reference recomputes the same positions from ``x``.

    Its gradient: w.r.t. dy, ``max_pool_grad_grad`` (it is linear in dy); w.r.t. x and
    y, zero almost everywhere (the routing is piecewise constant), so None."""

    name = "max_pool_grad"

    def infer_result(self, x: TensorType, y: TensorType, g: TensorType,
                     attrs: Mapping[str, Any]) -> TensorType:
        self.check_output(x, g, attrs, "gradient")
        return x

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, y, dy = inputs
        k, s, geo = self.geometry(x.shape, attrs)
        out_shape = (x.shape[0], *geo[0], x.shape[3])
        expect_shape(self.name, "the pooled output", y, out_shape)
        expect_shape(self.name, "the gradient", dy, out_shape)
        if dy.size == 0 or x.size == 0:
            return [np.zeros(x.shape, dtype=dy.dtype)]
        flat, padded = max_positions(x, k, s, geo)
        acc = compute_dtype(dy.dtype)
        dxp = np.bincount(flat.ravel(), weights=dy.astype(acc, copy=False).ravel(),
                          minlength=int(np.prod(padded))).reshape(padded)
        return [crop(dxp, geo[1], x.shape[1:3]).astype(dy.dtype)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        x, y, _ = op.inputs
        return [None, None, b("max_pool_grad_grad", x, y, grads[0], **op.attrs)]


@register
class MaxPoolGradGrad(MaxPoolGradBase):
    """The transpose of ``max_pool_grad`` in its gradient input: ``(x, y, g)`` -> y's
    shape, each window's value of ``g`` (x's shape) read at the window's first maximum.
    It is what the second derivative of ``max_pool`` needs (TensorFlow's MaxPoolGradGrad).
    Its gradient w.r.t. g is ``max_pool_grad``; w.r.t. x and y, None (as above)."""

    name = "max_pool_grad_grad"

    def infer_result(self, x: TensorType, y: TensorType, g: TensorType,
                     attrs: Mapping[str, Any]) -> TensorType:
        expect_rank4(self.name, g, "gradient")
        if not all(dims_compatible(a, b) for a, b in zip(x.shape, g.shape)):
            raise TypeMismatch(f"{self.name}: gradient {g} must have the shape of the "
                               f"input {x}")
        return y

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, y, g = inputs
        k, s, geo = self.geometry(x.shape, attrs)
        out_shape = (x.shape[0], *geo[0], x.shape[3])
        expect_shape(self.name, "the pooled output", y, out_shape)
        expect_shape(self.name, "the gradient", g, x.shape)
        if y.size == 0 or x.size == 0:
            return [np.zeros(out_shape, dtype=g.dtype)]
        flat, _ = max_positions(x, k, s, geo)
        gp = np.pad(g, pads_of(geo[1], geo[2]))
        return [gp.ravel()[flat]]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        x, y, _ = op.inputs
        return [None, None, b("max_pool_grad", x, y, grads[0], **op.attrs)]


@register
class AvgPoolGrad(PoolGrad):
    """The gradient of ``avg_pool`` w.r.t. its input: ``(dy, like)`` -> ``like``'s shape
    (the forward input; only its shape is read). Each window's ``dy``, divided by the
    window's count of real elements (SAME padding counts none), is added to every real
    element of the window. Its gradient w.r.t. dy is ``avg_pool`` (its transpose)."""

    name = "avg_pool_grad"
    num_inputs = 2
    shape_only = (1,)

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        dy, like = inputs
        dtype = same_dtype(self.name, inputs)
        expect_dtype(self.name, dy, FLOAT)
        expect_rank4(self.name, like, "like input")
        self.check_output(like, dy, attrs, "gradient")
        shape = (*like.shape[:3], merge_shapes(like.shape[3:], dy.shape[3:])[0])
        return [TensorType(dtype, shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        dy, like = inputs
        k, s, ((ho, wo), before, after) = self.geometry(like.shape, attrs)
        n, h, w, c = like.shape
        expect_shape(self.name, "the gradient", dy, (n, ho, wo, c))
        if dy.size == 0:
            return [np.zeros(like.shape, dtype=dy.dtype)]
        acc = compute_dtype(dy.dtype)
        pads = pads_of(before, after)
        share = dy.astype(acc, copy=False) / window_counts((h, w), pads, k, s, (ho, wo), acc)
        cols = np.broadcast_to(share[:, :, :, None, None, :], (n, ho, wo, *k, c))
        xp = col2im(cols, (h + before[0] + after[0], w + before[1] + after[1]), s, (1, 1))
        return [crop(xp, before, (h, w)).astype(dy.dtype)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        return [b("avg_pool", grads[0], **op.attrs), None]
