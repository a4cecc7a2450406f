"""Matrix products as one prepared cuBLAS call (``tfc.backends.cuda.gemm``): the call's
arguments for every transpose and batch layout, checked through BLAS's own definition
of them (``emulate_gemm``), and f16 products at the reference's contract.

Under ``TFC_BACKEND=cuda`` on a GPU the end-to-end tests run on cuBLAS (``gemmEx``,
tensor cores for f16); elsewhere on the emulator, which reads the operands through the
same arguments.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from tfc.backends.cuda import device as cuda_device
from tfc.backends.cuda.gemm import OP_N, OP_T, emulate_gemm, gemm_plan
from tfc.runtime.program import Program

from tests.backends.cuda.emulated import ON_GPU, emulated_off_the_gpu


@pytest.fixture(autouse=True)
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    emulated_off_the_gpu(monkeypatch)


LAYOUTS = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
           ((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 5)), ((2, 3, 4), (1, 4, 5)),
           ((2, 2, 3, 4), (2, 2, 4, 5)), ((1, 1), (1, 7))]


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("a_shape,b_shape", LAYOUTS)
def test_plans_compute_numpys_product_bit_for_bit(ta: bool, tb: bool, a_shape: tuple,
                                                  b_shape: tuple) -> None:
    """The BLAS call's arguments (column-major, operands swapped, transposes as flags,
    batch strides, 0 for a broadcast operand) read the row-major operands right: the
    emulation through BLAS's definition equals ``numpy.matmul`` bit for bit."""
    rng = np.random.default_rng(len(a_shape) * 7 + len(b_shape) + 2 * ta + tb)
    a = rng.normal(size=a_shape).astype(np.float32)
    b = rng.normal(size=b_shape).astype(np.float32)
    stored_a = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    stored_b = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    plan = gemm_plan(stored_a.shape, stored_b.shape, ta, tb)
    assert plan is not None
    assert (plan.transa, plan.transb) == (OP_T if tb else OP_N, OP_T if ta else OP_N)
    want = np.matmul(a, b)
    out = np.full(plan.out_shape, np.nan, np.float32)
    emulate_gemm(plan, stored_a, stored_b, out, np.float32)
    assert out.shape == want.shape
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 4), (3, 4, 5)),        # batch dims that do not broadcast
    ((2, 1, 3, 4), (2, 4, 5)),     # a broadcast that is no single stride
    ((3, 0), (0, 5)), ((0, 4), (4, 5)),  # empty: cuBLAS rejects a zero leading dim
    ((3, 4), (5, 6)),              # inner dims differ
])
def test_what_one_call_cannot_do_has_no_plan(a_shape: tuple, b_shape: tuple) -> None:
    assert gemm_plan(a_shape, b_shape, False, False) is None


def _matmul_program(m: int, k: int, n: int, dtype: Any, transpose_b: bool = False
                    ) -> Program:
    import tfc
    dt = getattr(tfc, np.dtype(dtype).name)
    with tfc.Graph().as_default() as g:
        a = tfc.placeholder(dt, [None, k], name="a")
        b = tfc.placeholder(dt, [n, k] if transpose_b else [k, n], name="b")
        tfc.entry("mm", feeds={"a": a, "b": b},
                  fetches={"c": tfc.matmul(a, b, transpose_b=transpose_b)})
    return Program(g.as_module(), backend="cuda")


def f16_ulp_error(got: np.ndarray, exact: np.ndarray) -> float:
    """The largest error of f16 values against exact ones, in units of the f16 spacing
    at the exact value (``numpy.spacing`` of its f16 rounding; the normal spacing below)."""
    spacing = np.maximum(np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64),
                         float(np.spacing(np.float16(np.finfo(np.float16).tiny))))
    return float(np.max(np.abs(got.astype(np.float64) - exact) / spacing))


