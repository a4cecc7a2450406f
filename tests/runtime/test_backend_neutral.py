"""The runtime knows backends only through ``tfc.backends.base.Backend``: it imports no
backend and tests no backend's name, so a new backend needs no edit under
``tfc/runtime/``. A toy backend registered from outside tfc goes through an artifact's
save and load like llvm does: its members stored under ``native/toy/<entry>/``, checked
against their digests, handed back to its ``load``."""

import ast
import json
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tfc
from tfc.backends import base
from tfc.runtime import Program, load
from tfc.runtime.artifact import NATIVE_FIELD, CorruptArtifactWarning
from tfc.runtime.digests import bytes_digest

RUNTIME = Path(tfc.__file__).resolve().parent / "runtime"
BACKEND_PACKAGES = ("tfc.backends.llvm", "tfc.backends.reference")


def _backend_specific(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each import of a backend package and each comparison with a
    backend's name, anywhere in ``tree`` (inside functions too)."""
    found = []
    names = set(base.BACKENDS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
            if node.module == "tfc.backends":
                mods += [f"tfc.backends.{a.name}" for a in node.names]
        else:
            mods = []
        for mod in mods:
            if any(mod == p or mod.startswith(p + ".") for p in BACKEND_PACKAGES):
                found.append((node.lineno, f"imports {mod}"))
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                for c in ast.walk(side):
                    if isinstance(c, ast.Constant) and c.value in names:
                        found.append((node.lineno, f"compares with the backend name "
                                                   f"{c.value!r}"))
    return found


def test_the_runtime_neither_imports_a_backend_nor_tests_its_name():
    files = sorted(RUNTIME.rglob("*.py"))
    assert len(files) > 10
    problems = [f"{f.relative_to(RUNTIME.parent.parent)}:{line}: {what}"
                for f in files for line, what in _backend_specific(ast.parse(f.read_text()))]
    assert problems == []


def test_the_scan_finds_what_it_forbids():
    bad = ast.parse(textwrap.dedent("""
        import tfc.backends.llvm.jit
        from tfc.backends import reference
        def save(backend, name):
            from tfc.backends.llvm.backend import NativeMeta
            if backend.name == "llvm" or name in ("reference", "x"):
                pass
    """))
    assert [line for line, _ in _backend_specific(bad)] == [2, 3, 5, 6, 6]
    assert _backend_specific(ast.parse("from tfc.backends.base import get_backend\n"
                                       "if a.name == b.name: pass\n")) == []


# ---- a backend the runtime has never heard of ---------------------------------------------

TOY = '''
import hashlib
from tfc.backends.base import ForeignNativeCode
from tfc.backends.reference import ReferenceBackend
from tfc.errors import ArtifactError
from tfc.ir.printer import print_module
from tfc.ir.core import Module

LOADED = []  # (entry, members) per load


class ToyExecutable:
    def __init__(self, module, entry, code):
        self.code = code
        self.run = ReferenceBackend().compile(module, entry)

    def __call__(self, feeds, variables, step):
        return self.run(feeds, variables, step)


def code_of(module, entry):
    text = print_module(Module({entry: module.graphs[entry]}, module.variables))
    return hashlib.sha256(text.encode()).digest()


class ToyBackend:
    name = "toy"
    pipeline = ""
    host = b"this machine"

    def compile(self, module, entry):
        return ToyExecutable(module, entry, code_of(module, entry))

    def export(self, exe):
        return {"code.bin": exe.code, "sub/host.txt": self.host}

    def load(self, module, entry, members):
        if members["sub/host.txt"] != self.host:
            raise ForeignNativeCode("made elsewhere")
        LOADED.append((entry, dict(members)))
        if members["code.bin"] != code_of(module, entry):
            raise ArtifactError(f"the code of '{entry}' is not its graph's")
        return ToyExecutable(module, entry, members["code.bin"])
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_backend.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(base.BACKENDS, "toy", "toy_backend:ToyBackend")
    import toy_backend
    yield toy_backend
    del sys.modules["toy_backend"]


def toy_program() -> Program:
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.linspace(-1, 1, 4, dtype=np.float32), name="w")
        tfc.entry("predict", feeds={"x": x}, fetches={"y": tfc.tanh(x * w)})
        tfc.entry("train", feeds={"x": x}, fetches={"y": tfc.reduce_sum(x)},
                  targets=[w.assign_add(tfc.ones([4]))])
        return Program(g.as_module(), backend="toy")


X = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)


def test_a_new_backends_members_are_stored_and_handed_back(tmp_path, toy):
    program = toy_program()
    program.run("train", x=X)
    path = tmp_path / "m.tfc"
    program.save(path)
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        stored = {n: zf.read(n) for n in zf.namelist() if n.startswith("native/")}
    assert manifest["backend"] == "toy"
    assert manifest[NATIVE_FIELD]["entries"]["predict"] == {
        "folder": "native/toy/predict/", "members": ["code.bin", "sub/host.txt"]}
    assert set(stored) == {f"native/toy/{e}/{n}" for e in ("predict", "train")
                           for n in ("code.bin", "sub/host.txt")}
    assert all(manifest["sha256"][n] == bytes_digest(d) for n, d in stored.items())

    loaded = load(path, backend="toy")
    assert sorted(e for e, _ in toy.LOADED) == ["predict", "train"]
    for entry, members in toy.LOADED:
        assert members == {"code.bin": stored[f"native/toy/{entry}/code.bin"],
                           "sub/host.txt": b"this machine"}
    assert set(loaded._executables) == {"predict", "train"}
    np.testing.assert_allclose(loaded.run("predict", x=X)["y"],
                               program.run("predict", x=X)["y"], rtol=1e-6)
    toy.LOADED.clear()
    load(path, backend="reference")  # members of another backend: not its business
    assert toy.LOADED == []


def test_a_new_backends_corrupt_or_foreign_members(tmp_path, toy, monkeypatch):
    path = tmp_path / "m.tfc"
    toy_program().save(path)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members["native/toy/predict/code.bin"] = b"flipped"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.warns(CorruptArtifactWarning, match="native/toy/predict/code.bin is corrupt"
                                                    ".*compiling entry 'predict' again"):
        loaded = load(path, backend="toy")
    assert list(loaded._executables) == ["train"]
    assert loaded.run("predict", x=X)["y"].shape == (2, 4)

    monkeypatch.setattr(toy.ToyBackend, "host", b"another machine")
    assert load(path, backend="toy", native="strict")._executables == {}  # compiled again
