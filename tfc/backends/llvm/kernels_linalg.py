"""Matrix products and convolutions: OpenBLAS ``cblas_sgemm``/``cblas_dgemm`` from native code.

``matmul`` (2-D or batched, transpose flags, broadcast batch dims) is one GEMM call per
matrix of the batch, row-major, the flags passed to BLAS (no transposed copies). A batch
input broadcast along a batch dim reuses its matrix (stride 0).

Convolutions with few taps (``kh*kw*C_in <= MAX_DIRECT_TAPS``, C_in static) are
*direct*: a 3x3 filter on one channel makes a GEMM with an inner dimension of 9, and
im2col writes nine copies of the input for it. SAME padding is made real once per image
(zeros, in scratch), so every tap of every output pixel is at a constant distance from
the pixel's corner and no load is checked. ``conv2d`` splits over images: per row,
pixels go in pairs with every vector of output channels accumulated in registers (each
filter vector loaded once per pair); output channels that are not whole vectors take a
loop over them per pixel, which LLVM vectorizes. ``conv2d_backprop_filter`` sums each
image's pixels into a block of partial sums in register blocks of (taps x channel
vectors) (``_vector_passes``), splitting over images too, then a second kernel adds the
images' blocks (per-image partial sums: rounding near a blocked GEMM's).

Other convolutions are im2col into the arena's scratch area (``[N*Ho*Wo, kh*kw*C]``,
padding as zeros) followed by one GEMM with the filter seen as ``[kh*kw*C, Co]``;
``conv2d_backprop_filter`` is the same im2col and ``cols^T @ dy``;
``conv2d_backprop_input`` (always) is ``dy @ W^T`` into scratch, then col2im (each
column element added to its input pixel). Only f32 and f64 (BLAS types); other dtypes
are not lowered.
"""

from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from tfc.backends.llvm import irutil as U
from tfc.backends.llvm.blas import DGEMM, NO_TRANS, ROW_MAJOR, SGEMM, TRANS, declare_gemm
from tfc.backends.llvm.context import Binding, Kernel, Storage, dim_key
from tfc.backends.llvm.kernels_array import inside, pad_before
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.ir.core import Op, Value
from tfc.ir.types import DType
from tfc.ops.nn import spatial_attr, window_padding

ZERO = U.i64(0)


def _gemm_fn(kc: Kernel, dtype: DType) -> tuple[ir.Function, ir.Type]:
    if dtype is DType.f32:
        return declare_gemm(kc.comp.module, SGEMM, U.F32), U.F32
    if dtype is DType.f64:
        return declare_gemm(kc.comp.module, DGEMM, U.F64), U.F64
    raise Unsupported(f"{dtype.value} matrix products")


def gemm(kc: Kernel, dtype: DType, ta: bool, tb: bool, m: ir.Value, n: ir.Value,
         k: ir.Value, a: ir.Value, lda: ir.Value, b_: ir.Value, ldb: ir.Value,
         c: ir.Value, ldc: ir.Value, beta: float = 0.0) -> None:
    """``C[m,n] = op(A) @ op(B) (+ beta C)``, row-major; skipped when the result is empty
    (and C zeroed by BLAS's ``beta = 0`` when ``k`` is 0)."""
    b = kc.b
    fn, ft = _gemm_fn(kc, dtype)
    i32 = U.I32

    def t32(v: ir.Value) -> ir.Value:
        return b.trunc(v, i32)

    def at_least_1(v: ir.Value) -> ir.Value:
        return b.select(b.icmp_signed("<", v, U.i64(1)), U.i64(1), v)

    nonempty = b.and_(b.icmp_signed(">", m, ZERO), b.icmp_signed(">", n, ZERO))
    with b.if_then(nonempty):
        b.call(fn, [ir.Constant(i32, ROW_MAJOR), ir.Constant(i32, TRANS if ta else NO_TRANS),
                    ir.Constant(i32, TRANS if tb else NO_TRANS), t32(m), t32(n), t32(k),
                    ir.Constant(ft, 1.0), a, t32(at_least_1(lda)), b_, t32(at_least_1(ldb)),
                    ir.Constant(ft, beta), c, t32(at_least_1(ldc))])


def _elem(b: ir.IRBuilder, ptr: ir.Value, dtype: DType, off: ir.Value) -> ir.Value:
    return U.elem_ptr(b, ptr, dtype, off)


def lower_matmul(gc, op: Op) -> None:
    a, bm = op.inputs
    out = op.result
    kc = gc.kernel("matmul", [a, bm, out])
    kc.whole()
    batched_gemm(kc, op, a.dtype, kc.ptr(a), kc.ptr(bm), kc.ptr(out))
    kc.finish()


