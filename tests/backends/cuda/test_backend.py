"""The CUDA backend end to end, on the CPU emulator (``TFC_CUDA_DEVICE=emulated``): whole
graphs against the reference backend, variables across steps, export/load, the no-GPU
error, the fallback warning.

Under the emulator the executable, its arena, the library ops (numpy as the array
module) and the generated kernels (compiled by g++ with the emulation header) all run as
on a GPU; only cupy's own calls (cuBLAS, the launch) do not. Under ``TFC_BACKEND=cuda``
on a machine with a GPU the same tests run on the GPU (``ON_GPU``), which checks those
too. Shapes stay small: every CUDA thread is a fiber. Tolerances: reductions sum in
another order than numpy's pairwise sums, so float results differ from the reference by
rounding (rtol 1e-5 on f32); random numbers and everything else are exact.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest

from tfc.backends.base import get_backend
from tfc.backends.cuda import CUDABackend, CUDAExecutable, device as cuda_device
from tfc.backends.reference import ReferenceBackend
from tfc.errors import ExecutionError, TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, VariableDecl
from tfc.ir.registry import make_op
from tfc.ir.types import DType, TensorType
from tfc.testing import compile_lowered, split_mlp_module

from tests.backends.cuda.emulated import ON_GPU, emulated_off_the_gpu

RTOL = 1e-5


@pytest.fixture(autouse=True)
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator, but under ``TFC_BACKEND=cuda`` on a machine with a GPU: there the
    same tests check the launch layer (cupy, cuBLAS, the stream) too."""
    emulated_off_the_gpu(monkeypatch)


def compile_cuda(module: Module, entry: str = "f") -> CUDAExecutable:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback would hide what is tested
        exe = compile_lowered(CUDABackend(), module, entry)
    assert not exe.fallback_ops
    return exe


def assert_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], what: str = "",
                 rtol: float = RTOL) -> None:
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype and a.shape == b.shape, (what, k, a.dtype, a.shape, b.dtype,
                                                           b.shape)
        if a.dtype.kind == "f":
            # f16 results are f32 results rounded once: a GPU's f32 (cuBLAS sums in its
            # own order) can round to the neighbouring half, one f16 ulp away
            tol = max(rtol, 2.0 ** -10) if a.dtype == np.float16 and ON_GPU else rtol
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{what} {k}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{what} {k}")


def train_both(module: Module, entry: str, feeds_of: Any, steps: int,
               variables: dict[str, np.ndarray]) -> tuple[Any, Any]:
    """``steps`` steps of ``entry`` on the cuda executable and the reference, each on its
    own copy of the variables (the updates fed back as a Program does); checks every
    step's fetches and updates."""
    exe = compile_cuda(module, entry)
    ref = ReferenceBackend().compile(module, entry)
    mine, theirs = dict(variables), dict(variables)
    for step in range(steps):
        feeds = feeds_of(step)
        got, want = exe(feeds, mine, step), ref(feeds, theirs, step)
        assert_close(got.fetches, want.fetches, f"step {step} fetch")
        assert sorted(got.updates) == sorted(want.updates)
        assert_close([got.updates[k] for k in sorted(want.updates)],
                     [want.updates[k] for k in sorted(want.updates)], f"step {step} update")
        for k, v in got.updates.items():  # as Program stores them: read-only, kept
            mine[k] = v
        theirs.update(want.updates)
    return exe, mine


def mlp_feeds(batch: int, features: int, classes: int):
    def feeds(step: int) -> list[np.ndarray]:
        rng = np.random.default_rng(step)
        return [rng.normal(size=(batch, features)).astype(np.float32),
                rng.integers(0, classes, batch).astype(np.int32)]
    return feeds


def initial_values(module: Module) -> dict[str, np.ndarray]:
    from tfc.runtime.program import Program
    return {k: np.asarray(v) for k, v in Program(module, backend="reference")
            .variables.items()}


def test_mlp_training_steps_match_the_reference() -> None:
    """Three SGD steps of an MLP (matmuls, bias+relu loop kernels, the softmax
    cross-entropy row kernel, bias-gradient reductions, shape arithmetic, var updates):
    the variables stay on the device between steps and match the reference's."""
    module = split_mlp_module([None])
    exe, _ = train_both(module, "train", mlp_feeds(5, 6, 3), 3, initial_values(module))
    assert exe.report.kernels == 10 and not exe.report.host_ops
    plan = module.memory_plans.get("train") or exe.plan
    assert exe.arena_bytes == plan.arena_bytes({"B": 5})


