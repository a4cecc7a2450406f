"""The CUDA kernels of fusions, checked without a GPU: NVRTC compiles them (a compile error
shows the kernel's source and log) and the CPU emulator runs them against the reference.

Every element-wise registry op on every dtype it accepts (and every cast) runs as a
one-op loop fusion over edge values (NaN, inf, -0.0, INT_MIN ...), with broadcasting and
a symbolic dim; reduce and row fusions (softmax, log_softmax, cross-entropies, means over
several axes, keepdims, first/middle/last axes) come from graphs lowered by the fusion
pass, as the backend gets them. Integer and exactly rounded float ops must be bit-exact;
transcendental functions within CUDA's stated ulp bounds (``cexpr.MAX_ULP``) of the exact
value; sums within a few ulp of the row's magnitude (their order differs from numpy's)."""

from __future__ import annotations

import itertools
import math
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pytest

from tfc.backends.cuda import cexpr, codegen
from tfc.backends.cuda.kernel import Kernel, Unsupported, module_source
from tfc.errors import TypeMismatch
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.registry import ELEMENTWISE, all_ops, lookup, make_op
from tfc.ir.types import DType, TensorType
from tfc.pipeline import lower_entry
from tfc.testing import edge_values, exact_math, same_bits, ulp_errors

nvrtc = pytest.importorskip("tfc.backends.cuda.nvrtc")
if not nvrtc.available():
    pytest.skip("NVRTC not found (pip install nvidia-cuda-nvrtc==13.0.*)", allow_module_level=True)

DTYPES = list(DType)
FLOATS = [DType.f16, DType.f32, DType.f64]
TRANSCENDENTAL = frozenset({"exp", "log", "log1p", "expm1", "softplus", "tanh", "sigmoid", "sin",
                            "cos", "pow"}) | {"tan", "atan", "asin", "acos", "atan2", "erf",
                                               "erfc"}
N = 700


# ---- building one-op fusions --------------------------------------------------------------

def loop_fusion(kind: str, in_types: Sequence[TensorType], attrs: Mapping[str, Any] | None = None,
                constants: Mapping[int, Any] | None = None) -> Op:
    """A ``loop`` fusion computing ``kind`` of its operands (operand ``i`` replaced by a
    splat constant ``constants[i]`` inside the region when given)."""
    region = Graph("fused")
    b = Builder(region)
    args: list[Value] = []
    for i, t in enumerate(in_types):
        if constants and i in constants:
            args.append(b("constant", value=np.asarray(constants[i], t.dtype.np)))
        else:
            args.append(region.add_arg(t, f"x{i}"))
    y = b(kind, *args, **(attrs or {}))
    region.set_results([y])
    outer = Graph("main")
    ins = [outer.add_arg(a.type, a.name) for a in region.args]
    return make_fusion(outer, ins, region, "loop")


def make_fusion(outer: Graph, ins: Sequence[Value], region: Graph, kind: str) -> Op:
    op = outer.append(make_op("fusion", ins, {"kind": kind}, regions=[region],
                              result_types=[v.type for v in region.results]))
    lookup("fusion").verify_op(op, None)
    return op


