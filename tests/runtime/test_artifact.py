"""The .tfc artifact: round trips, atomic writes, and every kind of broken file."""

import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tfc.errors import ArtifactError
from tfc.ir.bytecode import module_from_bytes, module_to_bytes
from tfc.ir.core import Module
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
  %0 = var.read @layer/w : f32[3]                     # model.py:4
  %1 = mul %x, %0 : f32[B,3]                          # model.py:5
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


def stored_text(p: Program) -> str:
    """The IR an artifact of ``p`` stores: ``STORED`` on a backend that lowers nothing;
    on llvm the entries as they compiled (fused and scheduled: the final IR)."""
    if not p.backend.pipeline:
        return STORED
    from tfc.pipeline import lower_entry
    raw = parse_module(MODEL, "model.tfir")
    lowered = [lower_entry(raw, name, p.backend.name) for name in raw.entries]
    text = print_module(Module({n: m.graphs[n] for m, n in zip(lowered, raw.entries)},
                               raw.variables))
    assert "fusion" in text and text != STORED
    return text


def trained_program(steps: int = 2) -> Program:
    p = Program(parse_module(MODEL, "model.tfir"))
    for _ in range(steps):
        p.run("train", scale=np.float32(1.0 / 3.0))  # values with no short decimal form
    return p


def rewrite(src, dst, members=(), manifest=None, digests=True):
    """Copy the zip ``src`` to ``dst``, replacing members (bytes) or dropping them (None),
    and changing the manifest with ``manifest(m)``. With ``digests`` the manifest records
    the replaced members' SHA-256 (a consistent edit, which the deeper checks must catch);
    without, the digests stay those of the original members (corruption)."""
    members = dict(members)
    with zipfile.ZipFile(src) as zin:
        out = {info.filename: zin.read(info.filename) for info in zin.infolist()}
    out.update(members)
    out = {name: data for name, data in out.items() if data is not None}
    if "manifest.json" in out and "manifest.json" not in members:
        m = json.loads(out["manifest.json"])
        if digests and "sha256" in m:
            m["sha256"] = {**{k: v for k, v in m["sha256"].items() if "#" in k},
                           **{name: hashlib.sha256(data).hexdigest()
                              for name, data in out.items() if name != "manifest.json"}}
        if manifest is not None:
            manifest(m)
        out["manifest.json"] = json.dumps(m).encode()
    with zipfile.ZipFile(dst, "w") as zout:
        for name, data in out.items():
            zout.writestr(name, data)


def without_bytecode(m):
    del m["ir_bytecode"]


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
    assert print_module(q.module) == stored_text(p)
    assert q.module.graphs["predict"].ops[1].loc.file == "model.py"
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
        assert zf.read("module.tfir").decode() == stored_text(p)
    assert names[0] == "manifest.json"
    planned = {"plans.json"} if p.backend.pipeline else set()  # the stored final IR's plans
    assert {n for n in names if not n.startswith("native/")} == {
        "manifest.json", "module.tfir", "module.tfcb", "variables/0000.npy",
        "variables/0001.npy", *planned}
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
                                            "reads version 2 at most"):
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
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, {"module.tfir": b"graph @oops(", "module.tfcb": None}, without_bytecode)
    with pytest.raises(ArtifactError, match="bad.tfc: module.tfir is not valid IR"):
        load(bad)


def test_save_artifact_needs_every_variable(tmp_path):
    module = parse_module(MODEL)
    with pytest.raises(Exception, match="variable @count has no value"):
        save_artifact(tmp_path / "x.tfc", module, {"layer/w": np.zeros(3, np.float32)})
    assert os.listdir(tmp_path) == []


# ---- the IR bytecode member: what loading reads; the text stays for people ------------

X = np.array([[1.0, -2.0, 0.5]], np.float32)


def test_bytecode_member_holds_the_stored_module(saved):
    p, path = saved
    with zipfile.ZipFile(path) as zf:
        m = json.loads(zf.read("manifest.json"))
        decoded = module_from_bytes(zf.read(m["ir_bytecode"]), "x")
    assert m["ir_bytecode"] == "module.tfcb"
    assert print_module(decoded) == stored_text(p)  # no __init__: the values are in the .npy files


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
    assert print_module(q.module) == stored_text(p)
    np.testing.assert_array_equal(q.run("predict", x=X)["y"], p.run("predict", x=X)["y"])
    assert q.run("train", scale=np.float32(1.0))["count"] == 2  # read before the step's add
    assert q.variables["count"] == 3


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
    with pytest.raises(ArtifactError, match="IR bytecode version 7, but this tfc reads version 2"):
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


