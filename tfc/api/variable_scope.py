"""TF1's variable sharing: ``tfc.variable_scope`` and ``tfc.get_variable``.

``get_variable("w", ...)`` inside ``variable_scope("tower")`` makes (or, with reuse, finds)
the variable named ``tower/w`` in the graph: the variable-scope path names it, the name
scopes opened by ``name_scope`` do not (as in TensorFlow). A variable scope also opens a
name scope of the same name for the ops made inside (``tower``, then ``tower_1`` the next
time, as TensorFlow does).

Reuse follows TF1: ``reuse=True`` requires the variable to exist, ``reuse=False``/None
(inherit; False at the top) requires it not to, ``tfc.AUTO_REUSE`` makes it when missing.
A scope's reuse is inherited by the scopes inside it; ``scope.reuse_variables()`` turns it
on for the rest of the block.

Initializers: a value (numpy array, Python number, tensor: its shape is the variable's), a
callable taking ``(shape, dtype)`` (``tfc.zeros_initializer()`` ...), or None: Glorot
uniform for floats (TF1's default), zeros otherwise.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from tfc.api.graph import Graph, Tensor, Variable, as_dtype, get_default_graph, user_location
from tfc.errors import TfcError, TypeMismatch
from tfc.ir.types import DType


class _AutoReuse:
    def __repr__(self) -> str:
        return "tfc.AUTO_REUSE"


AUTO_REUSE: Any = _AutoReuse()


@dataclass
class VariableScope:
    """One ``variable_scope`` block (``tf.VariableScope``): its full name and reuse."""
    name: str
    reuse: Any = False
    initializer: Any = None
    dtype: DType | None = None

    @property
    def original_name_scope(self) -> str:
        return self.name + "/" if self.name else ""

    def reuse_variables(self) -> None:
        """Reuse the scope's variables for the rest of the block."""
        self.reuse = True


def _stack(g: Graph) -> list[VariableScope]:
    return g.variable_scopes


def get_variable_scope() -> VariableScope:
    """The innermost variable scope (the root one, named "", outside every block)."""
    stack = _stack(get_default_graph())
    return stack[-1] if stack else _root(get_default_graph())


def _root(g: Graph) -> VariableScope:
    if g.root_variable_scope is None:
        g.root_variable_scope = VariableScope("")
    scope: VariableScope = g.root_variable_scope
    return scope


@contextlib.contextmanager
def variable_scope(name_or_scope: str | VariableScope | None, default_name: str | None = None,
                   values: Any = None, initializer: Any = None, reuse: Any = None,
                   dtype: Any = None) -> Iterator[VariableScope]:
    """``with tfc.variable_scope("layer1"):`` prefixes ``get_variable`` names with
    ``layer1/`` and opens the name scope ``layer1`` (see the module docstring)."""
    g = get_default_graph()
    outer = get_variable_scope()
    if isinstance(name_or_scope, VariableScope):
        full = name_or_scope.name
        base = full.rsplit("/", 1)[-1]
    else:
        if name_or_scope is None:
            if default_name is None:
                raise TfcError("variable_scope: give a name or a default_name",
                               user_location())
            base = _unique_default(g, outer, default_name)
        else:
            base = str(name_or_scope)
        if not base or "/" in base.strip("/"):
            raise TfcError(f"variable_scope: bad scope name {base!r}", user_location())
        full = f"{outer.name}/{base}" if outer.name else base
    if reuse is not None and reuse is not True and reuse is not False \
            and reuse is not AUTO_REUSE:
        raise TfcError(f"variable_scope: reuse must be True, False, None or "
                       f"tfc.AUTO_REUSE, got {reuse!r}", user_location())
    if outer.reuse is True:  # (a reusing scope's inner scopes reuse too)
        mode: Any = True
    elif reuse is None:
        mode = (name_or_scope.reuse if isinstance(name_or_scope, VariableScope)
                else outer.reuse)
    else:
        mode = reuse
    scope = VariableScope(
        full, mode, initializer if initializer is not None else outer.initializer,
        as_dtype(dtype) if dtype is not None else outer.dtype)
    g.variable_scopes.append(scope)
    try:
        with g.name_scope(base):
            yield scope
    finally:
        g.variable_scopes.pop()


def _unique_default(g: Graph, outer: VariableScope, default_name: str) -> str:
    """``default_name``, suffixed ``_1``, ``_2`` ... past the scopes already used."""
    used = g.used_variable_scopes
    prefix = f"{outer.name}/" if outer.name else ""
    name, i = default_name, 0
    while prefix + name in used:
        i += 1
        name = f"{default_name}_{i}"
    used.add(prefix + name)
    return name


