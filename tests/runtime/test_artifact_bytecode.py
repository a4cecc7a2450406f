"""The artifact's IR bytecode member: what loading reads (no lark), with the text kept for
people and for artifacts written before the bytecode existed."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tfc.errors import ArtifactError
from tfc.ir.bytecode import module_from_bytes, module_to_bytes
from tfc.ir.parser import parse_module
from tfc.ir.printer import print_module
from tfc.runtime import Program, load

MODEL = """\
var @layer/w : f32[3]
var @count : i64[] {device="/cpu:0", trainable=false}

graph @__init__() -> () {
  %0 = constant dense<f32[3]: 1.0, 2.0, 3.0> : f32[3]
  var.assign @layer/w, %0
  %1 = constant dense<i64[]: 0> : i64[]
  var.assign @count, %1
  return
}

graph @predict(%x: f32[B,3]) -> (y: f32[B,3]) {
  %0 = var.read @layer/w : f32[3]                     # model.py:4
  %1 = mul %x, %0 : f32[B,3]                          # model.py:5
  return %1
}

graph @train(%scale: f32[]) -> (count: i64[]) {
  %0 = var.read @layer/w : f32[3]
  %1 = mul %0, %scale : f32[3]
  var.assign @layer/w, %1
  %2 = constant dense<i64[]: 1> : i64[]
  var.assign_add @count, %2
  %3 = var.read @count : i64[]
  return %3
}
"""
X = np.array([[1.0, -2.0, 0.5]], np.float32)


def rewrite(src, dst, members=(), manifest=None):
    """Copy the zip ``src`` to ``dst``, replacing members (bytes) or dropping them (None),
    and changing the manifest with ``manifest(m)``."""
    members = dict(members)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == "manifest.json" and manifest is not None:
                m = json.loads(data)
                manifest(m)
                data = json.dumps(m).encode()
            if info.filename in members:
                data = members.pop(info.filename)
                if data is None:
                    continue
            zout.writestr(info.filename, data)
        for name, data in members.items():
            if data is not None:
                zout.writestr(name, data)


def without_bytecode(m):
    del m["ir_bytecode"]


@pytest.fixture
def saved(tmp_path):
    p = Program(parse_module(MODEL, "model.tfir"))
    p.run("train", scale=np.float32(0.5))
    path = tmp_path / "model.tfc"
    p.save(path)
    return p, path


def test_bytecode_member_holds_the_stored_module(saved):
    _, path = saved
    with zipfile.ZipFile(path) as zf:
        m = json.loads(zf.read("manifest.json"))
        text = zf.read(m["ir"]).decode()
        decoded = module_from_bytes(zf.read(m["ir_bytecode"]), "x")
    assert m["ir_bytecode"] == "module.tfcb" and m["version"] == 1
    assert print_module(decoded) == text
    assert "__init__" not in decoded.graphs  # values live in the .npy members


def test_loaded_module_is_the_saved_one(saved):
    p, path = saved
    q = load(path)
    assert print_module(q.module) == print_module(p.module).replace(
        MODEL[MODEL.index("graph @__init__"):MODEL.index("graph @predict")], "")
    assert q.module.graphs["predict"].ops[1].loc.file == "model.py"
    assert q.step == 1
    np.testing.assert_array_equal(q.run("predict", x=X)["y"], p.run("predict", x=X)["y"])


def test_the_text_is_not_read_when_there_is_bytecode(saved, tmp_path):
    p, path = saved
    other = tmp_path / "other.tfc"
    rewrite(path, other, {"module.tfir": b"not IR at all"})
    np.testing.assert_array_equal(load(other).run("predict", x=X)["y"],
                                  p.run("predict", x=X)["y"])
    rewrite(path, other, {"module.tfir": None})  # but it must be there
    with pytest.raises(ArtifactError, match="other.tfc has no member module.tfir"):
        load(other)


def test_old_artifact_without_bytecode_still_loads(saved, tmp_path):
    p, path = saved
    old = tmp_path / "old.tfc"
    rewrite(path, old, {"module.tfcb": None}, without_bytecode)
    q = load(old)
    assert print_module(q.module) == print_module(load(path).module)
    np.testing.assert_array_equal(q.run("predict", x=X)["y"], p.run("predict", x=X)["y"])
    assert q.run("train", scale=np.float32(1.0))["count"] == 1  # read before the step's add
    assert q.variables["count"] == 2


@pytest.mark.parametrize("data, message", [
    (b"\x00\x01 garbage", r"bad.tfc: module.tfcb is not valid IR bytecode: "
                          r".*bad.tfc!module.tfcb: not valid IR bytecode \(truncated or corrupt"),
    (None, r"bad.tfc has no member module.tfcb \(named by manifest.json\)"),
])
def test_corrupt_or_missing_bytecode_member(saved, tmp_path, data, message):
    _, path = saved
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, {"module.tfcb": data})
    with pytest.raises(ArtifactError, match=message):
        load(bad)


def _edit_bytecode(path, dst, change):
    with zipfile.ZipFile(path) as zf:
        doc = json.loads(zf.read("module.tfcb"))
    change(doc)
    rewrite(path, dst, {"module.tfcb": json.dumps(doc).encode()})


def _graph(doc, name):
    return next(g for g in doc["graphs"] if g["name"] == name)


def test_hand_edited_bytecode_is_an_artifact_error(saved, tmp_path):
    _, path = saved
    bad = tmp_path / "bad.tfc"
    _edit_bytecode(path, bad, lambda d: _graph(d, "predict")["ops"][1].update(op="mull"))
    with pytest.raises(ArtifactError, match=r"bad.tfc: module.tfcb is not valid IR bytecode: "
                                            r".*@predict: op 1 'mull': unknown op 'mull'"):
        load(bad)
    _edit_bytecode(path, bad, lambda d: d.update(version=7))
    with pytest.raises(ArtifactError, match="IR bytecode version 7, but this tfc reads version 1"):
        load(bad)


def test_manifest_checks_apply_to_the_decoded_module(saved, tmp_path):
    _, path = saved
    bad = tmp_path / "bad.tfc"
    _edit_bytecode(path, bad, lambda d: _graph(d, "predict").update(name="guess"))
    with pytest.raises(ArtifactError, match=r"manifest.json lists entries \['predict', "
                                            r"'train'\] but module.tfcb defines"):
        load(bad)
    _edit_bytecode(path, bad, lambda d: d["variables"].pop())
    with pytest.raises(ArtifactError, match="bad.tfc: module.tfcb is not valid IR: .*@count"):
        load(bad)  # the verifier: @train uses a variable no longer declared
    rewrite(path, bad, manifest=lambda m: m.update(ir_bytecode=3))
    with pytest.raises(ArtifactError, match="field 'ir_bytecode' should be a str, not int"):
        load(bad)


def test_multi_device_artifact_round_trips(tmp_path):
    """A model-parallel module (variables and ops on two devices)."""
    from tfc.testing import split_mlp_module
    module = split_mlp_module(["/cpu:0", "/cpu:1"])
    module.devices = ["/cpu:0", "/cpu:1"]
    p = Program(module, backend="reference")
    path = tmp_path / "split.tfc"
    p.save(path)
    q = load(path)
    assert q.module.devices == ["/cpu:0", "/cpu:1"]
    with zipfile.ZipFile(path) as zf:
        assert module_to_bytes(q.module) == zf.read("module.tfcb")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(q.run("predict", x=x)["logits"],
                                  p.run("predict", x=x)["logits"])


def test_loading_an_artifact_imports_no_parser(saved):
    """Loading and running a step never imports lark (nor the textual IR's parser): its
    import and the lexing were most of the time to load an artifact."""
    _, path = saved
    code = ("import sys, numpy as np, tfc.runtime as r\n"
            f"p = r.load({str(path)!r})\n"
            "p.run('predict', x=np.ones((2, 3), np.float32))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'lark' or "
            "m == 'tfc.ir.parser'))\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
