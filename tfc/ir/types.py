"""Element types, shapes with symbolic dimensions, and tensor types.

A dimension is an ``int``, a symbol (an identifier such as ``"B"`` that stands for a
size fixed at run time), or ``"?"`` (unknown, as TensorFlow's ``None`` after a reshape
it cannot resolve). Types are frozen so that ops can hash and compare them freely.
"""

from __future__ import annotations

import builtins
import enum
import re
from dataclasses import dataclass
from typing import Iterable, Sequence, Union, cast

import numpy as np

from tfc.errors import TypeMismatch

# What a symbolic dim (the batch ``B``) counts as wherever a size per step is estimated or
# reported without a real batch: the cost model, the placement and compression reports,
# the device graph views. One value, so their byte counts agree.
SYMBOL_SIZE = 128

Dim = Union[int, str]
UNKNOWN = "?"
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Inside ``DType`` the names ``np`` and ``bool`` are its own members, so its annotations
# spell numpy's dtype through this alias (and the builtin as ``builtins.bool``).
_NumpyDType = np.dtype


class DType(enum.Enum):
    """The element types of the IR, named as they print (``f32``)."""

    f16 = "f16"
    f32 = "f32"
    f64 = "f64"
    i32 = "i32"
    i64 = "i64"
    bool = "bool"

    @property
    def np(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def is_float(self) -> builtins.bool:
        return self in (DType.f16, DType.f32, DType.f64)

    @property
    def is_int(self) -> builtins.bool:
        return self in (DType.i32, DType.i64)

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @staticmethod
    def from_numpy(dtype: _NumpyDType | type) -> "DType":
        dtype = np.dtype(dtype)
        try:
            return _FROM_NUMPY[dtype]
        except KeyError:
            raise TypeMismatch(f"numpy dtype {dtype} has no tfc element type") from None

    def __repr__(self) -> str:
        return self.value


_TO_NUMPY: dict[DType, np.dtype] = {
    DType.f16: np.dtype(np.float16),
    DType.f32: np.dtype(np.float32),
    DType.f64: np.dtype(np.float64),
    DType.i32: np.dtype(np.int32),
    DType.i64: np.dtype(np.int64),
    DType.bool: np.dtype(np.bool_),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}


def check_dim(d: object) -> Dim:
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
        return int(d)
    if isinstance(d, str) and (d == UNKNOWN or _SYMBOL.match(d)):
        return d
    raise TypeMismatch(f"invalid dimension {d!r}: expected a size >= 0, a symbol or '?'")


@dataclass(frozen=True)
class TensorType:
    """A dtype and a shape; the type of every SSA value."""

    dtype: DType
    shape: tuple[Dim, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(check_dim(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def num_elements(self) -> int | None:
        if not self.is_static:
            return None
        return int(np.prod(cast("tuple[int, ...]", self.shape), dtype=np.int64))

    @property
    def static_shape(self) -> tuple[int, ...]:
        """The shape of a static type (``is_static``), its dims typed as the ints they are;
        a ``TypeMismatch`` for a type with a symbolic or unknown dim."""
        if not self.is_static:
            raise TypeMismatch(f"type {self} has no static shape (it has a symbolic or "
                               f"unknown dim)")
        return cast("tuple[int, ...]", self.shape)

    def nbytes(self, symbol_size: int = 1) -> int:
        """Bytes of a value of this type; symbols count as ``symbol_size`` (cost estimates)."""
        n = 1
        for d in self.shape:
            n *= d if isinstance(d, int) else symbol_size
        return n * self.dtype.itemsize

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(dtype, self.shape)

    def with_shape(self, shape: Iterable[Dim]) -> "TensorType":
        return TensorType(self.dtype, tuple(shape))

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(str(d) for d in self.shape)}]"

    __repr__ = __str__


def scalar(dtype: DType) -> TensorType:
    return TensorType(dtype, ())


def broadcast_dims(a: Dim, b: Dim) -> Dim | None:
    """The broadcast of two dims, or None where they cannot broadcast.

    As in TensorFlow, an unknown or symbolic dim against a static size other than 1
    takes that size (the run time checks it).
    """
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if a == UNKNOWN:
        return b
    if b == UNKNOWN:
        return a
    if isinstance(a, str) and isinstance(b, int):
        return b
    if isinstance(b, str) and isinstance(a, int):
        return a
    if isinstance(a, str) and isinstance(b, str):
        return UNKNOWN
    return None


def broadcast_shapes(*shapes: Sequence[Dim]) -> tuple[Dim, ...] | None:
    """numpy broadcasting over shapes with symbols; None if they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(rank):
        d: Dim = 1
        for s in shapes:
            j = i - (rank - len(s))
            if j < 0:
                continue
            both = broadcast_dims(d, s[j])
            if both is None:
                return None
            d = both
        out.append(d)
    return tuple(out)


def dims_compatible(a: Dim, b: Dim) -> bool:
    """Whether two dims may be the same size at run time."""
    return a == b or isinstance(a, str) or isinstance(b, str)


def shapes_compatible(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    return len(a) == len(b) and all(dims_compatible(x, y) for x, y in zip(a, b))


def format_shape(shape: Sequence[Dim]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
