"""Direct convolutions for filters with few taps (``kh*kw*C_in <= MAX_DIRECT_TAPS``).

A 3x3 filter on one channel makes a GEMM with an inner dimension of 9, and im2col writes
nine copies of the input for it; these kernels read the input in place instead. SAME
padding is made real once per image (zeros, in scratch), so every tap of every output
pixel is at a constant distance from the pixel's corner and no load is checked.
``conv2d`` splits over images: per row, pixels go in pairs with every vector of output
channels accumulated in registers (each filter vector loaded once per pair); output
channels that are not whole vectors take a loop over them per pixel, which LLVM
vectorizes. ``conv2d_backprop_filter`` sums each image's pixels into a block of partial
sums in register blocks of (taps x channel vectors) (``_vector_passes``), splitting over
images too, then a second kernel adds the images' blocks (per-image partial sums:
rounding near a blocked GEMM's). ``kernels_linalg`` picks these or im2col + GEMM.
"""

from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from tfc.backends.llvm import irutil as U
from tfc.backends.llvm.context import Binding, Kernel, Storage, dim_key
from tfc.backends.llvm.kernels_array import inside, pad_before
from tfc.ir.core import Op, Value
from tfc.ir.types import DType
from tfc.ops.nn import spatial_attr, window_padding

ZERO = U.i64(0)


def conv_geometry(op: Op) -> tuple[tuple[int, int], tuple[int, int]]:
    """(strides, dilations) of a convolution op."""
    return (spatial_attr(op.kind, "strides", op.attrs["strides"]),
            spatial_attr(op.kind, "dilations", op.attrs["dilations"]))

MAX_DIRECT_TAPS = 32


VECTOR_BYTES = 32  # AVX2: the explicit vector kernels' register width


ACC_REGISTERS = 8  # accumulator vectors of the backprop-filter kernel (of 16 registers)


def is_direct(x: Value, kh: int, kw: int) -> bool:
    c = x.type.shape[3]
    return isinstance(c, int) and kh * kw * c <= MAX_DIRECT_TAPS