def reference(op: Op, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [np.asarray(r) for r in lookup("fusion").reference_op(None, op, inputs)]


def concrete(shape: Sequence, bindings: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else bindings[d] for d in shape)


def gpu() -> Any:
    """cupy when a CUDA device is present, else None (then only the emulator runs)."""
    try:
        import cupy
        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # no cupy, no driver, no device: cupy raises its own error types
        return None


# Where the kernels run: the CPU emulator always, the GPU too when there is one (the same
# comparisons with the reference, whose ulp bounds are the GPU's).
TARGETS = ["emulator"] + (["gpu"] if gpu() is not None else [])


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run_kernels(cases: Sequence[tuple[Kernel, Op, Sequence[np.ndarray], Mapping[str, int]]],
                order: str | None = None, max_blocks: int = 65535,
                target: str = "emulator") -> list[list[np.ndarray]]:
    """Compile every case's kernel in one file with NVRTC (a check of the text) and in one
    emulated module (or load the PTX on the GPU: ``target``), run each on its inputs
    (threads in fiber ``order``); the results of each case; ``max_blocks`` caps the grid
    (the kernels loop grid-stride)."""
    kernels = [k for k, *_ in cases]
    ptx = compile_checked(kernels)
    if target == "gpu":
        return _run_on_gpu(ptx, cases, max_blocks)
    from tfc.backends.cuda.emulator import EmulatedModule
    module = EmulatedModule(kernels, order=order)
    out = []
    for kernel, op, inputs, bindings in cases:
        results = garbage(op, bindings)
        syms = [bindings[s] for s in kernel.symbols]
        module.launch(kernel, kernel.launch.grid(bindings, max_blocks), kernel.launch.block,
                      kernel.launch.shared_bytes,
                      [np.ascontiguousarray(x) for x in inputs] + results + scratch(kernel) +
                      syms)
        out.append(results)
    return out


def scratch(kernel: Kernel) -> list[np.ndarray]:
    """The zeroed scratch argument of a kernel that has one (``Launch.scratch_bytes``)."""
    n = kernel.launch.scratch_bytes
    return [np.zeros(n, np.uint8)] if n else []


def garbage(op: Op, bindings: Mapping[str, int]) -> list[np.ndarray]:
    """Result arrays holding garbage (0x5A bytes) where nothing is stored."""
    results = [np.zeros(concrete(r.type.shape, bindings), r.dtype.np) for r in op.results]
    for r in results:
        if r.dtype != np.bool_:
            r.reshape(-1).view(np.uint8)[:] = 0x5A
    return results


def _run_on_gpu(ptx: str, cases: Sequence[tuple[Kernel, Op, Sequence[np.ndarray],
                                                 Mapping[str, int]]],
                max_blocks: int) -> list[list[np.ndarray]]:
    """``run_kernels`` on the GPU, through cupy (runs only where there is one)."""
    import tempfile
    cp = gpu()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.ptx"
        path.write_text(ptx)
        module = cp.RawModule(path=str(path))
        out = []
        for kernel, op, inputs, bindings in cases:
            ins = [cp.asarray(np.ascontiguousarray(x)) for x in inputs]
            outs = [cp.asarray(r) for r in garbage(op, bindings)]
            syms = [np.int64(bindings[s]) for s in kernel.symbols]
            module.get_function(kernel.name)(
                (kernel.launch.grid(bindings, max_blocks),), (kernel.launch.block,),
                tuple(ins + outs + [cp.asarray(a) for a in scratch(kernel)] + syms),
                shared_mem=kernel.launch.shared_bytes)
            cp.cuda.Device().synchronize()
            out.append([cp.asnumpy(r) for r in outs])
    return out


def compile_checked(kernels: Sequence[Kernel]) -> str:
    """PTX of the kernels' file; a compile error fails with the source and log (the
    ``CudaCompileError`` message)."""
    return nvrtc.compile_ptx(module_source(kernels))


# ---- values -------------------------------------------------------------------------------

def values(dt: DType, seed: int, n: int = N) -> np.ndarray:
    """n values of dt: edge cases first, then random ones (``tfc.testing.edge_values``)."""
    return edge_values(dt, seed, n)


same = same_bits


def signature(kind: str, dt: DType) -> list[DType] | None:
    """The input dtypes of kind on dt, or None when the registry rejects it."""
    opdef = lookup(kind)
    ins = [DType.bool, dt, dt] if kind == "where" else [dt] * (opdef.num_inputs or 1)
    try:
        opdef.infer([TensorType(d, (4,)) for d in ins], {})
    except TypeMismatch:
        return None
    return ins


def elementwise_cases() -> list[tuple[str, str, list[DType], dict, dict]]:
    """(id, kind, input dtypes, attrs, constants) of every element-wise op and dtype."""
    out = []
    for kind in sorted(cexpr.SUPPORTED - {"cast"}):
        for dt in DTYPES:
            ins = signature(kind, dt)
            if ins is None:
                continue
            constants: dict = {}
            if kind in ("div", "floordiv", "floormod", "truncatediv", "truncatemod") \
                    and dt.is_int:
                constants = {1: -3}  # integer division only by a nonzero constant
            if kind == "pow" and dt.is_int:
                constants = {1: 5}
            out.append((f"{kind}_{dt.value}", kind, ins, {}, constants))
    for src, dst in itertools.product(DTYPES, DTYPES):
        out.append((f"cast_{src.value}_{dst.value}", "cast", [src], {"dtype": dst}, {}))
    for src, dst in [(DType.f32, DType.f16), (DType.f64, DType.f16), (DType.f64, DType.f32)]:
        out.append((f"cast_sat_{src.value}_{dst.value}", "cast", [src],
                    {"dtype": dst, "saturate": True}, {}))
    return out


def case_inputs(kind: str, ins: list[DType], constants: dict) -> list[np.ndarray]:
    arrays = [values(d, seed=k + 1) for k, d in enumerate(ins)]
    if len(ins) == 2 and ins[0].is_float:
        e = values(ins[0], seed=0)[:17]  # every pair of edge values
        gx, gy = np.meshgrid(e, e)
        arrays = [np.concatenate([arrays[0], gx.ravel()]), np.concatenate([arrays[1], gy.ravel()])]
    if kind == "cast" and ins[0].is_float:
        extra = np.array([3e9, -3e9, 1e19, -1e19, 2.5, -2.5, -0.7, 0.7, 65504, 65519, 65520,
                          -65520, 1e6])
        with np.errstate(all="ignore"):
            arrays[0] = np.concatenate([arrays[0], extra.astype(ins[0].np)])
    if kind == "cast" and ins[0] is DType.i64:
        arrays[0] = np.concatenate([arrays[0], np.array(
            [65519, 65520, 2**53 + 1, 2**62 + 2**38 + 1, -2**63], np.int64)])
    return [a for k, a in enumerate(arrays) if k not in constants]


CASES = elementwise_cases()


@pytest.fixture(scope="module")
def elementwise_results(target: str) -> dict[str, tuple[Op, list[np.ndarray], np.ndarray]]:
    """Every case run in one emulated module (one g++ compile): id -> (op, inputs, got)."""
    runs = []
    for name, kind, ins, attrs, constants in CASES:
        arrays = case_inputs(kind, ins, constants)
        n = arrays[0].size
        op = loop_fusion(kind, [TensorType(d, ("B",)) for d in ins], attrs, constants)
        runs.append((name, op, arrays, codegen.fusion_kernel(op, name), {"B": n}))
    got = run_kernels([(k, op, arrays, b) for _, op, arrays, k, b in runs], target=target)
    return {name: (op, arrays, g[0]) for (name, op, arrays, _, _), g in zip(runs, got)}


def test_every_elementwise_op_is_lowered() -> None:
    ops = {name for name, opdef in all_ops().items() if opdef.has(ELEMENTWISE)}
    assert ops <= cexpr.SUPPORTED, sorted(ops - cexpr.SUPPORTED)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_elementwise_against_reference(elementwise_results: dict, case: tuple) -> None:
    name, kind, ins, attrs, _ = case
    op, arrays, got = elementwise_results[name]
    want = reference(op, arrays)[0]
    out = op.result.dtype
    if kind == "sigmoid_cross_entropy":
        with np.errstate(all="ignore"):
            x, z = (a.astype(np.float64) for a in arrays)
            tol = 8 * np.finfo(out.np).eps * (np.abs(x) + np.abs(x * z) + 1)
            ok = (np.abs(got.astype(np.float64) - want) <= tol) | \
                (np.isnan(got) & np.isnan(want)) | (got == want)
        assert ok.all(), (arrays[0][~ok][:3], arrays[1][~ok][:3], got[~ok][:3], want[~ok][:3])
    elif kind in TRANSCENDENTAL and out.is_float:
        err = ulp_errors(got, exact_math(kind, *arrays))
        k = int(np.argmax(err))
        assert err[k] <= ulp_bound(kind, out), \
            f"{name}{tuple(a[k] for a in arrays)}: {err[k]} ulp (got {got[k]})"
    else:
        bad = ~((got == want) | (np.isnan(got) & np.isnan(want)) if out.is_float else got == want)
        assert same(got, want), (name, [a[bad][:4] for a in arrays], got[bad][:4], want[bad][:4])


# The emulator runs glibc's functions: where glibc's stated bound exceeds CUDA's, the test
# allows it (glibc manual, "Known Maximum Errors in Math Functions", x86_64).
GLIBC_ULP = {("tanh", DType.f64): 2, ("tanh", DType.f32): 2, ("sin", DType.f64): 1,
             ("cos", DType.f64): 1, ("pow", DType.f64): 1}


def ulp_bound(kind: str, dt: DType) -> float:
    """CUDA's stated bound for ``kind`` (sigmoid: exp's plus the roundings of 1 + e and the
    division; softplus ``max(x, 0) + log1p(e)``, a sum of non-negative terms: exp's and
    log1p's plus the addition's rounding); f16: the f32 result rounded once more to half,
    or each step rounded (sigmoid) as the reference does."""
    if dt is DType.f16:
        return 1.76 if kind == "sigmoid" else 0.51
    if kind == "softplus":
        return sum(cexpr.MAX_ULP[k][dt is DType.f64] for k in ("exp", "log1p")) + 0.5
    f32, f64 = cexpr.MAX_ULP["exp" if kind == "sigmoid" else kind]
    base = f32 if dt is DType.f32 else f64
    base = max(base, GLIBC_ULP.get((kind, dt), 0))
    return base + 1.5 if kind == "sigmoid" else base


# ---- broadcasting, views, one_hot, constants in loop fusions -------------------------------

def region_fusion(arg_types: Sequence[TensorType], body: Callable[[Builder, list[Value]], Any],
                  kind: str = "loop") -> Op:
    """A fusion of ``kind`` whose region is ``body(builder, args)`` (its results)."""
    region = Graph("fused")
    args = [region.add_arg(t, f"x{i}") for i, t in enumerate(arg_types)]
    out = body(Builder(region), args)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    region.set_results(outs)
    outer = Graph("main")
    ins = [outer.add_arg(t) for t in arg_types]
    return make_fusion(outer, ins, region, kind)


F32 = DType.f32


def t(shape: Sequence, dt: DType = F32) -> TensorType:
    return TensorType(dt, tuple(shape))


def _c(b: Builder, v: float, dt: DType = F32) -> Value:
    return b("constant", value=np.asarray(v, dt.np))


LOOP_FUSIONS: dict[str, tuple[list[TensorType], Callable, dict]] = {
    # bias add + relu + a mask, as a dense layer's forward
    "bias_relu": ([t(("B", 7)), t((7,))],
                  lambda b, a: [b("relu", b("add", a[0], a[1])),
                                b("greater", b("add", a[0], a[1]), _c(b, 0.0))], {"B": 5}),
    # operands broadcast along either axis, a scalar operand, a splat constant
    "broadcast_both": ([t((5, 1)), t((1, 7)), t(())],
                       lambda b, a: b("mul", b("sub", a[0], a[1]), b("add", a[2], _c(b, 2.5))),
                       {}),
    # size-1 views: expand_dims / squeeze / reshape adding and removing unit dims
    "unit_views": ([t(("B",)), t(("B", 1, 3))],
                   lambda b, a: [b("add", b("expand_dims", b("expand_dims", a[0], axis=-1),
                                                axis=-1), a[1]),
                                 b("squeeze", a[1], axes=[1])], {"B": 4}),
    "broadcast_to": ([t((3, 1)), t((2, 3, 4))],
                     lambda b, a: b("add", b("broadcast_like", a[0], a[1]), a[1]), {}),
    # a result smaller than the iteration shape (a scalar next to a matrix)
    "scalar_result": ([t(()), t((6, 5))],
                      lambda b, a: [b("mul", a[1], b("sqrt", a[0])), b("sqrt", a[0])], {}),
    "one_hot_middle": ([t((4, 3), DType.i32)],
                       lambda b, a: b("one_hot", a[0], depth=5, axis=1, on_value=2.0,
                                      off_value=-1.0), {}),
    "one_hot_where_f16": ([t(("B",), DType.i64), t(("B", 6), DType.f16)],
                          lambda b, a: b("where", b("one_hot", a[0], depth=6, dtype=DType.bool),
                                         a[1], _c(b, 0.0, DType.f16)), {"B": 9}),
    # rounded to f16 after every op, as numpy: bit-exact
    "f16_chain": ([t((257,), DType.f16), t((257,), DType.f16)],
                  lambda b, a: b("sub", b("mul", b("add", a[0], a[1]), b("sub", a[0], a[1])),
                                 b("div", a[0], a[1])), {}),
    "f16_tanh": ([t((33,), DType.f16)], lambda b, a: b("tanh", b("mul", a[0], a[0])), {}),
    "int_chain": ([t((3, 5), DType.i32), t((5,), DType.i32)],
                  lambda b, a: [b("div", b("mul", a[0], a[1]), _c(b, -4, DType.i32)),
                                b("cast", b("pow", a[1], _c(b, 3, DType.i32)), dtype=DType.f64)],
                  {}),
    "zero_size": ([t(("B", 3))], lambda b, a: b("exp", a[0]), {"B": 0}),
    # an operand that is also a result (copied through), next to a result computed from it
    "passthrough": ([t((2, 9), DType.i64)], lambda b, a: [a[0], b("neg", a[0])], {}),
}


def random_input(tt: TensorType, bindings: Mapping[str, int], rng: np.random.Generator,
                 high: int = 6) -> np.ndarray:
    shape = concrete(tt.shape, bindings)
    if tt.dtype is DType.bool:
        return rng.integers(0, 2, shape).astype(bool)
    if tt.dtype.is_int:
        return rng.integers(-1, high, shape).astype(tt.dtype.np)
    return rng.normal(0, 2, shape).astype(tt.dtype.np)


@pytest.fixture(scope="module")
def loop_results(target: str) -> dict:
    rng = np.random.default_rng(7)
    runs = []
    for name, (types, body, bindings) in LOOP_FUSIONS.items():
        op = region_fusion(types, body)
        inputs = [random_input(tt, bindings, rng) for tt in types]
        runs.append((name, op, inputs, codegen.fusion_kernel(op, name), bindings))
    got = run_kernels([(k, op, x, b) for _, op, x, k, b in runs], target=target)
    return {name: (op, x, g) for (name, op, x, _, _), g in zip(runs, got)}


@pytest.mark.parametrize("name", list(LOOP_FUSIONS))
def test_loop_fusions(loop_results: dict, name: str) -> None:
    op, inputs, got = loop_results[name]
    want = reference(op, inputs)
    for g, w in zip(got, want):
        if op.regions[0].ops[-1].kind == "tanh":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-3)
        else:
            assert same(g, w), (name, g, w)


