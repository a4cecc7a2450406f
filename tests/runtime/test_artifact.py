"""The .tfc artifact: round trips, atomic writes, and every kind of broken file."""

import io
import json
import os
import stat
import zipfile

import numpy as np
import pytest

from tfc.errors import ArtifactError
from tfc.ir.parser import parse_module
from tfc.ir.printer import print_module
from tfc.runtime import Program, load, save_artifact

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
  %0 = var.read @layer/w : f32[3]
  %1 = mul %x, %0 : f32[B,3]
  return %1
}

graph @train(%scale: f32[]) -> (count: i64[], w_before: f32[3]) {
  %0 = var.read @layer/w : f32[3]
  %1 = mul %0, %scale : f32[3]
  var.assign @layer/w, %1
  %2 = constant dense<i64[]: 1> : i64[]
  var.assign_add @count, %2
  %3 = var.read @count : i64[]
  return %3, %0
}
"""
# What the artifact stores: the module without __init__ (the values are in the .npy files).
STORED = MODEL[:MODEL.index("graph @__init__")] + MODEL[MODEL.index("graph @predict"):]


def trained_program(steps: int = 2) -> Program:
    p = Program(parse_module(MODEL, "model.tfir"))
    for _ in range(steps):
        p.run("train", scale=np.float32(1.0 / 3.0))  # values with no short decimal form
    return p


def rewrite(src, dst, members):
    """Copy the zip ``src`` to ``dst``, replacing members (bytes) or dropping them (None)."""
    members = dict(members)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if info.filename in members:
                if members[info.filename] is not None:
                    zout.writestr(info.filename, members.pop(info.filename))
                continue
            zout.writestr(info, zin.read(info.filename))
        for name, data in members.items():
            if data is not None:
                zout.writestr(name, data)


def npy_bytes(arr, allow_pickle=False):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


@pytest.fixture
def saved(tmp_path):
    p = trained_program()
    path = tmp_path / "model.tfc"
    p.save(path)
    return p, path


def test_round_trip_is_exact(saved):
    p, path = saved
    q = load(path)
    assert print_module(q.module) == STORED
    assert q.step == p.step == 2
    assert set(q.variables) == set(p.variables)
    for name, value in p.variables.items():
        assert not q.variables[name].flags.writeable
        assert q.variables[name].dtype == value.dtype
        assert q.variables[name].tobytes() == value.tobytes()  # bit-exact
    a = p.run("train", scale=np.float32(0.7))
    b = q.run("train", scale=np.float32(0.7))
    assert a["w_before"].tobytes() == b["w_before"].tobytes() and a["count"] == b["count"]


def test_manifest_layout(saved):
    p, path = saved
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        m = json.loads(zf.read("manifest.json"))
        assert zf.read("module.tfir").decode() == STORED
    assert names[0] == "manifest.json"
    assert {n for n in names if not n.startswith("native/")} == {
        "manifest.json", "module.tfir", "module.tfcb", "variables/0000.npy",
        "variables/0001.npy"}
    assert m["format"] == "tfc" and m["version"] == 1 and m["created_by"].startswith("tfc ")
    assert m["step"] == 2 and m["ir"] == "module.tfir" and m["backend"] == p.backend.name
    assert m["ir_bytecode"] == "module.tfcb"
    assert m["variables"]["layer/w"] == {"dtype": "f32", "shape": [3],
                                         "file": "variables/0000.npy", "trainable": True,
                                         "device": None}
    assert m["variables"]["count"]["device"] == "/cpu:0"
    assert m["entries"]["train"]["fetches"][1] == {"name": "w_before", "dtype": "f32",
                                                   "shape": [3]}
    assert m["entries"]["predict"]["feeds"] == [{"name": "x", "dtype": "f32", "shape": ["B", 3]}]
    assert "__init__" not in m["entries"]


def test_crash_mid_write_keeps_previous_artifact(saved, monkeypatch):
    p, path = saved
    before = path.read_bytes()
    p.run("train", scale=np.float32(5.0))
    real_save, calls = np.save, []

    def failing_save(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(np, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        p.save(path)
    monkeypatch.undo()
    assert len(calls) == 2
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == ["model.tfc"]  # no temp file left behind
    assert load(path).step == 2


def test_save_replaces_atomically_and_keeps_mode(saved):
    p, path = saved
    os.chmod(path, 0o640)
    p.run("train", scale=np.float32(2.0))
    p.save(path)
    assert load(path).step == 3
    assert os.listdir(path.parent) == ["model.tfc"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_save_into_missing_directory_names_the_target(tmp_path):
    target = tmp_path / "no" / "model.tfc"
    with pytest.raises(FileNotFoundError) as e:
        trained_program(0).save(target)
    assert e.value.filename == str(target)


def test_no_such_artifact(tmp_path):
    with pytest.raises(ArtifactError, match=f"no such artifact: {tmp_path}/nope.tfc"):
        load(tmp_path / "nope.tfc")
    with pytest.raises(ArtifactError, match="is a directory"):
        load(tmp_path)


def test_garbage_bytes(tmp_path):
    path = tmp_path / "junk.tfc"
    path.write_bytes(b"this is not a zip file at all" * 10)
    with pytest.raises(ArtifactError, match=r"junk.tfc is not a tfc artifact \(not a zip file\)"):
        load(path)


def test_truncated(saved):
    _, path = saved
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match="model.tfc is truncated or corrupt"):
        load(path)


def test_flipped_byte_in_a_member(saved, tmp_path):
    _, path = saved
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("variables/0000.npy")
    # the member's data starts after its local header (30 bytes + name + extra)
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + 130
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="model.tfc"):
        load(path)


def test_missing_manifest(saved, tmp_path):
    _, path = saved
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, {"manifest.json": None})
    with pytest.raises(ArtifactError, match="bad.tfc has no member manifest.json"):
        load(bad)


def test_manifest_not_json(saved, tmp_path):
    _, path = saved
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, {"manifest.json": b"{not json"})
    with pytest.raises(ArtifactError, match="manifest.json is not valid JSON"):
        load(bad)


def test_version_too_new(saved, tmp_path):
    _, path = saved
    with zipfile.ZipFile(path) as zf:
        m = json.loads(zf.read("manifest.json"))
    m["version"] = 999
    bad = tmp_path / "new.tfc"
    rewrite(path, bad, {"manifest.json": json.dumps(m).encode()})
    with pytest.raises(ArtifactError, match="new.tfc has tfc artifact format version 999, but this tfc "
                                            "reads version 1 at most"):
        load(bad)


def test_missing_members(saved, tmp_path):
    _, path = saved
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, {"module.tfir": None})
    with pytest.raises(ArtifactError, match="bad.tfc has no member module.tfir"):
        load(bad)
    rewrite(path, bad, {"variables/0001.npy": None})
    with pytest.raises(ArtifactError,
                       match=r"has no member variables/0001.npy \(variable 'count'\)"):
        load(bad)


def test_npy_with_wrong_shape_or_dtype(saved, tmp_path):
    _, path = saved
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, {"variables/0000.npy": npy_bytes(np.zeros(4, np.float32))})
    with pytest.raises(ArtifactError, match=r"bad.tfc: variables/0000.npy \(variable 'layer/w'\) "
                                            r"has shape \[4\], but manifest.json says f32\[3\]"):
        load(bad)
    rewrite(path, bad, {"variables/0000.npy": npy_bytes(np.zeros(3, np.float64))})
    with pytest.raises(ArtifactError, match="has dtype float64, but manifest.json says f32"):
        load(bad)


def test_npy_with_pickled_objects(saved, tmp_path):
    _, path = saved
    bad = tmp_path / "bad.tfc"
    evil = np.array([{"a": 1}, None, 3], dtype=object)
    rewrite(path, bad, {"variables/0000.npy": npy_bytes(evil, allow_pickle=True)})
    with pytest.raises(ArtifactError, match="holds pickled Python objects"):
        load(bad)


def test_ir_that_does_not_parse(saved, tmp_path):
    """The text is what loads when there is no bytecode (artifacts written before it)."""
    _, path = saved
    with zipfile.ZipFile(path) as zf:
        m = json.loads(zf.read("manifest.json"))
    del m["ir_bytecode"]
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, {"module.tfir": b"graph @oops(", "module.tfcb": None,
                        "manifest.json": json.dumps(m).encode()})
    with pytest.raises(ArtifactError, match="bad.tfc: module.tfir is not valid IR"):
        load(bad)


def test_save_artifact_needs_every_variable(tmp_path):
    module = parse_module(MODEL)
    with pytest.raises(Exception, match="variable @count has no value"):
        save_artifact(tmp_path / "x.tfc", module, {"layer/w": np.zeros(3, np.float32)})
    assert os.listdir(tmp_path) == []
