"""The LLVM backend end to end: programs, examples, fallback, object code, selection.

Timings (compile, step) are printed for the MLP training step, never asserted
(``pytest -s`` shows them).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from tfc.backends.base import ForeignNativeCode, default_backend_name, get_backend
from tfc.backends.llvm import LLVMBackend, LLVMExecutable
from tfc.backends.llvm.runtime import native
from tfc.backends.reference import ReferenceBackend
from tfc.compiler.frontend import load_model
from tfc.errors import ArtifactError, FeedError, TfcError
from tfc.ir.types import DType, TensorType
from tfc.pipeline import lower_entry
from tfc.runtime import Program
from tfc.testing import compile_lowered

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
F32, I32 = DType.f32, DType.i32


@pytest.fixture(scope="module")
def mlp():
    return load_model(EXAMPLES / "mlp_digits.py")


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    return (d.data / 16).astype(np.float32), d.target.astype(np.int32)


def _programs(module, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback (the __init__ graphs included)
        llvm = Program(module, backend="llvm", **kw)
    ref = Program(module, backend="reference", **kw)
    return llvm, ref


def test_mlp_training_matches_reference(mlp, digits):
    x, y = digits
    llvm, ref = _programs(mlp)
    for name in ref.variables:
        np.testing.assert_array_equal(llvm.variables[name], ref.variables[name])
    t0 = time.perf_counter()
    llvm._executable("train_step")
    compile_s = time.perf_counter() - t0
    for step in range(5):
        feeds = {"x": x[32 * step:32 * step + 32], "y": y[32 * step:32 * step + 32]}
        a, b = llvm.run("train_step", feeds), ref.run("train_step", feeds)
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
        np.testing.assert_allclose(a["accuracy"], b["accuracy"], rtol=1e-6)
    for name in ref.variables:
        np.testing.assert_allclose(llvm.variables[name], ref.variables[name], rtol=1e-4,
                                   atol=1e-6)
    times = {}
    for prog, tag in ((llvm, "llvm"), (ref, "reference")):
        ts = []
        for _ in range(10):
            t = time.perf_counter()
            prog.run("train_step", x=x[:32], y=y[:32])
            ts.append(time.perf_counter() - t)
        times[tag] = float(np.median(ts))
    print(f"\nMLP train_step (batch 32): compile {compile_s * 1e3:.0f} ms "
          f"({llvm._executable('train_step').report}); step llvm {times['llvm'] * 1e3:.3f} ms,"
          f" reference {times['reference'] * 1e3:.3f} ms "
          f"({times['reference'] / times['llvm']:.1f}x)")


def test_symbolic_batch_one_entry_for_every_size(mlp, digits):
    x, _ = digits
    llvm, ref = _programs(mlp)
    exe = llvm._executable("predict")
    for n in (1, 7, 64):
        a, b = llvm.run("predict", x=x[:n]), ref.run("predict", x=x[:n])
        np.testing.assert_allclose(a["output"], b["output"], rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(a["classes"], b["classes"])
    assert exe is llvm._executable("predict")
    assert {((n, 64),) for n in (1, 7, 64)} <= set(exe._bindings)  # the cache may hold more


@pytest.mark.parametrize("example,feeds", [
    ("softmax_digits.py", {"x": (5, 64)}),
    ("softmax_train_digits.py", {"x": (5, 64)}),
    ("ridge.py", {"X": (6, "ridge")}),
    ("ridge_gd.py", {"X": (6, "ridge")}),
    ("cnn_digits.py", {"x": (3, 8, 8, 1)}),
    ("kmeans_digits.py", None),
])
def test_examples_predict_entries(example, feeds):
    module = load_model(EXAMPLES / example)
    entry = "predict" if "predict" in module.graphs else "assign"
    graph = module.graphs[entry]
    rng = np.random.default_rng(1)
    arrays = {}
    for a in graph.args:
        shape = tuple(7 if isinstance(d, str) else d for d in a.type.shape)
        arrays[a.name] = rng.random(shape).astype(a.type.dtype.np)
    llvm, ref = _programs(module)
    got, want = llvm.run(entry, arrays), ref.run(entry, arrays)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert not llvm._executable(entry).fallback_ops


def test_cnn_training_steps_match(digits):
    module = load_model(EXAMPLES / "cnn_digits.py")
    x, y = digits
    llvm, ref = _programs(module)
    for step in range(2):
        feeds = {"x": x[16 * step:16 * step + 16].reshape(-1, 8, 8, 1),
                 "y": y[16 * step:16 * step + 16]}
        a, b = llvm.run("train_step", feeds), ref.run("train_step", feeds)
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
    assert not llvm._executable("train_step").fallback_ops


def test_unsupported_ops_fall_back_loudly(h, monkeypatch):
    from tfc.backends.llvm import kernels
    monkeypatch.delitem(kernels.LOWERINGS, "matrix_inverse")  # lowered now: pretend it is not
    m = h.make_module([("x", F32, (3, 3))],
                      lambda b, a: b("add", a[0], b("matrix_inverse", a[0])))
    with pytest.warns(UserWarning, match="matrix_inverse"):
        exe = compile_lowered(LLVMBackend(), m, "f")
    assert exe.fallback_ops == ["matrix_inverse"]
    assert "reference backend" in str(exe.report)
    x = np.eye(3, dtype=np.float32) * 2
    got, want = h.run_both(m, [x], exe=exe)
    h.assert_same(got, want)


def test_object_code_round_trip(h, monkeypatch, tmp_path):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    m = h.make_module([("x", F32, ("B", 4)), ("w", F32, (4, 2))],
                      lambda b, a: b("softmax", b("matmul", a[0], a[1])))
    exe = compile_lowered(LLVMBackend(), m, "f")
    assert not exe.report.cached and list((tmp_path / "llvm").glob("*.o"))
    again = compile_lowered(LLVMBackend(), m, "f")
    assert again.report.cached  # the compile cache: no LLVM work the second time
    x, w = np.random.rand(5, 4).astype(np.float32), np.random.rand(4, 2).astype(np.float32)
    want = exe([x, w], {}, 0).fetches[0]
    members = LLVMBackend().export(exe)  # what an artifact stores: code, host, tables
    assert set(members) == {"object.o", "host", "tables.json"}
    assert members["object.o"] == exe.object_code
    # without the tables: lowered again in Python
    relowered = LLVMBackend().load_code(exe.module, "f", exe.object_code, exe.host_key)
    for loaded in (LLVMBackend().load(exe.module, "f", members), relowered):
        assert isinstance(loaded, LLVMExecutable) and "llvm" not in loaded.report.seconds
        np.testing.assert_array_equal(loaded([x, w], {}, 0).fetches[0], want)
    with pytest.raises(ForeignNativeCode, match="another CPU"):
        LLVMBackend().load(exe.module, "f",
                           {**members, "host": b"x86_64|other-cpu|+avx|llvmlite 0"})
    assert exe.host_key == native.host_key()


@pytest.mark.parametrize("change, message", [
    (lambda ms: ms.pop("object.o"), "lacks its member object.o"),
    (lambda ms: ms.update({"host": b"\xff"}), "host key of 'f' is not text"),
    (lambda ms: ms.update({"tables.json": b"{"}), "invalid native tables for 'f'"),
    (lambda ms: ms.update({"notes.txt": b""}), "does not know: notes.txt"),
])
def test_members_it_cannot_use_are_artifact_errors(h, change, message):
    m = lower_entry(h.make_module([("x", F32, ("B", 4))], lambda b, a: b("tanh", a[0])),
                    "f", "llvm")
    members = LLVMBackend().export(LLVMBackend().compile(m, "f"))
    change(members)
    with pytest.raises(ArtifactError, match=message):
        LLVMBackend().load(m, "f", members)


def test_nothing_to_export_for_a_fallback_or_another_backends_executable(h, monkeypatch):
    from tfc.backends.llvm import kernels
    monkeypatch.delitem(kernels.LOWERINGS, "matrix_inverse")
    m = h.make_module([("x", F32, (3, 3))], lambda b, a: b("matrix_inverse", a[0]))
    with pytest.warns(UserWarning, match="runs on the reference backend"):
        fallback = compile_lowered(LLVMBackend(use_cache=False), m, "f")
    assert fallback.fallback_ops and LLVMBackend().export(fallback) == {}
    assert LLVMBackend().export(ReferenceBackend().compile(m, "f")) == {}


def test_feeds_are_checked(h):
    m = h.make_module([("x", F32, ("B", 4)), ("y", F32, ("B",))],
                      lambda b, a: b("add", a[0], b("expand_dims", a[1], axis=1)))
    exe = h.compile_llvm(m)
    with pytest.raises(FeedError, match="dtype"):
        exe([np.ones((2, 4)), np.ones(2, np.float32)], {}, 0)
    with pytest.raises(FeedError, match="expected f32"):
        exe([np.ones((2, 5), np.float32), np.ones(2, np.float32)], {}, 0)
    with pytest.raises(FeedError, match="dim B"):
        exe([np.ones((2, 4), np.float32), np.ones(3, np.float32)], {}, 0)


def test_backend_selection(monkeypatch):
    assert get_backend("llvm").name == "llvm"
    monkeypatch.delenv("TFC_BACKEND", raising=False)
    assert default_backend_name() == "llvm"  # the CPU default
    monkeypatch.setenv("TFC_BACKEND", "reference")
    assert default_backend_name() == "reference" and get_backend().name == "reference"
    monkeypatch.setenv("TFC_BACKEND", "cuda-ish")
    with pytest.raises(TfcError, match="TFC_BACKEND"):
        default_backend_name()


def test_threads_split_large_kernels(h, monkeypatch):
    monkeypatch.setenv("TFC_PARALLEL_MIN", "1")
    m = h.make_module([("x", F32, ("N", 33))],
                      lambda b, a: [b("tanh", a[0]), b("sum", a[0], axes=[1])])
    exe = compile_lowered(LLVMBackend(threads=3), m, "f")
    x = np.random.rand(1001, 33).astype(np.float32)
    got, want = h.run_both(m, [x], exe=exe)
    h.assert_same(got, want, rtol=1e-5)
    assert any(k.extent is not None for k in exe._lowered().calls)


def test_variables_of_wrong_type_are_rejected(h):
    def body(b, a):
        w = b.op("var.read", var="w", result_types=[TensorType(F32, (2,))]).result
        return b("add", a[0], w)

    m = h.make_module([("x", F32, (2,))], body, variables={"w": TensorType(F32, (2,))})
    exe = h.compile_llvm(m)
    from tfc.errors import ExecutionError
    with pytest.raises(ExecutionError, match="@w"):
        exe([np.ones(2, np.float32)], {"w": np.ones(3, np.float32)}, 0)


def test_data_ptr_matches_ctypes():
    # the step reads data pointers from the array object (a fifth of ``.ctypes.data``'s
    # cost): views, read-only, 0-d, empty arrays and subclasses must all agree
    from tfc.backends.llvm.runtime.executable import _data_ptr

    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    ro = a.copy()
    ro.setflags(write=False)
    arrays = [a, a[1:], a[:, 2:], ro, np.array(3.0), np.empty((0, 3)),
              np.ma.masked_array(a), np.asarray(a).view(np.recarray)]
    for x in arrays:
        assert _data_ptr(x) == x.ctypes.data


def test_the_lowering_runs_with_the_cycle_collector_off(mlp, monkeypatch):
    """``paused_gc``: the collector's passes over a compile's live objects found nothing
    and cost up to half of lowering a large model; it is back on afterwards."""
    import gc

    import tfc.backends.llvm.backend as backend_module
    seen = []
    real = backend_module.split_module

    def probe(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)
    monkeypatch.setattr(backend_module, "split_module", probe)
    entry = next(iter(mlp.entries))
    exe = compile_lowered(LLVMBackend(use_cache=False), mlp, entry)
    assert exe.object_code is not None and seen == [False]
    assert gc.isenabled()
