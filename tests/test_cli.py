"""The `tfc` command: ir, opt, compile, run, and how errors reach the user."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tfc.cli as cli
from tfc.cli import main
from tfc.runtime import load

MODEL_PY = """\
import numpy as np
import tfc

x = tfc.placeholder(tfc.float32, [None, 3], name="x")
scale = tfc.placeholder(tfc.float32, [], name="scale")
with tfc.name_scope("layer"):
    w = tfc.Variable(np.array([1.0, 2.0, 3.0], np.float32), name="w")
count = tfc.Variable(np.int64(0), trainable=False, name="count")
y = x * w * (1.0 * 1.0)
tfc.entry("predict", feeds={"x": x}, fetches={"y": y})
tfc.entry("train", feeds={"scale": scale}, fetches={"count": count.value()},
          targets=[w.assign(w.value() * scale), count.assign_add(np.int64(1))])
"""

IR = """\
graph @f(%a: f32[2]) -> (out: f32[2]) {
  %0 = add %a, %a : f32[2]
  %1 = add %a, %a : f32[2]
  %2 = mul %0, %1 : f32[2]
  %3 = neg %a : f32[2]
  return %2
}
"""


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    return path


@pytest.fixture
def artifact(model, tmp_path, capsys):
    out = tmp_path / "model.tfc"
    assert main(["compile", str(model), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    return out


def run_ok(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def run_err(capsys, code, *argv):
    got = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert got == code, (out, err)
    assert "Traceback" not in err
    return err


def test_compile_report(model, tmp_path, capsys):
    out, _ = run_ok(capsys, "compile", model, "-o", tmp_path / "m.tfc")
    assert "compiled" in out and "m.tfc" in out
    assert "predict" in out and "x: f32[B,3]" in out and "y: f32[B,3]" in out
    assert "before passes" in out and "variables: 2" in out
    assert "@layer/w" in out and "pass cse" in out
    program = load(tmp_path / "m.tfc")
    assert set(program.entries) == {"predict", "train"}
    np.testing.assert_array_equal(program.variables["layer/w"], [1, 2, 3])


def test_compile_default_output_name(model, capsys):
    run_ok(capsys, "compile", model, "-q")
    assert model.with_suffix(".tfc").exists()


def test_ir_modes(model, artifact, capsys):
    raw, _ = run_ok(capsys, "ir", model, "--raw")
    opt, _ = run_ok(capsys, "ir", model)
    assert "graph @predict" in raw and "graph @__init__" in raw
    assert raw != opt and raw.count("mul") > opt.count("mul")  # the 1.0 * 1.0 folds away
    after, _ = run_ok(capsys, "ir", model, "--after", "canonicalize")
    assert "graph @predict" in after
    chosen, _ = run_ok(capsys, "ir", model, "--passes", "cse")
    assert "graph @predict" in chosen
    stored, _ = run_ok(capsys, "ir", artifact)
    # the artifact keeps the compiled entries (the final IR tfc ir shows; the memory
    # plans' comments differ by __init__'s); its __init__ keeps only the initializer ops
    # (the splat `count`), the other values are stored as data
    opt, stored = (text.split("\n// memory plan")[0] for text in (opt, stored))
    assert stored[:stored.index("graph @__init__")] == opt[:opt.index("graph @__init__")]
    assert stored[stored.index("graph @predict"):] == opt[opt.index("graph @predict"):]
    init = stored[stored.index("graph @__init__"):stored.index("graph @predict")]
    assert "var.assign @count" in init and "@layer/w" not in init
    err = run_err(capsys, 1, "ir", model, "--after", "csee")
    assert err.startswith("error: unknown pass 'csee' (did you mean 'cse'?)")
    run_err(capsys, 2, "ir", model, "--raw", "--after", "cse")


def test_opt(tmp_path, capsys):
    src = tmp_path / "in.tfir"
    src.write_text(IR)
    out, _ = run_ok(capsys, "opt", src, "--passes", "cse,dce")
    assert out.count("add") == 1 and "neg" not in out
    same, _ = run_ok(capsys, "opt", src)
    assert same == IR
    dst = tmp_path / "out.tfir"
    out, _ = run_ok(capsys, "opt", src, "--passes", "cse", "-o", dst, "--print-after", "cse")
    assert out == "" and dst.read_text().count("add") == 1
    bad = tmp_path / "bad.tfir"
    bad.write_text("graph @f(%a: f32[2]) -> (out: f32[2]) {\n  %0 = nosuchop %a : f32[2]\n"
                   "  return %0\n}\n")
    err = run_err(capsys, 1, "opt", bad)
    assert err.startswith("error: ") and len(err.strip().splitlines()) >= 1
    assert "nosuchop" in err
    err = run_err(capsys, 1, "opt", tmp_path / "missing.tfir")
    assert err == f"error: no such file or directory: {tmp_path / 'missing.tfir'}\n"


def test_run_prints_fetches(artifact, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    out, _ = run_ok(capsys, "run", artifact, "--entry", "predict", "--feed",
                    f"x={tmp_path / 'x.npy'}")
    assert out.startswith("y: f32[2,3]\n[[1., 2., 3.],")
    np.savez(tmp_path / "d.npz", a=np.zeros((1, 3), np.float32), b=np.ones((4, 3), np.float32))
    out, _ = run_ok(capsys, "run", artifact, "--entry", "predict", "--feed",
                    f"x={tmp_path / 'd.npz'}:b")
    assert out.startswith("y: f32[4,3]")
    err = run_err(capsys, 1, "run", artifact, "--entry", "predict", "--feed",
                  f"x={tmp_path / 'd.npz'}")
    assert "holds 2 arrays (a, b); pick one with" in err
    np.savez(tmp_path / "x.npz", x=np.zeros((5, 3), np.float32), other=np.zeros(1))
    out, _ = run_ok(capsys, "run", artifact, "--feed", f"x={tmp_path / 'x.npz'}",
                    "--entry", "predict")
    assert out.startswith("y: f32[5,3]")


def test_run_out_files(artifact, tmp_path, capsys):
    res = tmp_path / "res.npz"
    run_ok(capsys, "run", artifact, "--entry", "train", "--feed", "scale=2", "--out", res)
    with np.load(res) as z:
        assert list(z.keys()) == ["count"] and z["count"] == 0
    one = tmp_path / "one.npy"
    run_ok(capsys, "run", artifact, "--entry", "train", "--feed", "scale=2", "--out", one)
    assert np.load(one) == 0
    err = run_err(capsys, 1, "run", artifact, "--entry", "train", "--feed", "scale=2",
                  "--out", tmp_path / "r.txt")
    assert "expected a .npz or .npy" in err


XENT_PY = """\
import numpy as np
import tfc
import tfc.train

