"""Checkpoints: bit-exact round trips, the index and max_to_keep, atomic saves (a failure
or SIGKILL mid-save leaves the previous checkpoint and index intact), one-sentence
errors, and exact resume of a training run whose steps use random ops."""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tfc
import tfc.train
from tfc.ir.core import Module, VariableDecl
from tfc.ir.types import DType, TensorType
from tfc.passes import DEFAULT_PIPELINE, run_passes
from tfc.runtime import Program
from tfc.runtime import checkpoint as ckpt_mod
from tfc.runtime.checkpoint import (CheckpointError, latest_checkpoint, read_checkpoint,
                                    read_index, save_checkpoint)

ROOT = Path(__file__).resolve().parents[2]


def train_module() -> Module:
    """Regression on a shuffled half batch with noise, trained by Adam: slots (m, v),
    non-slot state (beta powers) and a global step, and random ops in every step."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + 0.3).astype(np.float32)
    with tfc.Graph().as_default() as g:
        tfc.set_random_seed(7)
        w = tfc.Variable(np.zeros((4, 1), np.float32), name="w")
        b = tfc.Variable(np.zeros(1, np.float32), name="b")
        idx = tfc.random.shuffle(tfc.range(16))[:8]
        pred = tfc.reshape(tfc.matmul(tfc.gather(tfc.constant(x), idx), w) + b, [8])
        noise = tfc.random.uniform([8], -0.1, 0.1)
        loss = tfc.reduce_mean(tfc.square(pred + noise - tfc.gather(tfc.constant(y), idx)))
        step = tfc.Variable(np.int64(0), trainable=False, name="global_step")
        train = tfc.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
        tfc.entry("train_step", fetches={"loss": loss}, targets=[train])
        return run_passes(g.as_module(), DEFAULT_PIPELINE)


@pytest.fixture(scope="module")
def module():
    return train_module()


def state_module() -> Module:
    """Variables of every dtype (no entries): for round trips and mismatches."""
    m = Module()
    for name, dt, shape in [("a/f16", DType.f16, (2, 3)), ("f32", DType.f32, (4,)),
                            ("f64", DType.f64, ()), ("i32", DType.i32, (3, 1)),
                            ("i64", DType.i64, (2,)), ("flag", DType.bool, (2, 2))]:
        m.variables[name] = VariableDecl(name, TensorType(dt, shape))
    return m


def state_values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"a/f16": rng.normal(size=(2, 3)).astype(np.float16),
            "f32": np.array([np.nan, -0.0, np.inf, 1e-45], np.float32),
            "f64": np.float64(np.pi),
            "i32": np.array([[1], [-2], [2**31 - 1]], np.int32),
            "i64": np.array([-(2**63), 2**63 - 1], np.int64),
            "flag": np.array([[True, False], [False, True]])}


def one_sentence(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# ---- format and round trip ----------------------------------------------------------

def test_round_trip_is_bit_exact(tmp_path):
    p = Program(state_module(), state_values(), step=42)
    path = p.save_checkpoint(tmp_path / "ck")
    assert path == tmp_path / "ck" / "ckpt-42.tfckpt"
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        assert manifest["format"] == "tfc-checkpoint" and manifest["version"] == 1
        assert manifest["step"] == 42
        assert manifest["variables"]["a/f16"] == {"dtype": "f16", "shape": [2, 3],
                                                  "file": "variables/0000.npy"}
        assert set(zf.namelist()) == {"manifest.json"} | {
            f"variables/{i:04d}.npy" for i in range(6)}
    q = Program(state_module(), {n: np.zeros_like(v) for n, v in state_values().items()})
    assert q.restore_checkpoint(tmp_path / "ck") == path
    assert q.step == 42
    for name, value in state_values().items():
        got = q.variables[name]
        assert got.dtype == value.dtype and got.shape == np.shape(value)
        assert got.tobytes() == np.asarray(value).tobytes(), name
        assert not got.flags.writeable


def test_index_latest_and_max_to_keep(tmp_path):
    values = {"v": np.arange(3.0)}
    assert latest_checkpoint(tmp_path) is None
    for step in range(1, 8):
        save_checkpoint(tmp_path, values, step, max_to_keep=3)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.json", "ckpt-5.tfckpt",
                                            "ckpt-6.tfckpt", "ckpt-7.tfckpt"]
    assert json.loads((tmp_path / "checkpoint.json").read_text()) == {
        "latest": "ckpt-7.tfckpt", "all": ["ckpt-5.tfckpt", "ckpt-6.tfckpt", "ckpt-7.tfckpt"]}
    assert latest_checkpoint(tmp_path) == str(tmp_path / "ckpt-7.tfckpt")
    save_checkpoint(tmp_path, values, 6, max_to_keep=3)  # saving a step again moves it last
    assert read_index(tmp_path) == ["ckpt-5.tfckpt", "ckpt-7.tfckpt", "ckpt-6.tfckpt"]
    for step in range(8, 12):
        save_checkpoint(tmp_path, values, step, max_to_keep=None)
    assert len(read_index(tmp_path)) == 7
    named = save_checkpoint(tmp_path / "best.tfckpt", values, 3)
    assert named == tmp_path / "best.tfckpt" and read_index(tmp_path)[-1] == "best.tfckpt"
    assert read_checkpoint(tmp_path).step == 3
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    with pytest.raises(tfc.TfcError, match="max_to_keep"):
        save_checkpoint(tmp_path, values, 1, max_to_keep=-1)


# ---- atomicity ----------------------------------------------------------------------

def test_failure_mid_write_keeps_previous_checkpoint_and_index(tmp_path, monkeypatch):
    values = {"a": np.ones((64, 64), np.float32), "b": np.zeros(5), "c": np.arange(4)}
    save_checkpoint(tmp_path, values, 10)
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}
    written = []
    real_write = ckpt_mod._write_array

    for error in (OSError(28, "No space left on device"), KeyboardInterrupt()):
        def failing(member, arr, error=error):
            if written:
                raise error
            written.append(arr)
            real_write(member, arr)

        written.clear()
        monkeypatch.setattr(ckpt_mod, "_write_array", failing)
        with pytest.raises(type(error)):
            save_checkpoint(tmp_path, {k: v + 1 for k, v in values.items()}, 20)
        assert written, "the failure happened after part of the checkpoint was written"
        assert {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)} == before
    monkeypatch.setattr(ckpt_mod, "_write_array", real_write)
    assert read_checkpoint(tmp_path).values["a"].sum() == 64 * 64


def test_failure_writing_the_index_keeps_the_old_index(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, {"v": np.zeros(3)}, 1)
    index = (tmp_path / "checkpoint.json").read_bytes()

    def broken(f):
        f.write(b'{"latest": "ckpt-2.tf')
        raise OSError(5, "Input/output error")

    real_atomic = ckpt_mod.atomic_write
    monkeypatch.setattr(ckpt_mod, "atomic_write", lambda path, write: real_atomic(
        path, broken if Path(path).name == "checkpoint.json" else write))
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, {"v": np.ones(3)}, 2, max_to_keep=1)
    assert (tmp_path / "checkpoint.json").read_bytes() == index
    assert (tmp_path / "ckpt-1.tfckpt").exists()  # not pruned: the index still names it
    ck = read_checkpoint(tmp_path)
    assert ck.step == 1 and ck.values["v"].tolist() == [0, 0, 0]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from tfc.runtime.checkpoint import save_checkpoint

    big = np.empty(1 << 22, np.float32)  # 16 MiB
    step = 0
    while True:
        step += 1
        big.fill(step)
        print(f"saving {step}", flush=True)
        save_checkpoint(sys.argv[1], {"big": big, "step": np.int64(step)}, step,
                        max_to_keep=2)
""")


