"""The ops a CUDA executable runs through the array module rather than a generated kernel.

``LIBRARY`` maps an op kind to a function ``fn(xp, inputs, attrs) -> list of arrays``
written with the array module ``xp`` only: ``cupy`` on a GPU (matrix products are cuBLAS
calls, the rest cupy's own kernels), ``numpy`` under the emulator. The code a GPU runs is
therefore the code every CI run tests against the reference. Each function computes what
the op's registry reference computes (``tfc/ops/*``), dtype rules included; where cupy
and numpy could differ (integer matmul, NaN handling of argmax) the function says how
it keeps them equal. Convolutions and pooling (``conv``) are generated kernels plus
cuBLAS GEMMs; an executable prepares them once per binding (``PREPARED``), and their
``LIBRARY`` form prepares and runs them at once.

Other ops a step may hold, and how the executable runs them (``how_to_run``):

- ``BY_BINDING``: ops whose value depends only on attrs and shapes (``shape``, ``rank``,
  the input-less generators ``fill``/``zeros``/``ones``/``range``): evaluated once per
  binding on the host by the registry reference and uploaded once.
- random ops (``random.*``): one generated Philox kernel each
  (``codegen_random``); where there is none (an artifact made before them), the
  registry's sampler run with ``xp`` (``sample``). Either way the device draws the very
  numbers every backend draws (``tfc/ops/random.py``).
- ``ON_HOST``: ops run by their registry reference on the host, inputs copied down and
  the result copied up, per step: ``shuffle`` and what has no array-module version yet
  (matrix inverse and determinant: LAPACK's and cuSOLVER's singular-matrix errors differ;
  ``sort``: cupy's argsort is not documented stable, nor its NaN order).
  Correct everywhere, slow on a GPU (a synchronization per op): the compile report lists
  them (``host_ops``) so that nobody mistakes them for device code.
- anything else (control flow with regions, ``send``/``recv``, ``all_reduce``) is
  unsupported: the whole graph falls back to the reference backend.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.backends.cuda.conv import CONV_LIBRARY, PREPARED as CONV_PREPARED, Preparer
from tfc.errors import ExecutionError
from tfc.ir.registry import GENERATOR, RANDOM, lookup, normalize_axis
from tfc.ops.random import RandomOp

LibraryFn = Callable[[Any, Sequence[Any], Mapping[str, Any]], list]


def _matmul(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """``a @ b`` for what one prepared cuBLAS call does not do (integers, broadcast
    batches, empty dims: the executable's ``Device.gemm`` runs the rest); f16 computes in
    f32 and rounds once, as the reference (``compute_dtype``)."""
    a, b = ins
    if attrs["transpose_a"]:
        a = xp.swapaxes(a, -1, -2)
    if attrs["transpose_b"]:
        b = xp.swapaxes(b, -1, -2)
    dt = a.dtype
    if a.shape[-1] != b.shape[-2]:
        raise ExecutionError(f"matmul: inner dims {a.shape[-1]} and {b.shape[-2]} "
                             f"differ at run time")
    if dt == np.float16:
        a, b = a.astype(np.float32), b.astype(np.float32)
    return [xp.matmul(a, b).astype(dt, copy=False)]


def _transpose(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    perm = attrs["perm"]
    x = ins[0]
    return [xp.transpose(x, None if perm is None else [p % x.ndim for p in perm])]


def _concat(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    return [xp.concatenate(list(ins), axis=attrs["axis"])]


def _stack(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    return [xp.stack(list(ins), axis=attrs["axis"])]


def _tile(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    x = ins[0]
    return [xp.tile(x, attrs["multiples"]) if x.ndim else x.copy()]


def _gather(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """``take`` along ``axis``; an index out of range is the reference's error (the check
    synchronizes with the device: an index error must never become wrong numbers)."""
    from tfc.ops.array import gather_error
    params, indices = ins
    axis = normalize_axis("gather", attrs["axis"], params.ndim)
    n = params.shape[axis]
    bad = (indices < 0) | (indices >= n)
    if bool(bad.any()):
        first = int(indices[bad].ravel()[0])
        raise ExecutionError(gather_error(first, n, axis, list(params.shape)))
    return [xp.take(params, indices, axis=axis)]


def _scatter_add(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    dense, indices, updates = ins
    return [scatter_rows(xp, dense.copy(), indices, updates, "scatter_add")]


def scatter_rows(xp: Any, out: Any, indices: Any, updates: Any, op: str,
                 sign: int = 1) -> Any:
    """``out[indices[i]] += sign * updates[i]`` in place (repeated rows accumulate), as
    ``tfc.ops.scatter.scatter_rows``: ``xp.add.at`` (numpy's or cupy's)."""
    check_scatter_rows(out, indices, op)
    rows = updates.reshape((indices.size, *out.shape[1:]))
    if sign < 0:
        rows = -rows
    # numpy.add.at / cupy.add.at (cupy 14 deprecates cupyx.scatter_add with a warning,
    # an error in the tests that turn warnings into errors)
    xp.add.at(out, indices.reshape(-1), rows)
    return out


def check_scatter_rows(out: Any, indices: Any, op: str) -> None:
    """The error of ``scatter_rows`` for an index outside ``out``'s rows, before any write."""
    from tfc.ops.scatter import scatter_error
    n = out.shape[0]
    bad = (indices < 0) | (indices >= n)
    if bool(bad.any()):
        raise ExecutionError(scatter_error(op, int(indices[bad].ravel()[0]), n))


