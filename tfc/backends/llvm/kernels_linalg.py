"""Matrix products and convolutions: OpenBLAS ``cblas_sgemm``/``cblas_dgemm`` from native code.

``matmul`` (2-D or batched, transpose flags, broadcast batch dims) is one GEMM call per
matrix of the batch, row-major, the flags passed to BLAS (no transposed copies). A batch
input broadcast along a batch dim reuses its matrix (stride 0).

Convolutions with few taps (``kh*kw*C_in`` small) are direct (``kernels_conv_direct``).
Other convolutions are im2col into the arena's scratch area (``[N*Ho*Wo, kh*kw*C]``,
padding as zeros) followed by one GEMM with the filter seen as ``[kh*kw*C, Co]``;
``conv2d_backprop_filter`` is the same im2col and ``cols^T @ dy``;
``conv2d_backprop_input`` (always) is ``dy @ W^T`` into scratch, then col2im (each
column element added to its input pixel). BLAS has f32 and f64: f16 convolutions widen
their operands to f32 in scratch, run the f32 route and round the result once (as the
reference: ``_Wide``; f16 ``matmul`` is ``kernels_lapack``'s); i32/i64 products are
loop kernels (``int_gemm``), wrapping on overflow as numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from tfc.backends.llvm import irutil
from tfc.backends.llvm.blas import NO_TRANS, ROW_MAJOR, TRANS, declare_gemm
from tfc.backends.llvm.context import Kernel, Storage
from tfc.backends.llvm.kernels_array import pad_before
from tfc.backends.llvm.kernels_conv_direct import (conv_geometry, direct_backprop_filter,
                                                   direct_conv2d, is_direct)
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.backends.binding import Binding
from tfc.backends.llvm.runtime.symbols import DGEMM, SGEMM
from tfc.ir.core import Op, Value
from tfc.ir.types import DType

ZERO = irutil.i64(0)


def _gemm_fn(kernel: Kernel, dtype: DType) -> tuple[ir.Function, ir.Type]:
    if dtype is DType.f32:
        return declare_gemm(kernel.comp.module, SGEMM, irutil.F32), irutil.F32
    if dtype is DType.f64:
        return declare_gemm(kernel.comp.module, DGEMM, irutil.F64), irutil.F64
    raise Unsupported(f"{dtype.value} matrix products")


@dataclass(frozen=True)
class GemmSpec:
    """One row-major matrix product ``C[m,n] = alpha op(A) @ op(B) (+ beta C)``, as BLAS
    takes it: ``op`` transposes where ``transpose_a``/``transpose_b``; ``a``, ``b``, ``c``
    point at the operands of ``dtype`` and ``lda``, ``ldb``, ``ldc`` are their leading
    dimensions (row strides, in elements)."""

    dtype: DType
    m: ir.Value
    n: ir.Value
    k: ir.Value
    a: ir.Value
    lda: ir.Value
    b: ir.Value
    ldb: ir.Value
    c: ir.Value
    ldc: ir.Value
    transpose_a: bool = False
    transpose_b: bool = False
    alpha: float = 1.0
    beta: float = 0.0


def gemm(kernel: Kernel, spec: GemmSpec) -> None:
    """The product ``spec`` in ``kernel``; skipped when the result is empty (and C zeroed
    by BLAS's ``beta = 0`` when ``k`` is 0). Integer dtypes (no BLAS has them) take
    ``int_gemm``'s loops."""
    if spec.dtype.is_int:
        int_gemm(kernel, spec)
        return
    dtype, ta, tb, m, n, k = (spec.dtype, spec.transpose_a, spec.transpose_b, spec.m, spec.n,
                              spec.k)
    a, lda, b_, ldb, c, ldc = spec.a, spec.lda, spec.b, spec.ldb, spec.c, spec.ldc
    alpha, beta = spec.alpha, spec.beta
    b = kernel.b
    fn, ft = _gemm_fn(kernel, dtype)
    i32 = irutil.I32

    def t32(v: ir.Value) -> ir.Value:
        return b.trunc(v, i32)

    def at_least_1(v: ir.Value) -> ir.Value:
        return b.select(b.icmp_signed("<", v, irutil.i64(1)), irutil.i64(1), v)

    nonempty = b.and_(b.icmp_signed(">", m, ZERO), b.icmp_signed(">", n, ZERO))
    with b.if_then(nonempty):
        b.call(fn, [ir.Constant(i32, ROW_MAJOR), ir.Constant(i32, TRANS if ta else NO_TRANS),
                    ir.Constant(i32, TRANS if tb else NO_TRANS), t32(m), t32(n), t32(k),
                    ir.Constant(ft, alpha), a, t32(at_least_1(lda)), b_, t32(at_least_1(ldb)),
                    ir.Constant(ft, beta), c, t32(at_least_1(ldc))])


def int_gemm(kernel: Kernel, spec: GemmSpec) -> None:
    """``gemm`` for i32/i64 as loops, wrapping on overflow as numpy's integer matmul
    (LLVM ``add``/``mul`` without ``nsw``; sums mod 2^bits do not depend on the order).

    The innermost loop runs over contiguous memory so LLVM vectorizes it: ``i-k-j``
    (``C[i,:] += A[i,p] * B[p,:]``, the row of C staying in L1 across ``p``) unless only B
    is transposed, where each ``C[i,j]`` is the dot product of two contiguous rows (an
    integer reduction, which vectorizes without reassociation flags). Both transposed
    keeps ``i-k-j`` with B read at a stride (rare; correct, not fast)."""
    dtype, ta, tb, m, n, k = (spec.dtype, spec.transpose_a, spec.transpose_b, spec.m, spec.n,
                              spec.k)
    a, lda, b_, ldb, c, ldc = spec.a, spec.lda, spec.b, spec.ldb, spec.c, spec.ldc
    alpha, beta = spec.alpha, spec.beta
    if alpha != 1.0 or beta not in (0.0, 1.0):
        raise Unsupported(f"an integer product scaled by {alpha} (+ {beta} C)")
    b = kernel.b
    zero = ir.Constant(irutil.compute_type(dtype), 0)

    def at_a(i: ir.Value, p: ir.Value) -> ir.Value:
        return irutil.load(b, a, dtype, b.add(b.mul(p, lda), i) if ta else b.add(b.mul(i, lda), p))

    def at_b(p: ir.Value, j: ir.Value) -> ir.Value:
        return irutil.load(b, b_, dtype, b.add(b.mul(j, ldb), p) if tb else b.add(b.mul(p, ldb), j))

    def c_at(i: ir.Value, j: ir.Value) -> ir.Value:
        return b.add(b.mul(i, ldc), j)

    if tb and not ta:
        def dot(ij, _c) -> None:
            i, j = ij
            (s,) = irutil.loop(b, ZERO, k, lambda p, acc: [b.add(acc[0], b.mul(at_a(i, p),
                                                                               at_b(p, j)))],
                               [zero], name="p")
            if beta:
                s = b.add(s, irutil.load(b, c, dtype, c_at(i, j)))
            irutil.store(b, c, dtype, c_at(i, j), s)

        irutil.loop_nest(b, [(ZERO, m), (ZERO, n)], dot, name="ij")
        return

    def row(i: ir.Value, _c) -> None:
        if not beta:
            irutil.loop(b, ZERO, n, lambda j, _c2: irutil.store(b, c, dtype, c_at(i, j), zero),
                        name="z")

        def per_p(p: ir.Value, _c2) -> None:
            av = at_a(i, p)

            def per_j(j: ir.Value, _c3) -> None:
                at = c_at(i, j)
                irutil.store(b, c, dtype, at,
                             b.add(irutil.load(b, c, dtype, at), b.mul(av, at_b(p, j))))
            irutil.loop(b, ZERO, n, per_j, name="j")

        irutil.loop(b, ZERO, k, per_p, name="p")

    irutil.loop(b, ZERO, m, row, name="i")


def _elem(b: ir.IRBuilder, ptr: ir.Value, dtype: DType, off: ir.Value) -> ir.Value:
    return irutil.elem_ptr(b, ptr, dtype, off)


def lower_matmul(graph_compiler, op: Op) -> None:
    a, bm = op.inputs
    out = op.result
    kernel = graph_compiler.kernel("matmul", [a, bm, out])
    kernel.whole()
    batched_gemm(kernel, op, a.dtype, kernel.ptr(a), kernel.ptr(bm), kernel.ptr(out))
    kernel.finish()


def batched_gemm(kernel: Kernel, op: Op, dtype: DType, a_ptr: ir.Value, b_ptr: ir.Value,
                 c_ptr: ir.Value, alpha: float = 1.0, beta: float = 0.0) -> None:
    """One GEMM per matrix of the batch of ``matmul`` ``op``, on operands of ``dtype`` at
    ``a_ptr``/``b_ptr`` laid out like its inputs, into ``c_ptr`` laid out like its result
    (``C = alpha A @ B + beta C``)."""
    a, bm = op.inputs
    b = kernel.b
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    ad, bd, od = kernel.dims(a), kernel.dims(bm), kernel.dims(op.result)
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
        aoff = b.mul(irutil.linear(b, ai, ad[:-2]), asz)
        boff = b.mul(irutil.linear(b, bi, bd[:-2]), bsz)
        ooff = b.mul(irutil.linear(b, idx, batch), osz)
        gemm(kernel, GemmSpec(dtype, m, n, k, a=_elem(b, a_ptr, dtype, aoff), lda=ad[-1],
                              b=_elem(b, b_ptr, dtype, boff), ldb=bd[-1],
                              c=_elem(b, c_ptr, dtype, ooff), ldc=n, transpose_a=ta,
                              transpose_b=tb, alpha=alpha, beta=beta))

    irutil.loop_nest(b, [(ZERO, d) for d in batch], body, name="bt")


# ---- convolution -------------------------------------------------------------------------------

def _scratch(graph_compiler, cols_rows: Value, cols_width_of: Callable[[Binding], int],
             dtype: DType, extra: Callable[[Binding], int] = lambda binding: 0) -> Storage:
    """Reserve scratch for ``[rows of cols_rows' first 3 dims, width]`` and ``extra``
    elements after it (of ``dtype``)."""
    item = dtype.itemsize

    def nbytes(binding: Binding) -> int:
        s = binding.shape(cols_rows)
        return (s[0] * s[1] * s[2] * cols_width_of(binding) + extra(binding)) * item
    graph_compiler.comp.scratch.append(nbytes)
    return Storage("scratch", 0)


def _im2col(kernel: Kernel, op: Op, x: Value, cols: ir.Value, out_like: Value,
            kh: int, kw: int, cols_dt: DType | None = None) -> tuple[ir.Value, ir.Value]:
    """Fill ``cols[N*Ho*Wo, kh*kw*C]`` (of ``cols_dt``, default ``x``'s dtype) from NHWC
    ``x`` (zeros outside); returns (rows, width)."""
    b = kernel.b
    (sh, sw), (dh, dw) = conv_geometry(op)
    xd = kernel.dims(x)
    od = kernel.dims(out_like)
    c = xd[3]
    ph = pad_before(kernel, op, x, 1, kh, sh, dh)
    pw = pad_before(kernel, op, x, 2, kw, sw, dw)
    width = b.mul(irutil.i64(kh * kw), c)
    dt = x.dtype
    cdt = cols_dt or dt

    def body(idx, _c) -> None:
        n, ho, wo, i, j = idx
        row = irutil.linear(b, [n, ho, wo], od[:3])
        hi = b.add(b.sub(b.mul(ho, irutil.i64(sh)), ph), irutil.i64(0))
        hi = b.add(hi, b.mul(i, irutil.i64(dh)))
        wi = b.add(b.sub(b.mul(wo, irutil.i64(sw)), pw), b.mul(j, irutil.i64(dw)))
        ok = b.and_(b.and_(b.icmp_signed(">=", hi, ZERO), b.icmp_signed("<", hi, xd[1])),
                    b.and_(b.icmp_signed(">=", wi, ZERO), b.icmp_signed("<", wi, xd[2])))
        src = irutil.linear(b, [n, b.select(ok, hi, ZERO), b.select(ok, wi, ZERO), ZERO], xd)
        dst = b.add(b.mul(row, width), b.mul(b.add(b.mul(i, irutil.i64(kw)), j), c))
        zero = ir.Constant(irutil.compute_type(dt), 0.0)

        def chan(ci, _c2) -> None:
            v = irutil.load(b, kernel.ptr(x), dt, b.add(src, ci))
            irutil.store(b, cols, cdt, b.add(dst, ci), b.select(ok, v, zero))

        irutil.loop(b, ZERO, c, chan, name="ch")

    irutil.loop_nest(b, [(ZERO, od[0]), (ZERO, od[1]), (ZERO, od[2]), (ZERO, irutil.i64(kh)),
                         (ZERO, irutil.i64(kw))], body, name="im")
    rows = irutil.product(b, od[:3])
    return rows, width


# Direct convolutions: when the filter's taps times input channels is at most this (and
# the input channels are static), a conv is a loop over output pixels with the taps'
# input values loaded once each; larger ones are im2col + one GEMM. With few input
# channels the GEMM has a tiny inner dimension (9 for a 3x3 filter on one channel) and
# im2col writes 9 times the input.


@dataclass(frozen=True)
class Im2colConv:
    """A convolution or its filter gradient as im2col + one GEMM: the kernel's ``name``;
    im2col's input ``image`` (NHWC), a row per element of ``rows_like``'s first three
    dims; the GEMM's ``other`` operand and ``product(kernel, dtype, cols, rows, width,
    other_ptr, out_ptr)``; the filter's size from ``filter_like``'s first two dims; and
    the ``direct`` kernel that runs instead where ``is_direct``."""

    name: str
    image: Value
    other: Value
    rows_like: Value
    filter_like: Value
    direct: Callable
    product: Callable


def _im2col_conv(graph_compiler, op: Op, conv: Im2colConv) -> None:
    """``conv`` of ``op``: im2col of the image into scratch, then one GEMM; f16 through
    ``_Wide``, and the direct kernel instead where ``is_direct``."""
    x, other, rows_like, filt = conv.image, conv.other, conv.rows_like, conv.filter_like
    name, direct, product = conv.name, conv.direct, conv.product
    out = op.result
    kh, kw = _conv_check(x.dtype, filt)
    wide = _Wide(x.dtype)
    if not wide and is_direct(x, kh, kw):
        direct(graph_compiler, op, kh, kw)
        return
    scratch = _scratch(graph_compiler, rows_like,
                       lambda binding: kh * kw * binding.shapes[x][3], wide.dt,
                       wide.extra(other, out))
    kernel = graph_compiler.kernel(name, [x, other, out], [scratch])
    kernel.whole()
    cols = kernel.storage_ptr(scratch)
    rows, width = _im2col(kernel, op, x, cols, rows_like, kh, kw, wide.dt)
    other_ptr, o_ptr = wide.operands(
        kernel, irutil.elem_ptr(kernel.b, cols, wide.dt, kernel.b.mul(rows, width)), [other], [out])
    product(kernel, wide.dt, cols, rows, width, other_ptr, o_ptr)
    wide.narrow(kernel, o_ptr, out)
    kernel.finish()


def lower_conv2d(graph_compiler, op: Op) -> None:
    x, w = op.inputs

    def product(kernel, dt, cols, rows, width, w_ptr, o_ptr) -> None:
        co = kernel.dim(w, 3)  # out[rows, Co] = cols [rows, width] @ W [width, Co]
        gemm(kernel, GemmSpec(dt, m=rows, n=co, k=width, a=cols, lda=width, b=w_ptr, ldb=co,
                              c=o_ptr, ldc=co))

    _im2col_conv(graph_compiler, op, Im2colConv("conv2d", image=x, other=w, rows_like=op.result,
                                                filter_like=w, direct=direct_conv2d,
                                                product=product))


def lower_conv2d_backprop_filter(graph_compiler, op: Op) -> None:
    x, dy, like = op.inputs

    def product(kernel, dt, cols, rows, width, dy_ptr, o_ptr) -> None:
        co = kernel.dim(dy, 3)  # dW[width, Co] = cols^T [width, rows] @ dy [rows, Co]
        gemm(kernel, GemmSpec(dt, m=width, n=co, k=rows, a=cols, lda=width, b=dy_ptr, ldb=co,
                              c=o_ptr, ldc=co, transpose_a=True))

    _im2col_conv(graph_compiler, op, Im2colConv("conv2d_bwd_filter", image=x, other=dy,
                                                rows_like=dy, filter_like=like,
                                                direct=direct_backprop_filter, product=product))


def lower_conv2d_backprop_input(graph_compiler, op: Op) -> None:
    w, dy, like = op.inputs
    out = op.result
    kh, kw = _conv_check(w.dtype, w)
    wide = _Wide(w.dtype)
    scratch = _scratch(graph_compiler, dy, lambda binding: kh * kw * binding.shapes[like][3],
                       wide.dt, wide.extra(w, dy, out))
    kernel = graph_compiler.kernel("conv2d_bwd_input", [w, dy, out], [scratch])
    kernel.whole()
    b = kernel.b
    cols = kernel.storage_ptr(scratch)
    dd, xd = kernel.dims(dy), kernel.dims(out)
    c, co = xd[3], dd[3]
    rows = irutil.product(b, dd[:3])
    width = b.mul(irutil.i64(kh * kw), c)
    w_ptr, dy_ptr, o_ptr = wide.operands(kernel,
                                         irutil.elem_ptr(b, cols, wide.dt, b.mul(rows, width)),
                                         [w, dy], [out])
    # dcols[rows, width] = dy [rows, Co] @ W^T  (W seen as [width, Co])
    gemm(kernel, GemmSpec(wide.dt, m=rows, n=width, k=co, a=dy_ptr, lda=co, b=w_ptr, ldb=co,
                          c=cols, ldc=width, transpose_b=True))
    dt = wide.dt
    zero = ir.Constant(irutil.compute_type(dt), 0.0)
    irutil.loop(b, ZERO, kernel.size(out), lambda i, _c: irutil.store(b, o_ptr, dt, i, zero),
                name="z")
    (sh, sw), (dh, dw) = conv_geometry(op)
    ph = pad_before(kernel, op, out, 1, kh, sh, dh)
    pw = pad_before(kernel, op, out, 2, kw, sw, dw)

    def body(idx, _c) -> None:
        n, ho, wo, i, j = idx
        row = irutil.linear(b, [n, ho, wo], dd[:3])
        hi = b.add(b.sub(b.mul(ho, irutil.i64(sh)), ph), b.mul(i, irutil.i64(dh)))
        wi = b.add(b.sub(b.mul(wo, irutil.i64(sw)), pw), b.mul(j, irutil.i64(dw)))
        ok = b.and_(b.and_(b.icmp_signed(">=", hi, ZERO), b.icmp_signed("<", hi, xd[1])),
                    b.and_(b.icmp_signed(">=", wi, ZERO), b.icmp_signed("<", wi, xd[2])))
        with b.if_then(ok):
            dst = irutil.linear(b, [n, hi, wi, ZERO], xd)
            src = b.add(b.mul(row, width), b.mul(b.add(b.mul(i, irutil.i64(kw)), j), c))

            def chan(ci, _c2) -> None:
                cur = irutil.load(b, o_ptr, dt, b.add(dst, ci))
                v = irutil.load(b, cols, dt, b.add(src, ci))
                irutil.store(b, o_ptr, dt, b.add(dst, ci), b.fadd(cur, v, flags=irutil.FAST))

            irutil.loop(b, ZERO, c, chan, name="ch")

    irutil.loop_nest(b, [(ZERO, dd[0]), (ZERO, dd[1]), (ZERO, dd[2]), (ZERO, irutil.i64(kh)),
                         (ZERO, irutil.i64(kw))], body, name="ci")
    wide.narrow(kernel, o_ptr, out)
    kernel.finish()


class _Wide:
    """f16 convolutions run the f32 route: the GEMM operands other than ``cols`` are
    widened into scratch after it, the GEMM (and col2im's sums) produce f32 in scratch,
    and the result is rounded to f16 once — the reference's ``compute_dtype`` rule (it
    widens, computes in f32 and rounds once). For f32/f64 it adds nothing: operands and
    result are used in place. False for those, so ``if not wide`` reads naturally."""

    def __init__(self, dtype: DType) -> None:
        self.on = dtype is DType.f16
        self.dt = DType.f32 if self.on else dtype

    def __bool__(self) -> bool:
        return self.on

    def extra(self, *values: Value) -> Callable[[Binding], int]:
        """Scratch elements after ``cols``: an f32 copy of each of ``values``."""
        if not self.on:
            return lambda binding: 0
        return lambda binding: sum(binding.size(v) for v in values)

    def operands(self, kernel: Kernel, at: ir.Value, inputs: list[Value],
                 outputs: list[Value]) -> list[ir.Value]:
        """Pointers to ``inputs`` then ``outputs`` as the GEMM sees them: in place, or
        f32 copies laid out from ``at`` on (inputs widened here)."""
        if not self.on:
            return [kernel.ptr(v) for v in (*inputs, *outputs)]
        b, f32, ptrs = kernel.b, DType.f32, []
        for v in (*inputs, *outputs):
            ptrs.append(at)
            if v in inputs:
                def widen(i: ir.Value, _c, v=v, dst=at) -> None:
                    irutil.store(b, dst, f32, i, irutil.load(b, kernel.ptr(v), v.dtype, i))
                irutil.loop(b, ZERO, kernel.size(v), widen, name="w")
            at = irutil.elem_ptr(b, at, f32, kernel.size(v))
        return ptrs

    def narrow(self, kernel: Kernel, src: ir.Value, out: Value) -> None:
        """Round the f32 result at ``src`` into ``out`` (f16 only)."""
        if not self.on:
            return
        b = kernel.b

        def body(i: ir.Value, _c) -> None:
            irutil.store(b, kernel.ptr(out), out.dtype, i, irutil.load(b, src, DType.f32, i))
        irutil.loop(b, ZERO, kernel.size(out), body, name="n")


def _conv_check(dtype: DType, filt: Value) -> tuple[int, int]:
    """The filter's (height, width) of a convolution the GEMM kernels can run."""
    if dtype not in (DType.f16, DType.f32, DType.f64):
        raise Unsupported(f"{dtype.value} convolutions")
    kh, kw = filt.type.shape[0], filt.type.shape[1]
    if not (isinstance(kh, int) and isinstance(kw, int)):
        raise Unsupported("a symbolic filter size")
    return kh, kw


def _matmul_check(graph_compiler, op: Op) -> None:
    if op.inputs[0].dtype not in (DType.f32, DType.f64, DType.i32, DType.i64):
        raise Unsupported(f"{op.inputs[0].dtype.value} matrix products")
    lower_matmul(graph_compiler, op)


LOWERINGS: dict[str, Callable] = {
    "matmul": _matmul_check,
    "conv2d": lower_conv2d,
    "conv2d_backprop_filter": lower_conv2d_backprop_filter,
    "conv2d_backprop_input": lower_conv2d_backprop_input,
}
