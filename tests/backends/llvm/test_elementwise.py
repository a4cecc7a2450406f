"""The element-wise table against each op's numpy reference, for every dtype the op takes.

Kernels are JIT-compiled loops (load in compute type, ``emit_elementwise``, store) applied
to numpy buffers through ctypes. Integer, bool and exactly rounded float ops must be
bit-exact (NaN compared as NaN, zero signs included); transcendental ones within vmath's
ulp bounds of the exact value (``tfc.testing.exact_math``), not of the reference: numpy's
transcendental loops differ between AVX2 and AVX-512 hosts (its f16 exp, sin and cos
round differently on 0.1-1% of the halves), so a bound against them holds on one kind of
host only.
"""

from __future__ import annotations

import ctypes
import itertools
import warnings
from typing import Any

import llvmlite.ir as ir
import numpy as np
import pytest

from tfc.backends.llvm import elementwise, irutil, jit, vmath
from tfc.backends.llvm.runtime import native
from tfc.errors import TypeMismatch
from tfc.ir.registry import ELEMENTWISE, all_ops, lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import edge_values, exact_math, same_bits, ulp_errors

DTYPES = list(DType)
FLOATS = [DType.f16, DType.f32, DType.f64]
# Within vmath.MAX_ULP of the exact value; everything else is bit-exact with the reference.
EXACT = frozenset({"exp", "log", "log1p", "expm1", "softplus", "tanh", "sigmoid", "sin", "cos",
                   "pow"}) | {"tan", "atan", "asin", "acos", "atan2", "erf", "erfc"}
# f16 sigmoid rounds each step to f16 as the reference does (exp, 1 + e, the division):
# 1.7553 ulp at most over all 65536 halves, measured.
F16_SIGMOID_ULP = 1.76
N = 4000


def _signature(kind: str, dt: DType) -> tuple[list[DType], DType] | None:
    """(input dtypes, output dtype) of kind on dt, or None when the registry rejects it."""
    opdef = lookup(kind)
    ins = [DType.bool, dt, dt] if kind == "where" else [dt] * (opdef.num_inputs or 1)
    try:
        (out,) = opdef.infer([TensorType(d, (4,)) for d in ins], {})
    except TypeMismatch:
        return None
    return ins, out.dtype


def _specs() -> list[tuple[str, str, list[DType], DType, dict]]:
    specs = []
    for kind in sorted(elementwise.SUPPORTED - {"cast"}):
        for dt in DTYPES:
            sig = _signature(kind, dt)
            if sig:
                specs.append((f"{kind}_{dt.value}", kind, sig[0], sig[1], {}))
    for src, dst in itertools.product(DTYPES, DTYPES):
        specs.append((f"cast_{src.value}_{dst.value}", "cast", [src], dst, {"dtype": dst}))
    return specs


SPECS = _specs()


def _build(specs: list) -> dict:
    mod = ir.Module("elementwise_test")
    mod.triple, mod.data_layout = native.triple_and_layout()
    for name, kind, ins, out, _ in specs:
        fnty = ir.FunctionType(irutil.VOID, [irutil.PTR] * (len(ins) + 1) + [irutil.I64])
        fn = ir.Function(mod, fnty, name)
        b = ir.IRBuilder(fn.append_basic_block())

        def body(i: ir.Value, _c: list, fn: ir.Function = fn, kind: str = kind,
                 ins: list = ins, out: DType = out, b: ir.IRBuilder = b) -> None:
            args = [irutil.load(b, fn.args[k], d, i) for k, d in enumerate(ins)]
            v = elementwise.emit_elementwise(b, kind, args, ins, out)
            irutil.store(b, fn.args[len(ins)], out, i, v)

        irutil.loop(b, irutil.i64(0), fn.args[-1], body)
        b.ret_void()
    loaded = native.load_object(jit.emit_object(jit.optimize(str(mod))))
    fns: dict[str, Any] = {"_engine": loaded}
    for name, _, ins, out, _ in specs:
        proto = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(ins) + 1), ctypes.c_int64)
        fns[name] = (proto(loaded.address(name)), out)
    return fns