def batched_gemm(kc: Kernel, op: Op, dtype: DType, a_ptr: ir.Value, b_ptr: ir.Value,
                 c_ptr: ir.Value) -> None:
    """One GEMM per matrix of the batch of ``matmul`` ``op``, on operands of ``dtype`` at
    ``a_ptr``/``b_ptr`` laid out like its inputs, into ``c_ptr`` laid out like its result."""
    a, bm = op.inputs
    b = kc.b
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    ad, bd, od = kc.dims(a), kc.dims(bm), kc.dims(op.result)
    m, n = od[-2], od[-1]
    k = ad[-2] if ta else ad[-1]
    asz, bsz, osz = b.mul(ad[-2], ad[-1]), b.mul(bd[-2], bd[-1]), b.mul(m, n)
    batch = od[:-2]
    ra, rb = a.type.rank - 2, bm.type.rank - 2

    def body(idx, _c) -> None:
        r = len(idx)
        # broadcast batch dims: an input's size-1 batch dim reads matrix 0
        ai = [ZERO if a.type.shape[j] == 1 else idx[j + r - ra] for j in range(ra)]
        bi = [ZERO if bm.type.shape[j] == 1 else idx[j + r - rb] for j in range(rb)]
        aoff = b.mul(U.linear(b, ai, ad[:-2]), asz)
        boff = b.mul(U.linear(b, bi, bd[:-2]), bsz)
        ooff = b.mul(U.linear(b, idx, batch), osz)
        gemm(kc, dtype, ta, tb, m, n, k, _elem(b, a_ptr, dtype, aoff), ad[-1],
             _elem(b, b_ptr, dtype, boff), bd[-1], _elem(b, c_ptr, dtype, ooff), n)

    U.loop_nest(b, [(ZERO, d) for d in batch], body, name="bt")


# ---- convolution -------------------------------------------------------------------------------

def _conv_geometry(op: Op) -> tuple[tuple[int, int], tuple[int, int]]:
    return (spatial_attr(op.kind, "strides", op.attrs["strides"]),
            spatial_attr(op.kind, "dilations", op.attrs["dilations"]))


def _scratch(gc, cols_rows: Value, cols_width_of: Callable[[Binding], int],
             dtype: DType) -> Storage:
    """Reserve scratch for ``[rows of cols_rows' first 3 dims, width]``."""
    item = dtype.itemsize

    def nbytes(bd: Binding) -> int:
        s = bd.shapes[cols_rows]
        return s[0] * s[1] * s[2] * cols_width_of(bd) * item
    gc.comp.scratch.append(nbytes)
    return Storage("scratch", 0)


def _im2col(kc: Kernel, op: Op, x: Value, cols: ir.Value, out_like: Value,
            kh: int, kw: int) -> tuple[ir.Value, ir.Value]:
    """Fill ``cols[N*Ho*Wo, kh*kw*C]`` from NHWC ``x`` (zeros outside); returns
    (rows, width)."""
    b = kc.b
    (sh, sw), (dh, dw) = _conv_geometry(op)
    xd = kc.dims(x)
    od = kc.dims(out_like)
    c = xd[3]
    ph = pad_before(kc, op, x, 1, kh, sh, dh)
    pw = pad_before(kc, op, x, 2, kw, sw, dw)
    width = b.mul(U.i64(kh * kw), c)
    dt = x.dtype

    def body(idx, _c) -> None:
        n, ho, wo, i, j = idx
        row = U.linear(b, [n, ho, wo], od[:3])
        hi = b.add(b.sub(b.mul(ho, U.i64(sh)), ph), U.i64(0))
        hi = b.add(hi, b.mul(i, U.i64(dh)))
        wi = b.add(b.sub(b.mul(wo, U.i64(sw)), pw), b.mul(j, U.i64(dw)))
        ok = b.and_(b.and_(b.icmp_signed(">=", hi, ZERO), b.icmp_signed("<", hi, xd[1])),
                    b.and_(b.icmp_signed(">=", wi, ZERO), b.icmp_signed("<", wi, xd[2])))
        src = U.linear(b, [n, b.select(ok, hi, ZERO), b.select(ok, wi, ZERO), ZERO], xd)
        dst = b.add(b.mul(row, width), b.mul(b.add(b.mul(i, U.i64(kw)), j), c))
        zero = ir.Constant(U.compute_type(dt), 0.0)

        def chan(ci, _c2) -> None:
            v = U.load(b, kc.ptr(x), dt, b.add(src, ci))
            U.store(b, cols, dt, b.add(dst, ci), b.select(ok, v, zero))

        U.loop(b, ZERO, c, chan, name="ch")

    U.loop_nest(b, [(ZERO, od[0]), (ZERO, od[1]), (ZERO, od[2]), (ZERO, U.i64(kh)),
                    (ZERO, U.i64(kw))], body, name="im")
    rows = U.product(b, od[:3])
    return rows, width