@pytest.mark.parametrize("made_with, environment", [("reference", "llvm"),
                                                      ("llvm", "reference")])
def test_an_artifact_runs_on_its_own_backend_whatever_tfc_backend_says(
        made_with, environment, tmp_path, monkeypatch):
    """``$TFC_BACKEND`` picks the backend where none is named; an artifact names the one
    it was compiled (and lowered, and maybe linked) for, so loading it runs that one, as
    the model was saved, without a pass; ``backend=`` (``tfc run --backend``) still
    chooses another."""
    import tfc.passes.manager as manager
    from tfc.testing import split_mlp_module
    module = split_mlp_module(["/cpu:0", "/cpu:1"])
    module.devices = ["/cpu:0", "/cpu:1"]
    path = tmp_path / "split.tfc"
    Program(module, backend=made_with).save(path)
    monkeypatch.setenv("TFC_BACKEND", environment)
    real_run = manager.PassManager.run

    def refuse(self, module):
        raise AssertionError(f"a pass ran: {self.passes}")
    monkeypatch.setattr(manager.PassManager, "run", refuse)
    q = load(path)
    assert q.backend.name == made_with
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)
    assert q.run("predict", x=x)["logits"].shape == (2, 3)
    monkeypatch.setattr(manager.PassManager, "run", real_run)
    assert load(path, backend=environment).backend.name == environment


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


# ---- the manifest must describe the IR it ships with ---------------------------------

@pytest.mark.parametrize("change, message", [
    (lambda m: m["entries"]["predict"]["feeds"][0].update(shape=["B", 4]),
     r"manifest.json describes entry 'predict' as predict\(x: f32\[B,4\]\) -> \(y: f32\[B,3\]\), "
     r"but module.tfcb defines predict\(x: f32\[B,3\]\) -> \(y: f32\[B,3\]\)"),
    (lambda m: m["entries"]["predict"]["feeds"][0].update(dtype="f64"),
     r"describes entry 'predict' as predict\(x: f64\[B,3\]\)"),
    (lambda m: m["entries"]["predict"]["feeds"][0].update(name="input"),
     r"describes entry 'predict' as predict\(input: f32\[B,3\]\)"),
    (lambda m: m["entries"]["train"]["fetches"].pop(),
     r"describes entry 'train' as train\(scale: f32\[\]\) -> \(count: i64\[\]\), but"),
    (lambda m: m["entries"]["train"].update(feeds="scale"),
     r"describes entry 'train' as train\(\?\) -> \(count: i64\[\], w_before: f32\[3\]\)"),
    (lambda m: m["entries"]["train"]["feeds"].append({"bad": 1}),
     r"describes entry 'train' as train\(scale: f32\[\], \{'bad': 1\}\)"),
    (lambda m: m["variables"]["layer/w"].update(shape=[4]),
     r"bad.tfc: (manifest.json says variable 'layer/w' is f32\[4\], but module.tfcb declares "
     r"it f32\[3\]|variables/0000.npy \(variable 'layer/w'\) has shape \[3\], but manifest.json "
     r"says f32\[4\])"),
])
def test_hand_edited_manifest_signatures_are_artifact_errors(saved, tmp_path, change, message):
    """Callers read the manifest to learn what to feed, and the object code was compiled
    for the IR's signatures: a manifest that describes other ones is refused."""
    _, path = saved
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, manifest=change)
    with pytest.raises(ArtifactError, match=message):
        load(bad)


def test_hand_edited_module_that_does_not_verify_is_refused(saved, tmp_path):
    """A module rewritten consistently (its digest updated too) must still verify: native
    code never runs for a module that does not."""
    _, path = saved
    bad = tmp_path / "bad.tfc"

    with zipfile.ZipFile(path) as zf:
        doc = json.loads(zf.read("module.tfcb"))
    # var.assign @layer/w, %1 with %1: f32[B,3] (the mul) for an f32[3] variable
    _graph(doc, "predict")["ops"].append({"op": "var.assign", "attrs": {"var": "layer/w"},
                                          "in": [2], "types": []})
    rewrite(path, bad, {"module.tfcb": json.dumps(doc).encode()})
    with pytest.raises(ArtifactError, match=r"bad.tfc: module.tfcb is not valid IR: @predict: "
                                            r"op 2 'var.assign'"):
        load(bad)