class _Padded:
    """The input of a direct convolution as the kernels read it: ``[N, Hp, Wp, C]`` with
    the SAME padding made real (zeros, in scratch at ``offset`` elements, one image per
    batch index) so that every tap of every output pixel is at a constant distance from
    the pixel's corner and no load is checked. VALID reads the input in place."""

    def __init__(self, op: Op, x: Value, kh: int, kw: int) -> None:
        self.op, self.x, self.kh, self.kw = op, x, kh, kw
        channels = x.type.shape[3]
        assert isinstance(channels, int), "a direct convolution has static channels (is_direct)"
        self.channels = channels
        self.same = op.attrs["padding"] != "VALID"
        (self.sh, self.sw), (self.dh, self.dw) = conv_geometry(op)

    def extent(self, bd: Binding, axis: int) -> int:
        """Rows (axis 1) or columns (axis 2) of the padded image that taps can read."""
        k, s, d = ((self.kh, self.sh, self.dh) if axis == 1 else (self.kw, self.sw, self.dw))
        out = window_padding(self.op.kind, bd.shape(self.x)[axis], k, s, d,
                             self.op.attrs["padding"])[0]
        return max((out - 1) * s + (k - 1) * d + 1, 0) if out > 0 else 0

    def elements(self, bd: Binding) -> int:
        """Scratch elements of the padded images (0 for VALID)."""
        if not self.same:
            return 0
        sh = bd.shape(self.x)
        return sh[0] * self.extent(bd, 1) * self.extent(bd, 2) * sh[3]

    def bind(self, kc: Kernel, scratch: ir.Value | None, offset: ir.Value) -> None:
        """Pointer and dims for kernel ``kc`` (scratch at element ``offset`` if SAME)."""
        x = self.x
        self.kc = kc
        self.xd = kc.dims(x)
        if not self.same:
            self.ptr, self.pd = kc.ptr(x), self.xd
            return
        self.ptr = U.elem_ptr(kc.b, scratch, x.dtype, offset)
        hp = kc.param(("conv_extent", id(self.op), 1), lambda bd: self.extent(bd, 1))
        wp = kc.param(("conv_extent", id(self.op), 2), lambda bd: self.extent(bd, 2))
        self.pd = [self.xd[0], hp, wp, self.xd[3]]

    def copy_image(self, n: ir.Value) -> None:
        """Fill padded image ``n`` (SAME only)."""
        if not self.same:
            return
        kc, x = self.kc, self.x
        b = kc.b
        xd, pd = self.xd, self.pd
        ph = pad_before(kc, self.op, x, 1, self.kh, self.sh, self.dh)
        pw = pad_before(kc, self.op, x, 2, self.kw, self.sw, self.dw)
        zero = ir.Constant(U.compute_type(x.dtype), 0.0)

        def px(idx, _c) -> None:
            hp, wp = idx
            hi, wi = b.sub(hp, ph), b.sub(wp, pw)
            ok = inside(b, hi, wi, xd)
            src = U.linear(b, [n, b.select(ok, hi, ZERO), b.select(ok, wi, ZERO), ZERO], xd)
            dst = U.linear(b, [n, hp, wp, ZERO], pd)

            def ch(ci, _c2) -> None:
                v = U.load(b, kc.ptr(x), x.dtype, b.add(src, ci))
                U.store(b, self.ptr, x.dtype, b.add(dst, ci), b.select(ok, v, zero))

            U.loop(b, ZERO, xd[3], ch, name="pc")

        U.loop_nest(b, [(ZERO, pd[1]), (ZERO, pd[2])], px, name="pad")

    def corner(self, n: ir.Value, ho: ir.Value, wo: ir.Value) -> ir.Value:
        """Offset of the first tap of output pixel (``n``, ``ho``, ``wo``)."""
        b = self.kc.b
        return U.linear(b, [n, U.mul(b, ho, U.i64(self.sh)), U.mul(b, wo, U.i64(self.sw)),
                            ZERO], self.pd)

    def tap_offsets(self) -> list[ir.Value]:
        """Each tap's distance from the corner (filter order: row, column, channel)."""
        b = self.kc.b
        pd = self.pd
        row = U.mul(b, pd[2], pd[3])
        out = []
        for i in range(self.kh):
            for j in range(self.kw):
                base = U.add(b, U.mul(b, U.i64(i * self.dh), row),
                             U.mul(b, U.i64(j * self.dw), pd[3]))
                for ci in range(self.channels):
                    out.append(U.add(b, base, U.i64(ci)))
        return out

    def taps(self, n: ir.Value, ho: ir.Value, wo: ir.Value,
             offsets: list[ir.Value]) -> list[ir.Value]:
        b = self.kc.b
        c0 = self.corner(n, ho, wo)
        return [U.load(b, self.ptr, self.x.dtype, U.add(b, c0, o)) for o in offsets]


class _Vec:
    """Explicit ``VECTOR_BYTES``-wide vectors of ``dtype`` (f32 or f64) for builder ``b``:
    unaligned loads and stores at element offsets, and splats of scalars."""

    def __init__(self, b: ir.IRBuilder, dtype: DType) -> None:
        self.b, self.dtype = b, dtype
        self.width = VECTOR_BYTES // dtype.itemsize
        self.t = ir.VectorType(U.compute_type(dtype), self.width)
        self.zero = ir.Constant(self.t, [0.0] * self.width)

    def load(self, ptr: ir.Value, off: ir.Value) -> ir.Value:
        return self.b.load(U.elem_ptr(self.b, ptr, self.dtype, off), typ=self.t,
                           align=self.dtype.itemsize)

    def store(self, ptr: ir.Value, off: ir.Value, v: ir.Value) -> None:
        self.b.store(v, U.elem_ptr(self.b, ptr, self.dtype, off), align=self.dtype.itemsize)

    def splat(self, v: ir.Value) -> ir.Value:
        b, t = self.b, self.t
        one = b.insert_element(ir.Constant(t, ir.Undefined), v, ir.Constant(U.I32, 0))
        return b.shuffle_vector(one, ir.Constant(t, ir.Undefined),
                                ir.Constant(ir.VectorType(U.I32, self.width),
                                            [0] * self.width))

    def fma(self, x: ir.Value, y: ir.Value, acc: ir.Value | None) -> ir.Value:
        p = self.b.fmul(x, y, flags=U.FAST)
        return p if acc is None else self.b.fadd(acc, p, flags=U.FAST)


