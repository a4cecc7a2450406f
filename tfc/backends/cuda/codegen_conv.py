"""CUDA C kernels for convolutions and pooling (NHWC images, HWIO filters), one module
per element type, generated once and shared by every op, shape and executable.

Unlike a fusion's kernel (``codegen``), whose dims are literals of one graph, these are
library kernels: the window geometry (``n h w c ho wo kh kw sh sw dh dw top left``) is
passed as ``long long`` parameters, so one compile (NVRTC on a GPU, g++ under the
emulator) serves every convolution of a dtype. Each kernel is a grid-stride loop with one
thread per element it writes; every sum is a fixed sequential loop of that thread (no
atomics, no reductions across threads), so the bits are the same every run:

- ``im2col``: the reference's im2col matrix ``[n*ho*wo, kh*kw*c]`` (columns in the
  filter's ``(kh, kw, c)`` order), in the compute type (f16 widened to f32): the
  convolution and its filter gradient are then one GEMM each (cuBLAS on a GPU).
- ``conv_direct``: the convolution itself, one thread per output element (a dot over
  the filter's taps in order): for small filters, one launch instead of im2col + GEMM.
- ``filter_partials`` + ``filter_sum``: the filter gradient without im2col, for small
  filters: block ``b`` sums its chunk of output pixels for every ``(tap, out channel)``
  pair, then each pair folds the blocks' partials in block order.
- ``col2im``: the input gradient from the GEMM's ``[n*ho*wo, kh*kw*c]`` columns, each
  pixel gathering its taps in the reference's order (``tfc.ops.nn_grad.col2im`` adds
  one tap after the other, row-major, into zeros), so given the same columns the sums
  are the reference's bit for bit.
- ``max_pool``: the maximum of each window's real elements (a NaN wins and stays, as
  ``numpy.max``); any numeric type.
- ``max_pool_grad``: each pixel gathers the ``dy`` of the windows whose first maximum
  (``first_max``: row-major, NaN first, padding as the lowest value, as
  ``tfc.ops.nn_grad.max_positions``) it is, in window order, summed in f64 and rounded
  once, as the reference's ``bincount``.
- ``max_pool_grad_grad``: ``g`` at each window's first maximum (0 where that is padding).
- ``avg_pool``: each window's sum (padding adds zeros) over its count of real elements.
- ``avg_pool_grad``: each pixel gathers ``dy / count`` of the windows covering it, in the
  reference's ``col2im`` order.

``label_check_kernel`` (per integer type) finds the first class label outside
``[0, depth)`` on the device: the executable reads its answer once, at the step's end.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Mapping, Optional

from tfc.backends.cuda import cexpr
from tfc.backends.cuda.kernel import Kernel, Launch, Param
from tfc.ir.types import DType

BLOCK = 256
Values = Optional[Mapping[str, int]]  # a specialization's literals (``specialized``)
# The window geometry every window kernel takes after its pointers, in this order.
GEOMETRY = ("n", "h", "w", "c", "ho", "wo", "kh", "kw", "sh", "sw", "dh", "dw", "top", "left")
FLOATS = (DType.f16, DType.f32, DType.f64)
INTS = (DType.i32, DType.i64)

WINDOW_KINDS = ("im2col", "col2im", "conv_direct", "filter_partials", "filter_sum",
                "max_pool", "max_pool_grad", "max_pool_grad_grad", "avg_pool", "avg_pool_grad")


def kernel_name(kind: str, dtype: DType) -> str:
    """``tfc_conv_<kind>_<dtype>``."""
    return f"tfc_conv_{kind}_{dtype.name}"


def _geometry_params() -> tuple[Param, ...]:
    return tuple(Param(g, "long long") for g in GEOMETRY)


_LOOP = """  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {"""
_GEO = ("long long n, long long h, long long w, long long c, long long ho, long long wo, "
        "long long kh, long long kw, long long sh, long long sw, long long dh, long long dw, "
        "long long top, long long left")


def _first_max(dt: DType) -> str:
    """A device function: the tap (row-major) of window ``(nn, i, j, ch)``'s first
    maximum by ``argmax``'s rule (a NaN beats numbers and the first NaN stays; among
    numbers the first of the largest), padding counted as the lowest value."""
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    low = cexpr.literal(-float("inf"), dt) if dt in FLOATS else \
        cexpr.literal(-(1 << (63 if dt is DType.i64 else 31)), dt)
    better = "v > best || (v != v && best == best)" if dt in FLOATS else "v > best"
    guard = f"TFC_CONV_FIRST_MAX_{dt.name.upper()}"
    return f"""#ifndef {guard}