def _arg(fn: str) -> LibraryFn:
    def run(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
        x = ins[0]
        axis = normalize_axis(fn, attrs["axis"], x.ndim)
        return [getattr(xp, fn)(x, axis=axis).astype(attrs["output_type"].np)]
    return run


def _prod(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    from tfc.ir.registry import normalize_axes
    x = ins[0]
    axes = normalize_axes("prod", attrs["axes"], x.ndim)
    return [xp.asarray(xp.prod(x, axis=axes, keepdims=attrs["keepdims"], dtype=x.dtype))]


def _slice(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """The reference's own index computation (``Slice._slices``) applied with ``xp``."""
    from tfc.ops.array import _axes_of, _show
    x = ins[0]
    opdef = lookup("slice")
    sl = opdef._slices(x.ndim, attrs, str(list(x.shape)))  # type: ignore[attr-defined]
    out = x[tuple(sl)]
    squeeze = _axes_of("slice", attrs["squeeze_axes"], x)
    for a in squeeze:
        if out.shape[a] != 1:
            raise ExecutionError(f"slice: index [{_show(sl[a])}] is out of range for "
                                 f"axis {a} of shape {list(x.shape)}")
    return [xp.squeeze(out, axis=tuple(squeeze)) if squeeze else out]


def _split(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    from tfc.errors import TypeMismatch
    x = ins[0]
    axis = normalize_axis("split", attrs["axis"], x.ndim)
    opdef = lookup("split")
    try:
        parts = [int(p) for p in opdef._sizes(  # type: ignore[attr-defined]
            x.shape[axis], attrs, f"axis {axis} of shape {list(x.shape)}")]
    except TypeMismatch as e:
        raise ExecutionError(e.message) from None
    cuts = [int(c) for c in np.cumsum(parts)[:-1]]
    return list(xp.split(x, cuts, axis=axis))


def _pad(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    x = ins[0]
    opdef = lookup("pad")
    shown = str(list(x.shape))
    pairs = opdef._pairs(x.ndim, attrs, shown)  # type: ignore[attr-defined]
    for i, (d, (lo, hi)) in enumerate(zip(x.shape, pairs)):
        msg = opdef._check_mirror(attrs["mode"], d, lo, hi, i, shown)  # type: ignore[attr-defined]
        if msg:
            raise ExecutionError(msg)
    if not pairs:
        return [x.copy()]
    if attrs["mode"] == "constant":
        fill = np.asarray(attrs["value"]).astype(x.dtype)
        return [xp.pad(x, pairs, mode="constant", constant_values=fill.item())]
    return [xp.pad(x, pairs, mode=attrs["mode"])]


def _one_hot(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    from tfc.ops.array import check_labels
    x, dt = ins[0], attrs["dtype"].np
    if attrs["labels_of"]:
        bad = (x < 0) | (x >= attrs["depth"])
        if bool(bad.any()):  # the reference's message, from the offending labels
            check_labels(attrs["labels_of"], _host(x), attrs["depth"])
    hot = x[..., None] == xp.arange(attrs["depth"])
    on = xp.asarray(np.asarray(attrs["on_value"]).astype(dt))
    off = xp.asarray(np.asarray(attrs["off_value"]).astype(dt))
    out = xp.where(hot, on, off).astype(dt)
    return [xp.moveaxis(out, -1, attrs["axis"] % (x.ndim + 1))]


def _scan(kind: str) -> LibraryFn:
    """``cumsum`` / ``cumprod`` with ``xp``'s own scan: under the emulator numpy's, which is
    the reference's (an in-order accumulate); cupy's device scan adds in another order, so
    its float results may differ from the reference by rounding (a few ulps times the
    axis length). f16 accumulates in f32 and rounds once, as the reference."""
    def run(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
        x = ins[0]
        axis = normalize_axis(kind, attrs["axis"], x.ndim)
        acc = np.float32 if x.dtype == np.float16 else x.dtype
        v = xp.flip(x, axis) if attrs["reverse"] else x
        y = getattr(xp, kind)(v.astype(acc), axis=axis, dtype=acc)
        if kind == "cumsum" and np.dtype(acc).kind == "f":
            y = y + np.dtype(acc).type(0)  # from +0, as the reference (a leading -0: +0)
        if attrs["exclusive"]:
            head = [slice(None)] * x.ndim
            head[axis] = slice(0, x.shape[axis] - 1)
            first = xp.full_like(xp.take(y, [0], axis=axis), 0 if kind == "cumsum" else 1)
            y = xp.concatenate([first, y[tuple(head)]], axis=axis)
        if attrs["reverse"]:
            y = xp.flip(y, axis)
        return [xp.ascontiguousarray(y.astype(x.dtype))]
    return run


def _segment_reduce(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
    """``segment_reduce`` (segment25): the reference's checks on the ids (on the host: an
    error must never become wrong numbers), then ``xp``'s ``ufunc.at`` over the empty
    segments' values, as ``tfc.ops.segment.segment_reduce_np`` (under the emulator, with
    numpy, the reference's own steps). cupy adds with atomics (float sums in another
    order: rounding may differ by a few ulps times the rows per segment). On the host
    instead: products (cupy has no ``multiply.at``), f16 (cupy's atomics do not cover
    it), and max/min of data holding NaN (the reference propagates NaN; atomic max/min
    need not)."""
    from tfc.ops.segment import check_ids, empty_value, segment_reduce_np, shape_error
    data, ids = ins
    kind, n, sorted_ = attrs["reduction"], attrs["num_segments"], attrs["sorted"]
    if xp is not np and (kind == "prod" or data.dtype == np.float16 or (
            kind in ("max", "min") and data.dtype.kind == "f" and bool(xp.isnan(data).any()))):
        return [xp.asarray(segment_reduce_np(_host(data), _host(ids), kind, n, sorted_,
                                             attrs["what"]))]
    if tuple(data.shape[:ids.ndim]) != tuple(ids.shape):
        raise ExecutionError(shape_error(kind, list(data.shape), list(ids.shape)))
    check_ids(kind, _host(ids), n, sorted_, attrs["what"])
    rest = data.shape[ids.ndim:]
    flat = ids.reshape(-1).astype(np.int64)
    rows = data.reshape((flat.size, *rest))
    keep = flat >= 0
    flat, rows = flat[keep], rows[keep]
    out = xp.full((n, *rest), empty_value(kind, np.dtype(data.dtype), False), data.dtype)
    ufunc = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply"}[kind]
    with np.errstate(invalid="ignore", over="ignore"):  # (numpy's NaN max, inf products)
        getattr(xp, ufunc).at(out, flat, rows)
    if sorted_ and kind != "prod":
        out[xp.bincount(flat, minlength=n) == 0] = 0
    return [out]


def _host(a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else a.get()


LIBRARY: dict[str, LibraryFn] = {
    "matmul": _matmul,
    "transpose": _transpose,
    "concat": _concat,
    "stack": _stack,
    "tile": _tile,
    "gather": _gather,
    "scatter_add": _scatter_add,
    "argmax": _arg("argmax"),
    "argmin": _arg("argmin"),
    "prod": _prod,
    "slice": _slice,
    "split": _split,
    "pad": _pad,
    "one_hot": _one_hot,
    "cumsum": _scan("cumsum"),
    "cumprod": _scan("cumprod"),
    **CONV_LIBRARY,  # conv2d, max_pool, avg_pool and their gradients (generated kernels)
    "segment_reduce": _segment_reduce,  # segment25
}
# Library ops an executable prepares once per binding (``conv.PREPARED``: generated
# kernels and GEMMs bound to the binding's arrays) instead of calling their ``LIBRARY`` form.
PREPARED: dict[str, Preparer] = dict(CONV_PREPARED)

# Ops whose value is a function of attrs and shapes alone: once per binding.
BY_BINDING = frozenset({"shape", "rank"})
# Ops run by their registry reference on the host (see the module docstring).
ON_HOST = frozenset({"shuffle", "matrix_determinant", "matrix_inverse",
                     "sort",  # (sort: no device kernel yet; array24)
                     "cholesky",  # (LAPACK's rule for NaN and errors; linalg25)
                     "triangular_solve",  # (no device kernel yet; linalg25)
                     "log_matrix_determinant"})


def sample(xp: Any, kind: str, attrs: Mapping[str, Any], shape: Sequence[int],
           step: int) -> Any:
    """The values of random op ``kind`` (``random.uniform``, ``random.normal`` ... and
    ``random.uniform_like`` with its input's ``shape``) at ``step``: the registry's own
    sampler (``tfc.ops.random``) run with ``xp``, so the device draws the reference's
    numbers bit for bit (Philox in integers, then IEEE operations one array call each)."""
    opdef: Any = lookup(kind)
    params = {k: v for k, v in attrs.items() if k not in ("shape", "dtype", "seed")}
    return opdef.sampler(tuple(shape), attrs["dtype"], attrs["seed"], step, xp=xp, **params)


def how_to_run(kind: str) -> str | None:
    """``"library"``, ``"binding"``, ``"random"``, ``"host"`` or None (unsupported: the
    graph falls back) for an op that is not a fusion, a view or a variable op."""
    if kind in LIBRARY:
        return "library"
    opdef = lookup(kind)
    if kind in BY_BINDING or (opdef.has(GENERATOR) and opdef.num_inputs == 0):
        return "binding"
    if isinstance(opdef, RandomOp):
        return "random"
    if kind in ON_HOST or opdef.has(RANDOM):
        return "host"
    return None
