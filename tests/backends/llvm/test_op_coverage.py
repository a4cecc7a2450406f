"""Every registered op, in every dtype it accepts, runs natively on the LLVM backend.

For each op of the registry, one graph holds one instance of the op per dtype it accepts
(``cast``: per pair of dtypes); it is compiled with warnings as errors (a fallback to the
reference interpreter warns, so it fails here and ``fallback_ops`` must be empty) and run
on both backends. Examples are a small table of this file (``EXAMPLES``, the dtype under
test written ``T``) and, for ops not in it, generic inputs tried in order (as the registry
walk of ``tests/ir/test_registry.py`` does); an op that no example builds fails, so a new
op must come with one. Region ops and the device-transfer ops are skipped (``SKIP``).

Inputs: floats in [0.5, 1.5) (inside every op's domain: log, sqrt, pow, div), integers in
[1, 3) (no division by zero), index inputs (fixed ``i32`` in the table) in [0, 2), which
every example's indexed dims hold. Tolerances against the reference, by result dtype:
integers and bools exact; f64 rtol = atol = 1e-12 and f32 1e-5 (the vectorized
transcendental functions are within a few ulps, sums are reassociated); f16 rtol = atol =
2^-10, one f16 ulp: the kernels compute f16 in f32 and round, as the reference does, so
they differ only where an f32 result a few ulps off straddles an f16 rounding boundary.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any, Iterator

import numpy as np
import pytest

from tfc.backends.llvm import LLVMBackend
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, VariableDecl
from tfc.ir.registry import REQUIRED, all_ops, infer_types, lookup, make_op
from tfc.ir.types import DType, TensorType
from tfc.ops.control import RegionOp

T = "T"  # the dtype under test, in EXAMPLES
DTYPES = list(DType)
TOL = {DType.f16: 2.0 ** -10, DType.f32: 1e-5, DType.f64: 1e-12}
VAR_SHAPE = (2, 3)

SKIP = {
    "send": "a device transfer: needs a placed multi-device program (tests/runtime)",
    "recv": "a device transfer: needs a placed multi-device program (tests/runtime)",
    "all_reduce": "a collective over devices: needs a placed multi-device program",
}
# scan, cond, while and fusion own regions: built with their bodies in
# test_control_kernels.py (and fusion by the fusion pass of every compiled graph here).

Spec = tuple[Any, tuple]  # (dtype or T, shape)

# Ops the generic inputs below do not build: (inputs, attrs); a value T in attrs is the
# dtype under test too.
EXAMPLES: dict[str, tuple[list[Spec], dict[str, Any]]] = {
    "argmax": ([(T, (3, 4))], {"axis": 1}),
    "argmin": ([(T, (3, 4))], {"axis": 0, "output_type": DType.i32}),
    "matmul": ([(T, (2, 3, 4)), (T, (4, 5))], {}),
    "matrix_inverse": ([(T, (2, 3, 3))], {}),
    "matrix_determinant": ([(T, (2, 3, 3))], {}),
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
    "var.scatter_add": ([(DType.i32, (2,)), (T, (2, 3))], {"var": T}),
    "var.scatter_sub": ([(DType.i32, (2,)), (T, (2, 3))], {"var": T}),
}

# Generic examples: candidate inputs by arity, tried in order; required attrs by kind.
GENERIC_INPUTS: dict[int | None, list[list[Spec]]] = {
    0: [[]],
    1: [[(T, (2, 3))]],
    2: [[(T, (2, 3)), (T, (2, 3))], [(T, (2, 3)), (T, (3,))]],
    3: [[(DType.bool, (2, 3)), (T, (2, 3)), (T, (2, 3))]],
    None: [[(T, (2, 3)), (T, (2, 3))], [(T, (2, 3))]],
}
GENERIC_ATTRS: dict[str, Any] = {"int": 1, "float": 1.0, "bool": False, "dtype": T,
                                 "shape": (2, 3), "ints": (0, 1), "var": T}


def _var_name(dt: DType) -> str:
    return f"W_{dt.value}"


def _fill(value: Any, dt: DType) -> Any:
    """``value`` with the placeholder T made concrete for dtype ``dt``."""
    if value is T:
        return dt
    return value


def _attrs(attrs: dict[str, Any], dt: DType) -> dict[str, Any]:
    out = {}
    for k, v in attrs.items():
        if v is T and k == "var":
            out[k] = _var_name(dt)
        elif v is T and k == "value":  # constant: a small array of the dtype
            out[k] = np.arange(6).reshape(2, 3).astype(dt.np)
        else:
            out[k] = _fill(v, dt)
    return out


def _candidates(name: str) -> list[tuple[list[Spec], dict[str, Any]]]:
    if name in EXAMPLES:
        return [EXAMPLES[name]]
    opdef = lookup(name)
    required = {k: GENERIC_ATTRS[s.kind] for k, s in opdef.attrs.items()
                if s.default is REQUIRED}
    return [(ins, required) for ins in GENERIC_INPUTS[opdef.num_inputs]]


def variants(name: str) -> Iterator[tuple[str, list[TensorType], dict[str, Any], list]]:
    """(label, input types, attrs, result types) of ``name`` in each dtype it accepts."""
    if name == "cast":
        for src in DTYPES:
            for dst in DTYPES:
                yield f"{src.value}->{dst.value}", [TensorType(src, (2, 3))], \
                    {"dtype": dst}, [TensorType(dst, (2, 3))]
        return
    for dt in DTYPES:
        for specs, attrs in _candidates(name):
            ins = [TensorType(_fill(d, dt), shape) for d, shape in specs]
            full = _attrs(attrs, dt)
            try:
                _, _, outs = infer_types(name, ins, full)
            except TfcError:
                continue
            if outs is None:  # var.read: the variable's type
                outs = [TensorType(dt, VAR_SHAPE)]
            yield dt.value, ins, full, outs
            break


def _value(t: TensorType, rng: np.random.Generator, index: bool) -> np.ndarray:
    shape = tuple(int(d) for d in t.shape)
    if index:
        return rng.integers(0, 2, shape).astype(t.dtype.np)
    if t.dtype.is_float:
        return rng.uniform(0.5, 1.5, shape).astype(t.dtype.np)
    if t.dtype.is_int:
        return rng.integers(1, 3, shape).astype(t.dtype.np)
    return rng.integers(0, 2, shape).astype(bool)


def _build(name: str) -> tuple[Module, list, list[tuple[str, DType | None, list[int]]],
                               dict]:
    """The module (every variant of ``name``), its feeds, per variant (label, dtype of its
    results, their fetch indices), and the variables' values."""
    rng = np.random.default_rng(0)
    g = Graph("f")
    feeds: list[np.ndarray] = []
    groups, results = [], []
    spec_dtypes = [d for d, _ in EXAMPLES.get(name, ([], {}))[0]]
    for label, ins, attrs, outs in variants(name):
        args = []
        for i, t in enumerate(ins):
            args.append(g.add_arg(t, f"a{len(feeds)}"))
            x = _value(t, rng, index=i < len(spec_dtypes) and spec_dtypes[i] is DType.i32)
            if name in ("matrix_inverse", "matrix_determinant"):
                x = (x + 3 * np.eye(t.shape[-1])).astype(x.dtype)  # well conditioned
            feeds.append(x)
        op = g.append(make_op(name, args, attrs, result_types=outs))
        first = len(results)
        results.extend(op.results)
        # (var writes have no results: their updates are compared)
        groups.append((label, outs[0].dtype if outs else None, list(range(first, len(results)))))
    g.set_results(results)
    decls = {_var_name(dt): VariableDecl(_var_name(dt), TensorType(dt, VAR_SHAPE))
             for dt in DTYPES}
    variables = {k: _value(d.type, rng, False) for k, d in decls.items()}
    return Module({"f": g}, decls), feeds, groups, variables