def test_log1p_expm1_softplus_train_on_the_device() -> None:
    """Three SGD steps through softplus, log1p and expm1 and their gradients (sigmoid,
    1 / (1 + x), e^x), fused into the step's loop kernels (CUDA's ``log1pf``, ``expm1f``,
    ``tfc_softplus``): the loss and the weights match the reference's."""
    import tfc
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.linspace(-2, 2, 12).reshape(4, 3).astype(np.float32), name="w")
        h = tfc.matmul(x, w)
        loss = tfc.reduce_mean(tfc.nn.softplus(h) + tfc.log1p(tfc.square(h) * 0.5)
                               + tfc.expm1(-tfc.abs(h)))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss}, targets=[train])
    module = g.as_module()

    def feeds(step: int) -> list[np.ndarray]:
        return [np.random.default_rng(step).normal(size=(5, 4)).astype(np.float32)]
    exe, _ = train_both(module, "train", feeds, 3, initial_values(module))
    assert not exe.report.host_ops


def test_trigonometry_and_erf_train_on_the_device() -> None:
    """Three SGD steps through tan, atan, asin, acos, atan2, erf, erfc and gelu and their
    gradients, fused into the step's loop kernels (CUDA's ``tanf``, ``atanf``, ``asinf``,
    ``acosf``, ``atan2f``, ``erff``, ``erfcf``): the loss and the weights match the
    reference's."""
    import tfc
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.linspace(-1, 1, 12).reshape(4, 3).astype(np.float32), name="w")
        h = tfc.matmul(x, w)
        u = tfc.tanh(h) * 0.9  # in (-1, 1): asin and acos are defined
        loss = tfc.reduce_mean(tfc.tan(u) + tfc.atan(h) + tfc.asin(u) * tfc.acos(u)
                               + tfc.atan2(h, tfc.square(h) + 0.5) + tfc.erf(h)
                               + tfc.erfc(h) * tfc.nn.gelu(h))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss}, targets=[train])
    module = g.as_module()

    def feeds(step: int) -> list[np.ndarray]:
        return [np.random.default_rng(step).normal(size=(5, 4)).astype(np.float32)]
    exe, _ = train_both(module, "train", feeds, 3, initial_values(module))
    assert not exe.report.host_ops


def test_simple_elementwise_ops_and_the_hyperbolic_composites_train_on_the_device() -> None:
    """Three SGD steps through squared_difference, reciprocal, floormod (TF's gradient
    dy), sinh, cosh, asinh, atanh (composites of expm1, log1p, sqrt ...) and forward-only
    ceil, round, floordiv, is_finite on the feeds (exact ops, away from h's roundings):
    CUDA's ``tfc_sqdiff``, ``tfc_floormod``, ``ceilf``, ``rintf`` in the step's kernels;
    the loss and the weights match the reference's."""
    import tfc
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.linspace(-1, 1, 12).reshape(4, 3).astype(np.float32), name="w")
        h = tfc.matmul(x, w)
        m = tfc.floormod(x, 0.7) + tfc.round(x) * 0.25 + tfc.ceil(x) * 0.5 - x // 0.3
        picked = tfc.where(tfc.is_finite(m), m, tfc.zeros_like(m))
        loss = tfc.reduce_mean(tfc.squared_difference(h, 0.5) + tfc.reciprocal(
            tfc.square(h) + 1.0) + tfc.sinh(h * 0.3) + tfc.cosh(h * 0.2) + tfc.asinh(h)
            + tfc.atanh(tfc.tanh(h) * 0.5)) + tfc.reduce_mean(tfc.matmul(picked, w))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss}, targets=[train])
    module = g.as_module()

    def feeds(step: int) -> list[np.ndarray]:
        return [np.random.default_rng(step).normal(size=(5, 4)).astype(np.float32)]
    exe, _ = train_both(module, "train", feeds, 3, initial_values(module))
    assert not exe.report.host_ops