def test_sigkill_while_saving_leaves_loadable_checkpoints(tmp_path):
    """A real process saving large variables in a loop, killed with SIGKILL while its temp
    file is being written: every checkpoint left and the index's latest load."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        while child.stdout.readline().strip() != "saving 4":  # 3 saved, 1 pruned
            assert child.poll() is None, "the child died"
        deadline = time.monotonic() + 2.0
        while not any(n.startswith(".ckpt-") for n in os.listdir(tmp_path)):
            assert time.monotonic() < deadline, "the child never started writing"
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    names = os.listdir(tmp_path)
    done = sorted(n for n in names if n.endswith(".tfckpt"))
    assert done and set(read_index(tmp_path)) <= set(done)
    for name in done:
        ck = read_checkpoint(tmp_path / name)
        assert int(ck.values["step"]) == ck.step == int(name[5:-7])
        assert (ck.values["big"] == ck.step).all()
    latest = read_checkpoint(tmp_path)
    assert latest.step >= 3
    temps = [n for n in names if n.startswith(".ckpt-")]
    for name in temps:  # killed while writing this one (the usual case): not committed
        assert name.split(".")[1] + ".tfckpt" not in read_index(tmp_path)
    # the next save removes the dead writer's temp (its PID is gone), and nothing else
    save_checkpoint(tmp_path, {"big": np.zeros(1), "step": np.int64(99)}, 99, max_to_keep=0)
    after = set(os.listdir(tmp_path))
    assert not [n for n in after if n.endswith(".tmp")], after
    assert after == (set(names) - set(temps)) | {"ckpt-99.tfckpt"}


# ---- errors -------------------------------------------------------------------------

def _rewrite(path: Path, change) -> None:
    """Rewrite the zip at ``path`` with ``change(members) -> members``."""
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members = change(members)
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)


def _manifest(change):
    def edit(members):
        m = json.loads(members["manifest.json"])
        change(m)
        members["manifest.json"] = json.dumps(m).encode()
        return members
    return edit


def _flip_byte(path: Path) -> None:
    """Flip the last data byte of the first variable's member (its CRC no longer fits)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("variables/0000.npy")
    start = info.header_offset + 30 + len(info.filename)
    start += int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    data[start + info.compress_size - 1] ^= 0xFF
    path.write_bytes(bytes(data))