def within_the_f16_contract(got: np.ndarray, a: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """Where ``got`` (f16) keeps the reference's contract for ``a @ bt.T``: f32
    accumulation, then one rounding. Against the exact product ``x``, with
    ``E = k 2^-23 (|a| @ |bt|.T)`` the f32 dot product's error bound (any summation
    order, each addition rounded or truncated to f32), the error is at most
    ``E + 0.5 ulp_f16(|x| + E)``: half an f16 ulp, once the sum is within ``E``."""
    k = a.shape[-1]
    a64, b64 = a.astype(np.float64), bt.astype(np.float64)
    exact = a64 @ b64.T
    acc = k * 2.0 ** -23 * (np.abs(a64) @ np.abs(b64).T)
    half_ulp = 0.5 * np.spacing((np.abs(exact) + acc).astype(np.float16)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) <= acc + half_ulp


def test_f16_products_keep_the_contract_of_widening_then_rounding_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An f16 product (f16 operands, f32 accumulation, one rounding: cuBLAS ``gemmEx``
    with tensor cores on a GPU) keeps the reference's contract element by element (the
    bound of ``within_the_f16_contract``, which the reference's widen-then-round-once
    keeps too; an f16-accumulating product breaks it for most elements), and where sums
    do not cancel (positive inputs, the f32 error far below an f16 ulp) it is within 1
    f16 ulp of the exact product where widen-then-round is within 0.5. (Where sums
    cancel, the H200 measured 289 f16 ulps of the exact value at worst against f32
    SGEMM's 69, the same 0.48 ulp of the largest value, 99.0% correctly rounded against
    99.8%: the f16 kernels' f32 summation order, COMPUTE_32F_PEDANTIC's too.)
    It runs as the prepared library call, not through the array module's ``matmul``."""
    calls: list[Any] = []
    dev = cuda_device.cuda_device()
    real = dev.gemm
    monkeypatch.setattr(dev, "gemm", lambda *a: calls.append(a[0]) or real(*a))
    rng = np.random.default_rng(0)
    m, k, n = (256, 1024, 128) if ON_GPU else (24, 160, 16)
    for positive in (True, False):
        a = rng.normal(size=(m, k)).astype(np.float16)
        bt = rng.normal(size=(n, k)).astype(np.float16)
        if positive:
            a, bt = np.abs(a), np.abs(bt)
        prog = _matmul_program(m, k, n, np.float16, transpose_b=True)
        got = prog.run("mm", {"a": a, "b": bt})["c"]
        assert got.dtype == np.float16 and got.shape == (m, n)
        widened = (a.astype(np.float32) @ bt.astype(np.float32).T).astype(np.float16)
        assert within_the_f16_contract(widened, a, bt).all()
        ok = within_the_f16_contract(got, a, bt)
        assert ok.all(), f"{int((~ok).sum())} of {ok.size} products outside the contract"
        if positive:
            exact = a.astype(np.float64) @ bt.astype(np.float64).T
            mine, ref = f16_ulp_error(got, exact), f16_ulp_error(widened, exact)
            assert ref <= 0.5 + 1e-3 and mine <= 1.0, (mine, ref)
        if not ON_GPU:  # the emulator is numpy's widen-and-round itself
            np.testing.assert_array_equal(got, widened)
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_products_of_each_float_dtype_match_the_reference(dtype: Any) -> None:
    """Batch sizes change between steps: each binding prepares its own call."""
    prog = _matmul_program(0, 6, 5, dtype)
    ref = Program(prog.module, backend="reference")
    rng = np.random.default_rng(1)
    for batch in (3, 7, 3):
        feeds = {"a": rng.normal(size=(batch, 6)).astype(dtype),
                 "b": rng.normal(size=(6, 5)).astype(dtype)}
        got, want = prog.run("mm", feeds)["c"], ref.run("mm", feeds)["c"]
        assert got.dtype == want.dtype
        tol = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-12}[dtype]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        if not ON_GPU:
            np.testing.assert_array_equal(got, want)
