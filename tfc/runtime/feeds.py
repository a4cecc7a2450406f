"""Checking what a user feeds to an entry point against the entry's placeholders.

Feeds are the one place where untyped Python data meets the typed IR, so every mistake
here gets one clear sentence naming the feed, what it expected (``f32[B,784]``) and what
it got, instead of a shape error deep inside a kernel.

The dtype rule:

- numpy arrays (and numpy scalars, and objects with a ``dtype`` such as other array
  libraries' tensors) must have the placeholder's dtype or one that casts to it without
  loss (``np.can_cast(src, dst, "safe")``: i32 into f64 is fine, f64 into f32 is an error
  that suggests ``.astype(np.float32)``). Anything numpy holds has a deliberate dtype, and
  silently narrowing it would hide a bug.
- Python scalars and (nested) lists are converted to the placeholder's dtype, since they
  carry no width of their own. The conversion must keep every value: ``1.5`` into ``i32``
  or ``2`` into ``bool`` is an error; ``3.0`` into ``i32`` is fine. Into a float placeholder
  any real number converts (rounded to the nearest representable value, as a float literal
  in a program would be) unless it overflows to infinity.

Symbolic dims (``B``) bind to one size per call: ``B`` must be the same in every feed
that mentions it. ``?`` matches any size.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping

import numpy as np

from tfc.errors import FeedError
from tfc.ir.core import Graph
from tfc.ir.types import UNKNOWN, DType, TensorType, format_shape

if TYPE_CHECKING:
    from tfc.runtime.program import EntrySignature


def expected_feeds(graph: Graph) -> str:
    """``x: f32[B,784], y: i32[B]``: the feeds of ``graph``, for error messages."""
    items = [f"{n}: {a.type}" for n, a in zip(graph.arg_names, graph.args)]
    return ", ".join(items) if items else "none"


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def _np_name(dtype: DType) -> str:
    return "np.bool_" if dtype is DType.bool else f"np.{dtype.np.name}"


def _is_numpy_like(value: Any) -> bool:
    if isinstance(value, (np.ndarray, np.generic)):
        return True
    return hasattr(value, "dtype") and hasattr(value, "__array__")


def _convert_numpy(name: str, value: Any, t: TensorType, where: str) -> np.ndarray:
    arr = np.asarray(value)
    dst = t.dtype.np
    if arr.dtype == dst:
        return np.asarray(arr, order="C")
    try:
        src_name = DType.from_numpy(arr.dtype.newbyteorder("=")).value
    except Exception:
        src_name = str(arr.dtype)
    if not np.can_cast(arr.dtype, dst, "safe"):
        raise FeedError(
            f"{_prefix(where)}feed '{name}' has dtype {src_name}, expected {t} "
            f"({src_name} to {t.dtype.value} could lose values; convert it with "
            f"{name}.astype({_np_name(t.dtype)}))")
    return np.asarray(arr, dtype=dst, order="C")


def _convert_python(name: str, value: Any, t: TensorType, where: str) -> np.ndarray:
    dst = t.dtype.np
    fail = f"{_prefix(where)}feed '{name}' cannot be converted to {t}"
    try:
        raw = np.asarray(value)
    except (ValueError, TypeError) as e:  # ragged lists and the like
        raise FeedError(f"{fail}: {e}") from None
    if raw.dtype.kind not in "biuf":
        raise FeedError(f"{fail}: it is not numeric data (numpy reads it as {raw.dtype})")
    if raw.dtype == dst:
        return np.asarray(raw, order="C")
    with np.errstate(all="ignore"):
        out = raw.astype(dst)
        if t.dtype.is_float:
            lost = np.isinf(out) & ~np.isinf(raw)
        else:
            lost = out.astype(raw.dtype) != raw  # NaN never compares equal: lost too
    if np.any(lost):
        bad = raw[lost].flat[0].item()
        raise FeedError(f"{fail}: the value {bad!r} does not fit {t.dtype.value} "
                        f"without changing it")
    return np.asarray(out, order="C")


def _check_shape(name: str, arr: np.ndarray, t: TensorType, where: str,
                 bound: dict[str, tuple[int, str, TensorType, tuple[int, ...]]]) -> None:
    given = format_shape(arr.shape)
    if arr.ndim != t.rank:
        raise FeedError(f"{_prefix(where)}feed '{name}' has shape {given} (rank {arr.ndim}), "
                        f"expected {t} (rank {t.rank})")
    for axis, (size, dim) in enumerate(zip(arr.shape, t.shape)):
        if dim == UNKNOWN:
            continue
        if isinstance(dim, int):
            if size != dim:
                raise FeedError(f"{_prefix(where)}feed '{name}' has shape {given}, expected {t} "
                                f"(dim {axis} is {size}, not {dim})")
            continue
        if dim not in bound:
            bound[dim] = (size, name, t, arr.shape)
            continue
        size0, name0, t0, shape0 = bound[dim]
        if size0 != size:
            if name0 == name:
                raise FeedError(f"{_prefix(where)}feed '{name}' has shape {given}, expected {t}: "
                                f"dim {dim} is both {size0} and {size}")
            raise FeedError(
                f"{_prefix(where)}dim {dim} is {size0} in feed '{name0}' ({t0}, given "
                f"{format_shape(shape0)}) but {size} in feed '{name}' ({t}, given {given})")


def check_feed_names(graph: Graph, names: Iterable[str], where: str = "") -> None:
    """Raise ``FeedError`` for a feed name ``graph`` does not take, with the nearest one."""
    args = graph.arg_names
    for key in names:
        if key not in args:
            close = difflib.get_close_matches(str(key), args, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise FeedError(f"{_prefix(where)}unknown feed '{key}'{hint}; "
                            f"expected feeds: {expected_feeds(graph)}")


def check_feeds(graph: Graph, feeds: Mapping[str, Any], where: str = "") -> list[np.ndarray]:
    """The feeds of one call of ``graph`` as C-contiguous arrays, in argument order.

    ``where`` names the call in messages (``"entry 'predict'"``). Raises ``FeedError``
    for an unknown or missing feed, a wrong rank, shape or dtype, or a symbolic dim bound
    to two sizes (see the module docstring for the dtype rule).
    """
    check_feed_names(graph, feeds, where)
    names = graph.arg_names
    out: list[np.ndarray] = []
    bound: dict[str, tuple[int, str, TensorType, tuple[int, ...]]] = {}
    for name, arg in zip(names, graph.args):
        if name not in feeds:
            missing = [n for n in names if n not in feeds]
            which = ", ".join(f"'{n}'" for n in missing)
            raise FeedError(f"{_prefix(where)}missing feed{'s' if len(missing) > 1 else ''} "
                            f"{which}; expected feeds: {expected_feeds(graph)}")
        value = feeds[name]
        if _is_numpy_like(value):
            arr = _convert_numpy(name, value, arg.type, where)
        else:
            arr = _convert_python(name, value, arg.type, where)
        _check_shape(name, arr, arg.type, where, bound)
        out.append(arr)
    return out


def synthetic_feed(t: TensorType, batch: int, rng: np.random.Generator) -> np.ndarray:
    """A feed of type ``t`` made up for timing (``tfc bench``, profile runs): every
    symbolic or unknown dim is ``batch``; floats are standard normal, everything else
    zeros (valid labels and indices for any class count)."""
    shape = tuple(d if isinstance(d, int) else batch for d in t.shape)
    if t.dtype.is_float:
        return rng.standard_normal(shape).astype(t.dtype.np)
    return np.zeros(shape, t.dtype.np)


def synthetic_feeds(entry: "Graph | EntrySignature", batch: int, seed: int = 0,
                    given: Collection[str] = ()) -> dict[str, np.ndarray]:
    """The feeds of ``entry`` (a graph, or an artifact's ``EntrySignature``) made up for
    timing, one ``synthetic_feed`` each in argument order from one generator seeded with
    ``seed`` (so every program timed on them gets the same), but those named in
    ``given`` (the user's own): what ``tfc bench``, profile runs and the placement
    benchmark all time with."""
    if isinstance(entry, Graph):
        specs = list(zip(entry.arg_names, (a.type for a in entry.args)))
    else:
        specs = [(f.name, f.type) for f in entry.feeds]
    rng = np.random.default_rng(seed)
    return {name: synthetic_feed(t, batch, rng) for name, t in specs if name not in given}