def get_variable(name: str, shape: Sequence[int] | None = None, dtype: Any = None,
                 initializer: Any = None, regularizer: Any = None, trainable: bool = True,
                 collections: Any = None, caching_device: Any = None,
                 partitioner: Any = None, validate_shape: bool = True,
                 use_resource: Any = None) -> Variable:
    """The variable ``<scope>/name``: made, or found when the scope reuses (see the module
    docstring). A found variable's shape and dtype must match those asked for."""
    g = get_default_graph()
    loc = user_location()
    for arg, what in ((regularizer, "regularizer"), (partitioner, "partitioner"),
                      (caching_device, "caching_device")):
        if arg is not None:
            raise TfcError(f"get_variable: {what} is not supported", loc)
    scope = get_variable_scope()
    full = f"{scope.name}/{name}" if scope.name else name
    want_dtype = as_dtype(dtype) if dtype is not None else scope.dtype
    existing = g.variables.get(full)
    if scope.reuse is True or (scope.reuse is AUTO_REUSE and existing is not None):
        if existing is None:
            raise TfcError(f"Variable {full} does not exist, or was not created with "
                           "tfc.get_variable(); reuse=True needs an existing variable", loc)
        if shape is not None and tuple(shape) != tuple(existing.shape):
            raise TypeMismatch(f"Trying to share variable {full}, but specified shape "
                               f"{tuple(shape)} and found shape {existing.shape}", loc)
        if want_dtype is not None and want_dtype != existing.dtype:
            raise TypeMismatch(f"Trying to share variable {full}, but specified dtype "
                               f"{want_dtype} and found dtype {existing.dtype}", loc)
        return existing
    if existing is not None:
        raise TfcError(f"Variable {full} already exists, disallowed. Did you mean to set "
                       "reuse=True or reuse=tfc.AUTO_REUSE in variable_scope?", loc)
    init = initializer if initializer is not None else scope.initializer
    value = _initial_value(full, shape, want_dtype, init)
    parent, base = (full.rsplit("/", 1) if "/" in full else ("", full))
    with g.name_scope(parent + "/"):
        var = Variable(value, trainable=trainable, name=base)
    if var.name != full:  # (an op took the name: TF would have failed the same way)
        raise TfcError(f"get_variable: the name {full} is taken by an op", loc)
    return var


def _initial_value(full: str, shape: Sequence[int] | None, dtype: DType | None,
                   init: Any) -> Callable[[], Any] | Any:
    """What ``Variable`` takes: a value, or a thunk building it in the initializer scope."""
    loc = user_location()
    if init is None or callable(init) and not isinstance(init, (Tensor, Variable)):
        if shape is None:
            raise TfcError(f"get_variable: the shape of new variable {full} must be "
                           "given (or an initial value)", loc)
        dt = dtype or DType.f32
        dims = [int(d) for d in shape]
        if init is None:
            if dt.is_float:
                from tfc.api import random
                return lambda: random.glorot_uniform(dims, dt)
            return np.zeros(dims, dt.np)
        return lambda: init(dims, dt)
    if isinstance(init, (Tensor, Variable)) or dtype is None:
        value: Any = init  # (a Python float stays one: f32, as tfc.constant makes it)
    else:
        value = np.asarray(init, dtype.np)
    got = tuple(value.shape) if isinstance(value, (Tensor, Variable)) else np.shape(value)
    if shape is not None and tuple(shape) != got:
        raise TypeMismatch(f"get_variable: initial value of {full} has shape {got}, "
                           f"not the shape given {tuple(shape)}", loc)
    if dtype is not None and isinstance(value, (Tensor, Variable)) and value.dtype != dtype:
        raise TypeMismatch(f"get_variable: initial value of {full} is {value.dtype}, "
                           f"not the dtype given {dtype}", loc)
    return value


# ---- initializers (``tf.zeros_initializer()`` ...): callables of (shape, dtype) ----------

def zeros_initializer(dtype: Any = None) -> Callable[[Sequence[int], DType], Tensor]:
    return constant_initializer(0, dtype)


def ones_initializer(dtype: Any = None) -> Callable[[Sequence[int], DType], Tensor]:
    return constant_initializer(1, dtype)


def constant_initializer(value: Any = 0, dtype: Any = None
                         ) -> Callable[[Sequence[int], DType], Tensor]:
    """Fills with ``value`` (a scalar), or reshapes ``value`` (an array of the
    variable's size) to the variable's shape (``tf.constant_initializer``)."""
    def init(shape: Sequence[int], dt: DType) -> Tensor:
        from tfc.api import ops
        from tfc.api.tensor import constant
        d = as_dtype(dtype) if dtype is not None else dt
        arr = np.asarray(value)
        if arr.ndim == 0:
            return ops.fill(list(shape), arr.item(), d)
        if arr.size != int(np.prod(shape)):
            raise TypeMismatch(f"constant_initializer: {arr.size} values for shape "
                               f"{tuple(shape)}", user_location())
        return constant(arr.reshape(tuple(shape)).astype(d.np))
    return init


def random_normal_initializer(mean: float = 0.0, stddev: float = 1.0,
                              seed: int | None = None, dtype: Any = None
                              ) -> Callable[[Sequence[int], DType], Tensor]:
    from tfc.api import random
    return lambda shape, dt: random.normal(shape, mean, stddev,
                                           as_dtype(dtype) if dtype else dt, seed)


def truncated_normal_initializer(mean: float = 0.0, stddev: float = 1.0,
                                 seed: int | None = None, dtype: Any = None
                                 ) -> Callable[[Sequence[int], DType], Tensor]:
    from tfc.api import random
    return lambda shape, dt: random.truncated_normal(shape, mean, stddev,
                                                     as_dtype(dtype) if dtype else dt, seed)


def glorot_uniform_initializer(seed: int | None = None, dtype: Any = None
                               ) -> Callable[[Sequence[int], DType], Tensor]:
    from tfc.api import random
    return lambda shape, dt: random.glorot_uniform(shape, as_dtype(dtype) if dtype else dt,
                                                   seed)


__all__ = ["AUTO_REUSE", "VariableScope", "variable_scope", "get_variable",
           "get_variable_scope", "zeros_initializer", "ones_initializer",
           "constant_initializer", "random_normal_initializer",
           "truncated_normal_initializer", "glorot_uniform_initializer"]
