"""Gradient clipping by the global norm (``tf.clip_by_global_norm``), as graph ops."""

from __future__ import annotations

from typing import Sequence

from tfc.api import ops
from tfc.api.gradients import IndexedSlices
from tfc.api.graph import Tensor, Variable, user_location
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.errors import TfcError, TypeMismatch

Clippable = Tensor | IndexedSlices | None


def _values(t: TensorLike | IndexedSlices) -> Tensor:
    return t.values if isinstance(t, IndexedSlices) else convert_to_tensor(t)


def global_norm(t_list: Sequence[TensorLike | IndexedSlices | None]) -> Tensor:
    """``sqrt(sum of squares of every element of every tensor)``; None entries are
    skipped and ``IndexedSlices`` count their values (as TensorFlow's ``global_norm``).
    The norm has the dtype of the first tensor; the others' partial sums are cast to it."""
    if not isinstance(t_list, (list, tuple)):
        raise TypeError("global_norm: t_list should be a list or tuple of tensors")
    sums = [ops.reduce_sum(ops.square(_values(t))) for t in t_list if t is not None]
    if not sums:
        raise TfcError("global_norm: every entry of t_list is None", user_location())
    for s in sums:
        if not s.dtype.is_float:
            raise TypeMismatch(f"global_norm: cannot take the norm of {s.type} values "
                               "(float tensors only)", user_location())
    dtype = sums[0].dtype
    total = sums[0]
    for s in sums[1:]:
        total = total + (s if s.dtype == dtype else ops.cast(s, dtype))
    return ops.sqrt(total)


def clip_by_global_norm(t_list: Sequence[TensorLike | IndexedSlices | None],
                        clip_norm: TensorLike, use_norm: TensorLike | None = None,
                        name: str | None = None) -> tuple[list[Clippable], Tensor]:
    """Scale every tensor by ``clip_norm / max(global_norm, clip_norm)``, so that their
    global norm is at most ``clip_norm`` and their directions are kept; returns the
    clipped list and the global norm before clipping (``use_norm`` when given, saving
    its recomputation). None entries stay None; ``IndexedSlices`` keep their indices and
    have their values scaled. TF1's formula: ``scale = clip_norm * min(1 / norm,
    1 / clip_norm)`` (a zero norm gives scale 1).
    """
    if not isinstance(t_list, (list, tuple)):
        raise TypeError("clip_by_global_norm: t_list should be a list or tuple of tensors")
    norm = global_norm(t_list) if use_norm is None else convert_to_tensor(use_norm)
    if norm.type.rank != 0 or not norm.dtype.is_float:
        raise TypeMismatch(f"clip_by_global_norm: the norm must be a float scalar, got "
                           f"{norm.type}", user_location())
    if isinstance(clip_norm, (Tensor, Variable)):
        clip = convert_to_tensor(clip_norm)
        clip = clip if clip.dtype == norm.dtype else ops.cast(clip, norm.dtype)
    else:
        clip = convert_to_tensor(clip_norm, norm.dtype)
    # + (norm - norm): an infinite norm gives NaN everywhere, as TensorFlow (whose docs
    # promise it, to signal the overflow), not a silent scale of 0
    scale = clip * ops.minimum(1.0 / norm, 1.0 / clip) + (norm - norm)
    out: list[Clippable] = []
    for t in t_list:
        if t is None:
            out.append(None)
            continue
        v = _values(t)
        s = scale if scale.dtype == v.dtype else ops.cast(scale, v.dtype)
        if isinstance(t, IndexedSlices):
            out.append(IndexedSlices(t.indices, v * s, t.dense))
        else:
            out.append(v * s)
    return out, norm


__all__ = ["global_norm", "clip_by_global_norm"]