x = tfc.placeholder(tfc.float32, [None, 4], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")
w = tfc.Variable(np.full((4, 10), 0.1, np.float32), name="w")
b = tfc.Variable(np.zeros(10, np.float32), name="b")
logits = tfc.matmul(x, w) + b
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
train = tfc.train.AdamOptimizer(0.1).minimize(loss)
tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
"""


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_run_save_with_a_bad_label_keeps_the_artifact(tmp_path, capsys, backend):
    """A label out of range is the op's error on every backend (llvm fused it into NaN and
    trained on): `error:`, exit 1, and --save writes nothing, so the weights stay."""
    src, art = tmp_path / "xent.py", tmp_path / "xent.tfc"
    src.write_text(XENT_PY)
    run_ok(capsys, "compile", src, "-o", art, "-q")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32))
    np.save(tmp_path / "good.npy", np.array([1, 2, 3, 4], np.int32))
    np.save(tmp_path / "bad.npy", np.array([1, 2, 3, 99], np.int32))
    base = ["run", art, "--entry", "train_step", "--backend", backend,
            "--feed", f"x={tmp_path / 'x.npy'}", "--steps", 3, "--save"]
    run_ok(capsys, *base, "--feed", f"y={tmp_path / 'good.npy'}")
    trained = art.read_bytes()
    assert load(art).step == 3 and not np.allclose(load(art).variables["w"], 0.1)
    err = run_err(capsys, 1, *base, "--feed", f"y={tmp_path / 'bad.npy'}")
    assert err.splitlines()[-1] == (  # after the progress line; the reference's words
        f"error: {src}:10: sparse_softmax_cross_entropy: label 99 at index [3] is out of "
        f"range [0, 10)"), err
    assert sum(line.startswith("error:") for line in err.splitlines()) == 1
    assert art.read_bytes() == trained
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_run_steps_and_save(artifact, capsys):
    before = artifact.read_bytes()
    run_ok(capsys, "run", artifact, "--entry", "train", "--feed", "scale=2", "--steps", "3")
    assert artifact.read_bytes() == before  # no --save: the artifact is untouched
    run_ok(capsys, "run", artifact, "--entry", "train", "--feed", "scale=2", "--steps", "3",
           "--save")
    p = load(artifact)
    assert p.step == 3 and p.variables["count"] == 3
    np.testing.assert_array_equal(p.variables["layer/w"], [8, 16, 24])
    assert os.listdir(artifact.parent).count("model.tfc") == 1
    assert not [n for n in os.listdir(artifact.parent) if n.endswith(".tmp")]


def test_run_errors(artifact, tmp_path, capsys):
    err = run_err(capsys, 1, "run", artifact, "--entry", "predcit")
    assert err.startswith("error: unknown entry 'predcit' (did you mean 'predict'?)")
    err = run_err(capsys, 1, "run", artifact)
    assert "choose one with --entry" in err
    err = run_err(capsys, 1, "run", artifact, "--entry", "predict")
    assert err.startswith("error: entry 'predict': missing feed 'x'")
    np.save(tmp_path / "x64.npy", np.ones((2, 3)))
    err = run_err(capsys, 1, "run", artifact, "--entry", "predict", "--feed",
                  f"x={tmp_path / 'x64.npy'}")
    assert "x.astype(np.float32)" in err
    err = run_err(capsys, 1, "run", artifact, "--entry", "predict", "--feed", "x=nope.npy")
    assert err == "error: no such file or directory: nope.npy\n"
    np.save(tmp_path / "obj.npy", np.array([None, {}], dtype=object), allow_pickle=True)
    err = run_err(capsys, 1, "run", artifact, "--entry", "predict", "--feed",
                  f"x={tmp_path / 'obj.npy'}")
    assert "pickled" in err
    err = run_err(capsys, 1, "run", artifact, "--entry", "train", "--feed", "scale=fast")
    assert "neither a .npy/.npz file" in err
    err = run_err(capsys, 1, "run", tmp_path / "missing.tfc", "--entry", "x")
    assert err == f"error: no such artifact: {tmp_path / 'missing.tfc'}\n"
    junk = tmp_path / "junk.tfc"
    junk.write_bytes(b"junk")
    err = run_err(capsys, 1, "run", junk)
    assert "not a tfc artifact" in err
    run_err(capsys, 2, "run", artifact, "--steps", "many")


def test_model_errors_point_at_the_users_line(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import tfc\nx = tfc.placeholder(tfc.float32, [2, 3], name='x')\n"
                   "y = x + tfc.placeholder(tfc.float32, [4], name='z')\n")
    err = run_err(capsys, 1, "compile", bad)
    assert err.startswith(f"error: {bad}:3: ")
    assert len(err.splitlines()) == 1


def test_internal_errors(monkeypatch, artifact, capsys):
    def boom(args):
        raise RuntimeError("oops")

    monkeypatch.setattr(cli, "_cmd_run", boom)
    monkeypatch.delenv("TFC_DEBUG", raising=False)
    err = run_err(capsys, 70, "run", artifact)
    assert err.startswith("internal error: RuntimeError: oops")
    monkeypatch.setenv("TFC_DEBUG", "1")
    assert main(["run", str(artifact)]) == 70
    assert "Traceback" in capsys.readouterr().err


def test_keyboard_interrupt(monkeypatch, artifact, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_cmd_run", interrupted)
    assert run_err(capsys, 1, "run", artifact) == "error: interrupted\n"


def test_usage(capsys):
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["--help"]) == 0
    assert "compile" in capsys.readouterr().out


def test_installed_script(model, tmp_path):
    """One real process: exit codes and no traceback on stderr."""
    exe = shutil.which("tfc")
    cmd = [exe] if exe else [sys.executable, "-m", "tfc.cli"]
    env = {k: v for k, v in os.environ.items() if k != "TFC_DEBUG"}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = tmp_path / "m.tfc"
    ok = subprocess.run([*cmd, "compile", str(model), "-o", str(out), "-q"],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert zipfile.is_zipfile(out)
    bad = subprocess.run([*cmd, "run", str(out), "--entry", "nope"], capture_output=True,
                         text=True, env=env)
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: unknown entry 'nope'")
    assert "Traceback" not in bad.stderr


# ---- training with checkpoints --------------------------------------------------------

TRAIN_PY = """\
import numpy as np
import tfc
import tfc.train