def shift_zip_directory(path: Path) -> None:
    """Move where the zip's end record says its directory starts 16 MB on (one flipped
    bit can): ``zipfile`` finds the directory anyway, but takes every member's offset
    16 MB back, before the file's start, and its seek there raises ``OSError``."""
    data = bytearray(path.read_bytes())
    end = data.rindex(b"PK\x05\x06")
    start = int.from_bytes(data[end + 16:end + 20], "little")
    data[end + 16:end + 20] = (start + (1 << 24)).to_bytes(4, "little")
    path.write_bytes(bytes(data))


def _npy(arr: np.ndarray) -> bytes:
    """What ``np.save`` writes for ``arr``: a valid member of the wrong content."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


CORRUPTIONS = [
    ("junk", lambda p: p.write_bytes(b"not a zip at all"), "is not a tfc checkpoint"),
    ("truncated", lambda p: p.write_bytes(p.read_bytes()[:300]), "is truncated or corrupt"),
    ("flipped byte", _flip_byte, "is corrupt (Bad CRC-32"),
    ("directory offset", shift_zip_directory, "manifest.json cannot be read, the file is corrupt"),
    ("no manifest", lambda p: _rewrite(p, lambda m: {k: v for k, v in m.items()
                                                     if k != "manifest.json"}),
     "has no manifest.json"),
    ("manifest not json", lambda p: _rewrite(p, lambda m: {**m, "manifest.json": b"{"}),
     "manifest.json is not valid JSON"),
    ("artifact", lambda p: _rewrite(p, _manifest(lambda m: m.update(format="tfc"))),
     "is a tfc artifact, not a checkpoint"),
    ("future version", lambda p: _rewrite(p, _manifest(lambda m: m.update(version=9))),
     "has tfc checkpoint format version 9"),
    ("negative step", lambda p: _rewrite(p, _manifest(lambda m: m.update(step=-1))),
     "negative step -1"),
    ("missing member", lambda p: _rewrite(p, lambda m: {k: v for k, v in m.items()
                                                        if k != "variables/0001.npy"}),
     "has no member variables/0001.npy (variable 'f32')"),
    ("rewritten member", lambda p: _rewrite(p, lambda m: {
        **m, "variables/0001.npy": _npy(np.full(4, 7, np.float32))}),
     "variables/0001.npy is corrupt (its SHA-256 does not match"),
    ("dtype lies", lambda p: _rewrite(p, _manifest(
        lambda m: m["variables"]["f32"].update(dtype="f64"))),
     "variables/0001.npy (variable 'f32') has dtype float32, but manifest.json says f64[4]"),
]


@pytest.mark.parametrize("what,corrupt,message", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_corrupt_checkpoint_is_one_sentence(tmp_path, what, corrupt, message):
    p = Program(state_module(), state_values(), step=3)
    path = p.save_checkpoint(tmp_path)
    corrupt(path)
    with pytest.raises(CheckpointError) as e:
        p.restore_checkpoint(path)
    msg = one_sentence(e)
    assert msg.startswith(str(path)) and message in msg, msg
    assert isinstance(e.value, tfc.errors.ArtifactError)
    assert p.step == 3 and p.variables["i64"].tolist() == state_values()["i64"].tolist()


def test_mismatched_checkpoint_is_one_sentence_and_changes_nothing(tmp_path):
    values = state_values()
    path = Program(state_module(), values).save_checkpoint(tmp_path / "c.tfckpt")
    cases = [("i32", TensorType(DType.i32, (3, 2)),
              "variable @i32 has shape [3,1], expected i32[3,2]"),
             ("f64", TensorType(DType.f32, ()), "variable @f64 has dtype f64, expected f32[]")]
    for name, t, message in cases:
        m = state_module()
        m.variables[name] = VariableDecl(name, t)
        zeros = {n: np.zeros(d.type.shape, d.type.dtype.np) for n, d in m.variables.items()}
        p = Program(m, zeros, step=1)
        with pytest.raises(CheckpointError) as e:
            p.restore_checkpoint(path)
        assert one_sentence(e) == f"{path}: {message}"
        assert p.step == 1 and not p.variables["a/f16"].any()  # nothing restored

    m = state_module()
    m.variables["new/w"] = VariableDecl("new/w", TensorType(DType.f32, (2,)))
    zeros = {n: np.zeros(d.type.shape, d.type.dtype.np) for n, d in m.variables.items()}
    with pytest.raises(CheckpointError) as e:
        Program(m, zeros).restore_checkpoint(path)
    assert one_sentence(e) == f"{path} has no value for variable @new/w"
    del m.variables["new/w"], m.variables["f32"], zeros["new/w"], zeros["f32"]
    with pytest.raises(CheckpointError) as e:
        Program(m, zeros).restore_checkpoint(path)
    assert one_sentence(e) == f"{path} holds variable @f32, which the program does not declare"


def test_missing_and_bad_index(tmp_path):
    p = Program(state_module(), state_values())
    with pytest.raises(CheckpointError) as e:
        p.restore_checkpoint(tmp_path)
    assert one_sentence(e) == f"no checkpoint in {tmp_path} (it has no checkpoint.json naming one)"
    with pytest.raises(CheckpointError) as e:
        p.restore_checkpoint(tmp_path / "ckpt-9.tfckpt")
    assert one_sentence(e) == f"no such checkpoint: {tmp_path / 'ckpt-9.tfckpt'}"
    index = tmp_path / "checkpoint.json"
    for text, message in [("{", "is corrupt (not valid JSON"),
                          ('{"latest": "x", "all": "x"}', "is corrupt (it should hold a list"),
                          ('{"latest": "../x", "all": ["../x"]}', "names '../x', which is not"),
                          ('{"latest": "a", "all": ["a", "b"]}', "'latest' 'a' is not the last"),
                          ('{"latest": "gone.tfckpt", "all": ["gone.tfckpt"]}',
                           "names gone.tfckpt, which does not exist")]:
        index.write_text(text)
        with pytest.raises(CheckpointError) as e:
            p.restore_checkpoint(tmp_path)
        assert message in one_sentence(e)
    p.save_checkpoint(tmp_path)  # a save starts a fresh index over a broken one
    assert read_index(tmp_path) == ["ckpt-0.tfckpt"]


# ---- exact resume -------------------------------------------------------------------

def test_exact_resume_after_restore(tmp_path, module):
    straight = Program(module)
    losses = [straight.run("train_step")["loss"] for _ in range(10)]
    assert len({float(x) for x in losses}) == 10

    first = Program(module)
    for i in range(5):
        assert first.run("train_step")["loss"].tobytes() == losses[i].tobytes()
    path = first.save_checkpoint(tmp_path)
    assert path.name == "ckpt-5.tfckpt"
    assert {"w/Adam", "w/Adam_1", "beta1_power", "global_step"} <= set(
        read_checkpoint(path).values)

    resumed = Program(module)  # fresh: its own initial values, step 0
    resumed.restore_checkpoint(tmp_path)
    assert resumed.step == 5 and resumed.variables["global_step"] == 5
    for i in range(5, 10):
        assert resumed.run("train_step")["loss"].tobytes() == losses[i].tobytes(), i
    for name, value in straight.variables.items():
        assert resumed.variables[name].tobytes() == value.tobytes(), name

    # the step matters: the same variables at another step draw other random numbers
    other = Program(module, read_checkpoint(path).values, step=0)
    assert other.run("train_step")["loss"].tobytes() != losses[5].tobytes()


def test_mirrored_copies_restore_from_a_checkpoint_of_another_number_of_workers(tmp_path):
    """An allreduce worker's copy ``VAR/replica_I`` equals ``VAR``: a checkpoint of a job
    on fewer workers (an elastic one) fills the copies it lacks from their variable, and
    one of more workers restores without its extra copies."""
    from tfc.runtime.checkpoint import check_values

    def decls(*names: str) -> dict[str, VariableDecl]:
        return {n: VariableDecl(n, TensorType(DType.f64, (2,))) for n in names}

    w = np.array([1.0, 2.0])
    fewer = read_checkpoint(save_checkpoint(tmp_path / "a.tfckpt", {"w": w, "w/replica_1": w}, 3))
    got = check_values(fewer, decls("w", "w/replica_1", "w/replica_2"))
    assert sorted(got) == ["w", "w/replica_1", "w/replica_2"]
    np.testing.assert_array_equal(got["w/replica_2"], w)
    got = check_values(fewer, decls("w"))
    assert list(got) == ["w"]
    with pytest.raises(CheckpointError, match="no value for variable @v/replica_1"):
        check_values(fewer, decls("w", "v/replica_1"))  # (no v to copy)