def test_shape_arithmetic_is_computed_when_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mean's count (``prod(gather(shape(logits), [0]))``) is known once the feed shapes
    are: computed on the host when the binding is made, never by device ops (whose index
    check would synchronize with the GPU every step), and right for each batch size."""
    from tfc.backends.cuda import library

    def not_on_device(*a: Any) -> Any:
        raise AssertionError("shape arithmetic ran on the device")
    for kind in ("gather", "prod"):
        monkeypatch.setitem(library.LIBRARY, kind, not_on_device)
    module = split_mlp_module([None])
    exe = compile_cuda(module, "train")
    ref = ReferenceBackend().compile(module, "train")
    values = initial_values(module)
    for batch in (2, 5):
        feeds = mlp_feeds(batch, 6, 3)(batch)
        assert_close(exe(feeds, values, 0).fetches, ref(feeds, values, 0).fetches)


def test_variables_are_uploaded_once_and_follow_outside_changes() -> None:
    """A step whose variables are the arrays the executable handed back uploads nothing;
    a variable replaced from outside (a restore) is uploaded again."""
    module = split_mlp_module([None])
    values = initial_values(module)
    exe = compile_cuda(module, "train")
    feeds = mlp_feeds(4, 6, 3)
    out = exe(feeds(0), values, 0)
    current = {**values, **out.updates}
    uploads = []
    dev = cuda_device.cuda_device()
    real = dev.upload

    def counting(dst: Any, src: np.ndarray) -> None:
        uploads.append(src.shape)
        real(dst, src)
    dev.upload = counting  # type: ignore[method-assign]
    try:
        out2 = exe(feeds(1), current, 1)
        # the feeds only (on a GPU not even those: they go through pinned staging buffers)
        assert uploads == ([] if ON_GPU else [(4, 6), (4,)])
        restored = dict(current, w0=np.zeros((6, 8), np.float32))
        uploads.clear()
        out3 = exe(feeds(1), restored, 1)
        assert (6, 8) in uploads
    finally:
        del dev.upload
    ref = ReferenceBackend().compile(module, "train")
    want = ref(feeds(1), restored, 1)
    assert_close(out3.fetches, want.fetches)
    assert not np.array_equal(out2.fetches[0], out3.fetches[0])


def test_program_trains_and_predicts_on_the_cuda_backend() -> None:
    """Through ``Program``: two entries share the variables; the predict entry sees what
    the train entry's steps left, also across batch sizes (two bindings)."""
    from tfc.runtime.program import Program
    module = split_mlp_module([None])
    mine, ref = Program(module, backend="cuda"), Program(module, backend="reference")
    for step, batch in enumerate((4, 4, 7)):
        x, y = mlp_feeds(batch, 6, 3)(step)
        a, b = mine.run("train", x=x, y=y), ref.run("train", x=x, y=y)
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=RTOL)
    x = mlp_feeds(3, 6, 3)(9)[0]
    np.testing.assert_allclose(mine.run("predict", x=x)["logits"],
                               ref.run("predict", x=x)["logits"], rtol=RTOL, atol=RTOL)


def test_bad_labels_are_the_references_error() -> None:
    module = split_mlp_module([None])
    exe = compile_cuda(module, "train")
    x = np.ones((3, 6), np.float32)
    with pytest.raises(ExecutionError, match=r"label 5 at index \[1\] is out of range \[0, 3\)"):
        exe([x, np.array([0, 5, 1], np.int32)], initial_values(module), 0)


def _module(arg_types: Sequence[tuple[str, DType, tuple]], body: Any,
            variables: dict[str, TensorType] | None = None) -> Module:
    g = Graph("f")
    args = [g.add_arg(TensorType(dt, shape), n) for n, dt, shape in arg_types]
    out = body(Builder(g), args)
    g.set_results(list(out))
    return Module({"f": g}, {n: VariableDecl(n, t) for n, t in (variables or {}).items()})