# Direct convolutions: when the filter's taps times input channels is at most this (and
# the input channels are static), a conv is a loop over output pixels with the taps'
# input values loaded once each; larger ones are im2col + one GEMM. With few input
# channels the GEMM has a tiny inner dimension (9 for a 3x3 filter on one channel) and
# im2col writes 9 times the input.
MAX_DIRECT_TAPS = 32
VECTOR_BYTES = 32  # AVX2: the explicit vector kernels' register width
ACC_REGISTERS = 8  # accumulator vectors of the backprop-filter kernel (of 16 registers)


def _direct(x: Value, kh: int, kw: int) -> bool:
    c = x.type.shape[3]
    return isinstance(c, int) and kh * kw * c <= MAX_DIRECT_TAPS


class _Padded:
    """The input of a direct convolution as the kernels read it: ``[N, Hp, Wp, C]`` with
    the SAME padding made real (zeros, in scratch at ``offset`` elements, one image per
    batch index) so that every tap of every output pixel is at a constant distance from
    the pixel's corner and no load is checked. VALID reads the input in place."""

    def __init__(self, op: Op, x: Value, kh: int, kw: int) -> None:
        self.op, self.x, self.kh, self.kw = op, x, kh, kw
        self.same = op.attrs["padding"] != "VALID"
        (self.sh, self.sw), (self.dh, self.dw) = _conv_geometry(op)

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
        self.ptr = _elem(kc.b, scratch, x.dtype, offset)
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
                for ci in range(self.x.type.shape[3]):
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
        return self.b.load(_elem(self.b, ptr, self.dtype, off), typ=self.t,
                           align=self.dtype.itemsize)

    def store(self, ptr: ir.Value, off: ir.Value, v: ir.Value) -> None:
        self.b.store(v, _elem(self.b, ptr, self.dtype, off), align=self.dtype.itemsize)

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


def _direct_conv2d(gc, op: Op, kh: int, kw: int) -> None:
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
            U.loop(b, ZERO, pairs, lambda k, _c2, v0=v0, nv=nv:
                   block(ho, b.mul(k, U.i64(pb)), pb, v0, nv), name="pair")
            if pb > 1:
                U.loop(b, b.mul(pairs, U.i64(pb)), wo_n, lambda k, _c2, v0=v0, nv=nv:
                       block(ho, k, 1, v0, nv), name="tail")

    U.loop(b, ZERO, od[1], row, name="ho")


def lower_conv2d(gc, op: Op) -> None:
    x, w = op.inputs
    out = op.result
    kh, kw = _conv_check(x.dtype, w)
    if _direct(x, kh, kw):
        _direct_conv2d(gc, op, kh, kw)
        return
    scratch = _scratch(gc, out, lambda bd: kh * kw * bd.shapes[x][3], x.dtype)
    kc = gc.kernel("conv2d", [x, w, out], [scratch])
    kc.whole()
    cols = kc.storage_ptr(scratch)
    rows, width = _im2col(kc, op, x, cols, out, kh, kw)
    co = kc.dim(w, 3)
    gemm(kc, x.dtype, False, False, rows, co, width, cols, width, kc.ptr(w), co,
         kc.ptr(out), co)
    kc.finish()


