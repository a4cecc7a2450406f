"""Turning Python values into graph tensors, applying registry ops, and operator overloads.

``apply`` is the single path from the Python API into the IR: it converts inputs, picks
the graph, records the user's file:line and device, and lets the registry type-check the
op, so a shape error names the line the user wrote.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from tfc.api.graph import (Graph, Operation, Tensor, Variable, as_dtype, get_default_graph,
                           user_location)
from tfc.errors import TfcError, TypeMismatch
from tfc.ir.types import DType

TensorLike = Any  # Tensor, Variable, numpy array, Python number or nested list

_F64, _I64 = np.dtype(np.float64), np.dtype(np.int64)

# Python scalars become these when nothing else fixes the dtype (TensorFlow's defaults).
_DEFAULT_DTYPES = {bool: DType.bool, int: DType.i32, float: DType.f32}


def _graph_of(values: Sequence[Any]) -> Graph:
    default = get_default_graph()
    for v in values:
        if isinstance(v, (Tensor, Variable)):
            # a region being traced (tfc.cond ...) captures tensors of enclosing graphs
            return default if default.encloses(v.graph) else v.graph
    return default


def constant(value: Any, dtype: Any = None, shape: Sequence[int] | None = None,
             name: str | None = None) -> Tensor:
    """A constant tensor (``tf.constant``): Python numbers default to f32 / i32 / bool."""
    loc = user_location()
    arr = np.asarray(value)
    dt = as_dtype(dtype) if dtype is not None else default_dtype(value, arr)
    arr = _to_array(value, dt, loc, arr)
    if shape is not None:
        arr = np.broadcast_to(arr, tuple(shape)) if arr.size == 1 else arr.reshape(shape)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    if arr.base is None and arr is not value:
        # our own copy (``_to_array`` converted it): freeze it here, so that the op
        # shares it instead of copying it again (a 256x256 weight costs a copy less)
        arr.flags.writeable = False
    g = get_default_graph()
    op = g.create_op("constant", [], {"value": arr}, name=name, loc=loc)
    return Tensor(g, op.result, loc)


def default_dtype(value: Any, arr: np.ndarray | None = None) -> DType:
    """The dtype ``tf.constant`` gives ``value`` (``arr``: it as an array, when the caller
    has it): Python floats f32, ints i32 (i64 beyond its range), bools bool; numpy arrays
    and scalars keep theirs."""
    if arr is None:
        arr = np.asarray(value)
    from_python = not isinstance(value, (np.ndarray, np.generic))
    if from_python and arr.dtype == _F64:
        return DType.f32  # Python floats are f32, as in TensorFlow
    if from_python and arr.dtype == _I64:
        return DType.i32 if np.all(np.abs(arr) < 2**31) else DType.i64
    dt = DType.from_numpy(arr.dtype) if arr.dtype.kind in "biuf" else None
    if dt is None:
        raise TypeMismatch(f"cannot make a tensor from {type(value).__name__} "
                           f"with numpy dtype {arr.dtype}", user_location())
    return dt


def _to_array(value: Any, dtype: DType, loc: Any, arr: np.ndarray | None = None
              ) -> np.ndarray:
    """``value`` (``arr``: it as an array, when the caller has it) as ``dtype``, a copy: a
    float target takes rounding; an integer or bool target must hold every number exactly
    (the check is skipped for float targets: for pretrained weights it cost more than
    building the rest of the graph)."""
    if arr is None:
        arr = np.asarray(value)
    target = dtype.np
    if arr.dtype == target:
        return arr.astype(target)  # the same numbers, exactly
    with np.errstate(over="ignore"):
        out = arr.astype(target)
    # a finite number too large for a narrower float would silently become inf
    if dtype.is_float and arr.dtype != out.dtype and arr.dtype.kind in "biuf" and out.size \
            and np.isinf(out).any():
        bad = np.isinf(out) & np.isfinite(arr)
        if bad.any():
            raise TypeMismatch(f"value {arr[bad].flat[0].item()!r} is out of range for "
                               f"{dtype.value}", loc)
    if not dtype.is_float and arr.dtype.kind in "biuf" and out.size and not np.array_equal(
            out.astype(np.float64), arr.astype(np.float64), equal_nan=True):
        raise TypeMismatch(f"value {value!r} does not fit {dtype.value}", loc)
    return out


def convert_to_tensor(value: TensorLike, dtype: DType | None = None) -> Tensor:
    """A Tensor for ``value``; a Variable gives its read, other values a constant."""
    if isinstance(value, Tensor):
        t = value
    elif isinstance(value, Variable):
        t = value.value()
    elif isinstance(value, Operation):
        raise TypeMismatch(f"{value} has no value to use as a tensor", user_location())
    else:
        return constant(value, dtype=dtype)
    if dtype is not None and t.dtype != dtype:
        raise TypeMismatch(f"expected a {dtype.value} tensor, got {t.type} (use tfc.cast)",
                           user_location())
    return t


def as_operation(x: Any) -> Operation:
    if isinstance(x, Operation):
        return x
    raise TfcError(f"expected an operation (an assign, an initializer or a group), got {x!r}")


def apply(kind: str, *inputs: TensorLike, name: str | None = None, **attrs: Any) -> Any:
    """Apply registry op ``kind``: one result gives a Tensor, several a tuple, none an
    Operation. Python values among the inputs take the dtype of the first tensor input."""
    g = _graph_of(inputs)
    if g is get_default_graph():
        op = _apply_in(g, kind, inputs, name, attrs)
    else:  # (the inputs' graph, for the constants Python values among them become)
        with g.as_default():
            op = _apply_in(g, kind, inputs, name, attrs)
    results = op.results
    if len(results) == 1:
        return Tensor(g, results[0])
    if not results:
        return Operation(g, op, name=name)
    return tuple(Tensor(g, v) for v in results)


def _apply_in(g: Graph, kind: str, inputs: Sequence[TensorLike], name: str | None,
              attrs: dict[str, Any]) -> Any:
    """``apply``'s op, built in ``g``, the default graph."""
    hint = None  # the dtype of the first tensor input
    for x in inputs:
        if isinstance(x, Tensor):
            hint = x.value.type.dtype
            break
        if isinstance(x, Variable):
            hint = x.value().dtype
            break
    tensors: list[Tensor] = []
    for x in inputs:
        if isinstance(x, Tensor):
            tensors.append(x)
        elif isinstance(x, Variable):
            tensors.append(x.value())
        else:
            tensors.append(convert_to_tensor(x, hint))
    return g.create_op(kind, tensors, attrs, name=name, loc=user_location())