def test_variable_writes_see_the_start_of_the_step() -> None:
    """Swapped variables (each assigned the other's read), an ``assign_add`` of a feed,
    a ``scatter_sub`` with a repeated row and a variable only written: every write sees
    the values of the start of the step, on the device and in the returned updates,
    over two steps (the second with the device copies)."""
    t = TensorType(DType.f32, (3, 2))

    def body(b: Builder, args: list) -> list:
        x, idx, upd = args
        ra, rb = (b.op("var.read", var=n, result_types=[t]).result for n in "ab")
        b.op("var.assign", rb, var="a")
        b.op("var.assign", b("reshape", b("reshape", ra, shape=[6]), shape=[3, 2]), var="b")
        b.op("var.assign_add", x, var="c")
        b.op("var.scatter_sub", idx, upd, var="d")
        b.op("var.assign", b("add", x, x), var="e")
        return [b("add", ra, rb)]
    module = _module([("x", DType.f32, (3, 2)), ("i", DType.i32, (3,)),
                      ("u", DType.f32, (3, 2))], body, {n: t for n in "abcde"})
    rng = np.random.default_rng(1)
    values = {n: rng.normal(size=(3, 2)).astype(np.float32) for n in "abcd"}
    feeds = [rng.normal(size=(3, 2)).astype(np.float32), np.array([2, 0, 2], np.int32),
             rng.normal(size=(3, 2)).astype(np.float32)]
    train_both(module, "f", lambda step: feeds, 2, values)
    # the same through Program's fast path (var_names: the variables read; update_names)
    from tfc.runtime.program import Program
    values["e"] = np.zeros((3, 2), np.float32)
    mine, ref = Program(module, values, backend="cuda"), Program(module, values,
                                                                 backend="reference")
    exe = mine._executable("f")
    assert exe.var_names == ["a", "b", "c", "d"]
    assert exe.update_names == ["a", "b", "c", "d", "e"]
    args = dict(zip(("x", "i", "u"), feeds))
    for _ in range(2):
        assert_close(list(mine.run("f", **args).values()), list(ref.run("f", **args).values()))
        assert_close([mine.variables[n] for n in "abcde"], [ref.variables[n] for n in "abcde"])


def _run_op(kind: str, arrays: Sequence[np.ndarray], **attrs: Any) -> None:
    """One op (not fused: the library's or the host's) against the reference."""
    def body(b: Builder, args: list) -> list:
        op = b.graph.append(make_op(kind, args, attrs))
        return list(op.results)
    module = _module([(f"a{i}", DType.from_numpy(a.dtype), a.shape)
                      for i, a in enumerate(arrays)], body)
    exe = compile_cuda(module)
    got = exe(list(arrays), {}, 3)
    want = ReferenceBackend().compile(module, "f")(list(arrays), {}, 3)
    # random numbers are the same bits on every backend
    assert_close(got.fetches, want.fetches, kind, rtol=0 if kind.startswith("random.") else RTOL)


RNG = np.random.default_rng(7)
F = RNG.normal(size=(3, 4)).astype(np.float32)
I = np.array([2, 0, 2, 1], np.int32)
X4 = RNG.normal(size=(2, 5, 6, 3)).astype(np.float32)  # NHWC
W4 = RNG.normal(size=(3, 2, 3, 4)).astype(np.float32)  # HWIO
DY4 = RNG.normal(size=(2, 3, 3, 4)).astype(np.float32)  # SAME, strides 2
DY4V = RNG.normal(size=(2, 3, 5, 4)).astype(np.float32)  # VALID, strides 1
MP4 = RNG.normal(size=(2, 2, 3, 3)).astype(np.float32)  # max_pool 2x2/2 of X4
# ties, NaN and overlapping windows (3x3, strides 1x2, SAME: pooled [2, 5, 3, 3])
TIES = np.where(X4 > 1, np.nan, np.round(X4)).astype(np.float32)
MPS = RNG.normal(size=(2, 5, 3, 3)).astype(np.float32)
SEG_DATA = np.array([[1, -2], [3, 0.5], [np.nan, 4], [-1, 2], [7, -8], [0, 1]])