def _vector_channels(dtype: DType, co) -> int | None:
    """Vectors of output channels when ``co`` is static and whole vectors, else None."""
    width = VECTOR_BYTES // dtype.itemsize
    if isinstance(co, int) and co > 0 and co % width == 0 and dtype.itemsize in (4, 8):
        return co // width
    return None


def _scratch_storage(gc, nbytes: Callable[[Binding], int]) -> Storage:
    gc.comp.scratch.append(nbytes)
    return Storage("scratch", 0)


def direct_conv2d(gc, op: Op, kh: int, kw: int) -> None:
    """``out[n, ho, wo, :] = sum_t taps[t] * W[t, :]``, split over images (each pads its
    own images): output channels in whole vectors take ``_conv_rows_vector``; otherwise
    per pixel the taps are loaded once, then a loop over output channels (vectorized by
    LLVM) does the sums."""
    x, w = op.inputs
    out = op.result
    dt = out.dtype
    pad = _Padded(op, x, kh, kw)
    extra = [_scratch_storage(gc, lambda bd: pad.elements(bd) * dt.itemsize)] if pad.same else []
    kc = gc.kernel("conv2d", [x, w, out], extra)
    pad.bind(kc, kc.storage_ptr(extra[0]) if extra else None, ZERO)
    b = kc.b
    od = kc.dims(out)
    co = od[3]
    offsets = pad.tap_offsets()
    key, fn = dim_key(out, 0)
    lo, hi = kc.extent_of([od[0]], key, fn, out)

    nvec = _vector_channels(dt, w.type.shape[3])

    def image(n, _c) -> None:
        pad.copy_image(n)
        if nvec is not None:
            _conv_rows_vector(kc, pad, w, out, n, offsets, nvec)
            return

        def pixel(idx, _c2) -> None:
            ho, wo = idx
            vals = pad.taps(n, ho, wo, offsets)
            obase = U.linear(b, [n, ho, wo, ZERO], od)

            def chan(o, _c3) -> None:
                acc = None
                for t, v in enumerate(vals):
                    wv = U.load(b, kc.ptr(w), dt, U.add(b, U.mul(b, U.i64(t), co), o))
                    p = b.fmul(v, wv, flags=U.FAST)
                    acc = p if acc is None else b.fadd(acc, p, flags=U.FAST)
                U.store(b, kc.ptr(out), dt, b.add(obase, o), acc)

            U.loop(b, ZERO, co, chan, name="co")

        U.loop_nest(b, [(ZERO, od[1]), (ZERO, od[2])], pixel, name="px")

    U.loop(b, lo, hi, image, name="n")
    kc.finish()