OPS = sorted(n for n in all_ops() if not n.startswith("test."))


def _params() -> list:
    out = []
    for name in OPS:
        if name in SKIP:
            out.append(pytest.param(name, marks=pytest.mark.skip(reason=SKIP[name])))
        elif isinstance(lookup(name), RegionOp):
            out.append(pytest.param(name, marks=pytest.mark.skip(
                reason="owns regions: tested with bodies in test_control_kernels.py")))
        else:
            out.append(name)
    return out


@pytest.mark.parametrize("name", _params())
def test_op_is_native_and_matches_the_reference(h, name: str) -> None:
    module, feeds, groups, variables = _build(name)
    assert groups, f"no example builds {name}: add one to EXAMPLES"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warns
        exe = LLVMBackend().compile(module, "f")
    assert not exe.fallback_ops, exe.fallback_ops
    got, want = h.run_both(module, feeds, variables, exe=exe)
    for label, dt, idx in groups:
        tol = TOL.get(dt, 0.0)
        part = [SimpleNamespace(fetches=[r.fetches[i] for i in idx], updates={})
                for r in (got, want)]
        try:
            h.assert_same(*part, rtol=tol, atol=tol)
        except AssertionError as e:
            raise AssertionError(f"{name} {label}: {e}") from None
    for k in want.updates:  # variable writes, each in its variable's dtype
        tol = TOL.get(DType.from_numpy(want.updates[k].dtype), 0.0)
        np.testing.assert_allclose(got.updates[k], want.updates[k], rtol=tol, atol=tol,
                                   err_msg=f"{name} @{k}")
    assert set(got.updates) == set(want.updates)