@pytest.mark.parametrize("kind,arrays,attrs", [
    ("matmul", [F, F.T.copy()], {}),
    ("matmul", [F, F], {"transpose_a": True}),
    ("matmul", [RNG.normal(size=(2, 3, 4)).astype(np.float16), F.T.astype(np.float16)], {}),
    ("matmul", [np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(6, dtype=np.int32)
                .reshape(3, 2)], {}),
    ("transpose", [F], {"perm": [1, 0]}),
    ("concat", [F, F], {"axis": 1}),
    ("stack", [F, F], {"axis": 0}),
    ("tile", [F], {"multiples": [2, 1]}),
    ("gather", [F, I[:3]], {"axis": 0}),
    ("gather", [F, I], {"axis": 1}),
    ("scatter_add", [F, I[:3], np.ones((3, 4), np.float32)], {}),
    ("argmax", [np.array([[1, np.nan, 3], [2, 2, 1]], np.float32)], {"axis": 1}),
    ("argmin", [F], {"axis": 0, "output_type": DType.i32}),
    ("prod", [F], {"axes": [1]}),
    ("slice", [F], {"begin": [1, 0], "end": [3, 4]}),
    ("split", [F], {"axis": 1, "num": 2}),
    ("pad", [F], {"paddings": [[1, 0], [0, 2]]}),
    ("one_hot", [I], {"depth": 3}),
    ("shape", [F], {}),
    ("range", [], {"start": 1, "limit": 7, "delta": 2, "dtype": DType.i32}),
    ("random.normal", [], {"shape": [3, 5], "dtype": DType.f32, "seed": 11}),
    ("random.normal", [], {"shape": [7], "dtype": DType.f64, "seed": 1, "mean": 2.0}),
    ("random.uniform", [], {"shape": [4], "dtype": DType.f16, "seed": 2}),
    ("random.uniform", [], {"shape": [2, 3], "dtype": DType.f32, "seed": -5,
                            "minval": -1.5, "maxval": 3.0}),
    ("random.truncated_normal", [], {"shape": [9], "dtype": DType.f32, "seed": 3,
                                     "stddev": 0.1}),
    ("random.uniform_int", [], {"shape": [6], "dtype": DType.i32, "seed": 4, "minval": -3,
                                "maxval": 1000}),
    ("random.uniform_like", [F], {"dtype": DType.f64, "seed": 8}),
    ("shuffle", [F], {"seed": 3}),
    ("conv2d", [X4, W4], {}),
    ("conv2d", [X4, W4], {"padding": "SAME", "strides": [2, 1]}),
    ("conv2d", [X4, W4], {"padding": "SAME", "dilations": [2, 2]}),
    ("conv2d", [X4.astype(np.float16), W4.astype(np.float16)], {"padding": "SAME"}),
    ("conv2d_backprop_filter", [X4, DY4, W4], {"padding": "SAME", "strides": [2, 2]}),
    ("conv2d_backprop_filter", [X4, DY4V, W4], {}),
    ("conv2d_backprop_input", [W4, DY4, X4], {"padding": "SAME", "strides": [2, 2]}),
    ("conv2d_backprop_input", [W4, DY4V, X4], {}),
    ("max_pool", [X4], {"ksize": [2, 2], "strides": [2, 2]}),
    ("max_pool", [np.where(X4 > 1, np.nan, X4).astype(np.float32)],
     {"ksize": [3, 3], "strides": [2, 2], "padding": "SAME"}),
    ("max_pool_grad", [X4, MP4, MP4], {"ksize": [2, 2], "strides": [2, 2]}),
    ("max_pool_grad", [TIES, MPS, MPS], {"ksize": [3, 3], "strides": [1, 2],
                                         "padding": "SAME"}),
    ("max_pool_grad_grad", [TIES, MPS, TIES], {"ksize": [3, 3], "strides": [1, 2],
                                               "padding": "SAME"}),
    ("avg_pool", [X4], {"ksize": [2, 2], "padding": "SAME"}),
    ("avg_pool", [X4], {"ksize": [3, 3], "strides": [1, 2], "padding": "SAME"}),
    ("avg_pool_grad", [MPS, X4], {"ksize": [3, 3], "strides": [1, 2], "padding": "SAME"}),
    ("avg_pool_grad", [DY4[..., :3].copy(), X4], {"ksize": [3, 3], "strides": [2, 2],
                                                  "padding": "SAME"}),
    # scans and sorts (array24): every attr, an f16 and an integer scan; a sort with ties,
    # NaN and -0.0 (a host op)
    ("cumsum", [F], {"axis": 1, "exclusive": True, "reverse": True}),
    ("cumsum", [F.astype(np.float16)], {"axis": 0}),
    ("cumsum", [np.arange(12, dtype=np.int64).reshape(3, 4)], {"axis": 1, "reverse": True}),
    ("cumprod", [F], {"axis": 0, "exclusive": True}),
    ("sort", [np.array([[1, np.nan, 3, 1], [2, 2, 1, -0.0]], np.float32)],
     {"descending": True, "k": 3}),
    # segment reductions (segment25): each kind, both families; a dropped negative id,
    # empty segments, NaN, f16 and integers
    *[("segment_reduce", [np.nan_to_num(SEG_DATA, nan=5 if dt == np.int32 else np.nan)
                          .astype(dt), ids], {"reduction": k, "num_segments": 5, "sorted": s})
      for k in ("sum", "max", "min", "prod") for dt in (np.float32, np.float16, np.int32)
      for s, ids in ((False, np.array([2, -1, 0, 2, 4, 0], np.int32)),
                     (True, np.array([0, 0, 1, 3, 3, 3], np.int64)))],
])
def test_library_and_host_ops_match_the_reference(kind: str, arrays: list, attrs: dict
                                                  ) -> None:
    _run_op(kind, arrays, **attrs)