def test_integer_division_needs_a_constant_divisor() -> None:
    op = loop_fusion("div", [t((4,), DType.i32), t((4,), DType.i32)])
    with pytest.raises(Unsupported, match="nonzero constant divisor"):
        codegen.fusion_kernel(op, "k")
    op = loop_fusion("div", [t((4,), DType.i32), t((4,), DType.i32)], constants={1: 0})
    with pytest.raises(Unsupported, match="nonzero constant divisor"):
        codegen.fusion_kernel(op, "k")
    op = loop_fusion("pow", [t((4,), DType.i64), t((4,), DType.i64)], constants={1: -1})
    with pytest.raises(Unsupported, match="non-negative constant exponent"):
        codegen.fusion_kernel(op, "k")
    op = loop_fusion("div", [t((4,), F32), t((4,), F32)])  # float division is fine
    assert codegen.fusion_kernel(op, "k").name == "k"


def test_results_of_unrelated_shapes_are_unsupported() -> None:
    op = region_fusion([t((4, 5)), t((5, 4))], lambda b, a: [b("exp", a[0]), b("exp", a[1])])
    with pytest.raises(Unsupported, match=r"result 1 of shape \[5, 4\] does not map into"):
        codegen.fusion_kernel(op, "k")


def test_unknown_dims_are_unsupported() -> None:
    op = loop_fusion("exp", [t(("?", 3))])
    with pytest.raises(Unsupported, match="unknown size"):
        codegen.fusion_kernel(op, "k")