def test_members_that_do_not_match_their_digest(saved, tmp_path):
    """Rewritten with valid zip CRCs but not through tfc: refused, naming the member."""
    p, path = saved
    bad = tmp_path / "bad.tfc"
    for member, data in [("variables/0000.npy", npy_bytes(np.full(3, 9, np.float32))),
                         ("module.tfcb", b"{}"),
                         ("module.tfir", b"graph @oops(")]:
        drop = {"module.tfcb": None} if member == "module.tfir" else {}
        rewrite(path, bad, {member: data, **drop}, without_bytecode if drop else None,
                digests=False)
        with pytest.raises(ArtifactError, match=rf"bad.tfc: {member} is corrupt \(its SHA-256 "
                                                rf"does not match the one manifest.json records"):
            load(bad)
    rewrite(path, bad, manifest=lambda m: m["sha256"].pop("variables/0001.npy"))
    with pytest.raises(ArtifactError, match="manifest.json records no SHA-256 for "
                                            "variables/0001.npy"):
        load(bad)
    rewrite(path, bad, manifest=lambda m: m.update(sha256=["x"]))
    with pytest.raises(ArtifactError, match="field 'sha256' should map member names"):
        load(bad)


# ---- saving back to the file a program was loaded from --------------------------------

def test_saving_over_an_update_another_program_saved_is_refused(saved, tmp_path):
    _, path = saved
    first, second = load(path), load(path)
    first.run("train", scale=np.float32(2.0))
    first.save(path)
    second.run("train", scale=np.float32(5.0))
    with pytest.raises(ArtifactError, match=r"model.tfc was changed by another process since "
                                            r"this one loaded it at step 2 \(it is now at step "
                                            r"3\); not overwriting that update"):
        second.save(path)
    assert load(path).variables["layer/w"].tolist() == first.variables["layer/w"].tolist()
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
    second.save(path, force=True)
    assert load(path).variables["layer/w"].tolist() == second.variables["layer/w"].tolist()
    second.run("train", scale=np.float32(1.0))
    second.save(path)  # its own last save is what it compares with now
    first.save(tmp_path / "elsewhere.tfc")  # another file: nothing to lose
    assert load(path).step == 4


def test_writes_variables(saved):
    p, _ = saved
    assert p.writes_variables("train") and not p.writes_variables("predict")


# ---- memory plans: the module as lowered for its backend, stored with its plans --------

def lowered_program(backend: str) -> Program:
    """A training step lowered for llvm (fusion, memory) before the program, so the
    artifact stores the IR that compiles and its plans (the reference backend runs the
    same fused IR)."""
    import tfc
    from tfc.pipeline import Target, lower
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
        h = tfc.tanh(x @ w) * 2.0 + 1.0
        y = tfc.nn.softmax(tfc.reshape(h, [-1, 3]), name="y")
        tfc.entry("predict", feeds={"x": x}, fetches={"y": y})
        step = w.assign_sub(0.1 * tfc.gradients(tfc.reduce_sum(y * h), w)[0])
        tfc.entry("train", feeds={"x": x}, fetches={"y": y}, targets=[step])
        module = lower(g.as_module(), Target("llvm"), passes="")
    assert any(op.kind == "fusion" for op in module.graphs["train"].ops)
    return Program(module, backend=backend)


def no_pass(*args, **kwargs):
    raise AssertionError("loading a planned module must run no pass")