def test_gather_index_out_of_range_is_an_error() -> None:
    with pytest.raises(ExecutionError, match="gather"):
        _run_op("gather", [F, np.array([0, 3], np.int32)], axis=0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 5, 11])
def test_random_graphs_match_the_reference(seed: int) -> None:
    """Seeded random graphs (element-wise chains, views, reductions, softmax-like rows,
    variable assigns) against the reference, as the LLVM backend's differential test."""
    from tfc.passes import DEFAULT_PIPELINE, run_passes
    from tfc.testing_graphs import MAX_BATCH, random_graph
    case = random_graph(seed)
    optimized = run_passes(Module({"f": case.module.graphs["f"].clone()},
                                  dict(case.module.variables)), DEFAULT_PIPELINE)
    exe = compile_cuda(optimized)
    ref = ReferenceBackend().compile(case.module, "f")
    runs = [case.feeds]
    if case.batch is not None:  # the same executable at another size of B (a new binding)
        runs.append(case.feeds_for(MAX_BATCH + 1 - case.batch, seed))
    for feeds in runs:
        got = exe(feeds, dict(case.variables), 0)
        want = ref(feeds, dict(case.variables), 0)
        for k, (a, b, m) in enumerate(zip(got.fetches, want.fetches, case.bounds)):
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-6 * m,
                                       err_msg=f"seed {seed} fetch {k}")
        assert sorted(got.updates) == sorted(want.updates)
        for name, m in case.update_bounds.items():
            np.testing.assert_allclose(got.updates[name], want.updates[name], rtol=2e-6,
                                       atol=2e-6 * m, err_msg=f"seed {seed} @{name}")