def _vector_passes(ntaps: int, co: int, width: int) -> list[tuple[int, int, int, int]]:
    """Register blocks of the backprop-filter kernel: (first tap, taps, first vector of
    output channels, vectors), covering taps x ``co / width`` vectors with at most
    ``ACC_REGISTERS`` accumulators each."""
    nvec = co // width
    nb = min(nvec, 4)
    tb = max(1, ACC_REGISTERS // nb)
    return [(t0, min(tb, ntaps - t0), v0, min(nb, nvec - v0))
            for v0 in range(0, nvec, nb) for t0 in range(0, ntaps, tb)]


def _direct_backprop_filter(gc, op: Op, kh: int, kw: int) -> None:
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
    ntaps = kh * kw * x.type.shape[3]
    pad = _Padded(op, x, kh, kw)
    co_static = like.type.shape[3]

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
                def pixel(idx, acc, t0=t0, nt=nt, v0=v0, nv=nv) -> list[ir.Value]:
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

                res = U.loop_nest(b, [(ZERO, dd[1]), (ZERO, dd[2])], pixel,
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


def lower_conv2d_backprop_filter(gc, op: Op) -> None:
    x, dy, like = op.inputs
    out = op.result
    kh, kw = _conv_check(x.dtype, like)
    if _direct(x, kh, kw):
        _direct_backprop_filter(gc, op, kh, kw)
        return
    scratch = _scratch(gc, dy, lambda bd: kh * kw * bd.shapes[x][3], x.dtype)
    kc = gc.kernel("conv2d_bwd_filter", [x, dy, out], [scratch])
    kc.whole()
    cols = kc.storage_ptr(scratch)
    rows, width = _im2col(kc, op, x, cols, dy, kh, kw)
    co = kc.dim(dy, 3)
    # dW[width, Co] = cols^T [width, rows] @ dy [rows, Co]
    gemm(kc, x.dtype, True, False, width, co, rows, cols, width, kc.ptr(dy), co,
         kc.ptr(out), co)
    kc.finish()


def lower_conv2d_backprop_input(gc, op: Op) -> None:
    w, dy, like = op.inputs
    out = op.result
    kh, kw = _conv_check(w.dtype, w)
    scratch = _scratch(gc, dy, lambda bd: kh * kw * bd.shapes[like][3], w.dtype)
    kc = gc.kernel("conv2d_bwd_input", [w, dy, out], [scratch])
    kc.whole()
    b = kc.b
    cols = kc.storage_ptr(scratch)
    dd, xd = kc.dims(dy), kc.dims(out)
    c, co = xd[3], dd[3]
    rows = U.product(b, dd[:3])
    width = b.mul(U.i64(kh * kw), c)
    # dcols[rows, width] = dy [rows, Co] @ W^T  (W seen as [width, Co])
    gemm(kc, w.dtype, False, True, rows, width, co, kc.ptr(dy), co, kc.ptr(w), co, cols, width)
    dt = out.dtype
    zero = ir.Constant(U.compute_type(dt), 0.0)
    U.loop(b, ZERO, kc.size(out), lambda i, _c: U.store(b, kc.ptr(out), dt, i, zero), name="z")
    (sh, sw), (dh, dw) = _conv_geometry(op)
    ph = pad_before(kc, op, out, 1, kh, sh, dh)
    pw = pad_before(kc, op, out, 2, kw, sw, dw)

    def body(idx, _c) -> None:
        n, ho, wo, i, j = idx
        row = U.linear(b, [n, ho, wo], dd[:3])
        hi = b.add(b.sub(b.mul(ho, U.i64(sh)), ph), b.mul(i, U.i64(dh)))
        wi = b.add(b.sub(b.mul(wo, U.i64(sw)), pw), b.mul(j, U.i64(dw)))
        ok = b.and_(b.and_(b.icmp_signed(">=", hi, ZERO), b.icmp_signed("<", hi, xd[1])),
                    b.and_(b.icmp_signed(">=", wi, ZERO), b.icmp_signed("<", wi, xd[2])))
        with b.if_then(ok):
            dst = U.linear(b, [n, hi, wi, ZERO], xd)
            src = b.add(b.mul(row, width), b.mul(b.add(b.mul(i, U.i64(kw)), j), c))

            def chan(ci, _c2) -> None:
                cur = U.load(b, kc.ptr(out), dt, b.add(dst, ci))
                v = U.load(b, cols, dt, b.add(src, ci))
                U.store(b, kc.ptr(out), dt, b.add(dst, ci), b.fadd(cur, v, flags=U.FAST))

            U.loop(b, ZERO, c, chan, name="ch")

    U.loop_nest(b, [(ZERO, dd[0]), (ZERO, dd[1]), (ZERO, dd[2]), (ZERO, U.i64(kh)),
                    (ZERO, U.i64(kw))], body, name="ci")
    kc.finish()


def _conv_check(dtype: DType, filt: Value) -> tuple[int, int]:
    """The filter's (height, width) of a convolution the GEMM kernels can run."""
    if dtype not in (DType.f32, DType.f64):
        raise Unsupported(f"{dtype.value} convolutions")
    kh, kw = filt.type.shape[0], filt.type.shape[1]
    if not (isinstance(kh, int) and isinstance(kw, int)):
        raise Unsupported("a symbolic filter size")
    return kh, kw


def _matmul_check(gc, op: Op) -> None:
    if op.inputs[0].dtype not in (DType.f32, DType.f64):
        raise Unsupported(f"{op.inputs[0].dtype.value} matrix products")
    lower_matmul(gc, op)


LOWERINGS: dict[str, Callable] = {
    "matmul": _matmul_check,
    "conv2d": lower_conv2d,
    "conv2d_backprop_filter": lower_conv2d_backprop_filter,
    "conv2d_backprop_input": lower_conv2d_backprop_input,
}
