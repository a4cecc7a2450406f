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

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Kernel, Storage, dim_key
from tfc.backends.llvm.kernels_array import inside, pad_before
from tfc.backends.binding import Binding
from tfc.ir.core import Op, Value
from tfc.ir.types import DType
from tfc.ops.nn import spatial_attr, window_padding

ZERO = irutil.i64(0)


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

    def extent(self, binding: Binding, axis: int) -> int:
        """Rows (axis 1) or columns (axis 2) of the padded image that taps can read."""
        k, s, d = ((self.kh, self.sh, self.dh) if axis == 1 else (self.kw, self.sw, self.dw))
        out = window_padding(self.op.kind, binding.shape(self.x)[axis], k, s, d,
                             self.op.attrs["padding"])[0]
        return max((out - 1) * s + (k - 1) * d + 1, 0) if out > 0 else 0

    def elements(self, binding: Binding) -> int:
        """Scratch elements of the padded images (0 for VALID)."""
        if not self.same:
            return 0
        sh = binding.shape(self.x)
        return sh[0] * self.extent(binding, 1) * self.extent(binding, 2) * sh[3]

    def bind(self, kernel: Kernel, scratch: ir.Value | None, offset: ir.Value) -> None:
        """Pointer and dims for ``kernel`` (scratch at element ``offset`` if SAME)."""
        x = self.x
        self.kernel = kernel
        self.xd = kernel.dims(x)
        if not self.same:
            self.ptr, self.pd = kernel.ptr(x), self.xd
            return
        self.ptr = irutil.elem_ptr(kernel.b, scratch, x.dtype, offset)
        hp = kernel.param(("conv_extent", id(self.op), 1), lambda binding: self.extent(binding, 1))
        wp = kernel.param(("conv_extent", id(self.op), 2), lambda binding: self.extent(binding, 2))
        self.pd = [self.xd[0], hp, wp, self.xd[3]]

    def copy_image(self, n: ir.Value) -> None:
        """Fill padded image ``n`` (SAME only)."""
        if not self.same:
            return
        kernel, x = self.kernel, self.x
        b = kernel.b
        xd, pd = self.xd, self.pd
        ph = pad_before(kernel, self.op, x, 1, self.kh, self.sh, self.dh)
        pw = pad_before(kernel, self.op, x, 2, self.kw, self.sw, self.dw)
        zero = ir.Constant(irutil.compute_type(x.dtype), 0.0)

        def px(idx, _c) -> None:
            hp, wp = idx
            hi, wi = b.sub(hp, ph), b.sub(wp, pw)
            ok = inside(b, hi, wi, xd)
            src = irutil.linear(b, [n, b.select(ok, hi, ZERO), b.select(ok, wi, ZERO), ZERO], xd)
            dst = irutil.linear(b, [n, hp, wp, ZERO], pd)

            def ch(ci, _c2) -> None:
                v = irutil.load(b, kernel.ptr(x), x.dtype, b.add(src, ci))
                irutil.store(b, self.ptr, x.dtype, b.add(dst, ci), b.select(ok, v, zero))

            irutil.loop(b, ZERO, xd[3], ch, name="pc")

        irutil.loop_nest(b, [(ZERO, pd[1]), (ZERO, pd[2])], px, name="pad")

    def corner(self, n: ir.Value, ho: ir.Value, wo: ir.Value) -> ir.Value:
        """Offset of the first tap of output pixel (``n``, ``ho``, ``wo``)."""
        b = self.kernel.b
        return irutil.linear(b, [n, irutil.mul(b, ho, irutil.i64(self.sh)),
                                 irutil.mul(b, wo, irutil.i64(self.sw)), ZERO], self.pd)

    def tap_offsets(self) -> list[ir.Value]:
        """Each tap's distance from the corner (filter order: row, column, channel)."""
        b = self.kernel.b
        pd = self.pd
        row = irutil.mul(b, pd[2], pd[3])
        out = []
        for i in range(self.kh):
            for j in range(self.kw):
                base = irutil.add(b, irutil.mul(b, irutil.i64(i * self.dh), row),
                                  irutil.mul(b, irutil.i64(j * self.dw), pd[3]))
                for ci in range(self.channels):
                    out.append(irutil.add(b, base, irutil.i64(ci)))
        return out

    def taps(self, n: ir.Value, ho: ir.Value, wo: ir.Value,
             offsets: list[ir.Value]) -> list[ir.Value]:
        b = self.kernel.b
        c0 = self.corner(n, ho, wo)
        return [irutil.load(b, self.ptr, self.x.dtype, irutil.add(b, c0, o)) for o in offsets]