rng = np.random.default_rng(0)
X = rng.normal(size=(16, 4)).astype(np.float32)
Y = (X @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + 0.3).astype(np.float32)

tfc.set_random_seed(7)
w = tfc.Variable(np.zeros((4, 1), np.float32), name="w")
b = tfc.Variable(np.zeros(1, np.float32), name="b")
idx = tfc.random.shuffle(tfc.range(16))[:8]
pred = tfc.reshape(tfc.matmul(tfc.gather(tfc.constant(X), idx), w) + b, [8])
noise = tfc.random.uniform([8], -0.1, 0.1)
loss = tfc.reduce_mean(tfc.square(pred + noise - tfc.gather(tfc.constant(Y), idx)))
step = tfc.Variable(np.int64(0), trainable=False, name="global_step")
train = tfc.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
tfc.entry("train_step", fetches={"loss": loss, "step": step.value()}, targets=[train])
tfc.entry("evaluate", fetches={"loss": loss})
"""


@pytest.fixture
def trainer(tmp_path, capsys):
    src = tmp_path / "train.py"
    src.write_text(TRAIN_PY)
    out = tmp_path / "train.tfc"
    assert main(["compile", str(src), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    return out


def _losses(artifact, n):
    program = load(artifact)
    return [program.run("train_step")["loss"] for _ in range(n)]


def test_run_checkpoints_and_progress(trainer, tmp_path, capsys):
    ck = tmp_path / "ck"
    before = trainer.read_bytes()
    out, err = run_ok(capsys, "run", trainer, "--entry", "train_step", "--steps", 12,
                      "--checkpoint-dir", ck, "--checkpoint-every", 2, "--out",
                      tmp_path / "r.npz")
    assert "12/12" in err and "steps/s" in err and "step 12" in err
    losses = _losses(trainer, 12)
    assert f"loss={losses[-1].item():.4g}" in err
    assert f"saved checkpoint {ck / 'ckpt-12.tfckpt'} (step 12)" in err
    assert sorted(os.listdir(ck)) == ["checkpoint.json"] + [
        f"ckpt-{s}.tfckpt" for s in (10, 12, 4, 6, 8)]
    with np.load(tmp_path / "r.npz") as z:
        assert z["loss"].tobytes() == losses[-1].tobytes() and z["step"] == 11
    # every K of the global step, plus the end when it is not a multiple
    run_ok(capsys, "run", trainer, "--entry", "train_step", "--steps", 3,
           "--checkpoint-dir", tmp_path / "ck3", "--checkpoint-every", 2)
    assert sorted(os.listdir(tmp_path / "ck3")) == ["checkpoint.json", "ckpt-2.tfckpt",
                                                    "ckpt-3.tfckpt"]
    assert trainer.read_bytes() == before  # checkpoints never touch the artifact


def test_run_resume_continues_exactly(trainer, tmp_path, capsys):
    losses = _losses(trainer, 10)
    ck = tmp_path / "ck"
    run_ok(capsys, "run", trainer, "--entry", "train_step", "--steps", 5, "--checkpoint-dir", ck)
    for i in range(5, 9):  # one step per process: each resumes where the last stopped
        res = tmp_path / f"r{i}.npz"
        out, err = run_ok(capsys, "run", trainer, "--entry", "train_step", "--checkpoint-dir",
                          ck, "--resume", "--out", res)
        assert f"resumed from {ck / f'ckpt-{i}.tfckpt'} (step {i})" in err
        with np.load(res) as z:
            assert z["loss"].tobytes() == losses[i].tobytes(), i
            assert z["step"] == i
    out, err = run_ok(capsys, "run", trainer, "--entry", "train_step", "--steps", 1,
                      "--checkpoint-dir", ck, "--resume")
    assert out == f"loss: f32[]\n{losses[9].item()!r}\nstep: i64[]\n9\n"
    assert "step 10" in err
    assert json.loads((ck / "checkpoint.json").read_text())["latest"] == "ckpt-10.tfckpt"
    program = load(trainer)
    program.restore_checkpoint(ck)
    assert program.step == 10 and program.variables["global_step"] == 10


def test_run_checkpoint_errors(trainer, artifact, tmp_path, capsys):
    base = ["run", trainer, "--entry", "train_step"]
    err = run_err(capsys, 1, *base, "--resume")
    assert err == "error: --resume needs --checkpoint-dir DIR\n"
    err = run_err(capsys, 1, *base, "--checkpoint-every", 2)
    assert err == "error: --checkpoint-every needs --checkpoint-dir DIR\n"
    err = run_err(capsys, 1, *base, "--checkpoint-dir", tmp_path, "--checkpoint-every", 0)
    assert err == "error: --checkpoint-every must be at least 1, not 0\n"
    for empty in (tmp_path / "none", tmp_path):
        err = run_err(capsys, 1, *base, "--checkpoint-dir", empty, "--resume")
        assert err == f"error: --resume: no checkpoint in {empty} to resume from\n"
    # a checkpoint of another model does not fit
    other = tmp_path / "other"
    run_ok(capsys, "run", artifact, "--entry", "train", "--feed", "scale=2",
           "--checkpoint-dir", other)
    err = run_err(capsys, 1, *base, "--checkpoint-dir", other, "--resume")
    assert err == f"error: {other / 'ckpt-1.tfckpt'} has no value for variable @w (and 8 more)\n"
    (other / "ckpt-1.tfckpt").write_bytes(b"garbage")
    err = run_err(capsys, 1, *base, "--checkpoint-dir", other, "--resume")
    assert err == (f"error: {other / 'ckpt-1.tfckpt'} is not a tfc checkpoint "
                   f"(not a zip file)\n")


# ---- the artifact's integrity, read-only entries, concurrent saves (#14) ---------------

def tfc_process(*argv, pause_after_load=False, **kwargs):
    """``tfc ARGV`` in its own process. With ``pause_after_load`` it prints ``loaded``
    once the artifact is loaded and waits for a line on stdin before going on: a second
    process can then update the artifact in between, as a concurrent run would."""
    env = {k: v for k, v in os.environ.items() if k != "TFC_DEBUG"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + \
        env.get("PYTHONPATH", "")
    code = "import sys, tfc.cli; sys.exit(tfc.cli.main(sys.argv[1:]))"
    if pause_after_load:
        code = ("import sys, tfc.cli, tfc.runtime as rt\n"
                "real = rt.load\n"
                "def load(*a, **k):\n"
                "    p = real(*a, **k); print('loaded', flush=True); sys.stdin.readline()\n"
                "    return p\n"
                "rt.load = load\n"
                "sys.exit(tfc.cli.main(sys.argv[1:]))")
    return subprocess.Popen([sys.executable, "-c", code, *map(str, argv)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kwargs)


def finish(proc, stdin=""):
    out, err = proc.communicate(stdin, timeout=300)
    return proc.returncode, out, err


def test_concurrent_saves_do_not_lose_an_update(trainer):
    """Two runs --save one artifact: the one that saves second loaded the artifact before
    the first saved, so writing it would silently drop the first one's steps."""
    train = ["run", trainer, "--entry", "train_step", "--save"]
    slow = tfc_process(*train, "--steps", 2, pause_after_load=True)
    assert slow.stdout.readline() == "loaded\n"
    assert finish(tfc_process(*train, "--steps", 3))[0] == 0  # the other run saves first
    code, _, err = finish(slow, "\n")
    assert code == 1, err
    assert err.endswith(f"error: {trainer} was changed by another process since this one loaded "
                   f"it at step 0 (it is now at step 3); not overwriting that update (use "
                   f"--force, or save(..., force=True), to overwrite it anyway)\n")
    assert load(trainer).step == 3  # the first run's update is kept
    slow = tfc_process(*train, "--steps", 2, "--force", pause_after_load=True)
    assert slow.stdout.readline() == "loaded\n"
    assert finish(tfc_process(*train, "--steps", 3))[0] == 0
    code, _, err = finish(slow, "\n")
    assert code == 0 and f"updated {trainer} (step 5)" in err, err  # forced: 3 + 2
    assert load(trainer).step == 5
    code, _, err = finish(tfc_process("run", trainer, "--entry", "train_step", "--force"))
    assert (code, err) == (1, "error: --force needs --save (it overwrites an artifact another "
                              "process updated)\n")


