"""Artifacts made with the llvm backend carry object code: loading links it, no LLVM."""

import json
import zipfile

import numpy as np

import tfc
from tfc.backends.llvm import jit
from tfc.runtime import Program, load


def small_program(backend: str) -> Program:
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
        y = tfc.nn.softmax(tfc.tanh(x @ w) * 2.0, name="y")
        tfc.entry("predict", feeds={"x": x}, fetches={"y": y})
        step = w.assign_sub(0.1 * tfc.gradients(tfc.reduce_sum(y * y), w)[0])
        tfc.entry("train", feeds={"x": x}, fetches={"y": y}, targets=[step])
        return Program(g.as_module(), backend=backend)


def test_object_code_is_saved_and_linked_without_llvm(tmp_path, monkeypatch):
    path = tmp_path / "m.tfc"
    small_program("llvm").save(path)
    with zipfile.ZipFile(path) as zf:
        native = json.loads(zf.read("manifest.json"))["native"]
        assert native["host"] == jit.host_key()
        assert set(native["entries"]) == {"predict", "train"}
        assert all(zf.read(m) for m in native["entries"].values())

    def no_llvm(*args, **kwargs):
        raise AssertionError("loading an artifact must not run LLVM")
    monkeypatch.setattr(jit, "compile_ir", no_llvm)
    program = load(path, backend="llvm")
    reference = small_program("reference")
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    for _ in range(3):
        got, want = program.run("train", x=x), reference.run("train", x=x)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(program.variables["w"], reference.variables["w"], rtol=1e-5)


def test_object_code_for_another_cpu_is_recompiled_on_first_use(tmp_path, monkeypatch):
    path = tmp_path / "m.tfc"
    small_program("llvm").save(path)
    monkeypatch.setattr(jit, "host_key", lambda: "other|cpu|features")
    program = load(path, backend="llvm")
    assert program.run("predict", x=np.zeros((1, 4), np.float32))["y"].shape == (1, 3)


def test_reference_artifacts_carry_no_object_code(tmp_path):
    path = tmp_path / "m.tfc"
    small_program("reference").save(path)
    with zipfile.ZipFile(path) as zf:
        assert "native" not in json.loads(zf.read("manifest.json"))
        assert not [n for n in zf.namelist() if n.startswith("native/")]
