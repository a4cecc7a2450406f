"""Artifacts made with the llvm backend carry object code and its run-time tables: loading
links it without LLVM, and neither runs passes nor lowers the graph until a call needs a
binding the artifact does not have.

The members are the backend's ``export`` under ``native/llvm/<entry>/``; artifacts of the
layout before (``native/0000.o``, host and tables in the manifest's ``native`` section)
still load: most tests run on both (``layout``), the legacy one made by rewriting a saved
artifact as tfc wrote it then (``to_legacy_layout``)."""

import json
import warnings
import zipfile

import numpy as np
import pytest

import tfc
from tfc.backends.llvm import backend as llvm_backend
from tfc.backends.llvm import jit
from tfc.backends.llvm.runtime import native as native_code
from tfc.errors import ArtifactError
from tfc.runtime import Program, load
from tfc.runtime.artifact import (LEGACY_NATIVE_DIGEST, NATIVE_DIGEST, NATIVE_FIELD,
                                  CorruptArtifactWarning)
from tfc.runtime.digests import bytes_digest, json_digest

LAYOUTS = ["current", "legacy"]


def to_legacy_layout(path):
    """Rewrite the artifact ``path`` in the layout tfc wrote before backends exported their
    own members: llvm's object code as ``native/NNNN.o``, its constants as
    ``native/NNNN.const/KKKK.npy``, host and tables in the manifest's ``native`` section,
    digested as ``manifest.json#native`` (checked against an artifact the old code wrote:
    the same members, bytes and manifest, but for the host key's source fingerprint)."""
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    section = manifest.pop(NATIVE_FIELD)
    digests = manifest["sha256"]
    del digests[NATIVE_DIGEST]
    native, objects, hosts = {"host": None, "entries": {}, "tables": {}}, {}, set()
    for i, (entry, info) in enumerate(sorted(section["entries"].items())):
        got = {name: members.pop(info["folder"] + name) for name in info["members"]}
        for name in info["members"]:
            del digests[info["folder"] + name]
        hosts.add(got["host"].decode())
        native["entries"][entry] = f"native/{i:04d}.o"
        objects[f"native/{i:04d}.o"] = got["object.o"]
        if "tables.json" in got:
            table = json.loads(got["tables.json"])
            renamed = [f"native/{i:04d}.const/{k:04d}.npy"
                       for k in range(len(table["constant_files"]))]
            objects.update((new, got[old]) for old, new in zip(table["constant_files"], renamed))
            table["constant_files"] = renamed
            native["tables"][entry] = table
    native["host"] = hosts.pop() if len(hosts) == 1 else None
    manifest["native"] = native
    digests.update({n: bytes_digest(d) for n, d in objects.items()})
    digests[LEGACY_NATIVE_DIGEST] = json_digest(native)
    members["manifest.json"] = (json.dumps(manifest, indent=2) + "\n").encode()
    first = ["manifest.json", "module.tfir", "module.tfcb"]
    with zipfile.ZipFile(path, "w") as zf:
        for name in first:
            zf.writestr(name, members.pop(name))
        for name, data in [*objects.items(), *members.items()]:
            zf.writestr(name, data)


def save(program, path, layout):
    program.save(path, force=True)
    if layout == "legacy":
        to_legacy_layout(path)


def read_manifest(path):
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("manifest.json"))


def native_host(path):
    """The host key the artifact's native code was built for (one for all entries)."""
    m = read_manifest(path)
    if "native" in m:
        return m["native"]["host"]
    with zipfile.ZipFile(path) as zf:
        hosts = {zf.read(info["folder"] + "host").decode()
                 for info in m[NATIVE_FIELD]["entries"].values()}
    assert len(hosts) == 1
    return hosts.pop()


def object_member(path, entry):
    m = read_manifest(path)
    if "native" in m:
        return m["native"]["entries"][entry]
    return m[NATIVE_FIELD]["entries"][entry]["folder"] + "object.o"


def constant_member(path, entry):
    m = read_manifest(path)
    if "native" in m:
        return m["native"]["tables"][entry]["constant_files"][0]
    info = m[NATIVE_FIELD]["entries"][entry]
    return info["folder"] + next(n for n in info["members"] if n.startswith("const/"))


def read_tables(path, entry):
    m = read_manifest(path)
    if "native" in m:
        return m["native"]["tables"][entry]
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read(m[NATIVE_FIELD]["entries"][entry]["folder"] + "tables.json"))