class _Vec:
    """Explicit ``VECTOR_BYTES``-wide vectors of ``dtype`` (f32 or f64) for builder ``b``:
    unaligned loads and stores at element offsets, and splats of scalars."""

    def __init__(self, b: ir.IRBuilder, dtype: DType) -> None:
        self.b, self.dtype = b, dtype
        self.width = VECTOR_BYTES // dtype.itemsize
        self.t = ir.VectorType(irutil.compute_type(dtype), self.width)
        self.zero = ir.Constant(self.t, [0.0] * self.width)

    def load(self, ptr: ir.Value, off: ir.Value) -> ir.Value:
        return self.b.load(irutil.elem_ptr(self.b, ptr, self.dtype, off), typ=self.t,
                           align=self.dtype.itemsize)

    def store(self, ptr: ir.Value, off: ir.Value, v: ir.Value) -> None:
        self.b.store(v, irutil.elem_ptr(self.b, ptr, self.dtype, off), align=self.dtype.itemsize)

    def splat(self, v: ir.Value) -> ir.Value:
        b, t = self.b, self.t
        one = b.insert_element(ir.Constant(t, ir.Undefined), v, ir.Constant(irutil.I32, 0))
        return b.shuffle_vector(one, ir.Constant(t, ir.Undefined),
                                ir.Constant(ir.VectorType(irutil.I32, self.width),
                                            [0] * self.width))

    def fma(self, x: ir.Value, y: ir.Value, acc: ir.Value | None) -> ir.Value:
        p = self.b.fmul(x, y, flags=irutil.FAST)
        return p if acc is None else self.b.fadd(acc, p, flags=irutil.FAST)


def _vector_channels(dtype: DType, co) -> int | None:
    """Vectors of output channels when ``co`` is static and whole vectors, else None."""
    width = VECTOR_BYTES // dtype.itemsize
    if isinstance(co, int) and co > 0 and co % width == 0 and dtype.itemsize in (4, 8):
        return co // width
    return None


def _scratch_storage(graph_compiler, nbytes: Callable[[Binding], int]) -> Storage:
    graph_compiler.comp.scratch.append(nbytes)
    return Storage("scratch", 0)


def direct_conv2d(graph_compiler, op: Op, kh: int, kw: int) -> None:
    """``out[n, ho, wo, :] = sum_t taps[t] * W[t, :]``, split over images (each pads its
    own images): output channels in whole vectors take ``_conv_rows_vector``; otherwise
    per pixel the taps are loaded once, then a loop over output channels (vectorized by
    LLVM) does the sums."""
    x, w = op.inputs
    out = op.result
    dt = out.dtype
    pad = _Padded(op, x, kh, kw)
    extra = ([_scratch_storage(graph_compiler,
                               lambda binding: pad.elements(binding) * dt.itemsize)]
             if pad.same else [])
    kernel = graph_compiler.kernel("conv2d", [x, w, out], extra)
    pad.bind(kernel, kernel.storage_ptr(extra[0]) if extra else None, ZERO)
    b = kernel.b
    od = kernel.dims(out)
    co = od[3]
    offsets = pad.tap_offsets()
    key, fn = dim_key(out, 0)
    lo, hi = kernel.extent_of([od[0]], key, fn, out)

    nvec = _vector_channels(dt, w.type.shape[3])

    def image(n, _c) -> None:
        pad.copy_image(n)
        if nvec is not None:
            _conv_rows_vector(kernel, pad, w, out, n, offsets, nvec)
            return

        def pixel(idx, _c2) -> None:
            ho, wo = idx
            vals = pad.taps(n, ho, wo, offsets)
            obase = irutil.linear(b, [n, ho, wo, ZERO], od)

            def chan(o, _c3) -> None:
                acc = None
                for t, v in enumerate(vals):
                    wv = irutil.load(b, kernel.ptr(w), dt,
                                     irutil.add(b, irutil.mul(b, irutil.i64(t), co), o))
                    p = b.fmul(v, wv, flags=irutil.FAST)
                    acc = p if acc is None else b.fadd(acc, p, flags=irutil.FAST)
                irutil.store(b, kernel.ptr(out), dt, b.add(obase, o), acc)

            irutil.loop(b, ZERO, co, chan, name="co")

        irutil.loop_nest(b, [(ZERO, od[1]), (ZERO, od[2])], pixel, name="px")

    irutil.loop(b, lo, hi, image, name="n")
    kernel.finish()