def test_export_and_load_run_without_code_generation(monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    """The members carry source, PTX (when NVRTC is here) and tables; ``load`` makes an
    executable that runs the same numbers without calling the code generator."""
    from tfc.pipeline import lower_entry
    source = split_mlp_module([None])
    module = lower_entry(source, "train", "cuda")
    backend = CUDABackend()
    exe = backend.compile(module, "train")
    members = backend.export(exe)
    assert {"kernels.cu", "arch", "tables.json"} <= set(members)
    assert b"extern \"C\" __global__" in members["kernels.cu"]
    import tfc.backends.cuda.codegen as codegen

    def no_codegen(*a: Any, **k: Any) -> Any:
        raise AssertionError("load generated code")
    monkeypatch.setattr(codegen, "fusion_kernel", no_codegen)
    loaded = backend.load(module, "train", members)
    values = initial_values(source)
    feeds = mlp_feeds(4, 6, 3)(0)
    assert_close(loaded(feeds, values, 0).fetches, exe(feeds, values, 0).fetches)
    from tfc.errors import ArtifactError
    with pytest.raises(ArtifactError, match="lacks its member tables.json"):
        backend.load(module, "train", {k: v for k, v in members.items()
                                       if k != "tables.json"})


def test_an_artifact_carries_the_kernels_and_loads_without_code_generation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Program.save`` stores each compiled entry's source, PTX, arch and tables under
    ``native/cuda/<entry>/``; the loaded program runs them (no code generator) and
    continues training where the saved one stopped."""
    import zipfile
    from tfc.runtime import load
    from tfc.runtime.program import Program
    program = Program(split_mlp_module([None]), backend="cuda")
    x, y = mlp_feeds(4, 6, 3)(0)
    program.run("train", x=x, y=y)
    path = tmp_path / "mlp.tfc"
    program.save(path)
    names = set(zipfile.ZipFile(path).namelist())
    assert {f"native/cuda/train/{m}" for m in ("kernels.cu", "arch", "tables.json")} <= names
    import tfc.backends.cuda.codegen as codegen

    def no_codegen(*a: Any, **k: Any) -> Any:
        raise AssertionError("load generated code")
    monkeypatch.setattr(codegen, "fusion_kernel", no_codegen)
    loaded = load(path, backend="cuda")  # (whatever $TFC_BACKEND says)
    assert isinstance(loaded.backend, CUDABackend)
    x, y = mlp_feeds(4, 6, 3)(1)
    np.testing.assert_array_equal(loaded.run("train", x=x, y=y)["loss"],
                                  program.run("train", x=x, y=y)["loss"])


def test_running_without_a_device_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling needs no GPU; running on a machine without one is a clear error."""
    monkeypatch.delenv(cuda_device.DEVICE_ENV, raising=False)
    monkeypatch.setattr(cuda_device, "_devices", {})
    problem = cuda_device.device_problem()
    if problem is None:
        pytest.skip("this machine has a CUDA device")
    assert problem.startswith("no CUDA device: ")
    module = split_mlp_module([None])
    exe = compile_lowered(CUDABackend(), module, "predict")
    with pytest.raises(TfcError, match="^no CUDA device: "):
        exe([np.ones((2, 6), np.float32)], initial_values(module), 0)


def test_host_ops_are_listed_in_the_report() -> None:
    """An op without a device version runs its reference on the host: named in
    ``host_ops`` (no fallback of the graph), with the reference's numbers."""
    module = _module([("x", DType.f32, (2, 2))], lambda b, args: [b("matrix_inverse", *args)])
    x = np.array([[2, 1], [1, 3]], np.float32)
    exe = compile_cuda(module)
    assert exe.report.host_ops == ["matrix_inverse"]
    assert "on the host: matrix_inverse" in str(exe.report)
    np.testing.assert_allclose(exe([x], {}, 0).fetches[0], np.linalg.inv(x), rtol=1e-6)


def test_unsupported_ops_fall_back_with_a_warning() -> None:
    """A graph with an op nothing on the device runs (a ``send``) runs on the reference
    backend, said in a warning and in ``fallback_ops``; export stores nothing for it."""
    g = Graph("f")
    a = g.add_arg(TensorType(DType.f32, (2,)), "a")
    g.append(make_op("send", [a], {"key": "k", "to": "/cpu:1"}))
    g.set_results([a])
    module = Module({"f": g}, {})
    with pytest.warns(UserWarning, match="cuda backend: graph @f runs on the reference "
                                         "backend; ops not supported: send"):
        exe = compile_lowered(CUDABackend(), module, "f")
    assert exe.fallback_ops == ["send"]
    assert CUDABackend().export(exe) == {}


def test_backend_is_registered() -> None:
    assert isinstance(get_backend("cuda"), CUDABackend)


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("example,entry,host_ops", [
    ("mlp_digits.py", "train_step", []),
    ("cnn_digits.py", "train_step", []),
    ("kmeans_digits.py", "step", []),
    ("ridge.py", "fit", ["matrix_inverse"]),
])
def test_examples_run_and_match_the_reference(example: str, entry: str,
                                              host_ops: list[str]) -> None:
    """A step of an example model (digits MLP and CNN training, k-means, ridge) on the
    cuda backend against the reference, every fetch and update; feeds are random (batch
    3; integer feeds, labels or indices, in [0, 2))."""
    from tfc.compiler.frontend import load_model
    module = load_model(EXAMPLES / example)
    values = initial_values(module)
    rng = np.random.default_rng(0)
    feeds = []
    for a in module.graphs[entry].args:
        shape = [3 if isinstance(d, str) else d for d in a.type.shape]
        if a.type.dtype.is_int:
            feeds.append(rng.integers(0, 2, shape).astype(a.type.dtype.np))
        else:
            feeds.append(rng.normal(size=shape).astype(a.type.dtype.np))
    exe, _ = train_both(module, entry, lambda step: feeds, 2, values)
    assert exe.report.host_ops == host_ops


def test_control_flow_falls_back_to_the_reference() -> None:
    """The LSTM example's ``scan`` has no device version: the graph runs on the reference
    backend, with a warning naming the op, and gives the reference's numbers."""
    from tfc.compiler.frontend import load_model
    module = load_model(EXAMPLES / "lstm_sequence.py")
    with pytest.warns(UserWarning, match="ops not supported: scan"):
        exe = compile_lowered(CUDABackend(), module, "predict")
    assert exe.fallback_ops == ["scan"]
    values = initial_values(module)
    rng = np.random.default_rng(0)
    feeds = [rng.normal(size=[3 if isinstance(d, str) else d for d in a.type.shape])
             .astype(a.type.dtype.np) for a in module.graphs["predict"].args]
    want = ReferenceBackend().compile(module, "predict")(feeds, values, 0)
    assert_close(exe(feeds, values, 0).fetches, want.fetches, rtol=0)


def test_a_reduction_split_across_blocks_runs_step_after_step(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """``sum(cast(a @ b, f32))`` and a mean over a long vector: their kernels split each
    row across blocks, with a scratch the runtime allocates once per binding; every step
    (the scratch's counters are back to 0 after each) and an exported and loaded copy
    (``scratch_bytes`` is in tables.json) give the same bits, close to the reference."""
    def body(b: Builder, args: list) -> list:
        a, c, v = args
        return [b("sum", b("cast", b("matmul", a, c), dtype=DType.f32), axes=None),
                b("mean", v, axes=None)]
    module = _module([("a", DType.f32, (96, 64)), ("c", DType.f32, (64, 96)),
                      ("v", DType.f64, (20000,))], body)
    exe = compile_cuda(module)
    assert any(k.launch.scratch_bytes for k in exe.kernels.values())
    rng = np.random.default_rng(3)
    feeds = [rng.normal(size=(96, 64)).astype(np.float32),
             rng.normal(size=(64, 96)).astype(np.float32), rng.normal(size=20000)]
    want = ReferenceBackend().compile(module, "f")(feeds, {}, 0).fetches
    first = exe(feeds, {}, 0).fetches
    assert_close(first, want, rtol=1e-4)
    for step in range(1, 3):
        for g, w in zip(exe(feeds, {}, step).fetches, first):
            np.testing.assert_array_equal(g, w)
    from tfc.pipeline import lower_entry
    lowered = lower_entry(module, "f", "cuda")
    backend = CUDABackend()
    members = backend.export(backend.compile(lowered, "f"))
    import tfc.backends.cuda.codegen as codegen

    def no_codegen(*a: Any, **k: Any) -> Any:
        raise AssertionError("load generated code")
    monkeypatch.setattr(codegen, "fusion_kernel", no_codegen)
    loaded = backend.load(lowered, "f", members)
    assert any(k.launch.scratch_bytes for k in loaded.kernels.values())
    for g, w in zip(loaded(feeds, {}, 0).fetches, first):
        np.testing.assert_array_equal(g, w)


def test_a_long_elementwise_chain_generates_one_kernel_without_recursing() -> None:
    """A fused chain of 1500 element-wise ops (the llvm test's chain) generates its
    kernel by warming the values in region order: computing each result by recursion
    through its operands exceeded Python's recursion limit; the numbers are the
    reference's (rtol 1e-5: tanh within its ulp bound)."""
    from tests.backends.llvm.test_long_chains import chain
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the reference
        got = chain(1500, "cuda")
    np.testing.assert_allclose(got, chain(1500, "reference"), rtol=1e-5, atol=1e-6)


def _reduced_chains(ops: int, backend: str) -> list[np.ndarray]:
    """Fused chains of about ``ops`` element-wise ops feeding a row sum (a reduce
    kernel), following it (row results of the same kernel) and feeding a softmax (a row
    kernel)."""
    import tfc

    def chain(h: Any) -> Any:
        for k in range(ops // 2):
            h = tfc.tanh(h * 0.9 + 0.01) if k % 4 == 0 else h * 1.001 - 0.002
        return h
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [4, 8], name="x")
        h = chain(x)
        total = chain(tfc.reduce_sum(h, axis=1))
        soft = tfc.nn.softmax(chain(x * 0.5))
        xv = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
        return tfc.Session(backend=backend).run([total, soft], {x: xv})


def test_reduce_and_row_kernels_of_thousands_of_fused_ops_generate_without_recursing(
        ) -> None:
    """The reduce and row kernels compute a value by its operands' values first, with a
    stack (``Emitter.at``): recursing through a chain of 3000 ops exceeded Python's
    recursion limit. One kernel per reduction, the reference's numbers."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the reference
        got = _reduced_chains(3000, "cuda")
    for g, w in zip(got, _reduced_chains(3000, "reference")):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