def test_params_and_launch() -> None:
    op = loop_fusion("add", [t(("B", 3)), t(("A", "B", 1))])
    k = codegen.fusion_kernel(op, "kern")
    assert [(p.name, p.ctype) for p in k.params] == [
        ("in0", "const float*"), ("in1", "const float*"),
        ("out0", "float*"), ("sym_A", "long long"), ("sym_B", "long long")]
    assert k.symbols == ("A", "B")
    assert '__global__ void __launch_bounds__(256) kern(' in k.source
    assert k.launch.work == ("A", "B", 3)
    assert k.launch.grid({"A": 2, "B": 1000}) == -(-6000 // 256)


# ---- reduce and row fusions, as the fusion pass makes them ---------------------------------

def lowered_fusions(arg_types: Sequence[tuple[str, TensorType]],
                    body: Callable[[Builder, list[Value]], Any]) -> list[Op]:
    """The fusion ops of a one-graph module ``body(builder, args)`` after the llvm
    pipeline (``fusion,memory``: what the CUDA backend gets too)."""
    g = Graph("f")
    args = [g.add_arg(tt, n) for n, tt in arg_types]
    out = body(Builder(g), args)
    g.set_results(list(out) if isinstance(out, (list, tuple)) else [out])
    lowered = lower_entry(Module({"f": g}, {}), "f", "llvm")
    return [op for op in lowered.graphs["f"].ops if op.kind == "fusion"]


def fusion_inputs(op: Op, bindings: Mapping[str, int], rng: np.random.Generator
                  ) -> list[np.ndarray]:
    """Random operands for a fusion: class labels in range for a checking one_hot, NaN
    and -0.0 among float rows, small integers elsewhere."""
    labels = {c.operand: c.depth for c in codegen.label_checks(op)}
    out = []
    for i, v in enumerate(op.inputs):
        shape = concrete(v.type.shape, bindings)
        if i in labels:
            out.append(rng.integers(0, labels[i], shape).astype(v.dtype.np))
        elif v.dtype.is_float and v.type.rank == 0:
            out.append(rng.uniform(0.5, 1.0, shape).astype(v.dtype.np))  # a rate, a step
        else:
            out.append(random_input(v.type, bindings, rng))
    return out


X = ("x", t(("B", 10)))
LABELS = ("labels", t(("B",), DType.i32))

REDUCTIONS: dict[str, tuple[list, Callable, dict]] = {
    "softmax": ([X], lambda b, a: b("softmax", a[0], axis=-1), {"B": 5}),
    "softmax_f16_two_warps": ([("x", t(("B", 37), DType.f16))],
                              lambda b, a: b("softmax", a[0], axis=1), {"B": 3}),
    "softmax_f64_first_axis": ([("x", t((6, "B"), DType.f64))],
                               lambda b, a: b("softmax", a[0], axis=0), {"B": 4}),
    "log_softmax_middle_axis": ([("x", t((3, 4, 5)))],
                                lambda b, a: b("log_softmax", a[0], axis=1), {}),
    "sparse_cross_entropy": ([X, LABELS],
                             lambda b, a: b("sparse_softmax_cross_entropy", a[0], a[1]),
                             {"B": 6}),
    "cross_entropy": ([X, ("y", t(("B", 10)))],
                      lambda b, a: b("softmax_cross_entropy", a[0], b("softmax", a[1])),
                      {"B": 4}),
    "mean_two_axes_keepdims": ([("x", t((4, 5, 6)))],
                               lambda b, a: b("mean", a[0], axes=[0, 2], keepdims=True), {}),
    "mean_all_many_columns": ([("x", t(("B", 300)))],
                              lambda b, a: b("mean", a[0], axes=None), {"B": 2}),
    "sum_i32_first_axis_wraps": ([("x", t(("B", 7), DType.i32))],
                                 lambda b, a: b("sum", b("mul", a[0], b("constant", value=np.array(
                                     2**30, np.int32))), axes=[0]), {"B": 5}),
    "max_min_nan": ([("x", t(("B", 40)))],
                    lambda b, a: [b("max", b("log", a[0]), axes=[1]),
                                  b("min", b("sqrt", a[0]), axes=[1])], {"B": 5}),
    "max_bool_min_i64": ([("x", t(("B", 5), DType.bool)), ("y", t(("B", 5), DType.i64))],
                         lambda b, a: [b("max", a[0], axes=[1]), b("min", a[1], axes=[1])],
                         {"B": 6}),
    "sum_of_log_softmax": ([X], lambda b, a: b("sum", b("log_softmax", a[0], axis=1), axes=[1]),
                           {"B": 3}),
    "mean_f16": ([("x", t(("B", 50), DType.f16))],
                 lambda b, a: b("mean", a[0], axes=[1], keepdims=True), {"B": 3}),
    "layer_norm": ([("x", t(("B", 33)))], lambda b, a: _layer_norm(b, a[0]), {"B": 4}),
    "bias_gradient_update": ([("g", t(("B", 8))), ("w", t((8,))), ("lr", t(()))],
                             lambda b, a: b("sub", a[1], b("mul", a[2], b("sum", a[0], axes=[0]))),
                             {"B": 70}),
    # a full reduction: exp(mean) has the index of the one row; it is computed in the
    # loop over rows where its register is (not hoisted above it)
    "centered_by_the_mean": ([("x", t(("B", 6)))],
                             lambda b, a: [b("sub", a[0], b("exp", b("mean", a[0]))),
                                           b("mul", b("mean", a[0]), _c(b, 2.0))], {"B": 3}),
    # the column layout: reduced axes first, 32 rows per block (ragged, symbolic)
    "bias_gradient_columns": ([("g", t(("B", 45))), ("w", t((45,))), ("lr", t(()))],
                              lambda b, a: b("sub", a[1], b("mul", a[2],
                                                            b("sum", a[0], axes=[0]))),
                              {"B": 19}),
    "sum_two_leading_axes": ([("x", t((2, 3, "N")))],
                             lambda b, a: b("sum", a[0], axes=[0, 1], keepdims=True), {"N": 40}),
    "softmax_first_axis_columns": ([("x", t((7, 50), DType.f16))],
                                   lambda b, a: b("softmax", a[0], axis=0), {}),
    "global_average_pool": ([("x", t(("B", 3, 3, 20)))],
                            lambda b, a: b("mean", a[0], axes=[1, 2]), {"B": 3}),
    "max_i64_columns": ([("x", t((9, "N"), DType.i64))],
                        lambda b, a: b("max", a[0], axes=[0]), {"N": 70}),
}


def _layer_norm(b: Builder, x: Value) -> list[Value]:
    mean = b("mean", x, axes=[1], keepdims=True)
    centered = b("sub", x, mean)
    var = b("mean", b("square", centered), axes=[1], keepdims=True)
    return [b("mul", centered, b("rsqrt", b("add", var, _c(b, 1e-5)))), mean]


@pytest.fixture(scope="module")
def reduction_results(target: str) -> dict:
    rng = np.random.default_rng(11)
    runs = []
    for name, (args, body, bindings) in REDUCTIONS.items():
        for i, op in enumerate(lowered_fusions(args, body)):
            inputs = fusion_inputs(op, bindings, rng)
            runs.append((f"{name}_{i}", op, inputs,
                         codegen.fusion_kernel(op, f"{name}_{i}"), bindings))
    got = run_kernels([(k, op, x, b) for _, op, x, k, b in runs], target=target)
    return {name: (op, x, k, g) for (name, op, x, k, _), g in zip(runs, got)}


def assert_matches(got: Sequence[np.ndarray], want: Sequence[np.ndarray], what: str) -> None:
    """Integers and bools exact; floats within a few ulp of the magnitudes summed (the
    kernels sum in another order than numpy), NaN where NaN."""
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape)
        if w.dtype.kind != "f":
            np.testing.assert_array_equal(g, w, err_msg=what)
            continue
        rtol = {np.float16: 4e-3, np.float32: 4e-6, np.float64: 1e-13}[w.dtype.type]
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=rtol * max(1.0, float(np.nanmax(np.abs(w), initial=0))),
                                   err_msg=what)


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions(reduction_results: dict, name: str) -> None:
    runs = {k: v for k, v in reduction_results.items() if k.rsplit("_", 1)[0] == name}
    assert runs, f"{name}: no fusion"
    kinds = set()
    for key, (op, inputs, kernel, got) in runs.items():
        kinds.add(op.attrs["kind"])
        assert_matches(got, reference(op, inputs), f"{key}\n{kernel.source}")
    assert kinds & {"reduce", "row"}, kinds


