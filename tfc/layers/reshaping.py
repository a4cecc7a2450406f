"""Reshaping layers: padding, cropping and nearest-neighbour upsampling of ``[B, H, W, C]``
images (and ``[B, T, C]`` sequences), ``Permute`` and ``RepeatVector`` (Keras's names,
arguments and defaults; channels last only). None has weights; each is a composite of
``pad`` / slicing / ``tile`` / ``transpose``, so gradients come from those ops."""

from __future__ import annotations

from typing import Any, Sequence

from tfc.api import ops
from tfc.api.graph import Tensor
from tfc.errors import TypeMismatch
from tfc.layers.base import Layer
from tfc.layers.core import static_dim
from tfc.layers.pooling import _check_format, _check_rank


def _nonneg(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _two_sided(name: str, v: Any, dims: int) -> tuple[tuple[int, int], ...]:
    """Keras's padding / cropping spec, one per spatial dim as ``(before, after)``: an int
    (the same everywhere), ``dims`` ints (symmetric per dim), or ``dims`` pairs."""
    if _nonneg(v):
        return ((v, v),) * dims
    if dims == 1 and isinstance(v, (tuple, list)) and len(v) == 2 and all(map(_nonneg, v)):
        return ((int(v[0]), int(v[1])),)
    if isinstance(v, (tuple, list)) and len(v) == dims:
        if all(map(_nonneg, v)):
            return tuple((int(p), int(p)) for p in v)
        if all(isinstance(p, (tuple, list)) and len(p) == 2 and all(map(_nonneg, p))
               for p in v):
            return tuple((int(p[0]), int(p[1])) for p in v)
    raise TypeMismatch(f"{name} must be a non-negative int, {dims} ints or {dims} pairs of "
                       f"ints, got {v!r}")


def _sizes(name: str, v: Any, dims: int) -> tuple[int, ...]:
    t = (v,) * dims if isinstance(v, int) else tuple(v)
    if len(t) != dims or not all(isinstance(s, int) and s >= 1 for s in t):
        raise TypeMismatch(f"{name} must be a positive int or {dims} positive ints, got {v!r}")
    return t


class ZeroPadding2D(Layer):
    """Zeros around each image: ``padding`` as an int, ``(rows, cols)`` (symmetric) or
    ``((top, bottom), (left, right))``."""

    def __init__(self, padding: Any = (1, 1), data_format: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_format("ZeroPadding2D", data_format)
        self.padding = _two_sided("ZeroPadding2D: padding", padding, 2)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 4, "[batch, height, width, channels]")
        return ops.pad(x, [[0, 0], *map(list, self.padding), [0, 0]])


class ZeroPadding1D(Layer):
    """Zeros before and after each sequence: ``padding`` an int or ``(before, after)``."""

    def __init__(self, padding: Any = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.padding = _two_sided("ZeroPadding1D: padding", padding, 1)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 3, "[batch, steps, features]")
        return ops.pad(x, [[0, 0], list(self.padding[0]), [0, 0]])


class Cropping2D(Layer):
    """Rows and columns cut off each image: ``cropping`` as ``ZeroPadding2D``'s padding."""

    def __init__(self, cropping: Any = ((0, 0), (0, 0)), data_format: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_format("Cropping2D", data_format)
        self.cropping = _two_sided("Cropping2D: cropping", cropping, 2)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 4, "[batch, height, width, channels]")
        (t, b), (lo, r) = self.cropping
        h = static_dim(self, x.type, 1, "height")
        w = static_dim(self, x.type, 2, "width")
        if t + b >= h or lo + r >= w:
            raise TypeMismatch(f"Cropping2D '{self.name}': cropping {self.cropping} leaves "
                               f"nothing of its input {x.type}")
        return x[:, t:h - b, lo:w - r, :]


class Cropping1D(Layer):
    """Steps cut off each sequence: ``cropping`` an int or ``(before, after)``."""

    def __init__(self, cropping: Any = (1, 1), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cropping = _two_sided("Cropping1D: cropping", cropping, 1)

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 3, "[batch, steps, features]")
        (a, b), = self.cropping
        t = static_dim(self, x.type, 1, "steps")
        if a + b >= t:
            raise TypeMismatch(f"Cropping1D '{self.name}': cropping {(a, b)} leaves nothing "
                               f"of its input {x.type}")
        return x[:, a:t - b, :]


def _repeat(x: Tensor, axis: int, times: int) -> Tensor:
    """Each element of ``x`` along ``axis`` repeated ``times`` times in place (nearest
    upsampling): a new axis after ``axis`` tiled, then merged into it."""
    if times == 1:
        return x
    shape = list(x.type.shape)
    expanded = ops.expand_dims(x, axis + 1)
    tiled = ops.tile(expanded, [times if i == axis + 1 else 1 for i in range(len(shape) + 1)])
    out = [d if isinstance(d, int) else -1 for d in shape]
    out[axis] = out[axis] * times
    return ops.reshape(tiled, out)


class UpSampling2D(Layer):
    """Each pixel repeated ``size`` times along rows and columns (``interpolation=
    "nearest"``, Keras's default; bilinear is not offered)."""

    def __init__(self, size: int | Sequence[int] = (2, 2), data_format: str | None = None,
                 interpolation: str = "nearest", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_format("UpSampling2D", data_format)
        if interpolation != "nearest":
            raise TypeMismatch(f"UpSampling2D: only interpolation='nearest' is supported, got "
                               f"{interpolation!r}")
        self.size = _sizes("UpSampling2D: size", size, 2)
        self.interpolation = interpolation

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 4, "[batch, height, width, channels]")
        for axis in (1, 2):
            static_dim(self, x.type, axis, "height" if axis == 1 else "width")
        return _repeat(_repeat(x, 1, self.size[0]), 2, self.size[1])


class UpSampling1D(Layer):
    """Each step repeated ``size`` times."""

    def __init__(self, size: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = _sizes("UpSampling1D: size", size, 1)[0]

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 3, "[batch, steps, features]")
        static_dim(self, x.type, 1, "steps")
        return _repeat(x, 1, self.size)


class Permute(Layer):
    """The non-batch axes reordered: ``dims`` is a permutation of ``1 .. rank - 1``
    (Keras's: 1-based, the batch axis stays first)."""

    def __init__(self, dims: Sequence[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dims = tuple(int(d) for d in dims)
        if sorted(self.dims) != list(range(1, len(self.dims) + 1)):
            raise TypeMismatch(f"Permute: dims must be a permutation of 1 .. {len(self.dims)}"
                               f", got {tuple(dims)}")

    def call(self, x: Tensor, training: bool) -> Tensor:
        if x.type.rank != len(self.dims) + 1:
            raise TypeMismatch(f"Permute '{self.name}': dims {self.dims} need inputs of rank "
                               f"{len(self.dims) + 1}, got {x.type}")
        return ops.transpose(x, [0, *self.dims])


class RepeatVector(Layer):
    """``[B, F] -> [B, n, F]``: the vector repeated ``n`` times (an encoder's summary fed
    to each step of a decoder)."""

    def __init__(self, n: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(n, int) or n < 1:
            raise TypeMismatch(f"RepeatVector: n must be a positive int, got {n!r}")
        self.n = n

    def call(self, x: Tensor, training: bool) -> Tensor:
        _check_rank(self, x, 2, "[batch, features]")
        return ops.tile(ops.expand_dims(x, 1), [1, self.n, 1])