def binary_op(kind: str, a: TensorLike, b: TensorLike) -> Tensor:
    """A binary op where a Python scalar takes the dtype of the tensor operand."""
    return _in_operands_graph((a, b), lambda g: _binary_in(g, kind, a, b))


def truediv(a: TensorLike, b: TensorLike) -> Tensor:
    """``a / b`` as TensorFlow's truediv (``tf.divide``, ``/``): integer operands are
    divided as float64, as TensorFlow casts int32 and int64 to float64 first (7 / 2 is
    3.5, 1 / 0 is inf), floats as they are. ``//`` is the integer (floor) division."""
    return _in_operands_graph((a, b), lambda g: _truediv_in(g, a, b))


def _in_operands_graph(operands: tuple[TensorLike, ...], build: Callable[[Graph], Any]
                       ) -> Tensor:
    """The tensor of the op ``build(g)`` makes in ``g``, the operands' graph, made the
    default meanwhile (for the constant a Python value becomes)."""
    g = _graph_of(operands)
    if g is get_default_graph():
        op = build(g)
    else:
        with g.as_default():
            op = build(g)
    return Tensor(g, op.result)


def _truediv_in(g: Graph, a: TensorLike, b: TensorLike) -> Any:
    x, y = _operands(a, b)
    if x.dtype.is_int:
        x, y = (Tensor(g, g.create_op("cast", [v], {"dtype": DType.f64},
                                      loc=user_location()).result) for v in (x, y))
    return g.create_op("div", [x, y], {}, loc=user_location())


