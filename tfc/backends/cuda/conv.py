"""Convolutions and pooling with the array module: im2col + one matrix product (cuBLAS on
a GPU), as the reference computes them (``tfc/ops/nn.py``, ``tfc/ops/nn_grad.py``).

The reference builds its im2col matrix from numpy's ``sliding_window_view``, which cupy
lacks; here the same matrix (rows: output pixels; columns: the filter's ``(kh, kw, C)``
order) is stacked from one strided slice of the padded image per filter tap, and
``col2im`` (the input gradient) adds one strided slice per tap, exactly as the
reference's ``col2im`` does. The products are the same matrices, so under the emulator
(numpy) the numbers are the reference's; on a GPU they differ by cuBLAS's rounding.
The window geometry (output size, SAME padding) is the registry's own functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError
from tfc.ops.linalg import compute_dtype
from tfc.ops.nn import spatial_attr, window_counts, window_padding
from tfc.ops.nn_grad import expect_shape, geometry

Pads = tuple[tuple[int, int], tuple[int, int]]


def _taps(xp_img: Any, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int],
          out: tuple[int, int]) -> list[Any]:
    """One ``[N, Ho, Wo, C]`` strided slice of padded ``xp_img`` per filter tap, in
    ``(kh, kw)`` row-major order."""
    (ho, wo), (sh, sw), (dh, dw) = out, s, d
    return [xp_img[:, a * dh:a * dh + (ho - 1) * sh + 1:sh, b * dw:b * dw + (wo - 1) * sw + 1:sw, :]
            for a in range(k[0]) for b in range(k[1])]


def _im2col(xp: Any, x: Any, k: tuple[int, int], s: tuple[int, int], d: tuple[int, int],
            out: tuple[int, int], pads: Pads, acc: Any) -> Any:
    """``[N*Ho*Wo, kh*kw*C]``: the reference's im2col matrix."""
    n, c = x.shape[0], x.shape[3]
    img = xp.pad(x.astype(acc, copy=False), ((0, 0), pads[0], pads[1], (0, 0)))
    cols = xp.stack(_taps(img, k, s, d, out), axis=3)  # [N, Ho, Wo, kh*kw, C]
    return cols.reshape(n * out[0] * out[1], k[0] * k[1] * c)


def _pads(before: tuple[int, int], after: tuple[int, int]) -> Pads:
    """((top, bottom), (left, right)) from geometry's (top, left) and (bottom, right)."""
    return (before[0], after[0]), (before[1], after[1])