@pytest.fixture(scope="module")
def fns() -> dict:
    return _build(SPECS)


def run(fns: dict, name: str, *xs: np.ndarray) -> np.ndarray:
    cfn, out = fns[name]
    xs = tuple(np.ascontiguousarray(x) for x in xs)
    res = np.empty(xs[0].shape, out.np)
    cfn(*[x.ctypes.data for x in xs], res.ctypes.data, res.size)
    return res


def values(dt: DType, seed: int) -> np.ndarray:
    """N values of dt: edge cases first, then random ones (``tfc.testing.edge_values``)."""
    return edge_values(dt, seed, N)


same = same_bits


def reference(kind: str, arrays: list[np.ndarray], attrs: dict) -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return lookup(kind).reference(None, arrays, attrs)[0]


def inputs(kind: str, ins: list[DType]) -> list[np.ndarray]:
    arrays = [values(d, seed=k + 1) for k, d in enumerate(ins)]
    if len(ins) == 2 and ins[0].is_float:
        # also every pair of edge values, the cases where NaN/inf/-0.0 rules show
        e = values(ins[0], seed=0)[:17]
        gx, gy = np.meshgrid(e, e)
        arrays = [np.concatenate([arrays[0], gx.ravel()]), np.concatenate([arrays[1], gy.ravel()])]
    if kind in ("div", "floordiv", "floormod", "truncatediv", "truncatemod") and ins[0].is_int:
        arrays[1] = np.where(arrays[1] == 0, 3, arrays[1]).astype(arrays[1].dtype)
    if kind == "pow" and ins[0].is_int:
        arrays[1] = (np.abs(arrays[1].astype(np.int64)) % 70).astype(arrays[1].dtype)
    return arrays


def test_every_elementwise_op_is_lowered() -> None:
    ops = {name for name, opdef in all_ops().items() if opdef.has(ELEMENTWISE)}
    assert ops <= elementwise.SUPPORTED, sorted(ops - elementwise.SUPPORTED)


@pytest.mark.parametrize("spec", [s for s in SPECS if s[1] not in ("cast",)], ids=lambda s: s[0])
def test_against_reference(fns: dict, spec: tuple) -> None:
    name, kind, ins, out, attrs = spec
    arrays = inputs(kind, ins)
    want = reference(kind, arrays, attrs)
    got = run(fns, name, *arrays)
    if kind == "sigmoid_cross_entropy":
        with np.errstate(all="ignore"):
            x, z = (a.astype(np.float64) for a in arrays)
            scale = np.abs(x) + np.abs(x * z) + 1
        tol = 4 * np.finfo(out.np).eps * scale
        with np.errstate(all="ignore"):
            ok = (np.abs(got.astype(np.float64) - want) <= tol) | (np.isnan(got) & np.isnan(want)) \
                | (got == want)
        assert ok.all(), (arrays[0][~ok][:3], arrays[1][~ok][:3], got[~ok][:3], want[~ok][:3])
    elif kind in EXACT and out.is_float:
        bound = F16_SIGMOID_ULP if (kind, out) == ("sigmoid", DType.f16) else \
            vmath.MAX_ULP[kind][FLOATS.index(out)]
        err = ulp_errors(got, exact_math(kind, *arrays))
        k = int(np.argmax(err))
        assert err[k] <= bound, f"{name}{tuple(a[k] for a in arrays)}: {err[k]} ulp"
    else:
        bad = ~((got == want) | (np.isnan(got) & np.isnan(want)) if out.is_float else got == want)
        assert same(got, want), (name, [a[bad][:4] for a in arrays], got[bad][:4], want[bad][:4])


@pytest.mark.parametrize("src,dst", list(itertools.product(DTYPES, DTYPES)),
                         ids=lambda d: d.value)