def _binary_in(g: Graph, kind: str, a: TensorLike, b: TensorLike) -> Any:
    """``binary_op``'s op, built in ``g``, the default graph."""
    a, b = _operands(a, b)
    return g.create_op(kind, [a, b], {}, loc=user_location())


def _operands(a: TensorLike, b: TensorLike) -> tuple[Tensor, Tensor]:
    """The operands of a binary op as tensors: a Python value takes the other's dtype."""
    if isinstance(a, Tensor) or isinstance(a, Variable):
        a = a if isinstance(a, Tensor) else a.value()
        if isinstance(b, Variable):
            b = b.value()
        elif not isinstance(b, Tensor):
            b = convert_to_tensor(b, a.dtype)
    elif isinstance(b, (Tensor, Variable)):
        b = b if isinstance(b, Tensor) else b.value()
        a = convert_to_tensor(a, b.dtype)
    else:
        a, b = convert_to_tensor(a), convert_to_tensor(b)
    return a, b


# ---- operator overloads on Tensor and Variable ---------------------------------------------

def _index(x: TensorLike, key: Any) -> Tensor:
    """``x[1:3, ::2, 0, None, ...]``: one ``slice`` op, then ``expand_dims`` per ``None``."""
    from tfc.ops.array import index_attrs
    t = convert_to_tensor(x)
    keys = key if isinstance(key, tuple) else (key,)
    real = tuple(k for k in keys if k is not None)
    try:
        attrs = index_attrs(real, t.type.rank)
    except TfcError as e:
        raise e.at(user_location())
    new_axes, out_axis = [], 0
    n_explicit = sum(k is not Ellipsis for k in real)
    for k in keys:
        if k is None:
            new_axes.append(out_axis)
            out_axis += 1
        elif k is Ellipsis:
            out_axis += t.type.rank - n_explicit
        elif isinstance(k, slice):
            out_axis += 1
    out = t
    if any(k is not Ellipsis and k != slice(None) for k in real):
        out = apply("slice", t, **attrs)
    for a in new_axes:
        out = apply("expand_dims", out, axis=a)
    return out


def _def(name: str, fn: Any) -> None:
    setattr(Tensor, name, fn)
    setattr(Variable, name, fn)


_def("__truediv__", truediv)
_def("__rtruediv__", lambda a, b: truediv(b, a))
for _dunder, _kind in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("pow", "pow"),
                       ("matmul", "matmul"), ("and", "logical_and"), ("or", "logical_or")]:
    _def(f"__{_dunder}__", lambda a, b, _k=_kind: binary_op(_k, a, b))
    _def(f"__r{_dunder}__", lambda a, b, _k=_kind: binary_op(_k, b, a))
for _dunder, _kind in [("lt", "less"), ("le", "less_equal"), ("gt", "greater"),
                       ("ge", "greater_equal")]:
    _def(f"__{_dunder}__", lambda a, b, _k=_kind: binary_op(_k, a, b))
_def("__floordiv__", lambda a, b: _floordiv(a, b))
_def("__rfloordiv__", lambda a, b: _floordiv(b, a))
_def("__neg__", lambda a: apply("neg", a))
_def("__abs__", lambda a: apply("abs", a))
_def("__invert__", lambda a: apply("logical_not", a))
_def("__getitem__", _index)


def _floordiv(a: TensorLike, b: TensorLike) -> Tensor:
    """``a // b``: TensorFlow's floordiv (``floor(a / b)`` on floats, Python's ``//`` on
    integers), registry op ``floordiv``."""
    return binary_op("floordiv", a, b)


_def("__mod__", lambda a, b: binary_op("floormod", a, b))  # TF: % is floormod
_def("__rmod__", lambda a, b: binary_op("floormod", b, a))
_def("__xor__", lambda a, b: binary_op("logical_xor", a, b))  # TF: ^ on bools
_def("__rxor__", lambda a, b: binary_op("logical_xor", b, a))