def _window(op: str, attrs: Mapping[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
    return (spatial_attr(op, "strides", attrs["strides"]),
            spatial_attr(op, "dilations", attrs["dilations"]))


@dataclass(frozen=True)
class _Conv:
    """One convolution's geometry, checked: the image ``[n, h, w, c]``, the filter
    ``[kh, kw, c, co]``, strides, dilations, output size and padding."""

    n: int
    h: int
    w: int
    c: int
    kh: int
    kw: int
    co: int
    s: tuple[int, int]
    d: tuple[int, int]
    out: tuple[int, int]
    pads: Pads


def _conv(op: str, attrs: Mapping[str, Any], image: Sequence[int],
          filt: Sequence[int]) -> _Conv:
    s, d = _window(op, attrs)
    n, h, wd, c = image
    kh, kw, ci, co = filt
    if c != ci:
        raise ExecutionError(f"{op}: input has {c} channels, filter expects {ci}")
    out, before, after = geometry(op, (h, wd), (kh, kw), s, d, attrs["padding"])
    return _Conv(n, h, wd, c, kh, kw, co, s, d, out, _pads(before, after))


def conv2d(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    x, w = ins
    g = _conv("conv2d", attrs, x.shape, w.shape)
    (ho, wo) = g.out
    if ho == 0 or wo == 0 or g.n == 0:
        return [xp.zeros((g.n, ho, wo, g.co), dtype=x.dtype)]
    acc = compute_dtype(x.dtype)
    cols = _im2col(xp, x, (g.kh, g.kw), g.s, g.d, g.out, g.pads, acc)
    out = cols @ w.astype(acc, copy=False).reshape(g.kh * g.kw * g.c, g.co)
    return [out.reshape(g.n, ho, wo, g.co).astype(x.dtype, copy=False)]


def conv2d_backprop_filter(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    x, dy, like = ins
    op = "conv2d_backprop_filter"
    g = _conv(op, attrs, x.shape, like.shape)
    expect_shape(op, "the gradient", dy, (g.n, *g.out, g.co))
    if dy.size == 0 or x.size == 0:
        return [xp.zeros(like.shape, dtype=x.dtype)]
    acc = compute_dtype(x.dtype)
    cols = _im2col(xp, x, (g.kh, g.kw), g.s, g.d, g.out, g.pads, acc)
    dw = cols.T @ dy.astype(acc, copy=False).reshape(g.n * g.out[0] * g.out[1], g.co)
    return [dw.reshape(g.kh, g.kw, g.c, g.co).astype(x.dtype)]


def conv2d_backprop_input(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    w, dy, like = ins
    op = "conv2d_backprop_input"
    g = _conv(op, attrs, like.shape, w.shape)
    (ho, wo), ((top, bottom), (left, right)) = g.out, g.pads
    expect_shape(op, "the gradient", dy, (g.n, ho, wo, g.co))
    if dy.size == 0:
        return [xp.zeros(like.shape, dtype=w.dtype)]
    acc = compute_dtype(w.dtype)
    wm = w.astype(acc, copy=False).reshape(g.kh * g.kw * g.c, g.co)
    cols = (dy.astype(acc, copy=False).reshape(-1, g.co) @ wm.T).reshape(
        g.n, ho, wo, g.kh, g.kw, g.c)
    img = xp.zeros((g.n, g.h + top + bottom, g.w + left + right, g.c), dtype=acc)
    for (a, b), tap in zip(((a, b) for a in range(g.kh) for b in range(g.kw)),
                           _taps(img, (g.kh, g.kw), g.s, g.d, g.out)):
        tap += cols[:, :, :, a, b, :]  # a view of img: within a tap, distinct pixels
    dx = img[:, top:top + g.h, left:left + g.w, :]
    return [dx.astype(w.dtype)]


def max_pool(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """The maximum of one strided slice per window tap (``maximum`` propagates NaN, as
    the reference's ``max`` over the window does); SAME pads with the lowest value."""
    x = ins[0]
    k = spatial_attr("max_pool", "ksize", attrs["ksize"])
    s = k if attrs["strides"] is None else spatial_attr("max_pool", "strides",
                                                        attrs["strides"])
    geo = [window_padding("max_pool", x.shape[1 + i], k[i], s[i], 1, attrs["padding"])
           for i in range(2)]
    (ho, ph0, ph1), (wo, pw0, pw1) = geo
    if ho == 0 or wo == 0:
        return [xp.zeros((x.shape[0], ho, wo, x.shape[3]), dtype=x.dtype)]
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    img = xp.pad(x, ((0, 0), (ph0, ph1), (pw0, pw1), (0, 0)), constant_values=low)
    taps = _taps(img, k, s, (1, 1), (ho, wo))
    out = taps[0]
    for t in taps[1:]:
        out = xp.maximum(out, t)
    return [xp.array(out, dtype=x.dtype, copy=True)]


def _first_max(xp: Any, x: Any, k: tuple[int, int], s: tuple[int, int], geo: Any
               ) -> tuple[Any, tuple[int, ...]]:
    """The tap (row-major in the window) of each window's first maximum ``[N, Ho, Wo, C]``
    and the padded image's shape: ``tfc.ops.nn_grad.max_positions`` as a running
    comparison over the taps (a NaN wins over numbers and the first NaN stays, as
    ``argmax``; padding is the lowest value, so it never wins)."""
    (ho, wo), before, after = geo
    floats = x.dtype.kind == "f"
    low = -np.inf if floats else np.iinfo(x.dtype).min
    img = xp.pad(x, ((0, 0), (before[0], after[0]), (before[1], after[1]), (0, 0)),
                 constant_values=low)
    taps = _taps(img, k, s, (1, 1), (ho, wo))
    best, first = taps[0], xp.zeros(taps[0].shape, dtype=np.int32)
    for i, t in enumerate(taps[1:], 1):
        better = t > best
        if floats:
            better |= xp.isnan(t) & ~xp.isnan(best)
        best = xp.where(better, t, best)
        first = xp.where(better, np.int32(i), first)
    return first, img.shape


def _pool_geometry(op: str, x_shape: Sequence[int], attrs: Mapping[str, Any]) -> Any:
    k = spatial_attr(op, "ksize", attrs["ksize"])
    s = k if attrs["strides"] is None else spatial_attr(op, "strides", attrs["strides"])
    return k, s, geometry(op, x_shape[1:3], k, s, (1, 1), attrs["padding"])


def max_pool_grad(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """Each window's gradient added at its first maximum; the sums in f64 and rounded
    once, as the reference's ``bincount``."""
    x, y, dy = ins
    op = "max_pool_grad"
    k, s, geo = _pool_geometry(op, x.shape, attrs)
    out_shape = (x.shape[0], *geo[0], x.shape[3])
    expect_shape(op, "the pooled output", y, out_shape)
    expect_shape(op, "the gradient", dy, out_shape)
    if dy.size == 0 or x.size == 0:
        return [xp.zeros(x.shape, dtype=dy.dtype)]
    first, padded = _first_max(xp, x, k, s, geo)
    img = xp.zeros(padded, dtype=np.float64)
    wide = dy.astype(np.float64)
    for i, tap in enumerate(_taps(img, k, s, (1, 1), geo[0])):
        tap += xp.where(first == i, wide, 0.0)  # a view of img
    (h, w), before = x.shape[1:3], geo[1]
    return [img[:, before[0]:before[0] + h, before[1]:before[1] + w, :].astype(dy.dtype)]


def max_pool_grad_grad(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """``g`` read at each window's first maximum."""
    x, y, g = ins
    op = "max_pool_grad_grad"
    k, s, geo = _pool_geometry(op, x.shape, attrs)
    out_shape = (x.shape[0], *geo[0], x.shape[3])
    expect_shape(op, "the pooled output", y, out_shape)
    expect_shape(op, "the gradient", g, x.shape)
    if y.size == 0 or x.size == 0:
        return [xp.zeros(out_shape, dtype=g.dtype)]
    first, _ = _first_max(xp, x, k, s, geo)
    (_, before, after) = geo
    gp = xp.pad(g, ((0, 0), (before[0], after[0]), (before[1], after[1]), (0, 0)))
    out = xp.zeros(out_shape, dtype=g.dtype)
    for i, tap in enumerate(_taps(gp, k, s, (1, 1), geo[0])):
        out = xp.where(first == i, tap, out)
    return [out]


def avg_pool(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """Each window's sum (its taps added in row-major order) over its count of real
    elements (``window_counts``, computed on the host: it depends on shapes only)."""
    x = ins[0]
    k, s, ((ho, wo), before, after) = _pool_geometry("avg_pool", x.shape, attrs)
    if ho == 0 or wo == 0:
        return [xp.zeros((x.shape[0], ho, wo, x.shape[3]), dtype=x.dtype)]
    acc = compute_dtype(x.dtype)
    pads = ((0, 0), (before[0], after[0]), (before[1], after[1]), (0, 0))
    taps = _taps(xp.pad(x.astype(acc, copy=False), pads), k, s, (1, 1), (ho, wo))
    total = taps[0].copy()
    for t in taps[1:]:
        total += t
    counts = xp.asarray(window_counts(x.shape[1:3], pads, k, s, (ho, wo), acc))
    return [(total / counts).astype(x.dtype)]


def avg_pool_grad(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """Each window's gradient over its count, added to every tap of the window in the
    reference's ``col2im`` order (the same sums, bit for bit)."""
    dy, like = ins
    op = "avg_pool_grad"
    k, s, ((ho, wo), before, after) = _pool_geometry(op, like.shape, attrs)
    n, h, w, c = like.shape
    expect_shape(op, "the gradient", dy, (n, ho, wo, c))
    if dy.size == 0:
        return [xp.zeros(like.shape, dtype=dy.dtype)]
    acc = compute_dtype(dy.dtype)
    pads = ((0, 0), (before[0], after[0]), (before[1], after[1]), (0, 0))
    share = dy.astype(acc, copy=False) / xp.asarray(
        window_counts((h, w), pads, k, s, (ho, wo), acc))
    img = xp.zeros((n, h + before[0] + after[0], w + before[1] + after[1], c), dtype=acc)
    for tap in _taps(img, k, s, (1, 1), (ho, wo)):
        tap += share  # a view of img
    return [img[:, before[0]:before[0] + h, before[1]:before[1] + w, :].astype(dy.dtype)]


CONV_LIBRARY = {
    "conv2d": conv2d,
    "conv2d_backprop_filter": conv2d_backprop_filter,
    "conv2d_backprop_input": conv2d_backprop_input,
    "max_pool": max_pool,
    "max_pool_grad": max_pool_grad,
    "max_pool_grad_grad": max_pool_grad_grad,
    "avg_pool": avg_pool,
    "avg_pool_grad": avg_pool_grad,
}