def change_tables(path, entry, change, digest=True):
    """Change ``entry``'s run-time tables with ``change(table)``; with ``digest`` the
    digest that covers them is updated too (a consistent edit, which the deeper checks
    must catch), without it stays the original's (corruption)."""
    m = read_manifest(path)
    if "native" in m:
        rewrite_manifest(path, lambda m: change(m["native"]["tables"][entry]), digest)
        return
    member = m[NATIVE_FIELD]["entries"][entry]["folder"] + "tables.json"
    table = read_tables(path, entry)
    change(table)
    data = json.dumps(table).encode()
    if digest:
        rewrite_manifest(path, lambda m: m["sha256"].update({member: bytes_digest(data)}))
    replace_members(path, {member: data})


def drop_tables(path):
    """The artifact as if its entries had been stored without run-time tables."""
    m = read_manifest(path)
    if "native" in m:
        rewrite_manifest(path, lambda m: m["native"].pop("tables"))
        return

    def keep_code(m):
        for info in m[NATIVE_FIELD]["entries"].values():
            info["members"] = ["host", "object.o"]
    rewrite_manifest(path, keep_code)


def small_program(backend: str) -> Program:
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
        y = tfc.nn.softmax(tfc.tanh(x @ w) * 2.0, name="y")
        tfc.entry("predict", feeds={"x": x}, fetches={"y": y})
        step = w.assign_sub(0.1 * tfc.gradients(tfc.reduce_sum(y * y), w)[0])
        tfc.entry("train", feeds={"x": x}, fetches={"y": y}, targets=[step])
        return Program(g.as_module(), backend=backend)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_object_code_is_saved_and_linked_without_llvm(tmp_path, monkeypatch, layout):
    path = tmp_path / "m.tfc"
    save(small_program("llvm"), path, layout)
    assert native_host(path) == native_code.host_key()
    with zipfile.ZipFile(path) as zf:
        assert all(zf.read(object_member(path, e)) for e in ("predict", "train"))

    def no_llvm(*args, **kwargs):
        raise AssertionError("loading an artifact must not run LLVM")
    monkeypatch.setattr(jit, "compile_ir", no_llvm)
    program = load(path, backend="llvm")
    assert set(program._executables) == {"predict", "train"}
    reference = small_program("reference")
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    for _ in range(3):
        got, want = program.run("train", x=x), reference.run("train", x=x)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(program.variables["w"], reference.variables["w"], rtol=1e-5)


def test_native_members_are_the_backends_export_under_its_name_and_the_entry(tmp_path):
    program = program_with_a_constant()
    program.run("predict", x=X)
    path = tmp_path / "m.tfc"
    program.save(path)
    m = read_manifest(path)
    assert "native" not in m and LEGACY_NATIVE_DIGEST not in m["sha256"]
    section = m[NATIVE_FIELD]
    members = ["const/0000.npy", "host", "object.o", "tables.json"]
    assert section == {"backend": "llvm", "entries": {"predict": {
        "folder": "native/llvm/predict/", "members": members}}}
    with zipfile.ZipFile(path) as zf:
        stored = [n for n in zf.namelist() if n.startswith("native/")]
        assert stored == [f"native/llvm/predict/{n}" for n in members]
        assert all(m["sha256"][n] == bytes_digest(zf.read(n)) for n in stored)
        exported = llvm_backend.LLVMBackend().export(program._executable("predict"))
        assert {f"native/llvm/predict/{n}": d for n, d in exported.items()} == {
            n: zf.read(n) for n in stored}
    assert m["sha256"][NATIVE_DIGEST] == json_digest(section)