@pytest.mark.parametrize("order", ["descending", "warps_reversed", "shuffled"])
def test_reductions_under_other_fiber_orders(reduction_results: dict, order: str,
                                             target: str) -> None:
    """The block reductions have every barrier they need: threads scheduled in another
    order give the same bits (the summation order does not depend on the schedule)."""
    if target != "emulator":
        pytest.skip("fiber orders are the emulator's")
    cases = [(k, op, x, REDUCTIONS[name.rsplit("_", 1)[0]][2])
             for name, (op, x, k, _) in reduction_results.items()]
    for (name, (_, _, _, want)), got in zip(reduction_results.items(),
                                            run_kernels(cases, order=order)):
        for g, w in zip(got, want):
            assert same(g, w), (name, order, g, w)
    # one block for every row (the grid-stride loop over rows): the shared memory of one
    # row is reused by the next
    for (name, (_, _, _, want)), got in zip(reduction_results.items(),
                                            run_kernels(cases, order=order, max_blocks=1)):
        for g, w in zip(got, want):
            assert same(g, w), (name, order, "one block", g, w)


def test_layouts() -> None:
    assert codegen.row_layout((7, 50), (0,)) == codegen.RowLayout(32, 256)
    assert codegen.row_layout(("B", 45), (0,)) == codegen.RowLayout(32, 1024)
    assert codegen.row_layout((512, 45), (0,)) == codegen.RowLayout(32, 1024)
    assert codegen.row_layout((2, 3, "N"), (0, 1)) == codegen.RowLayout(32, 256)
    assert codegen.row_layout(("B", 8), (0,)) == codegen.RowLayout(1, 256)  # few rows
    assert codegen.row_layout(("B", 10), (1,)) == codegen.RowLayout(1, 32)
    assert codegen.row_layout((4, 5, 6), (0, 2)) == codegen.RowLayout(1, 32)
    assert codegen.row_layout(("B", 3, 3, 20), (1, 2)) == codegen.RowLayout(32, 256)
    assert codegen.row_layout((3, 3, 20), (0, 2)) == codegen.RowLayout(1, 64)  # 60 columns