@pytest.mark.parametrize("native", ["use", "recompile"])
@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_memory_plans_are_stored_and_restored(tmp_path, monkeypatch, backend, native):
    import tfc.passes.manager
    import tfc.passes.memory
    program = lowered_program(backend)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    program.run("train", x=x)
    path = tmp_path / "m.tfc"
    program.save(path)
    with zipfile.ZipFile(path) as zf:
        m = json.loads(zf.read("manifest.json"))
        assert m["memory_plans"] == "plans.json"
        assert m["sha256"]["plans.json"] == hashlib.sha256(zf.read("plans.json")).hexdigest()
        assert set(json.loads(zf.read("plans.json"))) == {"predict", "train"}
    monkeypatch.setattr(tfc.passes.manager, "run_passes", no_pass)
    monkeypatch.setattr(tfc.passes.memory, "plan_memory", no_pass)
    loaded = load(path, backend=backend, native=native)
    for name in ("predict", "train"):
        saved, got = program.module.memory_plans[name], loaded.module.memory_plans[name]
        g = loaded.module.graphs[name]
        assert got.to_json(g) == saved.to_json(program.module.graphs[name])
        assert [b.size for b in got.buffers] == [b.size for b in saved.buffers]
        assert got.offsets({"B": 5}) == saved.offsets({"B": 5})
        assert {got.names[v]: got.names[r] for v, r in got.alias_of.items()} == {
            saved.names[v]: saved.names[r] for v, r in saved.alias_of.items()}
        assert got.report({"B": 5}) == saved.report({"B": 5})
    for _ in range(2):
        a, b = loaded.run("train", x=x), program.run("train", x=x)
        np.testing.assert_array_equal(a["y"], b["y"])
    np.testing.assert_array_equal(loaded.variables["w"], program.variables["w"])
    if backend == "llvm":
        assert loaded._executable("train").module is loaded.module  # compiled as planned


def test_corrupt_or_invalid_memory_plans_are_artifact_errors(tmp_path):
    path = tmp_path / "m.tfc"
    lowered_program("reference").save(path)
    with zipfile.ZipFile(path) as zf:
        plans = json.loads(zf.read("plans.json"))
    text = json.dumps(plans)
    flipped = text.replace('"dynamic": false', '"dynamic": true', 1).encode()
    assert flipped != text.encode()
    bad = tmp_path / "bad.tfc"
    rewrite(path, bad, {"plans.json": flipped}, digests=False)
    with pytest.raises(ArtifactError, match=r"bad.tfc: plans.json is corrupt \(its SHA-256"):
        load(bad)
    rewrite(path, bad, {"plans.json": flipped})  # a consistent edit: the plan is checked
    with pytest.raises(ArtifactError, match=r"bad.tfc: plans.json: the memory plan of @\w+ "
                                            r"is invalid \("):
        load(bad)
    rewrite(path, bad, {"plans.json": b"{"})
    with pytest.raises(ArtifactError, match="plans.json is not valid JSON"):
        load(bad)
    rewrite(path, bad, {"plans.json": json.dumps({"nope": {}}).encode()})
    with pytest.raises(ArtifactError, match="a memory plan for an unknown graph @nope"):
        load(bad)
    rewrite(path, bad, {"plans.json": None})
    with pytest.raises(ArtifactError, match="has no member plans.json"):
        load(bad)


@pytest.mark.parametrize("lost", ["field", "plan"])
def test_a_lowered_module_without_its_plans_is_an_artifact_error(tmp_path, lost):
    """A damaged manifest key (``"mgmory_plans"``: the corruption fuzzer's mutant 839 at
    TFC_CORRUPTION_FUZZ=1500) or a plan missing from plans.json leaves a module lowered
    for llvm without a plan, which the backend refused only at run time, as a TfcError
    that did not name the file."""
    path = tmp_path / "m.tfc"
    lowered_program("llvm").save(path)
    bad = tmp_path / "bad.tfc"
    if lost == "field":
        def damage(m):
            m["mgmory_plans"] = m.pop("memory_plans")
        rewrite(path, bad, manifest=damage)
    else:
        with zipfile.ZipFile(path) as zf:
            plans = json.loads(zf.read("plans.json"))
        del plans["train"]
        rewrite(path, bad, {"plans.json": json.dumps(plans).encode()})
    with pytest.raises(ArtifactError, match=r"bad.tfc: @\w+ is lowered for llvm but has no "
                                            r"memory plan \(manifest.json field 'memory_plans'"):
        load(bad)


def test_a_zip_directory_that_points_before_the_file_is_an_artifact_error(saved, tmp_path):
    """The corruption fuzzer's mutant 12438 at TFC_CORRUPTION_FUZZ=400: a flipped bit in
    the zip's end record sends zipfile's seeks before the file's start (OSError: Invalid
    argument), which the loader let out."""
    from tests.runtime.test_checkpoint import shift_zip_directory
    _, path = saved
    shift_zip_directory(path)
    with pytest.raises(ArtifactError, match=r"model.tfc: manifest.json cannot be read, the "
                                            r"file is corrupt \("):
        load(path)
