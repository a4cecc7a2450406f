"""OpenBLAS's thread count on the run path: a step whose GEMMs are all small runs OpenBLAS
on one thread (``blas_policy``, ``symbols.small_gemms``), a reserved core
(``tfc.backends.cores``) takes one thread off, and limits, reservations and small steps
combine and always give the count back."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.backends.cores import reserve_core
from tfc.backends.llvm.runtime import symbols
from tfc.backends.llvm.runtime.blas_policy import SMALL_GEMM_FLOPS, gemms_are_small
from tfc.runtime import Program


@pytest.fixture
def two_threads():
    """OpenBLAS at 2 threads with no small step in force; the count is put back after."""
    before = symbols.get_num_threads()
    symbols.small_gemms(False)
    symbols.set_num_threads(2)
    yield
    symbols.small_gemms(False)
    symbols.set_num_threads(before)


def matmul_graph(m: int, k: int, n: int, batch_symbol: bool = False):
    with tfc.Graph().as_default() as g:
        a = tfc.placeholder(tfc.float32, [None if batch_symbol else m, k], name="a")
        b = tfc.placeholder(tfc.float32, [k, n], name="b")
        tfc.entry("f", feeds={"a": a, "b": b}, fetches={"c": tfc.matmul(a, b)})
    return g.as_module()


def test_gemm_sizes_decide():
    small = matmul_graph(32, 256, 64).graphs["f"]
    assert 2 * 32 * 256 * 64 < SMALL_GEMM_FLOPS
    assert gemms_are_small(small, {}) is True
    assert gemms_are_small(matmul_graph(512, 512, 512).graphs["f"], {}) is False
    dynamic = matmul_graph(0, 256, 64, batch_symbol=True).graphs["f"]
    (batch,) = [d for d in dynamic.args[0].type.shape if isinstance(d, str)]
    assert gemms_are_small(dynamic, {batch: 32}) is True
    assert gemms_are_small(dynamic, {batch: 4096}) is False
    assert gemms_are_small(dynamic, {}) is False  # a size it cannot tell: not small
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [8], name="x")
        tfc.entry("f", feeds={"x": x}, fetches={"y": x * 2.0})
    assert gemms_are_small(g.as_module().graphs["f"], {}) is None


def test_a_small_conv_step_is_small():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [32, 8, 8, 1], name="x")
        w = tfc.constant(np.ones((3, 3, 1, 16), np.float32))
        tfc.entry("f", feeds={"x": x}, fetches={"y": tfc.nn.conv2d(x, w, 1, "SAME")})
    assert gemms_are_small(g.as_module().graphs["f"], {}) is True


def test_small_steps_run_openblas_on_one_thread_and_large_ones_give_the_count_back(
        two_threads):
    rng = np.random.default_rng(0)
    small = Program(matmul_graph(32, 256, 64), backend="llvm").callable("f", ["a", "b"], "c")
    large = Program(matmul_graph(512, 512, 512), backend="llvm").callable("f", ["a", "b"], "c")
    a, b = rng.normal(size=(32, 256)).astype(np.float32), rng.normal(size=(256, 64)).astype(
        np.float32)
    np.testing.assert_allclose(small(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert symbols.get_num_threads() == 1
    a2, b2 = rng.normal(size=(512, 512)).astype(np.float32), rng.normal(
        size=(512, 512)).astype(np.float32)
    np.testing.assert_allclose(large(a2, b2), a2 @ b2, rtol=1e-3, atol=1e-3)
    assert symbols.get_num_threads() == 2
    small(a, b)
    assert symbols.get_num_threads() == 1


def test_reserved_cores_take_threads_off_and_combine_with_limits(two_threads):
    symbols.openblas()  # (registers the reservation hook)
    with reserve_core():
        assert symbols.get_num_threads() == 1
    assert symbols.get_num_threads() == 2
    symbols.set_num_threads(3)
    with symbols.limited_threads(3):
        with reserve_core():
            assert symbols.get_num_threads() == 2
            with reserve_core():
                assert symbols.get_num_threads() == 1
                with reserve_core():
                    assert symbols.get_num_threads() == 1  # never fewer than one
        assert symbols.get_num_threads() == 3
    with reserve_core():
        symbols.small_gemms(True)
        assert symbols.get_num_threads() == 1
    assert symbols.get_num_threads() == 1  # the small step still holds
    symbols.small_gemms(False)
    assert symbols.get_num_threads() == 3


@pytest.mark.parametrize("first", ["limited_threads", "small_gemms"])
def test_a_limit_or_a_small_step_before_openblas_is_loaded_does_not_deadlock(first):
    """Loading OpenBLAS registers the core-reservation hook, which runs at once and takes
    the limits' lock: a first ``limited_threads`` (a rank of ``tfc.distributed.run``) or
    ``small_gemms`` that loaded it while holding that lock waited for itself forever."""
    import subprocess
    import sys
    code = ("from tfc.backends.llvm.runtime import symbols\n"
            + ("with symbols.limited_threads(1):\n    pass\n" if first == "limited_threads"
               else "symbols.small_gemms(True)\nsymbols.small_gemms(False)\n")
            + "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert out.stdout.strip() == "done", out.stderr