def test_entry_names_that_are_no_file_names_get_a_folder_of_their_own(tmp_path):
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        tfc.entry("a/b c", feeds={"x": x}, fetches={"y": tfc.tanh(x)})
        tfc.entry("..", feeds={"x": x}, fetches={"y": tfc.tanh(x) * 2.0})
        tfc.entry("a%2Fb%20c", feeds={"x": x}, fetches={"y": tfc.tanh(x) * 3.0})
        program = Program(g.as_module(), backend="llvm")
    path = tmp_path / "m.tfc"
    program.save(path)
    folders = {e: i["folder"] for e, i in read_manifest(path)[NATIVE_FIELD]["entries"].items()}
    assert folders == {"a/b c": "native/llvm/a%2Fb%20c/", "..": "native/llvm/%2E./",
                       "a%2Fb%20c": "native/llvm/a%252Fb%2520c/"}
    loaded = load(path, backend="llvm")
    assert set(loaded._executables) == set(folders)
    for k, entry in enumerate(["a/b c", "..", "a%2Fb%20c"]):
        np.testing.assert_allclose(loaded.run(entry, x=X)["y"], np.tanh(X) * (k + 1),
                                   rtol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("corrupt", [False, True])
def test_object_code_for_another_cpu_is_recompiled_on_first_use(tmp_path, monkeypatch,
                                                                 layout, corrupt):
    """Silently, and before the code is even checked, as a cache miss: code for another
    CPU is never used, whatever state it is in."""
    path = tmp_path / "m.tfc"
    save(small_program("llvm"), path, layout)
    if corrupt:
        member = object_member(path, "predict")
        replace_members(path, {member: b"not object code"})
    monkeypatch.setattr(native_code, "host_key", lambda: "other|cpu|features")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for native in ("use", "strict"):
            program = load(path, backend="llvm", native=native)
            assert program._executables == {}
            assert program.run("predict", x=np.zeros((1, 4), np.float32))["y"].shape == (1, 3)


def test_reference_artifacts_carry_no_object_code(tmp_path):
    path = tmp_path / "m.tfc"
    small_program("reference").save(path)
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        assert "native" not in manifest and NATIVE_FIELD not in manifest
        assert not [n for n in zf.namelist() if n.startswith("native/")]


def no_lowering(*args, **kwargs):
    raise AssertionError("loading with stored tables must not lower the graph")


def no_linking(*args, **kwargs):
    raise AssertionError("this object code must not be linked")


def rewrite_manifest(path, change, digest=True):
    """Change the manifest with ``change(m)``; with ``digest`` the manifest's digest of
    its native section is that of the changed one (a consistent edit, which the deeper
    checks must catch), without it stays the original's."""
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    change(manifest)
    if digest and "native" in manifest:
        manifest["sha256"][LEGACY_NATIVE_DIGEST] = json_digest(manifest["native"])
    if digest and NATIVE_FIELD in manifest:
        manifest["sha256"][NATIVE_DIGEST] = json_digest(manifest[NATIVE_FIELD])
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_stored_bindings_run_without_lowering_and_new_shapes_lower_once(tmp_path,
                                                                        monkeypatch, layout):
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    trained = small_program("llvm")
    trained.run("train", x=x)
    trained.run("predict", x=x)
    path = tmp_path / "m.tfc"
    save(trained, path, layout)
    tables = read_tables(path, "train")
    assert [b["feeds"] for b in tables["bindings"]] == [[[5, 4]]]
    assert tables["updates"] == ["w"]

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


@pytest.mark.parametrize("layout", LAYOUTS)
def test_artifacts_without_tables_still_load(tmp_path, monkeypatch, layout):
    x = np.ones((2, 4), np.float32)
    program = small_program("llvm")
    want = program.run("predict", x=x)["y"]
    path = tmp_path / "m.tfc"
    save(program, path, layout)
    drop_tables(path)
    monkeypatch.setattr(jit, "compile_ir", no_linking)  # lowered again, but no LLVM
    loaded = load(path, backend="llvm")
    assert set(loaded._executables) == {"predict", "train"}
    np.testing.assert_allclose(loaded.run("predict", x=x)["y"], want, rtol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("change, message", [
    (lambda t: t.update(n_ptrs=2), "do not fit"),
    (lambda t: t.update(step_slot="x"), "step_slot"),
    (lambda t: t["bindings"][0].update(feeds=[[9, 9]]), "does not fit its graph"),
    (lambda t: t["bindings"][0].update(params=[1]), "does not fit"),
    (lambda t: t.update(errors=[3]), "errors should be a list of strings"),
    (lambda t: t.update(constant_files=["native/nope.npy"]), "no member native/nope.npy"),
])
def test_bad_tables_are_artifact_errors(tmp_path, change, message, layout):
    program = small_program("llvm")
    program.run("predict", x=np.ones((2, 4), np.float32))
    path = tmp_path / "m.tfc"
    save(program, path, layout)
    change_tables(path, "predict", change)
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


X = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("change", [
    lambda code: code[:64] + bytes(b ^ 0xFF for b in code[64:96]) + code[96:],  # NaNs before
    lambda code: code[:len(code) // 2],  # SIGSEGV before
    lambda code: b"",
    lambda code: None,  # the member is gone
], ids=["flipped", "truncated", "empty", "missing"])
def test_corrupt_object_code_is_compiled_again_with_a_warning(tmp_path, change, monkeypatch,
                                                              layout):
    path = tmp_path / "m.tfc"
    save(small_program("llvm"), path, layout)
    member = object_member(path, "predict")
    with zipfile.ZipFile(path) as zf:
        replace_members(path, {member: change(zf.read(member))})
    linked = []
    real_link = llvm_backend.LLVMBackend.load_code
    monkeypatch.setattr(llvm_backend.LLVMBackend, "load_code",
                        lambda self, m, entry, *a, **k: linked.append(entry) or
                        real_link(self, m, entry, *a, **k))
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


@pytest.mark.parametrize("layout", LAYOUTS)
def test_corrupt_native_constants_or_tables_are_compiled_again(tmp_path, layout):
    program = program_with_a_constant()
    want = program.run("predict", x=X)["y"]
    path = tmp_path / "m.tfc"
    save(program, path, layout)
    constant = constant_member(path, "predict")  # the tables' constant
    with zipfile.ZipFile(path) as zf:
        data = zf.read(constant)
    replace_members(path, {constant: data[:-4] + b"\xff\xff\xff\x7f"})  # a NaN at the end
    with pytest.warns(CorruptArtifactWarning, match=f"m.tfc: {constant} is corrupt"):
        got = load(path, backend="llvm").run("predict", x=X)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    save(program, path, layout)
    # a hand-edited table (the digest that covers it no longer fits)
    change_tables(path, "predict", lambda t: t.update(n_ptrs=2), digest=False)
    if layout == "legacy":
        message = r"m.tfc: manifest.json's 'native' tables do not match their SHA-256"
        what = "every entry"
    else:
        message = r"m.tfc: native/llvm/predict/tables.json is corrupt"
        what = "entry 'predict'"
    with pytest.warns(CorruptArtifactWarning, match=f"{message}.*{what}"):
        got = load(path, backend="llvm").run("predict", x=X)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ArtifactError, match=message):
        load(path, backend="llvm", native="strict")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_hand_edited_native_section_is_never_trusted(tmp_path, monkeypatch, layout):
    """The manifest's section says which members are whose: one edited without its digest
    (here: the entries swap their code) sends every entry back to the IR."""
    path = tmp_path / "m.tfc"
    save(small_program("llvm"), path, layout)

    def swap(m):
        entries = (m["native"] if layout == "legacy" else m[NATIVE_FIELD])["entries"]
        entries["predict"], entries["train"] = entries["train"], entries["predict"]
    rewrite_manifest(path, swap, digest=False)
    monkeypatch.setattr(llvm_backend.LLVMBackend, "load_code", no_linking)
    field = "native" if layout == "legacy" else NATIVE_FIELD
    with pytest.warns(CorruptArtifactWarning, match=f"manifest.json's '{field}' tables do not "
                                                    f"match their SHA-256.*every entry"):
        program = load(path, backend="llvm")
    monkeypatch.undo()
    want = small_program("reference").run("predict", x=X)["y"]
    np.testing.assert_allclose(program.run("predict", x=X)["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_recompile_never_links_stored_code(tmp_path, monkeypatch, layout):
    path = tmp_path / "m.tfc"
    save(small_program("llvm"), path, layout)

    def no_link(*args, **kwargs):
        raise AssertionError("native='recompile' must not link stored object code")
    monkeypatch.setattr(llvm_backend.LLVMBackend, "load", no_link)
    program = load(path, backend="llvm", native="recompile")
    want = small_program("reference").run("predict", x=X)["y"]
    np.testing.assert_allclose(program.run("predict", x=X)["y"], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(tfc.errors.TfcError, match="native='sometimes': expected one of"):
        load(path, native="sometimes")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_artifacts_without_digests_load_but_their_code_is_not_linked(tmp_path, monkeypatch,
                                                                     layout):
    """Artifacts of older tfc versions (format version 1 too) record no digests: they
    load, but their object code cannot be checked, so it is compiled again."""
    path = tmp_path / "m.tfc"
    save(small_program("llvm"), path, layout)
    rewrite_manifest(path, lambda m: m.pop("sha256"), digest=False)
    monkeypatch.setattr(llvm_backend.LLVMBackend, "load_code", no_linking)
    with pytest.warns(CorruptArtifactWarning, match="m.tfc records no SHA-256 digests"):
        program = load(path, backend="llvm")
    monkeypatch.undo()
    want = small_program("reference").run("predict", x=X)["y"]
    np.testing.assert_allclose(program.run("predict", x=X)["y"], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ArtifactError, match="records no SHA-256 digests"):
        load(path, backend="llvm", native="strict")