def test_block_size_follows_the_columns() -> None:
    assert codegen.block_size([10]) == 32
    assert codegen.block_size([37]) == 64
    assert codegen.block_size([4, 300]) == 256
    assert codegen.block_size(["B"]) == 256


def test_label_checks_name_the_operand() -> None:
    (op,) = lowered_fusions([X, LABELS], lambda b, a: b("sparse_softmax_cross_entropy", a[0], a[1]))
    assert codegen.label_checks(op) == [
        codegen.LabelCheck(1, 10, "sparse_softmax_cross_entropy")]


# ---- every fusion of every example --------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# softmax_digits fits sklearn's model when it loads (~10 s); its one fusion is a softmax,
# as REDUCTIONS["softmax"].
EXAMPLE_FILES = sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".py", ".tfm")
                       and p.stem not in ("data", "softmax_digits"))


def example_fusions() -> list[tuple[str, Op]]:
    """(kernel name, fusion) of every entry of every example, lowered for llvm."""
    from tfc.compiler.frontend import load_model
    out = []
    for path in EXAMPLE_FILES:
        module = load_model(path)
        for entry in module.graphs:
            lowered = lower_entry(module, entry, "llvm")
            for i, op in enumerate(lowered.graphs[entry].ops):
                if op.kind == "fusion":
                    stem = f"{path.stem}_{path.suffix[1:]}"
                    out.append((f"{stem}_{entry.strip('_')}_{i}", op))
    return out


