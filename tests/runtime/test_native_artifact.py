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
from tfc.backends.llvm.runtime import native as native_code
from tfc.errors import ArtifactError
from tfc.runtime import Program, load
from tfc.runtime.artifact import NATIVE_DIGEST, CorruptArtifactWarning
from tfc.runtime.digests import json_digest


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
        assert native["host"] == native_code.host_key()
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
    monkeypatch.setattr(native_code, "host_key", lambda: "other|cpu|features")
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


def rewrite_manifest(path, change, digest=True):
    """Change the manifest with ``change(m)``; with ``digest`` the manifest's digest of
    its native section is that of the changed one (a consistent edit, which the deeper
    checks must catch), without it stays the original's."""
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    change(manifest)
    if digest and "native" in manifest:
        manifest["sha256"][NATIVE_DIGEST] = json_digest(manifest["native"])
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


# ---- corrupt object code: never linked; compiled again from the IR, or refused ---------

def replace_members(path, members):
    """Rewrite members (bytes, or None to drop one) with valid zip CRCs, keeping the
    manifest: its digests are those of the original members (corruption)."""
    with zipfile.ZipFile(path) as zf:
        out = {n: zf.read(n) for n in zf.namelist()}
    out.update(members)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in out.items():
            if data is not None:
                zf.writestr(name, data)


def native_member(path, entry, constant=False):
    with zipfile.ZipFile(path) as zf:
        native = json.loads(zf.read("manifest.json"))["native"]
    if constant:
        return native["tables"][entry]["constant_files"][0]
    return native["entries"][entry]


X = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)


@pytest.mark.parametrize("change", [
    lambda code: code[:64] + bytes(b ^ 0xFF for b in code[64:96]) + code[96:],  # NaNs before
    lambda code: code[:len(code) // 2],  # SIGSEGV before
    lambda code: b"",
    lambda code: None,  # the member is gone
], ids=["flipped", "truncated", "empty", "missing"])
def test_corrupt_object_code_is_compiled_again_with_a_warning(tmp_path, change, monkeypatch):
    path = tmp_path / "m.tfc"
    small_program("llvm").save(path)
    member = native_member(path, "predict")
    with zipfile.ZipFile(path) as zf:
        replace_members(path, {member: change(zf.read(member))})
    linked = []
    real_load = llvm_backend.LLVMBackend.load
    monkeypatch.setattr(llvm_backend.LLVMBackend, "load",
                        lambda self, m, entry, *a, **k: linked.append(entry) or
                        real_load(self, m, entry, *a, **k))
    with pytest.warns(CorruptArtifactWarning, match=rf"m.tfc(: {member} is corrupt| has no "
                      rf"member {member}).*compiling entry 'predict' again from the IR"):
        program = load(path, backend="llvm")
    assert linked == ["train"]  # the intact entry is still linked
    want = small_program("reference").run("predict", x=X)["y"]
    np.testing.assert_allclose(program.run("predict", x=X)["y"], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ArtifactError, match=rf"m.tfc(: {member} is corrupt| has no member "
                                            rf"{member}).*refusing to link its object code"):
        load(path, backend="llvm", native="strict")


def program_with_a_constant() -> Program:
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        c = tfc.constant(np.linspace(0, 1, 400, dtype=np.float32).reshape(4, 100))
        tfc.entry("predict", feeds={"x": x}, fetches={"y": tfc.tanh(x @ c)})
        return Program(g.as_module(), backend="llvm")


def test_corrupt_native_constants_or_tables_are_compiled_again(tmp_path):
    program = program_with_a_constant()
    want = program.run("predict", x=X)["y"]
    path = tmp_path / "m.tfc"
    program.save(path)
    constant = native_member(path, "predict", constant=True)  # the tables' constant
    with zipfile.ZipFile(path) as zf:
        data = zf.read(constant)
    replace_members(path, {constant: data[:-4] + b"\xff\xff\xff\x7f"})  # a NaN at the end
    with pytest.warns(CorruptArtifactWarning, match=f"m.tfc: {constant} is corrupt"):
        got = load(path, backend="llvm").run("predict", x=X)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    program.save(path, force=True)  # this test replaced the file it saved
    # a hand-edited table (the digest of the manifest's native section no longer fits)
    rewrite_manifest(path, lambda m: m["native"]["tables"]["predict"].update(n_ptrs=2),
                     digest=False)
    with pytest.warns(CorruptArtifactWarning, match=r"m.tfc: manifest.json's 'native' tables "
                                                    r"do not match their SHA-256.*every entry"):
        got = load(path, backend="llvm").run("predict", x=X)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ArtifactError, match="'native' tables do not match"):
        load(path, backend="llvm", native="strict")


def test_recompile_never_links_stored_code(tmp_path, monkeypatch):
    path = tmp_path / "m.tfc"
    small_program("llvm").save(path)

    def no_link(*args, **kwargs):
        raise AssertionError("native='recompile' must not link stored object code")
    monkeypatch.setattr(llvm_backend.LLVMBackend, "load", no_link)
    program = load(path, backend="llvm", native="recompile")
    want = small_program("reference").run("predict", x=X)["y"]
    np.testing.assert_allclose(program.run("predict", x=X)["y"], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(tfc.errors.TfcError, match="native='sometimes': expected one of"):
        load(path, native="sometimes")


def test_artifacts_without_digests_load_but_their_code_is_not_linked(tmp_path, monkeypatch):
    """Artifacts of older tfc versions (format version 1 too) record no digests: they
    load, but their object code cannot be checked, so it is compiled again."""
    path = tmp_path / "m.tfc"
    small_program("llvm").save(path)
    rewrite_manifest(path, lambda m: m.pop("sha256"), digest=False)
    monkeypatch.setattr(llvm_backend.LLVMBackend, "load", no_lowering)
    with pytest.warns(CorruptArtifactWarning, match="m.tfc records no SHA-256 digests"):
        program = load(path, backend="llvm")
    want = small_program("reference").run("predict", x=X)["y"]
    np.testing.assert_allclose(program.run("predict", x=X)["y"], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ArtifactError, match="records no SHA-256 digests"):
        load(path, backend="llvm", native="strict")
