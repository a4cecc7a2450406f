"""Identical kernels compiled once, and per-kernel object code cached across entries,
models and processes (``kernel_units``, ``jit.compile_split``): the numbers stay the
reference backend's, no code is made per entry besides its kernels (the schedule is a
table: ``step_table``), and cached code is reused only for the same kernel on the same
CPU, never when damaged."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.backends.llvm import LLVMBackend, jit, step_table
from tfc.backends.llvm.kernel_units import _numbered_metadata
from tfc.backends.llvm.runtime import native
from tfc.backends.reference import ReferenceBackend
from tfc.testing import compile_lowered

WIDTH, BATCH = 8, 4


def mlp(layers: int, edited: int | None = None, width: int = WIDTH):
    """An MLP training step (ReLU, softmax cross-entropy, SGD) and its variables' values;
    ``edited``: that layer's activation is ``relu(h) * 1.5`` (a one-layer edit)."""
    rng = np.random.default_rng(0)
    values = {}
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [BATCH, width], name="x")
        y = tfc.placeholder(tfc.int32, [BATCH], name="y")
        h = x
        for i in range(layers):
            values[f"W{i}"] = (rng.standard_normal((width, width)) * 0.5).astype(np.float32)
            values[f"b{i}"] = rng.standard_normal(width).astype(np.float32) * 0.1
            w = tfc.Variable(values[f"W{i}"], name=f"W{i}")
            b = tfc.Variable(values[f"b{i}"], name=f"b{i}")
            h = tfc.matmul(h, w) + b
            if i < layers - 1:
                h = tfc.nn.relu(h) * 1.5 if i == edited else tfc.nn.relu(h)
        loss = tfc.reduce_mean(
            tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss},
                  targets=[train])
    return g.as_module(), values


def feeds(width: int = WIDTH):
    rng = np.random.default_rng(1)
    return [rng.standard_normal((BATCH, width)).astype(np.float32),
            rng.integers(0, width, BATCH).astype(np.int32)]