@pytest.fixture(scope="module")
def examples() -> list[tuple[str, Op, Kernel]]:
    """Each distinct kernel of the examples' fusions once (the examples share most: the
    same model in .py and .tfm, one layer in predict and train_step, ...)."""
    pytest.importorskip("sklearn")  # the digits examples load their data
    seen: set[str] = set()
    out = []
    for name, op in example_fusions():
        text = codegen.fusion_kernel(op, "kernel").source
        if text not in seen:
            seen.add(text)
            out.append((name, op, codegen.fusion_kernel(op, name)))
    return out


def test_every_example_fusion_compiles_with_nvrtc(examples: list) -> None:
    assert len(examples) > 40
    ptx = compile_checked([k for _, _, k in examples])
    assert all(f".entry {k.name}(" in ptx for _, _, k in examples)
    # each kernel's block size is a bound the compiler keeps (registers for 1024 threads)
    assert ptx.count(".maxntid") == len(examples)
    assert any(k.launch.block == 1024 for _, _, k in examples)


def test_every_example_fusion_matches_the_reference(examples: list, target: str) -> None:
    rng = np.random.default_rng(3)
    cases = []
    for name, op, kernel in examples:
        bindings = {s: 3 for s in kernel.symbols}
        cases.append((kernel, op, fusion_inputs(op, bindings, rng), bindings))
    for (kernel, op, inputs, _), got in zip(cases, run_kernels(cases, target=target)):
        assert_matches(got, reference(op, inputs), f"{kernel.name}\n{kernel.source}")


# ---- vector loads in flat loop kernels ----------------------------------------------------

def test_flat_kernels_use_vectors_with_a_scalar_fallback() -> None:
    """A flat loop kernel (every value the iteration's elements or one) loads and stores
    4-element vectors when its pointers are aligned, else (and for the ragged tail) one
    element at a time: both give the reference's bits."""
    types = [t(("B",)), t((1, "B")), t(())]  # same elements as [B]; a scalar operand

    def body(b: Builder, a: list[Value]) -> Value:
        return b("sub", b("mul", a[0], b("squeeze", a[1], axes=[0])), b("sqrt", a[2]))

    op = region_fusion(types, body)
    kernel = codegen.fusion_kernel(op, "flat")
    body_text = kernel.source.split('extern "C"')[1]
    assert "tfc_vec<float, 4>" in body_text and "_r = " not in body_text  # no index divided
    assert kernel.launch.per_block == 4 * kernel.launch.block
    not_flat = codegen.fusion_kernel(region_fusion([t(("B", 3)), t((3,))],
                                                   lambda b, a: b("add", a[0], a[1])), "bias")
    assert "tfc_vec" not in not_flat.source.split('extern "C"')[1]
    rng = np.random.default_rng(5)
    from tfc.backends.cuda.emulator import EmulatedModule
    compile_checked([kernel])
    module = EmulatedModule([kernel])
    for n, misalign in itertools.product([1, 3, 4, 257, 1030], [False, True]):
        x, y = rng.normal(size=n).astype(np.float32), rng.normal(size=(1, n)).astype(np.float32)
        s = np.asarray(0.75, np.float32)
        shift = 1 if misalign else 0
        xs = np.empty(n + shift, np.float32)[shift:]  # 4 bytes off a 16-byte boundary
        xs[:] = x
        out = np.empty(n + shift, np.float32)[shift:]
        module.launch(kernel, kernel.launch.grid({"B": n}, max_blocks=2), kernel.launch.block, 0,
                      [xs, y, s, out, n])
        assert same(out, reference(op, [x, y, s])[0]), (n, misalign)
        if gpu() is not None:  # a misaligned vector access would fault there
            assert same(_flat_on_gpu(kernel, [x, y, s], n, shift), out), (n, misalign)


def _flat_on_gpu(kernel: Kernel, inputs: list[np.ndarray], n: int, shift: int) -> np.ndarray:
    """The flat kernel on the GPU with its first operand and result ``shift`` elements off
    their allocation's (aligned) start."""
    import tempfile
    cp = gpu()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flat.ptx"
        path.write_text(compile_checked([kernel]))
        function = cp.RawModule(path=str(path)).get_function(kernel.name)
        x = cp.empty(n + shift, cp.float32)[shift:]
        x[...] = cp.asarray(inputs[0])
        out = cp.empty(n + shift, cp.float32)[shift:]
        args = (x, cp.asarray(inputs[1]), cp.asarray(inputs[2]), out, np.int64(n))
        function((kernel.launch.grid({"B": n}, 2),), (kernel.launch.block,), args)
        cp.cuda.Device().synchronize()
        return cp.asnumpy(out)


# ---- seeded random graphs -----------------------------------------------------------------