def test_sequential_saves_of_one_run_and_of_several_runs(trainer, capsys):
    for steps in (2, 3):  # each run loads what the previous one saved
        run_ok(capsys, "run", trainer, "--entry", "train_step", "--steps", steps, "--save")
    program = load(trainer)
    assert program.step == 5
    for _ in range(2):  # one program saving twice: its own first save is no conflict
        program.run("train_step")
        program.save(trainer)
    assert load(trainer).step == 7


def test_read_only_entry_saves_nothing_and_keeps_the_step(trainer, tmp_path, capsys):
    ck = tmp_path / "ck"
    run_ok(capsys, "run", trainer, "--entry", "train_step", "--steps", 3, "--checkpoint-dir", ck)
    before = {n: (ck / n).read_bytes() for n in os.listdir(ck)}
    artifact_before = trainer.read_bytes()
    out, err = run_ok(capsys, "run", trainer, "--entry", "evaluate", "--checkpoint-dir", ck,
                      "--resume", "--steps", 2, "--checkpoint-every", 1, "--save")
    assert f"resumed from {ck / 'ckpt-3.tfckpt'} (step 3)" in err
    assert "no checkpoint saved: entry 'evaluate' updates no variables" in err
    assert f"{trainer} not updated: entry 'evaluate' updates no variables" in err
    assert out.startswith("loss: f32[]")
    assert {n: (ck / n).read_bytes() for n in os.listdir(ck)} == before
    assert trainer.read_bytes() == artifact_before
    out, err = run_ok(capsys, "run", trainer, "--entry", "train_step", "--checkpoint-dir", ck,
                      "--resume")
    assert "resumed from" in err and "(step 3)" in err and "(step 4)" in err