def test_cast(fns: dict, src: DType, dst: DType) -> None:
    x = values(src, seed=5)
    if src.is_float:  # out of range for every int type, halves, negative fractions
        extra = np.array([3e9, -3e9, 1e19, -1e19, 2.5, -2.5, -0.7, 0.7, 65504, -65504])
        with np.errstate(all="ignore"):
            x = np.concatenate([x, extra.astype(src.np)])
    if src is DType.i64:
        x = np.concatenate([x, np.array([65519, 65520, 2**53 + 1, 2**62 + 2**38 + 1, -2**63],
                                        np.int64)])
    want = reference("cast", [x], {"dtype": dst})
    got = run(fns, f"cast_{src.value}_{dst.value}", x)
    assert same(got, want), (x[got != want][:4], got[got != want][:4], want[got != want][:4])


def test_integer_division_edge_cases(fns: dict) -> None:
    """Floor division rounds toward -inf; MIN // -1 wraps; // 0 gives 0 (the backend checks)."""
    for dt in (DType.i32, DType.i64):
        lo = np.iinfo(dt.np).min
        x = np.array([7, -7, 7, -7, lo, lo, 5, 0, -1], dt.np)
        y = np.array([2, 2, -2, -2, -1, 1, 0, 0, 0], dt.np)
        got = run(fns, f"div_{dt.value}", x, y)
        assert got.tolist() == [3, -4, -4, 3, lo, lo, 0, 0, 0]


def test_max_min_nan_and_zero_rules(fns: dict) -> None:
    x = np.array([np.nan, 1.0, -0.0, 0.0, np.nan], np.float32)
    y = np.array([1.0, np.nan, 0.0, -0.0, np.nan], np.float32)
    for kind in ("maximum", "minimum"):
        got = run(fns, f"{kind}_f32", x, y)
        want = getattr(np, kind)(x, y)
        assert same(got, want), (kind, got, want)
    relu = run(fns, "relu_f32", np.array([-0.0, np.nan, -1, 2], np.float32))
    assert same(relu, np.array([0.0, np.nan, 0, 2], np.float32))


def test_bool_is_stored_as_bytes(fns: dict) -> None:
    x = np.array([True, False, True, False])
    y = np.array([True, True, False, False])
    assert run(fns, "logical_and_bool", x, y).tolist() == [True, False, False, False]
    assert run(fns, "logical_or_bool", x, y).tolist() == [True, True, True, False]
    assert run(fns, "logical_not_bool", x).tolist() == [False, True, False, True]
    assert run(fns, "greater_bool", x, y).tolist() == [False, False, True, False]
    assert run(fns, "where_f64", x, np.arange(4.0), -np.arange(4.0)).tolist() == [0, -1, 2, -3]


def test_types_and_errors() -> None:
    assert elementwise.dtype_to_llvm(DType.bool) == ir.IntType(1)
    assert elementwise.dtype_to_llvm_storage(DType.bool) == ir.IntType(8)
    assert elementwise.dtype_to_llvm(DType.f16) == ir.FloatType()
    assert elementwise.dtype_to_llvm_storage(DType.f16) == ir.HalfType()
    b = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f")
                     .append_basic_block())
    with pytest.raises(KeyError, match="no element-wise lowering for 'matmul'"):
        elementwise.emit_elementwise(b, "matmul", [], [], DType.f32)


def test_no_fast_math_flags() -> None:
    """No reassociation or contraction: results stay those numpy computes."""
    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()] * 2), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    v = fn.args[0]
    for kind in ("add", "mul", "div", "pow", "maximum"):
        v = elementwise.emit_elementwise(b, kind, [v, fn.args[1]], [DType.f64] * 2, DType.f64)
    for kind in ("exp", "tanh", "sin", "sigmoid", "log"):
        v = elementwise.emit_elementwise(b, kind, [v], [DType.f64], DType.f64)
    b.ret(v)
    text = str(mod)
    assert not any(f in text for f in (" fast ", " contract ", " reassoc ", " afn ", " nnan "))