#define {guard}
__device__ __forceinline__ long long tfc_conv_first_max_{dt.name}(
    const {s}* __restrict__ x, long long nn, long long i, long long j, long long ch,
    {_GEO}) {{
  long long first = 0;
  {a} best = {low};
  for (long long t = 0; t < kh * kw; ++t) {{
    long long y = i * sh + t / kw - top, xx = j * sw + t % kw - left;
    {a} v = (y >= 0 && y < h && xx >= 0 && xx < w)
        ? {cexpr.load(dt, f"x[((nn * h + y) * w + xx) * c + ch]")} : {low};
    if (t == 0 || {better}) {{
      best = v;
      first = t;
    }}
  }}
  return first;
}}
#endif
"""


def _kernel(kind: str, dt: DType, pointers: tuple[Param, ...], body: str,
            helpers: str = "", extra: tuple[Param, ...] = (), values: Values = None) -> Kernel:
    """A window kernel: its pointers, the geometry, then ``extra`` scalars; with
    ``values`` (``specialized``) those scalars are literals instead of parameters."""
    name = kernel_name(kind, dt)
    params = (*pointers, *_geometry_params(), *extra)
    consts = ""
    if values is not None:
        fixed = dict(values)
        name += "_" + hashlib.sha256(repr(sorted(fixed.items())).encode()).hexdigest()[:12]
        consts = "".join(f"  const long long {p.name} = {int(fixed[p.name])}LL;\n"
                         for p in params if p.name in fixed)
        params = tuple(p for p in params if p.name not in fixed)
    sig = ", ".join(f"{p.ctype} {p.name}" for p in params)
    source = (f"{helpers}extern \"C\" __global__ void {name}({sig}) {{\n{consts}{body}\n}}\n")
    return Kernel(name, source, params, Launch(("total",), BLOCK, BLOCK))


def _decompose_out() -> str:
    """``(nn, i, j, ch)`` of output element ``idx`` of an ``[n, ho, wo, c]`` array."""
    return ("    long long ch = idx % c, t = idx / c;\n"
            "    long long j = t % wo; t /= wo;\n"
            "    long long i = t % ho, nn = t / ho;\n")


def _decompose_in() -> str:
    """``(nn, y, xx, ch)`` of element ``idx`` of an ``[n, h, w, c]`` image."""
    return ("    long long ch = idx % c, t = idx / c;\n"
            "    long long xx = t % w; t /= w;\n"
            "    long long y = t % h, nn = t / h;\n")


def _im2col(dt: DType, values: Values = None) -> Kernel:
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    body = f"""  const long long kk = kh * kw * c, total = n * ho * wo * kk;
{_LOOP}
    long long k = idx % kk, m = idx / kk;
    long long ch = k % c, tap = k / c;
    long long b = tap % kw, a = tap / kw;
    long long j = m % wo, t = m / wo;
    long long i = t % ho, nn = t / ho;
    long long y = i * sh + a * dh - top, xx = j * sw + b * dw - left;
    {a} v = 0;
    if (y >= 0 && y < h && xx >= 0 && xx < w)
      v = {cexpr.load(dt, "x[((nn * h + y) * w + xx) * c + ch]")};
    cols[idx] = v;
  }}"""
    return _kernel("im2col", dt, (Param("x", f"const {s}* __restrict__"),
                                  Param("cols", f"{a}* __restrict__")), body, values=values)


def _col2im(dt: DType, values: Values = None) -> Kernel:
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    body = f"""  const long long kk = kh * kw * c, total = n * h * w * c;
{_LOOP}
{_decompose_in()}    {a} acc = 0;
    for (long long a = 0; a < kh; ++a) {{
      long long py = y + top - a * dh;
      if (py < 0 || py % sh != 0 || py / sh >= ho) continue;
      for (long long b = 0; b < kw; ++b) {{
        long long px = xx + left - b * dw;
        if (px < 0 || px % sw != 0 || px / sw >= wo) continue;
        acc += cols[((nn * ho + py / sh) * wo + px / sw) * kk + (a * kw + b) * c + ch];
      }}
    }}
    dx[idx] = {cexpr.store(dt, "acc")};
  }}"""
    return _kernel("col2im", dt, (Param("cols", f"const {a}* __restrict__"),
                                  Param("dx", f"{s}* __restrict__")), body, values=values)


def _conv_direct(dt: DType, values: Values = None) -> Kernel:
    """The convolution without im2col: one thread per output element, its dot product
    over the filter's ``(kh, kw, c)`` taps in order (for few taps, one launch instead of
    im2col and a GEMM)."""
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    body = f"""  const long long total = n * ho * wo * co;
{_LOOP}
    long long o = idx % co, t = idx / co;
    long long j = t % wo; t /= wo;
    long long i = t % ho, nn = t / ho;
    {a} acc = 0;
    for (long long a = 0; a < kh; ++a) {{
      long long yy = i * sh + a * dh - top;
      if (yy < 0 || yy >= h) continue;
      for (long long b = 0; b < kw; ++b) {{
        long long xx = j * sw + b * dw - left;
        if (xx < 0 || xx >= w) continue;
        const {s}* px = x + ((nn * h + yy) * w + xx) * c;
        const {s}* pw = f + (a * kw + b) * c * co + o;
        for (long long ch = 0; ch < c; ++ch)
          acc += {cexpr.load(dt, "px[ch]")} * {cexpr.load(dt, "pw[ch * co]")};
      }}
    }}
    y[idx] = {cexpr.store(dt, "acc")};
  }}"""
    return _kernel("conv_direct", dt, (Param("x", f"const {s}* __restrict__"),
                                       Param("f", f"const {s}* __restrict__"),
                                       Param("y", f"{s}* __restrict__")), body,
                   extra=(Param("co", "long long"),), values=values)


def _filter_partials(dt: DType, values: Values = None) -> Kernel:
    """The filter gradient's first stage without im2col: block ``b`` sums rows
    ``[b * chunk, (b + 1) * chunk)`` of ``cols.T @ dy`` (output pixels, in order) for
    every ``(tap, out channel)`` pair, one pair per thread, into ``partials[b]``."""
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    body = f"""  const long long kk = kh * kw * c, rows = n * ho * wo;
  const long long first = (long long)blockIdx.x * chunk;
  const long long last = first + chunk < rows ? first + chunk : rows;
  for (long long p = threadIdx.x; p < kk * co; p += blockDim.x) {{
    long long o = p % co, k = p / co;
    long long ch = k % c, tap = k / c;
    long long b = tap % kw, a = tap / kw;
    long long j = first % wo, t = first / wo;
    long long i = t % ho, nn = t / ho;
    {a} acc = 0;
    for (long long m = first; m < last; ++m) {{
      long long yy = i * sh + a * dh - top, xx = j * sw + b * dw - left;
      if (yy >= 0 && yy < h && xx >= 0 && xx < w)
        acc += {cexpr.load(dt, "x[((nn * h + yy) * w + xx) * c + ch]")} *
               {cexpr.load(dt, "dy[m * co + o]")};
      if (++j == wo) {{
        j = 0;
        if (++i == ho) {{
          i = 0;
          ++nn;
        }}
      }}
    }}
    partials[(long long)blockIdx.x * kk * co + p] = acc;
  }}"""
    return _kernel("filter_partials", dt, (Param("x", f"const {s}* __restrict__"),
                                           Param("dy", f"const {s}* __restrict__"),
                                           Param("partials", f"{a}* __restrict__")), body,
                   extra=(Param("co", "long long"), Param("chunk", "long long")), values=values)


def _filter_sum(dt: DType, values: Values = None) -> Kernel:
    """The filter gradient's second stage: each ``(tap, out channel)`` sums its blocks'
    partials in block order (the same bits every run) and rounds once."""
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    body = f"""  const long long total = kh * kw * c * co;
{_LOOP}
    {a} acc = 0;
    for (long long q = 0; q < blocks; ++q) acc += partials[q * total + idx];
    grad[idx] = {cexpr.store(dt, "acc")};
  }}"""
    return _kernel("filter_sum", dt, (Param("partials", f"const {a}* __restrict__"),
                                      Param("grad", f"{s}* __restrict__")), body,
                   extra=(Param("co", "long long"), Param("blocks", "long long")), values=values)


def _max_pool(dt: DType, values: Values = None) -> Kernel:
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    better = "v > best || (v != v && best == best)" if dt in FLOATS else "v > best"
    body = f"""  const long long total = n * ho * wo * c;
{_LOOP}
{_decompose_out()}    bool have = false;
    {s} keep = 0;
    {a} best = 0;
    for (long long a = 0; a < kh; ++a) {{
      long long yy = i * sh + a - top;
      if (yy < 0 || yy >= h) continue;
      for (long long b = 0; b < kw; ++b) {{
        long long xx = j * sw + b - left;
        if (xx < 0 || xx >= w) continue;
        {s} e = x[((nn * h + yy) * w + xx) * c + ch];
        {a} v = {cexpr.load(dt, "e")};
        if (!have || {better}) {{
          best = v;
          keep = e;
          have = true;
        }}
      }}
    }}
    y[idx] = keep;
  }}"""
    return _kernel("max_pool", dt, (Param("x", f"const {s}* __restrict__"),
                                    Param("y", f"{s}* __restrict__")), body, values=values)


def _max_pool_grad(dt: DType, values: Values = None) -> Kernel:
    s = cexpr.STORAGE[dt]
    to_storage = {DType.f16: "tfc_d2h(acc)", DType.f32: "(float)acc", DType.f64: "acc"}[dt]
    body = f"""  const long long total = n * h * w * c;
{_LOOP}
{_decompose_in()}    double acc = 0;
    long long py = y + top, px = xx + left;
    long long i0 = py - kh + 1 > 0 ? (py - kh + 1 + sh - 1) / sh : 0;
    long long j0 = px - kw + 1 > 0 ? (px - kw + 1 + sw - 1) / sw : 0;
    for (long long i = i0; i < ho && i * sh <= py; ++i) {{
      for (long long j = j0; j < wo && j * sw <= px; ++j) {{
        long long f = tfc_conv_first_max_{dt.name}(x, nn, i, j, ch, {", ".join(GEOMETRY)});
        if (i * sh + f / kw == py && j * sw + f % kw == px)
          acc += (double){cexpr.load(dt, "dy[((nn * ho + i) * wo + j) * c + ch]")};
      }}
    }}
    dx[idx] = {to_storage};
  }}"""
    return _kernel("max_pool_grad", dt, (Param("x", f"const {s}* __restrict__"),
                                         Param("dy", f"const {s}* __restrict__"),
                                         Param("dx", f"{s}* __restrict__")),
                   body, _first_max(dt), values=values)


def _max_pool_grad_grad(dt: DType, values: Values = None) -> Kernel:
    s = cexpr.STORAGE[dt]
    body = f"""  const long long total = n * ho * wo * c;
{_LOOP}
{_decompose_out()}    long long f = tfc_conv_first_max_{dt.name}(x, nn, i, j, ch,
                                               {", ".join(GEOMETRY)});
    long long yy = i * sh + f / kw - top, xx = j * sw + f % kw - left;
    {s} v = 0;
    if (yy >= 0 && yy < h && xx >= 0 && xx < w) v = g[((nn * h + yy) * w + xx) * c + ch];
    out[idx] = v;
  }}"""
    return _kernel("max_pool_grad_grad", dt, (Param("x", f"const {s}* __restrict__"),
                                              Param("g", f"const {s}* __restrict__"),
                                              Param("out", f"{s}* __restrict__")), body,
                   _first_max(dt), values=values)


def _avg_pool(dt: DType, values: Values = None) -> Kernel:
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    body = f"""  const long long total = n * ho * wo * c;
{_LOOP}
{_decompose_out()}    {a} acc = 0;
    long long count = 0;
    for (long long a = 0; a < kh; ++a) {{
      long long yy = i * sh + a - top;
      for (long long b = 0; b < kw; ++b) {{
        long long xx = j * sw + b - left;
        {a} v = 0;
        if (yy >= 0 && yy < h && xx >= 0 && xx < w) {{
          v = {cexpr.load(dt, "x[((nn * h + yy) * w + xx) * c + ch]")};
          ++count;
        }}
        acc = (a == 0 && b == 0) ? v : acc + v;
      }}
    }}
    y[idx] = {cexpr.store(dt, f"acc / ({a})count")};
  }}"""
    return _kernel("avg_pool", dt, (Param("x", f"const {s}* __restrict__"),
                                    Param("y", f"{s}* __restrict__")), body, values=values)


def _avg_pool_grad(dt: DType, values: Values = None) -> Kernel:
    s, a = cexpr.STORAGE[dt], cexpr.COMPUTE[dt]
    body = f"""  const long long total = n * h * w * c;
{_LOOP}
{_decompose_in()}    {a} acc = 0;
    for (long long a = 0; a < kh; ++a) {{
      long long py = y + top - a;
      if (py < 0 || py % sh != 0 || py / sh >= ho) continue;
      long long i = py / sh, r0 = i * sh - top;
      long long rows = (r0 + kh < h ? r0 + kh : h) - (r0 > 0 ? r0 : 0);
      for (long long b = 0; b < kw; ++b) {{
        long long px = xx + left - b;
        if (px < 0 || px % sw != 0 || px / sw >= wo) continue;
        long long j = px / sw, c0 = j * sw - left;
        long long cols = (c0 + kw < w ? c0 + kw : w) - (c0 > 0 ? c0 : 0);
        acc += {cexpr.load(dt, "dy[((nn * ho + i) * wo + j) * c + ch]")} / ({a})(rows * cols);
      }}
    }}
    dx[idx] = {cexpr.store(dt, "acc")};
  }}"""
    return _kernel("avg_pool_grad", dt, (Param("dy", f"const {s}* __restrict__"),
                                         Param("dx", f"{s}* __restrict__")), body, values=values)


_MAKERS = {"im2col": _im2col, "col2im": _col2im, "conv_direct": _conv_direct,
           "filter_partials": _filter_partials, "filter_sum": _filter_sum,
           "max_pool": _max_pool,
           "max_pool_grad": _max_pool_grad, "max_pool_grad_grad": _max_pool_grad_grad,
           "avg_pool": _avg_pool, "avg_pool_grad": _avg_pool_grad}


@functools.lru_cache(maxsize=None)
def window_kernels(dt: DType) -> tuple[Kernel, ...]:
    """The window kernels of element type ``dt``: all of them for floats, ``max_pool``
    for integers (the only window op defined on them)."""
    kinds = WINDOW_KINDS if dt in FLOATS else ("max_pool",)
    return tuple(_MAKERS[k](dt) for k in kinds)


@functools.lru_cache(maxsize=None)
def specialized(kind: str, dt: DType, values: tuple[tuple[str, int], ...]) -> Kernel:
    """Window kernel ``kind`` with its scalar parameters named in ``values`` (geometry and
    extras) as literals: the same text but constants, so the compiler folds the index
    arithmetic (divisions by constants become multiplications) and unrolls the window
    loops. Its name carries a hash of the values; it takes only the other parameters."""
    return _MAKERS[kind](dt, dict(values))


@functools.lru_cache(maxsize=None)
def label_check_kernel(dt: DType) -> Kernel:
    """``tfc_label_check_<dt>(labels, found, count, depth)``: one block; ``found[0]``
    becomes the flat index of the first label outside ``[0, depth)`` and ``found[1]``
    that label, or ``found[0] = -1`` when all are in range (a minimum over the block:
    the same answer whatever the thread order)."""
    s = cexpr.STORAGE[dt]
    name = f"tfc_label_check_{dt.name}"
    source = f"""extern "C" __global__ void {name}(const {s}* __restrict__ labels,
    long long* __restrict__ found, long long count, long long depth) {{
  __shared__ long long first[{BLOCK}];
  long long mine = count;
  for (long long k = threadIdx.x; k < count; k += blockDim.x) {{
    long long v = (long long)labels[k];
    if ((v < 0 || v >= depth) && k < mine) mine = k;
  }}
  first[threadIdx.x] = mine;
  __syncthreads();
  for (int half = {BLOCK} / 2; half > 0; half /= 2) {{
    if ((int)threadIdx.x < half && first[threadIdx.x + half] < first[threadIdx.x])
      first[threadIdx.x] = first[threadIdx.x + half];
    __syncthreads();
  }}
  if (threadIdx.x == 0) {{
    found[0] = first[0] < count ? first[0] : -1;
    found[1] = first[0] < count ? (long long)labels[first[0]] : 0;
  }}
}}
"""
    params = (Param("labels", f"const {s}* __restrict__"),
              Param("found", "long long* __restrict__"), Param("count", "long long"),
              Param("depth", "long long"))
    return Kernel(name, source, params, Launch((1,), BLOCK, BLOCK))


def all_kernels() -> list[Kernel]:
    """Every kernel this module generates (what the NVRTC tests compile)."""
    out: list[Kernel] = []
    for dt in (*FLOATS, *INTS):
        out.extend(window_kernels(dt))
    out.extend(label_check_kernel(dt) for dt in INTS)
    return out