def test_fusions_of_random_graphs(target: str) -> None:
    """Every fusion of 40 seeded random graphs (``tfc.testing_graphs``: diamonds, views,
    reductions over random axes, softmax-like rows, a symbolic batch) is generated (no
    ``Unsupported``) and matches the reference on random operands."""
    from tfc.testing_graphs import random_graph
    rng = np.random.default_rng(13)
    cases = []
    for seed in range(40):
        rg = random_graph(seed)
        lowered = lower_entry(rg.module, "f", "llvm")
        for i, op in enumerate(lowered.graphs["f"].ops):
            if op.kind == "fusion":
                kernel = codegen.fusion_kernel(op, f"g{seed}_{i}")
                bindings = {s: rg.batch or 3 for s in kernel.symbols}
                cases.append((kernel, op, fusion_inputs(op, bindings, rng), bindings))
    assert len(cases) > 60
    kinds = {op.attrs["kind"] for _, op, _, _ in cases}
    assert kinds == {"loop", "reduce", "row"}, kinds
    for (kernel, op, inputs, _), got in zip(cases, run_kernels(cases, target=target)):
        want = reference(op, inputs)
        for g, w in zip(got, want):  # sums in another order: measured within 1.2e-5
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6,
                                       err_msg=f"{kernel.name}\n{kernel.source}")


# ---- reductions to few long rows, split across blocks --------------------------------------

SPLIT = {
    "sum_all": ([("x", t((3, 5000)))], lambda b, a: b("sum", a[0], axes=None)),
    "mean_all_f64": ([("x", t((9000,), DType.f64))], lambda b, a: b("mean", a[0], axes=None)),
    "max_two_rows_one_nan": ([("x", t((2, 9000)))], lambda b, a: b("max", a[0], axes=[1])),
    "sum_f16_first_axis": ([("x", t((9000, 2), DType.f16))],
                           lambda b, a: b("sum", a[0], axes=[0])),
    "sum_and_min_i32": ([("x", t((2, 8500), DType.i32))],
                        lambda b, a: [b("sum", a[0], axes=[1]), b("min", a[0], axes=[1])]),
}


def _split_cases() -> list[tuple[str, Op, list[np.ndarray], Kernel]]:
    rng = np.random.default_rng(19)
    cases = []
    for name, (args, body) in SPLIT.items():
        for i, op in enumerate(lowered_fusions(args, body)):
            inputs = fusion_inputs(op, {}, rng)
            if name.startswith("max"):
                inputs[0][1, 4321] = np.nan  # in the second chunk of the second row only
            cases.append((f"{name}_{i}", op, inputs, codegen.fusion_kernel(op, f"{name}_{i}")))
    return cases


def test_few_long_rows_split_across_blocks_the_same_bits_every_run() -> None:
    """A reduction to few long rows runs on many blocks (a scratch of partials, the last
    block folds them in chunk order): it matches the reference, gives the same bits
    whatever the fiber order and the number of blocks launched (one block doing every
    chunk included), and leaves the scratch's counters at 0, so a second launch on the
    same scratch is right too."""
    from tfc.backends.cuda.emulator import EmulatedModule
    cases = _split_cases()
    kernels = [k for _, _, _, k in cases]
    for name, _, _, k in cases:
        assert k.launch.scratch_bytes > 0 and k.launch.work[-1] > 1, (name, k.launch)
        assert [p.name for p in k.params][-1] == "scratch", name
    compile_checked(kernels)
    module = EmulatedModule(kernels)
    for name, op, inputs, k in cases:
        first = None
        scratch_arg = np.zeros(k.launch.scratch_bytes, np.uint8)
        for order in ("ascending", "descending", "warps_reversed", "shuffled"):
            for blocks in (65535, 3, 1):
                for _ in range(2):  # the same scratch twice: its counters were reset
                    got = garbage(op, {})
                    module.launch(k, k.launch.grid({}, blocks), k.launch.block, 0,
                                  inputs + got + [scratch_arg], order=order)
                    rows = math.prod(int(d) for d in k.launch.work[:-1])
                    assert not scratch_arg[:4 * rows].any(), (name, "counters left set")
                    if first is None:
                        first = got
                        assert_matches(got, reference(op, inputs), f"{name}\n{k.source}")
                    for g, w in zip(got, first):
                        assert same(g, w), (name, order, blocks, g, w)


def test_split_rule() -> None:
    """Static, few (< 32) rows of at least two chunks' columns, results of the row's
    shape, independent reductions: split. Many rows, short or symbolic columns,
    softmax's dependent passes: one block per row."""
    def chunks(args: list, body: Callable) -> int:
        (op,) = lowered_fusions(args, body)
        k = codegen.fusion_kernel(op, "k")
        assert (k.launch.scratch_bytes > 0) == (len(k.launch.work) == 2 and
                                                k.launch.work[-1] != 1 and
                                                "scratch" in [p.name for p in k.params])
        return int(k.launch.work[-1]) if k.launch.scratch_bytes else 1

    assert chunks([("x", t((2048, 2048)))], lambda b, a: b("sum", a[0], axes=None)) == 1024
    assert chunks([("x", t((4, 2048 * 2048)))], lambda b, a: b("sum", a[0], axes=[1])) == 256
    assert chunks([("x", t((8000,)))], lambda b, a: b("sum", a[0], axes=None)) == 1
    assert chunks([("x", t((64, 9000)))], lambda b, a: b("sum", a[0], axes=[1])) == 1
    assert chunks([("x", t(("B", 9000)))], lambda b, a: b("sum", a[0], axes=None)) == 1
    assert chunks([("x", t((2, 9000)))], lambda b, a: b("softmax", a[0], axis=1)) == 1