def test_run_removes_a_killed_runs_checkpoint_temps(trainer, tmp_path, capsys):
    ck = tmp_path / "ck"
    run_ok(capsys, "run", trainer, "--entry", "train_step", "--checkpoint-dir", ck)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    from tfc.atomic import temp_name
    temps = [ck / temp_name(t).replace(f"-{os.getpid()}-", f"-{dead.pid}-")
             for t in ("ckpt-2.tfckpt", "checkpoint.json")]
    for t in temps:
        t.write_bytes(b"what a killed save left")
    mine = ck / "notes.tmp"
    mine.write_bytes(b"not tfc's")
    run_ok(capsys, "run", trainer, "--entry", "train_step", "--checkpoint-dir", ck, "--resume")
    assert sorted(os.listdir(ck)) == ["checkpoint.json", "ckpt-1.tfckpt", "ckpt-2.tfckpt",
                                      "notes.tmp"]


def test_run_with_corrupt_object_code(trainer, tmp_path):
    """The object code of an llvm artifact rewritten (valid zip CRCs, wrong content):
    compiled again from the IR with a warning naming the artifact and the member, or
    refused with --no-recompile; --recompile never links it."""
    program = load(trainer, backend="llvm")
    program.run("train_step")
    program.save(trainer)
    with zipfile.ZipFile(trainer) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    entry = json.loads(members["manifest.json"])["native_code"]["entries"]["train_step"]
    member = entry["folder"] + "object.o"
    members[member] = members[member][:len(members[member]) // 2]  # SIGSEGV before #14
    with zipfile.ZipFile(trainer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    base = ["run", trainer, "--entry", "train_step", "--backend", "llvm"]
    code, out, err = finish(tfc_process(*base))
    assert code == 0, err
    assert err.startswith(f"warning: {trainer}: {member} is corrupt (its SHA-256 does not match "
                          f"the one manifest.json records); compiling entry 'train_step' again "
                          f"from the IR")
    assert out == finish(tfc_process(*base, "--recompile"))[1]
    code, _, err = finish(tfc_process(*base, "--no-recompile"))
    assert code == 1 and err.startswith(f"error: {trainer}: {member} is corrupt") \
        and "refusing to link its object code" in err, err
    code, _, err = finish(tfc_process(*base, "--recompile", "--no-recompile"))
    assert code == 2 and "not allowed with argument" in err


def test_compile_rejects_a_state_op_of_the_wrong_type(tmp_path, capsys):
    """kmeans' IR with the centroids (f32[10,64]) assigned an f32[B,64] value compiled,
    then `tfc run` segfaulted or aborted with heap corruption; now the verifier refuses
    it, naming the assign's line in the example."""
    root = Path(__file__).resolve().parents[1]
    out, _ = run_ok(capsys, "ir", root / "examples" / "kmeans_digits.py", "--raw", "--full")
    assert "var.assign @centroids, %19 " in out
    src = tmp_path / "kmeans.tfir"
    src.write_text(out.replace("var.assign @centroids, %19 ", "var.assign @centroids, %0 "))
    err = run_err(capsys, 1, "compile", src, "-o", tmp_path / "k.tfc")
    assert err.startswith("error: ") and "kmeans_digits.py:33: @step: op 23 'var.assign'" in err
    assert "assigns a f32[B,64] to @centroids, declared f32[10,64]" in err
    assert not (tmp_path / "k.tfc").exists()
    # a Program refuses the module too, before anything runs it
    from tfc.errors import VerifyError
    from tfc.ir.parser import parse_module
    from tfc.runtime.artifact import save_artifact
    from tfc.runtime.program import Program
    module = parse_module(src.read_text(), src.name)
    with pytest.raises(VerifyError, match="assigns a f32"):
        Program(module, backend="reference").run("step", x=np.zeros((4, 64), np.float32))
    # an artifact written around the compiler and Program is refused when `tfc run`
    # loads it, before any native code runs
    bad = tmp_path / "bad.tfc"
    save_artifact(bad, module, {n: np.zeros(d.type.shape, d.type.dtype.np)
                                for n, d in module.variables.items()})
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((40, 64), np.float32))
    err = run_err(capsys, 1, "run", bad, "--entry", "step", "--feed",
                  f"x={tmp_path / 'x.npy'}")
    assert err.startswith(f"error: {bad}: ") and "assigns a f32[B,64] to @centroids" in err


def test_run_of_a_shape_too_large_to_allocate_is_an_error(tmp_path, capsys):
    """A huge shape (a mutation fuzzer's `shape=[1099511627776]`) was `internal error:
    MemoryError` (exit 70) on both backends; it is the input's doing: `error:`, exit 1.
    (2^47 floats: more than any x86-64 address space, so no allocation can succeed.)"""
    src = tmp_path / "huge.tfir"
    n = 1 << 47
    src.write_text(f"graph @main(%x: f32[3]) -> (z: f32[{n}]) {{\n"
                   f"  %z = random.uniform {{shape=[{n}], dtype=f32, seed=1}} : f32[{n}]\n"
                   "  return %z\n}\n")
    run_ok(capsys, "compile", src, "-o", tmp_path / "huge.tfc", "-q")
    for backend in ("llvm", "reference"):
        err = run_err(capsys, 1, "run", tmp_path / "huge.tfc", "--feed", "x=[1,2,3]",
                      "--backend", backend)
        assert err.startswith("error: out of memory"), err


def test_run_of_a_singular_matrix_inverse_is_the_same_error_on_both_backends(tmp_path,
                                                                             capsys):
    """A singular matrix whose LU meets no exactly zero pivot: the reference printed an
    "inverse" of 1e16 where llvm failed (or the other way round); both now say it is not
    invertible, at the op's line."""
    src = tmp_path / "inv.tfir"
    src.write_text("graph @main(%x: f64[5,5]) -> (y: f64[5,5]) {\n"
                   "  %y = matrix_inverse %x : f64[5,5]  # model.py:4\n  return %y\n}\n")
    run_ok(capsys, "compile", src, "-o", tmp_path / "inv.tfc", "-q")
    rank2 = np.random.RandomState(0).randn(5, 2) @ np.random.RandomState(1).randn(2, 5)
    np.save(tmp_path / "x.npy", rank2)
    errors = set()
    for backend in ("llvm", "reference"):
        errors.add(run_err(capsys, 1, "run", tmp_path / "inv.tfc", "--feed",
                           f"x={tmp_path / 'x.npy'}", "--backend", backend))
    assert errors == {"error: model.py:4: matrix_inverse: input is not invertible: the 5x5 "
                      "matrix is singular to working precision\n"}, errors
