"""Artifacts made with the llvm backend carry object code and its run-time tables: loading
links it without LLVM, and neither runs passes nor lowers the graph until a call needs a
binding the artifact does not have."""

import json
import zipfile

import numpy as np
import pytest

import tfc
from tfc.backends.llvm import backend as llvm_backend
from tfc.backends.llvm import jit
from tfc.errors import ArtifactError
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


def no_lowering(*args, **kwargs):
    raise AssertionError("loading with stored tables must not lower the graph")


def rewrite_manifest(path, change):
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    change(manifest)
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def test_stored_bindings_run_without_lowering_and_new_shapes_lower_once(tmp_path,
                                                                        monkeypatch):
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    trained = small_program("llvm")
    trained.run("train", x=x)
    trained.run("predict", x=x)
    path = tmp_path / "m.tfc"
    trained.save(path)
    with zipfile.ZipFile(path) as zf:
        tables = json.loads(zf.read("manifest.json"))["native"]["tables"]
    assert [b["feeds"] for b in tables["train"]["bindings"]] == [[[5, 4]]]
    assert tables["train"]["updates"] == ["w"]

    monkeypatch.setattr(llvm_backend.LLVMBackend, "_lower", no_lowering)
    program = load(path, backend="llvm")
    reference = small_program("reference")
    reference.set_variable("w", trained.variables["w"])
    got, want = program.run("train", x=x), reference.run("train", x=x)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(program.variables["w"], reference.variables["w"], rtol=1e-5)

    monkeypatch.undo()  # a batch size the artifact has not seen: lowered now, once
    x3 = x[:3]
    got, want = program.run("train", x=x3), reference.run("train", x=x3)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(program.variables["w"], reference.variables["w"], rtol=1e-5)


def test_artifacts_without_tables_still_load(tmp_path):
    x = np.ones((2, 4), np.float32)
    program = small_program("llvm")
    want = program.run("predict", x=x)["y"]
    path = tmp_path / "m.tfc"
    program.save(path)
    rewrite_manifest(path, lambda m: m["native"].pop("tables"))
    np.testing.assert_allclose(load(path, backend="llvm").run("predict", x=x)["y"], want,
                               rtol=1e-6)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.update(n_ptrs=2), "do not fit"),
    (lambda t: t.update(step_slot="x"), "step_slot"),
    (lambda t: t["bindings"][0].update(feeds=[[9, 9]]), "does not fit its graph"),
    (lambda t: t["bindings"][0].update(params=[1]), "does not fit"),
    (lambda t: t.update(errors=[3]), "errors should be a list of strings"),
    (lambda t: t.update(constant_files=["native/nope.npy"]), "no member native/nope.npy"),
])
def test_bad_tables_are_artifact_errors(tmp_path, change, message):
    program = small_program("llvm")
    program.run("predict", x=np.ones((2, 4), np.float32))
    path = tmp_path / "m.tfc"
    program.save(path)
    rewrite_manifest(path, lambda m: change(m["native"]["tables"]["predict"]))
    with pytest.raises(ArtifactError, match=message):
        load(path, backend="llvm", native="strict")
