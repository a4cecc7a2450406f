"""The op functions of the Python API, with TensorFlow's names and signatures.

Each is a thin call of ``apply`` on one registry op; argument conventions (``axis=None``
means all axes, ``keepdims``, ``dtype``) follow TensorFlow so TF1 code reads the same.
"""

from __future__ import annotations

import builtins
import math as _math  # (not re-exported: tfc.math is tfc.api.math_ns)
from typing import Any, Sequence

import numpy as np

from tfc.api.graph import (Operation, Tensor, Variable, as_dtype, get_default_graph,
                           user_location)
from tfc.api.tensor import TensorLike, apply, constant, convert_to_tensor
from tfc.api.tensor import binary_op as _binary
from tfc.api.tensor import default_dtype, truediv
from tfc.ir.types import DType
from tfc.errors import TfcError, TypeMismatch


def _axes(axis: int | Sequence[int] | None) -> tuple[int, ...] | None:
    if axis is None:
        return None
    return (int(axis),) if isinstance(axis, int) else tuple(int(a) for a in axis)


# ---- element-wise -----------------------------------------------------------------------

def add(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("add", x, y)


def add_n(inputs: Sequence[TensorLike]) -> Tensor:
    """The sum of same-shaped tensors, added left to right (``tf.add_n``)."""
    if not inputs:
        raise TfcError("add_n needs at least one tensor", user_location())
    total = convert_to_tensor(inputs[0])
    for x in inputs[1:]:
        total = add(total, x)
    return total


def subtract(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("sub", x, y)


def multiply(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("mul", x, y)


def divide(x: TensorLike, y: TensorLike) -> Tensor:
    """``x / y`` as ``tf.divide``: integers are divided as float64 (7 / 2 is 3.5)."""
    return truediv(x, y)


def pow(x: TensorLike, y: TensorLike) -> Tensor:  # noqa: A001 (TensorFlow's name)
    return _binary("pow", x, y)


def maximum(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("maximum", x, y)


def minimum(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("minimum", x, y)


def greater(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("greater", x, y)


def greater_equal(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("greater_equal", x, y)


def less(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("less", x, y)


def less_equal(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("less_equal", x, y)


def equal(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("equal", x, y)


def not_equal(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("not_equal", x, y)


def logical_and(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("logical_and", x, y)


def logical_or(x: TensorLike, y: TensorLike) -> Tensor:
    return _binary("logical_or", x, y)


def _unary(kind: str) -> Any:
    def op(x: TensorLike, name: str | None = None) -> Tensor:
        return apply(kind, x, name=name)
    op.__name__ = op.__qualname__ = kind
    op.__doc__ = f"Element-wise ``{kind}`` (registry op ``{kind}``)."
    return op


negative = _unary("neg")
abs = _unary("abs")  # noqa: A001
exp = _unary("exp")
log = _unary("log")
log1p = _unary("log1p")
expm1 = _unary("expm1")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
square = _unary("square")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
sin = _unary("sin")
cos = _unary("cos")
floor = _unary("floor")
sign = _unary("sign")
logical_not = _unary("logical_not")
identity = _unary("identity")


def where(condition: TensorLike, x: TensorLike, y: TensorLike) -> Tensor:
    """``x`` where ``condition`` holds, else ``y`` (Python scalars take the other's dtype)."""
    tensors = [convert_to_tensor(v) for v in (x, y) if isinstance(v, (Tensor, Variable))]
    hint = tensors[0].dtype if tensors else None
    return apply("where", convert_to_tensor(condition, DType.bool),
                 *(convert_to_tensor(v, None if isinstance(v, (Tensor, Variable)) else hint)
                   for v in (x, y)))


def cast(x: TensorLike, dtype: Any, name: str | None = None) -> Tensor:
    return apply("cast", x, dtype=as_dtype(dtype), name=name)


# ---- reductions -------------------------------------------------------------------------

def _reduction(kind: str) -> Any:
    def op(x: TensorLike, axis: int | Sequence[int] | None = None, keepdims: bool = False,
           name: str | None = None) -> Tensor:
        return apply(kind, x, axes=_axes(axis), keepdims=keepdims, name=name)
    op.__name__ = op.__qualname__ = f"reduce_{kind}"
    op.__doc__ = f"``{kind}`` over ``axis`` (all axes when None)."
    return op


reduce_sum = _reduction("sum")
_float_mean = _reduction("mean")


def reduce_mean(x: TensorLike, axis: int | Sequence[int] | None = None, keepdims: bool = False,
                name: str | None = None) -> Tensor:
    """The mean over ``axis`` (all axes when None). Of integers, as ``tf.reduce_mean``: the
    sum (accumulated in int64, so an int32 sum does not wrap) divided by the count,
    truncated toward zero, in the input's dtype; an empty mean of integers is 0."""
    t = convert_to_tensor(x)
    if not t.dtype.is_int:
        return _float_mean(t, axis, keepdims, name)
    axes = _axes(axis)
    rank = t.type.rank
    reduced = tuple(builtins.range(rank)) if axes is None else tuple(a % rank if rank else a
                                                            for a in axes)
    total = apply("sum", cast(t, DType.i64), axes=axes, keepdims=keepdims)
    dims = [t.type.shape[a] for a in reduced]
    static = [d for d in dims if isinstance(d, int)]
    if len(static) == len(dims):
        count: TensorLike = _math.prod(static)
    else:  # (a symbolic dim: its size at run time)
        sizes = apply("gather", shape(t, DType.i64),
                      constant(np.array(reduced, np.int32)))
        count = apply("prod", sizes, axes=None, keepdims=False)
    count = maximum(count, 1) if not isinstance(count, int) else max(count, 1)
    magnitude = _binary("div", apply("abs", total), count)  # both >= 0: floor is trunc
    return cast(apply("mul", apply("sign", total), magnitude), t.dtype, name=name)


reduce_max = _reduction("max")
reduce_min = _reduction("min")
reduce_prod = _reduction("prod")


def _bool_reduction(kind: str, tf_name: str) -> Any:
    def op(x: TensorLike, axis: int | Sequence[int] | None = None, keepdims: bool = False,
           name: str | None = None) -> Tensor:
        t = convert_to_tensor(x)
        if t.dtype != DType.bool:
            raise TypeMismatch(f"{tf_name} takes bool tensors, got {t.type}", user_location())
        return apply(kind, t, axes=_axes(axis), keepdims=keepdims, name=name)
    op.__name__ = op.__qualname__ = tf_name
    op.__doc__ = (f"``{tf_name}`` of a bool tensor over ``axis`` (all axes when None): the "
                  f"registry's ``{kind}``, bools being ordered False < True.")
    return op


reduce_any = _bool_reduction("max", "reduce_any")
reduce_all = _bool_reduction("min", "reduce_all")


def count_nonzero(x: TensorLike, axis: int | Sequence[int] | None = None,
                  keepdims: bool = False, dtype: Any = DType.i64,
                  name: str | None = None) -> Tensor:
    """How many elements over ``axis`` are not zero (not False), as ``dtype``
    (``tf.count_nonzero``: int64 by default)."""
    t = convert_to_tensor(x)
    nonzero = t if t.dtype == DType.bool else not_equal(t, 0)
    return apply("sum", cast(nonzero, dtype), axes=_axes(axis), keepdims=keepdims, name=name)


def clip_by_value(t: TensorLike, clip_value_min: TensorLike, clip_value_max: TensorLike,
                  name: str | None = None) -> Tensor:
    """``min(max(t, clip_value_min), clip_value_max)`` element-wise (``tf.clip_by_value``;
    its gradient flows where ``t`` is inside the bounds, as TensorFlow's)."""
    return minimum(maximum(t, clip_value_min), clip_value_max)


def argmax(x: TensorLike, axis: int = 0, output_type: Any = DType.i64) -> Tensor:
    return apply("argmax", x, axis=axis, output_type=as_dtype(output_type))


def argmin(x: TensorLike, axis: int = 0, output_type: Any = DType.i64) -> Tensor:
    return apply("argmin", x, axis=axis, output_type=as_dtype(output_type))


# ---- matrices -----------------------------------------------------------------------------

def matmul(a: TensorLike, b: TensorLike, transpose_a: bool = False,
           transpose_b: bool = False, name: str | None = None) -> Tensor:
    return apply("matmul", a, b, transpose_a=transpose_a, transpose_b=transpose_b, name=name)


def matrix_inverse(x: TensorLike, name: str | None = None) -> Tensor:
    return apply("matrix_inverse", x, name=name)


def matrix_determinant(x: TensorLike, name: str | None = None) -> Tensor:
    return apply("matrix_determinant", x, name=name)


# ---- arrays -------------------------------------------------------------------------------

def _shape(shape: Sequence[int | str | None]) -> tuple[int | str, ...]:
    return tuple(-1 if d is None else d for d in shape)


def reshape(x: TensorLike, shape: Sequence[int], name: str | None = None) -> Tensor:
    return apply("reshape", x, shape=_shape(shape), name=name)


def transpose(x: TensorLike, perm: Sequence[int] | None = None,
              name: str | None = None) -> Tensor:
    return apply("transpose", x, perm=None if perm is None else tuple(perm), name=name)


def broadcast_to(x: TensorLike, shape: Sequence[int | str]) -> Tensor:
    return apply("broadcast_to", x, shape=tuple(shape))


def concat(values: Sequence[TensorLike], axis: int, name: str | None = None) -> Tensor:
    return apply("concat", *values, axis=axis, name=name)


def stack(values: Sequence[TensorLike], axis: int = 0, name: str | None = None) -> Tensor:
    return apply("stack", *values, axis=axis, name=name)


def split(x: TensorLike, num_or_size_splits: int | Sequence[int], axis: int = 0
          ) -> list[Tensor]:
    if isinstance(num_or_size_splits, int):
        out = apply("split", x, axis=axis, num=num_or_size_splits)
    else:
        out = apply("split", x, axis=axis, sizes=tuple(num_or_size_splits))
    return list(out) if isinstance(out, tuple) else [out]


def slice(x: TensorLike, begin: Sequence[int], size: Sequence[int]) -> Tensor:  # noqa: A001
    """``tf.slice``: ``size[i] == -1`` takes the rest of axis i. As in TensorFlow, a
    ``begin`` or ``size`` outside a static axis is an error (not clamped, as ``x[a:b]``)."""
    from tfc.ops.array import OPEN_HI
    t = convert_to_tensor(x)
    if len(begin) != t.type.rank or len(size) != t.type.rank:
        raise TypeMismatch(f"slice: begin {list(begin)} and size {list(size)} must have one "
                           f"entry per axis of {t.type}", user_location())
    for axis, (b, n, dim) in enumerate(zip(begin, size, t.type.shape)):
        if b < 0 or n < -1 or (isinstance(dim, int) and (b > dim or (n != -1 and b + n > dim))):
            raise TypeMismatch(f"slice: begin {b} and size {n} do not fit axis {axis} of "
                               f"{t.type} (need 0 <= begin <= begin + size <= {dim}, or "
                               f"size -1 for the rest)", user_location())
    end = [OPEN_HI if s == -1 else b + s for b, s in zip(begin, size)]
    return apply("slice", t, begin=tuple(begin), end=tuple(end))


def pad(x: TensorLike, paddings: Sequence[Sequence[int]], mode: str = "CONSTANT",
        constant_values: float = 0.0) -> Tensor:
    return apply("pad", x, paddings=[list(p) for p in paddings], mode=mode.lower(),
                 value=float(constant_values))


def gather(params: TensorLike, indices: TensorLike, axis: int = 0) -> Tensor:
    """Rows ``indices`` of ``params`` (along ``axis``); of a partitioned variable, each
    shard's rows gathered where the shard lives (``tfc.api.partitioned``)."""
    from tfc.api.partitioned import PartitionedVariable
    if isinstance(params, PartitionedVariable) and axis == 0:
        return params.gather(indices)
    return apply("gather", params, convert_to_tensor(indices, None if isinstance(
        indices, Tensor) else DType.i32), axis=axis)


def one_hot(indices: TensorLike, depth: int, on_value: float | None = None,
            off_value: float | None = None, axis: int = -1, dtype: Any = None) -> Tensor:
    """``tf.one_hot``: without ``dtype`` the result takes the dtype of ``on_value`` (else
    ``off_value``; f32 when neither is given), so integer values give an i32 tensor."""
    if dtype is None:
        given = on_value if on_value is not None else off_value
        dtype = DType.f32 if given is None else default_dtype(given)
    return apply("one_hot", indices, depth=depth,
                 on_value=1.0 if on_value is None else on_value,
                 off_value=0.0 if off_value is None else off_value,
                 axis=axis, dtype=as_dtype(dtype))


def shape(x: TensorLike, out_type: Any = DType.i32) -> Tensor:
    return apply("shape", x, out_type=as_dtype(out_type))


def rank(x: TensorLike) -> Tensor:
    return apply("rank", x)


def size(x: TensorLike, out_type: Any = DType.i32) -> Tensor:
    """The number of elements of ``x`` (``tf.size``): static when the shape is, else the
    product of its run-time shape."""
    t = convert_to_tensor(x)
    dims = t.type.shape
    if all(isinstance(d, int) for d in dims):
        return constant(np.asarray(_math.prod(dims), as_dtype(out_type).np))
    return apply("prod", shape(t, out_type), axes=None, keepdims=False)


def tile(x: TensorLike, multiples: Sequence[int]) -> Tensor:
    return apply("tile", x, multiples=tuple(multiples))


def expand_dims(x: TensorLike, axis: int) -> Tensor:
    return apply("expand_dims", x, axis=axis)


def squeeze(x: TensorLike, axis: int | Sequence[int] | None = None) -> Tensor:
    return apply("squeeze", x, axes=_axes(axis))


def fill(dims: Sequence[int], value: float, dtype: Any = None) -> Tensor:
    """``tf.fill``: ``value`` everywhere; without ``dtype`` the value's own (``tf.fill([2],
    7)`` is i32, ``7.0`` f32). An integer the op's float attr cannot hold exactly (beyond
    2**53) is a broadcast constant instead, so it is not rounded."""
    dt = default_dtype(value) if dtype is None else as_dtype(dtype)
    if dt.is_int and float(value) != int(value):
        return broadcast_to(constant(int(value), dt), tuple(dims))
    return apply("fill", shape=tuple(dims), value=float(value), dtype=dt)


def zeros(shape: Sequence[int], dtype: Any = DType.f32) -> Tensor:
    return apply("zeros", shape=tuple(shape), dtype=as_dtype(dtype))


def ones(shape: Sequence[int], dtype: Any = DType.f32) -> Tensor:
    return apply("ones", shape=tuple(shape), dtype=as_dtype(dtype))


def _filled_like(x: TensorLike, value: float, dtype: Any = None) -> Tensor:
    """A tensor of ``value`` with the shape of ``x`` and its dtype (or ``dtype``); symbolic
    shapes too (via ``where``, which broadcasts a scalar to the condition's shape whatever
    ``x`` holds, NaN included)."""
    t = convert_to_tensor(x)
    dt = t.dtype if dtype is None else as_dtype(dtype)
    if t.type.is_static:
        return fill(t.type.static_shape, value, dt)
    c = constant(value, dtype=dt)
    return where(equal(t, t), c, c)


def zeros_like(x: TensorLike, dtype: Any = None) -> Tensor:
    """``tf.zeros_like``: zeros shaped like ``x``, of its dtype unless ``dtype`` says."""
    return _filled_like(x, 0, dtype)


def ones_like(x: TensorLike, dtype: Any = None) -> Tensor:
    """``tf.ones_like``: ones shaped like ``x``, of its dtype unless ``dtype`` says."""
    return _filled_like(x, 1, dtype)


def range(start: float, limit: float | None = None, delta: float = 1,  # noqa: A001
          dtype: Any = None) -> Tensor:
    """``tf.range``: i32 unless a bound is a float (then f32) or ``dtype`` says."""
    if limit is None:
        start, limit = 0, start
    if dtype is None:
        dtype = DType.f32 if any(isinstance(v, float) for v in (start, limit, delta)) \
            else DType.i32
    return apply("range", start=float(start), limit=float(limit), delta=float(delta),
                 dtype=as_dtype(dtype))


# ---- state (TF1's functional forms of the Variable methods) ------------------------------

def assign(ref: Variable, value: TensorLike, name: str | None = None) -> Operation:
    """``ref.assign(value)`` (``tf.assign``). It lands at the end of the step and is an
    operation: fetching it gives None, not the new value (README differences)."""
    return _variable(ref, "assign").assign(value, name)


def assign_add(ref: Variable, value: TensorLike, name: str | None = None) -> Operation:
    """``ref.assign_add(value)`` (``tf.assign_add``)."""
    return _variable(ref, "assign_add").assign_add(value, name)


def assign_sub(ref: Variable, value: TensorLike, name: str | None = None) -> Operation:
    """``ref.assign_sub(value)`` (``tf.assign_sub``)."""
    return _variable(ref, "assign_sub").assign_sub(value, name)


def _variable(ref: Any, what: str) -> Variable:
    if not isinstance(ref, Variable):
        raise TfcError(f"{what}: ref must be a tfc.Variable, got {ref!r}", user_location())
    return ref


def no_op(name: str | None = None) -> Operation:
    """An operation that does nothing but run its control dependencies (``tf.no_op``)."""
    return Operation(get_default_graph(), None, [], name=name or "NoOp")


def control_dependencies(control_inputs: Sequence[Any] | None) -> Any:
    """``with tfc.control_dependencies([op]):`` operations made inside also run ``op``
    (``tf.control_dependencies``; see ``Graph.control_dependencies``)."""
    return get_default_graph().control_dependencies(control_inputs)


def global_variables() -> list[Variable]:
    """The default graph's variables in creation order, less the local ones
    (``tf.global_variables``)."""
    from tfc.api.graph_collections import GraphKeys, get_collection
    return get_collection(GraphKeys.GLOBAL_VARIABLES)


def local_variables() -> list[Variable]:
    """The default graph's local variables: ``tfc.metrics``' sums (``tf.local_variables``)."""
    from tfc.api.graph_collections import GraphKeys, get_collection
    return get_collection(GraphKeys.LOCAL_VARIABLES)


def local_variables_initializer() -> Operation:
    """An operation that sets the local variables (``tfc.metrics``' sums) to their
    initial values (TF1's ``tf.local_variables_initializer``, run next to the global one;
    it resets a streaming metric)."""
    return Operation(get_default_graph(), None, [v.initializer for v in local_variables()],
                     name="local_init")


# ---- tan, inverse trigonometry, the error function (registry: tfc/ops/math_special.py) --
tan = _unary("tan")
atan = _unary("atan")
asin = _unary("asin")
acos = _unary("acos")
erf = _unary("erf")
erfc = _unary("erfc")


def atan2(y: TensorLike, x: TensorLike, name: str | None = None) -> Tensor:
    """The angle of the point (x, y) in [-pi, pi] (``tf.math.atan2(y, x)``: y first),
    with C's signed zeros and infinities (atan2(+-0, -0) = +-pi)."""
    return apply("atan2", y, x, name=name)


# ---- ceil, round, reciprocal, is_nan/is_inf/is_finite, floordiv/floormod,
# squared_difference, logical_xor; sinh, cosh, asinh, acosh, atanh (composites) -------------

ceil = _unary("ceil")
rint = _unary("round")  # (tf.math.rint: ties to even, as round)
rint.__name__ = rint.__qualname__ = "rint"
reciprocal = _unary("reciprocal")
is_nan = _unary("is_nan")
is_inf = _unary("is_inf")
is_finite = _unary("is_finite")


def round(x: TensorLike, name: str | None = None) -> Tensor:  # noqa: A001 (TF's name)
    """The nearest integer, ties to even (``tf.round``: round(2.5) is 2, as Python's and
    np.rint, not C's round); integers are returned unchanged, as TensorFlow does."""
    t = convert_to_tensor(x)
    if t.dtype.is_int:
        return apply("identity", t, name=name)
    return apply("round", t, name=name)


def floordiv(x: TensorLike, y: TensorLike, name: str | None = None) -> Tensor:
    """``x // y`` (``tf.math.floordiv``): ``floor(x / y)`` on floats (as TensorFlow; not
    numpy's floor_divide, which gives 9 for 1 // 0.1), Python's ``//`` on integers. An
    integer zero divisor fails the run (``ExecutionError``), as ``div``. No gradient."""
    return _named(_binary("floordiv", x, y), name)


def floormod(x: TensorLike, y: TensorLike, name: str | None = None) -> Tensor:
    """``x % y`` (``tf.math.floormod``, ``tf.math.mod``): the remainder of floor division,
    with the divisor's sign, as Python's ``%`` (``fmod`` plus ``y`` where their signs
    differ, exact on floats); ``x % 0.0`` is NaN, an integer zero divisor fails the run
    (``ExecutionError``). Gradients as TensorFlow's: ``dy`` and ``-floor(x / y) dy``."""
    return _named(_binary("floormod", x, y), name)


mod = floormod


def truncatediv(x: TensorLike, y: TensorLike, name: str | None = None) -> Tensor:
    """``x / y`` rounded toward zero (``tf.truncatediv``: C's integer division; floats
    ``trunc(x / y)``). An integer zero divisor fails the run (``ExecutionError``); no
    gradient (TF registers none)."""
    return _named(_binary("truncatediv", x, y), name)


def truncatemod(x: TensorLike, y: TensorLike, name: str | None = None) -> Tensor:
    """The remainder of ``truncatediv``, with the dividend's sign (``tf.truncatemod``: C's
    ``%``, ``fmod`` on floats, exact). An integer zero divisor fails the run; no
    gradient (TF registers none)."""
    return _named(_binary("truncatemod", x, y), name)


def squared_difference(x: TensorLike, y: TensorLike, name: str | None = None) -> Tensor:
    """``(x - y)^2`` element-wise (``tf.math.squared_difference``)."""
    return _named(_binary("squared_difference", x, y), name)


def logical_xor(x: TensorLike, y: TensorLike, name: str | None = None) -> Tensor:
    """``x != y`` on bool tensors (``tf.math.logical_xor``)."""
    return _named(_binary("logical_xor", x, y), name)


def _named(t: Tensor, name: str | None) -> Tensor:
    return t if name is None else apply("identity", t, name=name)


def _float_operand(x: TensorLike, what: str) -> Tensor:
    t = convert_to_tensor(x)
    if not t.dtype.is_float:
        raise TypeMismatch(f"{what} takes float tensors, got {t.type}", user_location())
    return t


def divide_no_nan(x: TensorLike, y: TensorLike, name: str | None = None) -> Tensor:
    """``x / y``, but 0 where ``y`` is 0 (``tf.math.divide_no_nan``; floats). The divisor
    is replaced by 1 there before dividing, so the gradient is 0 there too (as TF's), not
    NaN."""
    if isinstance(x, (Tensor, Variable)):
        xt = _float_operand(x, "divide_no_nan")
        yt = convert_to_tensor(y, xt.dtype)
    else:
        yt = _float_operand(y, "divide_no_nan")
        xt = convert_to_tensor(x, yt.dtype)
    zero = equal(yt, 0)
    safe = where(zero, 1, yt)
    return _named(where(zero, 0, _binary("div", xt, safe)), name)


def reciprocal_no_nan(x: TensorLike, name: str | None = None) -> Tensor:
    """``1 / x``, but 0 where ``x`` is 0 (``tf.math.reciprocal_no_nan``; floats)."""
    t = _float_operand(x, "reciprocal_no_nan")
    return divide_no_nan(constant(1, t.dtype), t, name=name)


def _odd(x: Tensor, magnitude: Tensor) -> Tensor:
    """``f(x)`` of an odd ``f`` from ``f(|x|)``: its sign set from x's, ±0 and NaN kept."""
    return where(less(x, 0), negative(magnitude), where(greater(x, 0), magnitude, x))


def _split(a: Tensor, limit: float) -> tuple[Tensor, Tensor, Tensor]:
    """(a < limit, a where below limit else 0, a where not below else limit): each branch
    of a ``where`` sees only inputs where it is finite, so no 0 * inf enters a gradient."""
    small = less(a, limit)
    return small, where(small, a, 0), where(small, limit, a)


# Past these |x| the exp-based formulas' terms underflow or overflow (see each composite).
def _big(dt: DType) -> float:
    return {DType.f16: 5.0, DType.f32: 20.0}.get(dt, 40.0)


def _half_exp(a: Tensor, dt: DType) -> Tensor:
    """``e^a / 2`` for ``a >= 0`` without overflow while it fits: ``e^a`` halved below
    log(max) (exp's error only), ``(e^(a/2) / 2) e^(a/2)`` above (sinh(89) in float32)."""
    top = {DType.f16: 11.0, DType.f32: 88.5}.get(dt, 709.5)  # (below log(max), in dt)
    huge = greater_equal(a, top)
    one = exp(where(huge, top, a))
    w = exp(multiply(where(huge, a, top), 0.5))
    return where(huge, multiply(multiply(w, 0.5), w), multiply(one, 0.5))


def sinh(x: TensorLike, name: str | None = None) -> Tensor:
    """``(e^x - e^-x) / 2`` (``tf.math.sinh``), composed of registry ops: with
    ``t = expm1(|x|)``, ``(t + t / (t + 1)) / 2`` (no cancellation near 0: sinh(1e-30) is
    1e-30), and past |x| = 20 (f64: 40, f16: 5), where e^-|x| is below an ulp,
    ``e^|x| / 2``, which does not overflow while the result fits (``_half_exp``); odd.
    Max error measured in tests/api/test_math_composites.py."""
    t = _float_operand(x, "sinh")
    small, lo, hi = _split(abs(t), _big(t.dtype))
    e = expm1(lo)
    near = multiply(add(e, truediv(e, add(e, 1))), 0.5)
    return _named(_odd(t, where(small, near, _half_exp(hi, t.dtype))), name)


def cosh(x: TensorLike, name: str | None = None) -> Tensor:
    """``(e^x + e^-x) / 2`` (``tf.math.cosh``): ``1 + t^2 / (2 (1 + t))`` with
    ``t = expm1(|x|)`` (positive terms only, so its derivative through these ops is
    sinh(x) without the cancellation of ``(e - 1/e) / 2`` near 0), past |x| = 20 (f64:
    40, f16: 5) ``e^|x| / 2``, which does not overflow while the result fits
    (``_half_exp``)."""
    t = _float_operand(x, "cosh")
    small, lo, hi = _split(abs(t), _big(t.dtype))
    e = expm1(lo)
    near = add(truediv(square(e), multiply(add(e, 1), 2)), 1)
    return _named(where(small, near, _half_exp(hi, t.dtype)), name)


def _log_twice(a: Tensor) -> Tensor:
    """``log(2a)`` for large a, without overflowing 2a."""
    return add(log(a), _math.log(2.0))


def _root_limit(dt: DType) -> float:
    """Past this, ``x^2 + 1`` is ``x^2`` to the dtype's precision (and x^2 is finite)."""
    return {DType.f16: 2.0 ** 6, DType.f32: 2.0 ** 12}.get(dt, 2.0 ** 28)


def asinh(x: TensorLike, name: str | None = None) -> Tensor:
    """``log(x + sqrt(x^2 + 1))`` (``tf.math.asinh``) as ``log1p(a + a^2 / (1 +
    sqrt(1 + a^2)))`` of ``a = |x|`` (exact near 0), and ``log(a) + log(2)`` past 2^12
    (f64: 2^28, f16: 2^6), where squaring would lose 1 or overflow; odd."""
    t = _float_operand(x, "asinh")
    small, lo, hi = _split(abs(t), _root_limit(t.dtype))
    sq = square(lo)
    near = log1p(add(lo, truediv(sq, add(sqrt(add(sq, 1)), 1))))
    return _named(_odd(t, where(small, near, _log_twice(hi))), name)


def acosh(x: TensorLike, name: str | None = None) -> Tensor:
    """``log(x + sqrt(x^2 - 1))`` (``tf.math.acosh``), x >= 1 (NaN below): with
    ``u = x - 1`` (exact near 1), ``log1p(u + sqrt(u (u + 2)))``, and ``log(x) + log(2)``
    past 2^12 (f64: 2^28, f16: 2^6); NaN below 1. At x = 1 the root is taken as
    ``sqrt(u) sqrt(u + 2)`` (the same 0), whose chain rule gives TF's inf derivative
    there, where ``u (u + 2)``'s meets 0 * inf (NaN); elsewhere one rounded root (the
    split one costs about 1 ulp more)."""
    t = _float_operand(x, "acosh")
    limit = _root_limit(t.dtype)
    large = greater_equal(t, limit)
    lo = where(large, 2, t)  # (NaN and x < 1 stay: sqrt or log1p gives NaN)
    hi = where(large, t, limit)
    u = subtract(lo, 1)
    at_one = equal(u, 0)
    root = where(at_one, multiply(sqrt(u), sqrt(add(u, 2))), sqrt(multiply(u, add(u, 2))))
    near = log1p(add(u, root))
    # (below -1, u + sqrt(u (u + 2)) is -1 or below: NaN from log1p, or -inf at -1)
    r = where(large, _log_twice(hi), near)
    return _named(where(less(t, 1), float("nan"), r), name)


def atanh(x: TensorLike, name: str | None = None) -> Tensor:
    """``log((1 + x) / (1 - x)) / 2`` (``tf.math.atanh``) as ``(log1p(a) - log1p(-a)) / 2``
    of ``a = |x|`` (exact near 0, no cancellation: the terms have opposite signs; ±1 give
    ±inf and an inf derivative, as TF's, |x| > 1 NaN); odd."""
    t = _float_operand(x, "atanh")
    a = abs(t)
    r = multiply(subtract(log1p(a), log1p(negative(a))), 0.5)
    return _named(_odd(t, r), name)
