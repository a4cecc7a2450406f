"""A valid instance of every registered op in each dtype it accepts, and inputs for it.

The walks over the registry build every op from here: ``tests/ir/test_registry.py``
(each op has infer, reference and cost) and ``tests/backends/llvm/test_op_coverage.py``
(each op, in each dtype, runs natively and matches the reference). ``EXAMPLES`` holds the
ops the generic candidates do not build (the dtype under test written ``T``); an op that
neither builds has no example, and both walks fail for it, so a new op comes with one.

Inputs (``feeds``): floats in [0.5, 1.5) (inside every op's domain: log, sqrt, pow, div),
integers in [1, 3) (no division by zero), index inputs (an ``i32`` fixed in the table) in
[0, 2), which every example's indexed dims hold; matrices to invert are well conditioned.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from tfc.errors import TfcError
from tfc.ir.registry import REQUIRED, infer_types, lookup
from tfc.ir.types import DType, TensorType

T = "T"  # the dtype under test, in EXAMPLES
DTYPES = tuple(DType)
VAR_SHAPE = (2, 3)  # the variables the var.* examples name (``var_name``)

Spec = tuple[Any, tuple]  # (dtype or T, shape)

EXAMPLES: dict[str, tuple[list[Spec], dict[str, Any]]] = {
    "argmax": ([(T, (3, 4))], {"axis": 1}),
    "argmin": ([(T, (3, 4))], {"axis": 0, "output_type": DType.i32}),
    "matmul": ([(T, (2, 3, 4)), (T, (4, 5))], {}),
    "matrix_inverse": ([(T, (2, 3, 3))], {}),
    "matrix_determinant": ([(T, (2, 3, 3))], {}),
    "cholesky": ([(T, (2, 3, 3))], {}),
    "log_matrix_determinant": ([(T, (2, 3, 3))], {}),  # (feeds: diagonally dominant, so SPD; linalg25)
    "triangular_solve": ([(T, (2, 3, 3)), (T, (2, 3, 2))], {"adjoint": True}),
    "where": ([(DType.bool, (2, 3)), (T, (2, 3)), (T, (1, 3))], {}),
    "gather": ([(T, (4, 3)), (DType.i32, (5,))], {}),
    "one_hot": ([(DType.i32, (5,))], {"depth": 4, "dtype": T}),
    "sparse_softmax_cross_entropy": ([(T, (2, 3)), (DType.i32, (2,))], {}),
    "softmax_cross_entropy": ([(T, (2, 3)), (T, (2, 3))], {}),
    "bias_add": ([(T, (2, 3)), (T, (3,))], {}),
    "conv2d": ([(T, (1, 5, 5, 2)), (T, (3, 3, 2, 4))], {"padding": "SAME"}),
    "conv2d_backprop_input": ([(T, (3, 3, 2, 4)), (T, (1, 3, 3, 4)), (T, (1, 5, 5, 2))], {}),
    "conv2d_backprop_filter": ([(T, (1, 5, 5, 2)), (T, (1, 3, 3, 4)), (T, (3, 3, 2, 4))], {}),
    "max_pool": ([(T, (1, 5, 5, 2))], {"ksize": [3, 3], "strides": [2, 2],
                                       "padding": "SAME"}),
    "avg_pool": ([(T, (1, 5, 5, 2))], {"ksize": [3, 3], "strides": [2, 2],
                                       "padding": "SAME"}),
    "max_pool_grad": ([(T, (1, 5, 5, 2)), (T, (1, 3, 3, 2)), (T, (1, 3, 3, 2))],
                      {"ksize": [3, 3], "strides": [2, 2], "padding": "SAME"}),
    "max_pool_grad_grad": ([(T, (1, 5, 5, 2)), (T, (1, 3, 3, 2)), (T, (1, 5, 5, 2))],
                           {"ksize": [3, 3], "strides": [2, 2], "padding": "SAME"}),
    "avg_pool_grad": ([(T, (1, 3, 3, 2)), (T, (1, 5, 5, 2))],
                      {"ksize": [3, 3], "strides": [2, 2], "padding": "SAME"}),
    "pad": ([(T, (2, 3))], {"paddings": [[1, 0], [0, 2]]}),
    "split": ([(T, (4, 3))], {"num": 2}),
    "slice": ([(T, (2, 3))], {"begin": [0, 1], "end": [2, 3]}),
    "tile": ([(T, (2, 3))], {"multiples": [2, 1]}),
    "reshape": ([(T, (2, 3))], {"shape": [3, 2]}),
    "broadcast_to": ([(T, (3,))], {"shape": [2, 3]}),
    "broadcast_like": ([(T, (3,)), (T, (2, 3))], {}),
    "reshape_like": ([(T, (6,)), (T, (2, 3))], {}),
    "transpose": ([(T, (2, 3, 4))], {"perm": [2, 0, 1]}),
    "expand_dims": ([(T, (2, 3))], {"axis": 1}),
    "squeeze": ([(T, (2, 1, 3))], {}),
    "concat": ([(T, (2, 3)), (T, (1, 3))], {}),
    "stack": ([(T, (2, 3)), (T, (2, 3))], {"axis": 1}),
    "sum": ([(T, (2, 3, 4))], {"axes": [0, 2]}),
    "max": ([(T, (2, 3))], {"axes": [1], "keepdims": True}),
    "fill": ([], {"shape": [2, 3], "value": 1.0, "dtype": T}),
    "zeros": ([], {"shape": [2, 3], "dtype": T}),
    "ones": ([], {"shape": [2, 3], "dtype": T}),
    "range": ([], {"start": 1.0, "limit": 7.0, "delta": 2.0, "dtype": T}),
    "constant": ([], {"value": T}),
    "random.uniform": ([], {"shape": [2, 3], "seed": 1, "dtype": T}),
    "random.normal": ([], {"shape": [2, 3], "seed": 2, "dtype": T}),
    "random.truncated_normal": ([], {"shape": [2, 3], "seed": 3, "dtype": T}),
    "random.uniform_int": ([], {"shape": [2, 3], "seed": 4, "maxval": 10, "dtype": T}),
    "random.uniform_like": ([(T, (2, 3))], {"seed": 5, "dtype": T}),
    "shuffle": ([(T, (5, 2))], {"seed": 6}),
    "scatter_add": ([(T, (4, 3)), (DType.i32, (5,)), (T, (5, 3))], {}),
    "first_occurrence": ([(DType.i32, (5,)), (T, (5,))], {}),
    "var.scatter_add": ([(DType.i32, (2,)), (T, (2, 3))], {"var": T}),
    "var.scatter_sub": ([(DType.i32, (2,)), (T, (2, 3))], {"var": T}),
    "send": ([(T, (2, 3))], {"key": "k", "to": "/cpu:1"}),
    "recv": ([], {"key": "k", "from": "/cpu:0", "dtype": T, "shape": [2, 3]}),
    "all_reduce": ([(T, (2, 3)), (T, (2, 3)), (T, (2, 3))], {"reduction": "mean"}),
    "optimizer.grad": ([(T, (2, 3))], {"var": "w"}),
    # (array24: scans along a middle axis from the end; a top-k of rows with ties)
    "cumsum": ([(T, (3, 4, 2))], {"axis": 1, "exclusive": True, "reverse": True}),
    "cumprod": ([(T, (3, 4))], {"axis": 0}),
    "sort": ([(T, (3, 5, 2))], {"axis": 1, "descending": True, "k": 3}),
    # (segment25: rows of a matrix reduced into 3 segments, one of them empty)
    "segment_reduce": ([(T, (5, 3)), (DType.i32, (5,))], {"reduction": "max",
                                                         "num_segments": 3}),
}

# Generic candidates: inputs by arity, tried in order; required attrs by kind.
GENERIC_INPUTS: dict[int | None, list[list[Spec]]] = {
    0: [[]],
    1: [[(T, (2, 3))]],
    2: [[(T, (2, 3)), (T, (2, 3))], [(T, (2, 3)), (T, (3,))]],
    3: [[(DType.bool, (2, 3)), (T, (2, 3)), (T, (2, 3))]],
    None: [[(T, (2, 3)), (T, (2, 3))], [(T, (2, 3))]],
}
GENERIC_ATTRS: dict[str, Any] = {"int": 1, "float": 1.0, "bool": False, "dtype": T,
                                 "shape": (2, 3), "ints": (0, 1), "var": T}


def var_name(dt: DType) -> str:
    """The variable a var.* example of dtype ``dt`` names (of shape ``VAR_SHAPE``)."""
    return f"W_{dt.value}"


def _attrs(attrs: dict[str, Any], dt: DType) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if v is T and k == "var":
            out[k] = var_name(dt)
        elif v is T and k == "value":  # constant: a small array of the dtype
            out[k] = np.arange(6).reshape(2, 3).astype(dt.np)
        else:
            out[k] = dt if v is T else v
    return out


def _candidates(name: str) -> list[tuple[list[Spec], dict[str, Any]]]:
    if name in EXAMPLES:
        return [EXAMPLES[name]]
    opdef = lookup(name)
    required = {k: GENERIC_ATTRS[s.kind] for k, s in opdef.attrs.items()
                if s.default is REQUIRED}
    return [(ins, required) for ins in GENERIC_INPUTS[opdef.num_inputs]]


def variants(name: str, dtypes: Sequence[DType] = DTYPES
             ) -> Iterator[tuple[str, list[TensorType], dict[str, Any], list[TensorType]]]:
    """(label, input types, attrs, result types) of ``name`` in each of ``dtypes`` it
    accepts (``cast``: each pair of them)."""
    if name == "cast":
        for src in dtypes:
            for dst in dtypes:
                yield f"{src.value}->{dst.value}", [TensorType(src, (2, 3))], \
                    {"dtype": dst}, [TensorType(dst, (2, 3))]
        return
    for dt in dtypes:
        for specs, attrs in _candidates(name):
            ins = [TensorType(dt if d is T else d, shape) for d, shape in specs]
            full = _attrs(attrs, dt)
            try:
                _, _, outs = infer_types(name, ins, full)
            except TfcError:
                continue
            if outs is None:  # var.read: the variable's type
                outs = [TensorType(dt, VAR_SHAPE)]
            yield dt.value, ins, full, outs
            break


def value(t: TensorType, rng: np.random.Generator, index: bool = False) -> np.ndarray:
    """An input of type ``t`` valid for every example (see the module docstring)."""
    shape = tuple(int(d) for d in t.shape)
    if index:
        return rng.integers(0, 2, shape).astype(t.dtype.np)
    if t.dtype.is_float:
        return rng.uniform(0.5, 1.5, shape).astype(t.dtype.np)
    if t.dtype.is_int:
        return rng.integers(1, 3, shape).astype(t.dtype.np)
    return rng.integers(0, 2, shape).astype(bool)


def feeds(name: str, ins: Sequence[TensorType], rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs for an example of ``name`` with input types ``ins``."""
    specs = [d for d, _ in EXAMPLES.get(name, ([], {}))[0]]
    out = []
    for i, t in enumerate(ins):
        x = value(t, rng, index=i < len(specs) and specs[i] is DType.i32)
        if name in ("matrix_inverse", "matrix_determinant", "cholesky",
                    "log_matrix_determinant") or (
                name == "triangular_solve" and i == 0):
            x = (x + 3 * np.eye(t.static_shape[-1])).astype(x.dtype)  # well conditioned
        out.append(x)
    return out
