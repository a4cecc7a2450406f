"""Elements of a dataset: one array, a tuple of arrays or a dict of arrays (nested freely).

These helpers flatten an element to its arrays and build it back, so every transformation
works on flat lists and keeps the user's structure. A list is a value, not a structure
(as tf.data: ``from_tensor_slices([1, 2, 3])`` slices one array)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tfc.errors import TfcError


def flatten(element: Any) -> list[Any]:
    """The leaves of ``element`` in a fixed order (dicts by insertion order)."""
    if isinstance(element, dict):
        return [leaf for v in element.values() for leaf in flatten(v)]
    if isinstance(element, tuple):
        return [leaf for v in element for leaf in flatten(v)]
    return [element]


def packer(element: Any) -> Callable[[list[Any]], Any]:
    """A function that builds a structure like ``element`` from its leaves, in order."""
    if isinstance(element, dict):
        keys = list(element)
        parts = [(len(flatten(element[k])), packer(element[k])) for k in keys]

        def pack_dict(leaves: list[Any]) -> Any:
            out, i = {}, 0
            for k, (n, p) in zip(keys, parts):
                out[k] = p(leaves[i:i + n])
                i += n
            return out
        return pack_dict
    if isinstance(element, tuple):
        kind = type(element)
        parts = [(len(flatten(v)), packer(v)) for v in element]

        def pack_seq(leaves: list[Any]) -> Any:
            out, i = [], 0
            for n, p in parts:
                out.append(p(leaves[i:i + n]))
                i += n
            return kind(*out) if hasattr(element, "_fields") else kind(out)
        return pack_seq
    return lambda leaves: leaves[0]


def as_arrays(value: Any, what: str) -> list[np.ndarray]:
    """The leaves of ``value`` as numpy arrays; a clear error for anything else."""
    out = []
    for leaf in flatten(value):
        arr = leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf)
        if arr.dtype == object:
            raise TfcError(f"{what}: {type(leaf).__name__} is not an array of numbers")
        out.append(arr)
    return out


def signature(element: Any) -> Any:
    """A hashable description of ``element``'s structure (not its values)."""
    if isinstance(element, dict):
        return ("dict", tuple((k, signature(v)) for k, v in element.items()))
    if isinstance(element, tuple):
        return (type(element).__name__, tuple(signature(v) for v in element))
    return "leaf"