def _conv_rows_vector(kc: Kernel, pad: "_Padded", w: Value, out: Value, n: ir.Value,
                      offsets: list[ir.Value], nvec: int) -> None:
    """Image ``n`` of a direct conv with whole vectors of output channels: per row and
    block of up to 4 channel vectors, pixels go in pairs (a tail pixel alone) with
    ``pair x block`` accumulators (8 vectors), each filter vector loaded once per pair
    and each tap value splat once."""
    b = kc.b
    dt = out.dtype
    vec = _Vec(b, dt)
    width = vec.width
    od = kc.dims(out)
    co = nvec * width
    nb = min(nvec, 4)
    pb = max(1, ACC_REGISTERS // nb)
    wo_n = od[2]
    pairs = b.sdiv(wo_n, U.i64(pb))

    def block(ho: ir.Value, wo0: ir.Value, npix: int, v0: int, nv: int) -> None:
        corners = [pad.corner(n, ho, b.add(wo0, U.i64(p))) for p in range(npix)]
        acc: list[ir.Value | None] = [None] * (npix * nv)
        for t, off in enumerate(offsets):
            xs = [vec.splat(U.load(b, pad.ptr, pad.x.dtype, U.add(b, c0, off)))
                  for c0 in corners]
            for v in range(nv):
                wv = vec.load(kc.ptr(w), U.i64(t * co + (v0 + v) * width))
                for p in range(npix):
                    acc[p * nv + v] = vec.fma(xs[p], wv, acc[p * nv + v])
        for p in range(npix):
            obase = U.linear(b, [n, ho, b.add(wo0, U.i64(p)), ZERO], od)
            for v in range(nv):
                vec.store(kc.ptr(out), U.add(b, obase, U.i64((v0 + v) * width)),
                          acc[p * nv + v])

    def row(ho, _c) -> None:
        for v0 in range(0, nvec, nb):
            nv = min(nb, nvec - v0)
            # (U.loop emits the body now, so the lambdas see this iteration's v0 and nv)
            U.loop(b, ZERO, pairs, lambda k, _c2:
                   block(ho, b.mul(k, U.i64(pb)), pb, v0, nv), name="pair")
            if pb > 1:
                U.loop(b, b.mul(pairs, U.i64(pb)), wo_n, lambda k, _c2:
                       block(ho, k, 1, v0, nv), name="tail")

    U.loop(b, ZERO, od[1], row, name="ho")


def _vector_passes(ntaps: int, co: int, width: int) -> list[tuple[int, int, int, int]]:
    """Register blocks of the backprop-filter kernel: (first tap, taps, first vector of
    output channels, vectors), covering taps x ``co / width`` vectors with at most
    ``ACC_REGISTERS`` accumulators each."""
    nvec = co // width
    nb = min(nvec, 4)
    tb = max(1, ACC_REGISTERS // nb)
    return [(t0, min(tb, ntaps - t0), v0, min(nb, nvec - v0))
            for v0 in range(0, nvec, nb) for t0 in range(0, ntaps, tb)]


def direct_backprop_filter(gc, op: Op, kh: int, kw: int) -> None:
    """``dW[t, :] = sum over pixels of taps[t] * dy[pixel, :]`` in two kernels.

    The first, split over images, sums each image's pixels into its own block of
    ``taps x Co`` partial sums (scratch): with ``Co`` whole vectors, in register blocks
    (``_vector_passes``): per block, one loop nest over the image's pixels carries the
    block's accumulators (each pixel adds its taps times its ``dy`` vectors), which are
    then stored; otherwise per pixel and tap a loop over output channels (vectorized by
    LLVM) adds into the block in scratch. The second adds
    the images' blocks into ``dW``: per-image partial sums keep the rounding error near
    that of a blocked GEMM, and the images split across threads."""
    x, dy, like = op.inputs
    out = op.result
    dt = out.dtype
    ct = U.compute_type(dt)
    pad = _Padded(op, x, kh, kw)
    ntaps = kh * kw * pad.channels
    co_dim = like.type.shape[3]
    co_static = co_dim if isinstance(co_dim, int) else 0  # 0: symbolic, no vector passes

    def nbytes(bd: Binding) -> int:
        d = bd.shape(dy)
        return (d[0] * ntaps * d[3] + pad.elements(bd)) * dt.itemsize
    scratch = _scratch_storage(gc, nbytes)
    kc = gc.kernel("conv2d_bwd_filter", [x, dy, out], [scratch])
    b = kc.b
    part = kc.storage_ptr(scratch)
    dd = kc.dims(dy)
    co = dd[3]
    block = U.mul(b, U.i64(ntaps), co)
    pad.bind(kc, part, U.mul(b, dd[0], block))
    offsets = pad.tap_offsets()
    zero = ir.Constant(ct, 0.0)
    vec = _Vec(b, dt)
    width = vec.width
    passes = (_vector_passes(ntaps, co_static, width)
              if _vector_channels(dt, co_static) is not None else None)
    key, fn = dim_key(dy, 0)
    lo, hi = kc.extent_of([dd[0]], key, fn, dy)

    def image(n, _c) -> None:
        pad.copy_image(n)
        pbase = U.mul(b, n, block)

        if passes is not None:
            # dy's image is read once per block (from cache after the first)
            for t0, nt, v0, nv in passes:
                def block_pixel(idx, acc, t0=t0, nt=nt, v0=v0, nv=nv) -> list[ir.Value]:
                    ho, wo = idx
                    dbase = U.linear(b, [n, ho, wo, ZERO], dd)
                    g = [vec.load(kc.ptr(dy), U.add(b, dbase, U.i64((v0 + v) * width)))
                         for v in range(nv)]
                    c0 = pad.corner(n, ho, wo)
                    nxt = []
                    for t in range(nt):
                        xv = vec.splat(U.load(b, pad.ptr, x.dtype,
                                              U.add(b, c0, offsets[t0 + t])))
                        for v in range(nv):
                            nxt.append(vec.fma(xv, g[v], acc[t * nv + v]))
                    return nxt

                res = U.loop_nest(b, [(ZERO, dd[1]), (ZERO, dd[2])], block_pixel,
                                  [vec.zero] * (nt * nv), name="px")
                for t in range(nt):
                    for v in range(nv):
                        at = U.add(b, pbase, U.i64((t0 + t) * co_static + (v0 + v) * width))
                        vec.store(part, at, res[t * nv + v])
            return

        U.loop(b, ZERO, block, lambda i, _c2: U.store(b, part, dt, b.add(pbase, i), zero),
               name="z")

        def pixel(idx, _c2) -> None:
            ho, wo = idx
            vals = pad.taps(n, ho, wo, offsets)
            dbase = U.linear(b, [n, ho, wo, ZERO], dd)

            def chan(o, _c3) -> None:
                g = U.load(b, kc.ptr(dy), dt, b.add(dbase, o))
                for t, v in enumerate(vals):
                    at = b.add(pbase, U.add(b, U.mul(b, U.i64(t), co), o))
                    cur = U.load(b, part, dt, at)
                    U.store(b, part, dt, at, b.fadd(cur, b.fmul(v, g, flags=U.FAST),
                                                    flags=U.FAST))

            U.loop(b, ZERO, co, chan, name="co")

        U.loop_nest(b, [(ZERO, dd[1]), (ZERO, dd[2])], pixel, name="px")

    U.loop(b, lo, hi, image, name="n")
    kc.finish()

    # the images' partial sums into dW
    ks = gc.kernel("conv2d_bwd_filter_sum", [dy, out], [scratch])
    ks.whole()
    b = ks.b
    part = ks.storage_ptr(scratch)
    dd = ks.dims(dy)
    block = U.mul(b, U.i64(ntaps), dd[3])
    U.loop(b, ZERO, block, lambda i, _c: U.store(b, ks.ptr(out), dt, i, zero), name="z")

    def add(idx, _c) -> None:
        n, i = idx
        cur = U.load(b, ks.ptr(out), dt, i)
        U.store(b, ks.ptr(out), dt, i, b.fadd(cur, U.load(b, part, dt,
                                                          b.add(b.mul(n, block), i))))

    U.loop_nest(b, [(ZERO, dd[0]), (ZERO, block)], add, name="s")
    ks.finish()