def check_against_reference(module, values, exe) -> None:
    want = ReferenceBackend().compile(module, "train_step")(feeds(), dict(values), 0)
    got = exe(feeds(), dict(values), 0)
    np.testing.assert_allclose(got.fetches[0], want.fetches[0], rtol=1e-5, atol=1e-6)
    assert set(got.updates) == set(want.updates) == set(values)
    for name, arr in want.updates.items():
        np.testing.assert_allclose(got.updates[name], arr, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def llvm_runs(monkeypatch):
    """The optimization level of every module LLVM optimizes, in order."""
    speeds: list[int] = []
    optimize = jit.optimize

    def counting(text, tm=None, speed=3):
        speeds.append(speed)
        return optimize(text, tm, speed)
    monkeypatch.setattr(jit, "optimize", counting)
    return speeds


def test_identical_layers_compile_as_one_kernel(cache, llvm_runs, monkeypatch):
    module, values = mlp(6)
    texts: list[str] = []
    split = jit.compile_split

    def keep(data, units, runner, use_cache=True):
        texts[:] = [data, runner, *units]
        return split(data, units, runner, use_cache)
    monkeypatch.setattr(jit, "compile_split", keep)
    exe = compile_lowered(LLVMBackend(use_cache=False), module, "train_step")
    data, runner, units = texts[0], texts[1], texts[2:]
    # no code per entry but its kernels: the global variables, the fixed runner of the
    # step table (the same text for every entry), and each unit its kernel with its
    # wrappers and helpers
    assert "define" not in data
    assert runner == step_table.runner(*native.triple_and_layout())
    assert all("_whole\"(" in u for u in units)
    report = exe.report
    # 6 layers: every hidden layer's kernels are the same up to names
    assert 0 < report.distinct_kernels < report.kernels
    assert f"{report.kernels} kernels ({report.distinct_kernels} distinct" in str(report)
    # one O3 run per distinct kernel, then the global variables (no code) and the runner
    assert llvm_runs == [3] * report.distinct_kernels + [jit.GLUE_SPEED, 3]
    check_against_reference(module, values, exe)
    deeper = compile_lowered(LLVMBackend(use_cache=False), mlp(12)[0], "train_step").report
    assert deeper.kernels > report.kernels
    assert deeper.distinct_kernels == report.distinct_kernels  # depth adds no new kernel


def test_kernels_of_other_shapes_stay_apart(cache):
    narrow = compile_lowered(LLVMBackend(use_cache=False), mlp(4)[0], "train_step").report
    module, values = mlp(4, width=16)
    wide = compile_lowered(LLVMBackend(use_cache=False), module, "train_step")
    assert wide.report.distinct_kernels == narrow.distinct_kernels
    assert compile_lowered(LLVMBackend(), mlp(4)[0], "train_step").report.kernels_cached == 0
    # the 16-wide model shares only kernels that do not depend on the width (the mean of
    # the batch's losses, say): most of its kernels are not the 8-wide ones
    reused = compile_lowered(LLVMBackend(), module, "train_step").report.kernels_cached
    assert reused < wide.report.distinct_kernels // 2
    want = ReferenceBackend().compile(module, "train_step")(feeds(16), dict(values), 0)
    got = wide(feeds(16), dict(values), 0)
    np.testing.assert_allclose(got.fetches[0], want.fetches[0], rtol=1e-5, atol=1e-6)


def test_a_one_layer_edit_compiles_only_the_new_kernels(cache, llvm_runs):
    first = compile_lowered(LLVMBackend(), mlp(8)[0], "train_step").report
    assert first.kernels_cached == 0
    compiled_cold = len(llvm_runs)
    llvm_runs.clear()
    module, values = mlp(8, edited=3)
    exe = compile_lowered(LLVMBackend(), module, "train_step")
    report = exe.report
    new_units = report.distinct_kernels - report.kernels_cached
    assert report.kernels_cached > 0 and 0 < new_units <= 3
    assert llvm_runs == [3] * new_units  # the new kernels alone
    # (the global variables' module and the runner are the same texts: cached)
    assert len(llvm_runs) < compiled_cold
    check_against_reference(module, values, exe)


def test_cached_kernels_are_keyed_by_the_cpu(cache, monkeypatch, llvm_runs):
    module, values = mlp(3)
    compile_lowered(LLVMBackend(), module, "train_step")
    key = native.host_key()
    other = key.replace(native._STATE["cpu"], "some-other-cpu", 1)  # type: ignore[arg-type]
    assert other != key
    monkeypatch.setattr(native, "host_key", lambda: other)
    llvm_runs.clear()
    exe = compile_lowered(LLVMBackend(), module, "train_step")
    assert exe.report.kernels_cached == 0
    assert len(llvm_runs) == exe.report.distinct_kernels + 2  # everything compiled again


def test_damaged_cached_kernels_are_compiled_again(cache, llvm_runs):
    module, values = mlp(3)
    compile_lowered(LLVMBackend(), module, "train_step")
    files = sorted((cache / "llvm").glob("*.o"))
    assert files
    for path in files:
        data = bytearray(path.read_bytes())
        data[-20] ^= 0xFF  # a flipped bit in the code
        path.write_bytes(bytes(data))
    for path in (cache / "entries").glob("*.zip"):  # the entry cache sits above them
        path.unlink()
    llvm_runs.clear()
    exe = compile_lowered(LLVMBackend(), module, "train_step")
    assert exe.report.kernels_cached == 0 and not exe.report.cached
    assert len(llvm_runs) == exe.report.distinct_kernels + 2
    check_against_reference(module, values, exe)


def test_a_bundle_cut_short_is_an_error_not_a_crash():
    blob = native.bundle([b"abc", b"defgh"])
    assert native.unbundle(blob) == [b"abc", b"defgh"]
    assert native.unbundle(b"\x7fELF...") == [b"\x7fELF..."]  # one plain object
    for cut in (len(blob) - 1, len(blob) - 6, 20):
        with pytest.raises(tfc.errors.ArtifactError, match="truncated"):
            native.unbundle(blob[:cut])


def test_metadata_numbers_do_not_tell_kernels_apart_but_their_contents_do():
    body = 'br label %"a", !llvm.loop !{}'
    four = {"0": '!0 = !{ !"llvm.loop.interleave.count", i32 4 }', "1": "!1 = !{ !1, !0 }"}
    later = {"7": '!7 = !{ !"llvm.loop.interleave.count", i32 4 }', "9": "!9 = !{ !9, !7 }"}
    two = {"0": '!0 = !{ !"llvm.loop.interleave.count", i32 2 }', "1": "!1 = !{ !1, !0 }"}
    a = _numbered_metadata(body.format(1), four)
    assert a == _numbered_metadata(body.format(9), later)
    assert a != _numbered_metadata(body.format(1), two)
    assert "i32 4" in a and "!0 = !{ !0, !1 }" in a


def test_dedup_compares_each_kernel_function_once(monkeypatch):
    """A kernel function called from every layer (``kernel_memo``) is compared with the
    others once, not once per call site: the canonical texts made are at most the
    functions, however many layers call them."""
    from tfc.backends.llvm import kernel_units
    from tfc.pipeline import lower_entry
    made: list[str] = []
    real = kernel_units._numbered_metadata

    def counting(body, defs):
        made.append(body)
        return real(body, defs)
    backend = LLVMBackend(use_cache=False)
    module = lower_entry(mlp(12)[0], "train_step", "llvm")
    monkeypatch.setattr(kernel_units, "_numbered_metadata", counting)
    _, _, gc, report = backend._lower(module, "train_step")
    monkeypatch.undo()
    functions = len({k.fn.name for k in gc.calls})
    assert report.kernels > 3 * functions  # (the layers share their kernels)
    assert len(made) <= sum(1 for f in gc.comp.module.functions if f.blocks)
