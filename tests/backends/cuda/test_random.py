"""Random ops as one generated Philox kernel each (``tfc.backends.cuda.codegen_random``):
the same bits as the reference's samplers (``tfc.ops.random``) for every op, dtype and
parameter kind, sizes that do not fill the last Philox block, steps past 32 and 63 bits,
and a batch known only at run time. On the emulator here; on a GPU under
``TFC_BACKEND=cuda``; and every kernel through NVRTC when it is installed."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from tfc.backends.cuda import CUDABackend, library
from tfc.backends.reference import ReferenceBackend
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
from tfc.ir.registry import make_op
from tfc.ir.types import DType, TensorType
from tfc.testing import compile_lowered

from tests.backends.cuda.emulated import emulated_off_the_gpu


@pytest.fixture(autouse=True)
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    emulated_off_the_gpu(monkeypatch)


@pytest.fixture(autouse=True)
def no_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    """The array-module sampler must not run: the kernel draws."""
    def sampled(*a: Any, **k: Any) -> Any:
        raise AssertionError("the random op ran as array calls, not as its kernel")
    monkeypatch.setattr(library, "sample", sampled)


def _module(kind: str, attrs: dict, like: tuple | None = None) -> Module:
    g = Graph("f")
    args = [g.add_arg(TensorType(DType.f32, like), "x")] if like is not None else []
    op = Builder(g).graph.append(make_op(kind, args, attrs))
    g.set_results([op.result])
    return Module({"f": g}, {})


CASES = [
    ("random.uniform", {"shape": [7], "dtype": DType.f16, "seed": 2}),
    ("random.uniform", {"shape": [3, 5], "dtype": DType.f32, "seed": -5, "minval": -1.5,
                        "maxval": 3.0}),
    ("random.uniform", {"shape": [5], "dtype": DType.f64, "seed": 1 << 40, "minval": 2.0,
                        "maxval": 2.5}),
    ("random.uniform", {"shape": [9], "dtype": DType.f16, "seed": 3, "minval": -1.0,
                        "maxval": 1.0}),
    ("random.normal", {"shape": [3, 3], "dtype": DType.f32, "seed": 11}),
    ("random.normal", {"shape": [7], "dtype": DType.f64, "seed": 1, "mean": 2.0}),
    ("random.normal", {"shape": [5], "dtype": DType.f16, "seed": 9, "stddev": 0.25}),
    ("random.truncated_normal", {"shape": [9], "dtype": DType.f32, "seed": 3,
                                 "stddev": 0.1}),
    ("random.truncated_normal", {"shape": [3], "dtype": DType.f64, "seed": 4, "mean": -1.0}),
    ("random.truncated_normal", {"shape": [6], "dtype": DType.f16, "seed": 5}),
    ("random.uniform_int", {"shape": [5], "dtype": DType.i32, "seed": 4, "minval": -3,
                            "maxval": 1000}),
    ("random.uniform_int", {"shape": [4], "dtype": DType.i64, "seed": 6,
                            "minval": -(1 << 62), "maxval": (1 << 62) + 12345}),
]


@pytest.mark.parametrize("kind,attrs", CASES)
def test_each_random_op_draws_the_references_bits(kind: str, attrs: dict) -> None:
    exe = compile_lowered(CUDABackend(), _module(kind, attrs), "f")
    assert not exe.fallback_ops and len(exe.kernels) == 1
    ref = ReferenceBackend().compile(_module(kind, attrs), "f")
    for step in (0, 3, (1 << 32) + 7, (1 << 64) - 2):
        got = exe([], {}, step).fetches[0]
        want = ref([], {}, step).fetches[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8),
                                      err_msg=f"{kind} step {step}")


def test_uniform_like_takes_the_run_times_batch() -> None:
    """A dropout mask's draw: the count is a kernel argument, so each batch size binds
    the same kernel; elements beyond a full Philox block are drawn too."""
    attrs = {"dtype": DType.f32, "seed": 8, "minval": 0.0, "maxval": 1.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exe = compile_lowered(CUDABackend(), _module("random.uniform_like", attrs,
                                                     ("B", 3)), "f")
    ref = ReferenceBackend().compile(_module("random.uniform_like", attrs, ("B", 3)), "f")
    for batch in (1, 5, 2, 700):
        x = np.zeros((batch, 3), np.float32)
        got, want = exe([x], {}, batch).fetches[0], ref([x], {}, batch).fetches[0]
        np.testing.assert_array_equal(got, want)


def test_artifacts_carry_the_random_kernels() -> None:
    """``export``/``load``: the random kernel is in the stored source and tables, and the
    loaded executable launches it (no sampler, no code generation)."""
    kind, attrs = CASES[4]
    backend = CUDABackend()
    exe = compile_lowered(backend, _module(kind, attrs), "f")
    members = backend.export(exe)
    assert b"tfc_philox" in members["kernels.cu"]
    loaded = backend.load(exe.module, "f", members)
    assert set(loaded.kernels) == set(exe.kernels) == {0}
    want = ReferenceBackend().compile(_module(kind, attrs), "f")([], {}, 5).fetches[0]
    np.testing.assert_array_equal(loaded([], {}, 5).fetches[0], want)