def _conv_rows_vector(kernel: Kernel, pad: "_Padded", w: Value, out: Value, n: ir.Value,
                      offsets: list[ir.Value], nvec: int) -> None:
    """Image ``n`` of a direct conv with whole vectors of output channels: per row and
    block of up to 4 channel vectors, pixels go in pairs (a tail pixel alone) with
    ``pair x block`` accumulators (8 vectors), each filter vector loaded once per pair
    and each tap value splat once."""
    b = kernel.b
    dt = out.dtype
    vec = _Vec(b, dt)
    width = vec.width
    od = kernel.dims(out)
    co = nvec * width
    nb = min(nvec, 4)
    pb = max(1, ACC_REGISTERS // nb)
    wo_n = od[2]
    pairs = b.sdiv(wo_n, irutil.i64(pb))

    def block(ho: ir.Value, wo0: ir.Value, npix: int, v0: int, nv: int) -> None:
        corners = [pad.corner(n, ho, b.add(wo0, irutil.i64(p))) for p in range(npix)]
        acc: list[ir.Value | None] = [None] * (npix * nv)
        for t, off in enumerate(offsets):
            xs = [vec.splat(irutil.load(b, pad.ptr, pad.x.dtype, irutil.add(b, c0, off)))
                  for c0 in corners]
            for v in range(nv):
                wv = vec.load(kernel.ptr(w), irutil.i64(t * co + (v0 + v) * width))
                for p in range(npix):
                    acc[p * nv + v] = vec.fma(xs[p], wv, acc[p * nv + v])
        for p in range(npix):
            obase = irutil.linear(b, [n, ho, b.add(wo0, irutil.i64(p)), ZERO], od)
            for v in range(nv):
                vec.store(kernel.ptr(out), irutil.add(b, obase, irutil.i64((v0 + v) * width)),
                          acc[p * nv + v])

    def row(ho, _c) -> None:
        for v0 in range(0, nvec, nb):
            nv = min(nb, nvec - v0)
            # (irutil.loop emits the body now, so the lambdas see this iteration's v0 and nv)
            irutil.loop(b, ZERO, pairs, lambda k, _c2:
                        block(ho, b.mul(k, irutil.i64(pb)), pb, v0, nv), name="pair")
            if pb > 1:
                irutil.loop(b, b.mul(pairs, irutil.i64(pb)), wo_n, lambda k, _c2:
                            block(ho, k, 1, v0, nv), name="tail")

    irutil.loop(b, ZERO, od[1], row, name="ho")


def _vector_passes(ntaps: int, co: int, width: int) -> list[tuple[int, int, int, int]]:
    """Register blocks of the backprop-filter kernel: (first tap, taps, first vector of
    output channels, vectors), covering taps x ``co / width`` vectors with at most
    ``ACC_REGISTERS`` accumulators each."""
    nvec = co // width
    nb = min(nvec, 4)
    tb = max(1, ACC_REGISTERS // nb)
    return [(t0, min(tb, ntaps - t0), v0, min(nb, nvec - v0))
            for v0 in range(0, nvec, nb) for t0 in range(0, ntaps, tb)]


def direct_backprop_filter(graph_compiler, op: Op, kh: int, kw: int) -> None:
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
    ct = irutil.compute_type(dt)
    pad = _Padded(op, x, kh, kw)
    ntaps = kh * kw * pad.channels
    co_dim = like.type.shape[3]
    co_static = co_dim if isinstance(co_dim, int) else 0  # 0: symbolic, no vector passes

    def nbytes(binding: Binding) -> int:
        d = binding.shape(dy)
        return (d[0] * ntaps * d[3] + pad.elements(binding)) * dt.itemsize
    scratch = _scratch_storage(graph_compiler, nbytes)
    kernel = graph_compiler.kernel("conv2d_bwd_filter", [x, dy, out], [scratch])
    b = kernel.b
    part = kernel.storage_ptr(scratch)
    dd = kernel.dims(dy)
    co = dd[3]
    block = irutil.mul(b, irutil.i64(ntaps), co)
    pad.bind(kernel, part, irutil.mul(b, dd[0], block))
    offsets = pad.tap_offsets()
    zero = ir.Constant(ct, 0.0)
    vec = _Vec(b, dt)
    width = vec.width
    passes = (_vector_passes(ntaps, co_static, width)
              if _vector_channels(dt, co_static) is not None else None)
    key, fn = dim_key(dy, 0)
    lo, hi = kernel.extent_of([dd[0]], key, fn, dy)

    def image(n, _c) -> None:
        pad.copy_image(n)
        pbase = irutil.mul(b, n, block)

        if passes is not None:
            # dy's image is read once per block (from cache after the first)
            for t0, nt, v0, nv in passes:
                def block_pixel(idx, acc, t0=t0, nt=nt, v0=v0, nv=nv) -> list[ir.Value]:
                    ho, wo = idx
                    dbase = irutil.linear(b, [n, ho, wo, ZERO], dd)
                    g = [vec.load(kernel.ptr(dy),
                                  irutil.add(b, dbase, irutil.i64((v0 + v) * width)))
                         for v in range(nv)]
                    c0 = pad.corner(n, ho, wo)
                    nxt = []
                    for t in range(nt):
                        xv = vec.splat(irutil.load(b, pad.ptr, x.dtype,
                                                   irutil.add(b, c0, offsets[t0 + t])))
                        for v in range(nv):
                            nxt.append(vec.fma(xv, g[v], acc[t * nv + v]))
                    return nxt

                res = irutil.loop_nest(b, [(ZERO, dd[1]), (ZERO, dd[2])], block_pixel,
                                       [vec.zero] * (nt * nv), name="px")
                for t in range(nt):
                    for v in range(nv):
                        at = irutil.add(b, pbase,
                                        irutil.i64((t0 + t) * co_static + (v0 + v) * width))
                        vec.store(part, at, res[t * nv + v])
            return

        irutil.loop(b, ZERO, block, lambda i, _c2: irutil.store(b, part, dt, b.add(pbase, i), zero),
                    name="z")

        def pixel(idx, _c2) -> None:
            ho, wo = idx
            vals = pad.taps(n, ho, wo, offsets)
            dbase = irutil.linear(b, [n, ho, wo, ZERO], dd)

            def chan(o, _c3) -> None:
                g = irutil.load(b, kernel.ptr(dy), dt, b.add(dbase, o))
                for t, v in enumerate(vals):
                    at = b.add(pbase, irutil.add(b, irutil.mul(b, irutil.i64(t), co), o))
                    cur = irutil.load(b, part, dt, at)
                    irutil.store(b, part, dt, at, b.fadd(cur, b.fmul(v, g, flags=irutil.FAST),
                                                         flags=irutil.FAST))

            irutil.loop(b, ZERO, co, chan, name="co")

        irutil.loop_nest(b, [(ZERO, dd[1]), (ZERO, dd[2])], pixel, name="px")

    irutil.loop(b, lo, hi, image, name="n")
    kernel.finish()

    # the images' partial sums into dW
    ks = graph_compiler.kernel("conv2d_bwd_filter_sum", [dy, out], [scratch])
    ks.whole()
    b = ks.b
    part = ks.storage_ptr(scratch)
    dd = ks.dims(dy)
    block = irutil.mul(b, irutil.i64(ntaps), dd[3])
    irutil.loop(b, ZERO, block, lambda i, _c: irutil.store(b, ks.ptr(out), dt, i, zero), name="z")

    def add(idx, _c) -> None:
        n, i = idx
        cur = irutil.load(b, ks.ptr(out), dt, i)
        irutil.store(b, ks.ptr(out), dt, i, b.fadd(cur, irutil.load(b, part, dt,
                                                                    b.add(b.mul(n, block), i))))

    irutil.loop_nest(b, [(ZERO, dd[0]), (ZERO, block)], add, name="s")
    ks.finish()
