"""Bad input to every `tfc` subcommand gets one `error:` line and exit 1, before any
work is done: numeric options, output paths, GPUs, empty and odd files, bad feeds."""

import numpy as np
import pytest

import tfc.runtime
from tfc.cli import main

MODEL_TFM = """\
input x: f32[B, 3]
param w: f32[3] = ones
entry predict(x) { return y = x * w }
"""


@pytest.fixture
def artifact(tmp_path, capsys):
    src = tmp_path / "m.tfm"
    src.write_text(MODEL_TFM)
    assert main(["compile", str(src), "-q", "-o", str(tmp_path / "m.tfc")]) == 0
    capsys.readouterr()
    return tmp_path / "m.tfc"


def error_of(capsys, *argv) -> str:
    """The one error line of a failing command (exit 1, no traceback)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert err.startswith("error: ") and "internal error" not in err and "Traceback" not in err
    return err


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a command gets as far as loading an artifact or a model."""
    def refuse(*args, **kwargs):
        raise AssertionError("the command did work before checking its arguments")
    monkeypatch.setattr(tfc.runtime, "load", refuse)
    monkeypatch.setattr("tfc.compiler.driver.load_source", refuse)


@pytest.mark.parametrize("argv, message", [
    (["bench", "{a}", "--batch", "-5"], "--batch must be at least 1, not -5"),
    (["bench", "{a}", "--batch", "0"], "--batch must be at least 1, not 0"),
    (["bench", "{a}", "--steps", "0"], "--steps must be at least 1, not 0"),
    (["run", "{a}", "--steps", "-1"], "--steps must be at least 1, not -1"),
    (["run", "{a}", "--checkpoint-dir", "{d}", "--checkpoint-every", "0"],
     "--checkpoint-every must be at least 1, not 0"),
    (["bench", "{a}", "--trace", "{d}/missing/t.json"],
     "--trace {d}/missing/t.json: no such directory: {d}/missing"),
    (["bench", "{a}", "--trace", "{d}"], "is a directory, not a file name"),
    (["run", "{a}", "--out", "{d}/missing/o.npz"], "no such directory: {d}/missing"),
    (["run", "{a}", "--out", "{d}/o.txt"], "expected a .npz or .npy file name"),
    (["compile", "{d}/m.tfm", "-o", "{d}/missing/m.tfc"], "no such directory: {d}/missing"),
    (["compile", "{d}/m.tfm", "-o", "{d}"], "is a directory, not a file name"),
    (["ir", "{d}/m.tfm", "-o", "{d}/missing/m.tfir"], "no such directory"),
    (["opt", "{d}/m.tfir", "-o", "{d}/missing/m.tfir"], "no such directory"),
    (["viz", "{a}", "-o", "{d}/missing/g.html"], "no such directory"),
    (["calibrate", "-o", "{d}/missing/d.json"], "no such directory"),
])
def test_arguments_are_checked_before_any_work(argv, message, artifact, no_work, capsys):
    d = artifact.parent
    argv = [a.format(a=artifact, d=d) for a in argv]
    assert message.format(d=d) in error_of(capsys, *argv)


def test_gpu_devices_without_a_cuda_compiler_say_so(tmp_path, capsys, monkeypatch):
    """A GPU needs no GPU to compile for, but it needs the CUDA C compiler (NVRTC or
    nvcc): without one, compiling for a GPU is one clear error naming what to install."""
    reason = "no CUDA C compiler found (install NVRTC: pip install -e '.[cuda]')"
    monkeypatch.setattr("tfc.pipeline.cuda_compile_unavailable", lambda: reason)
    src = tmp_path / "m.tfm"
    src.write_text(MODEL_TFM)
    for devices in ("gpu:0", "cpu:0,gpu:0"):
        err = error_of(capsys, "compile", src, "--devices", devices, "-o", tmp_path / "g.tfc")
        assert f"/gpu:0: cannot compile for a GPU on this machine: {reason}" in err
    assert "cannot compile for a GPU" in error_of(capsys, "ir", src, "--devices", "gpu:1")
    assert not (tmp_path / "g.tfc").exists()


@pytest.mark.parametrize("name, text, message", [
    ("e.tfir", "", "e.tfir: empty input"),
    ("e.tfm", "  \n", "e.tfm: empty input"),
    ("e.py", "", "e.py: empty input"),
    ("c.tfir", "// only a comment\n", "c.tfir: the IR defines no graphs to run"),
    ("b.tfir", b"\xff\xfe", "b.tfir: not a UTF-8 text file"),
    ("m.txt", "x", "unknown model format '.txt'"),
])
def test_empty_and_odd_model_files(name, text, message, tmp_path, capsys):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    for command in ("compile", "ir"):
        assert message in error_of(capsys, command, path)
    assert not path.with_suffix(".tfc").exists()


def test_opt_of_empty_input(tmp_path, capsys):
    assert "/dev/null: empty input" in error_of(capsys, "opt", "/dev/null")
    (tmp_path / "c.tfir").write_text("// nothing\n")
    assert "empty input" in error_of(capsys, "opt", tmp_path / "c.tfir")
    assert "is a directory" in error_of(capsys, "opt", tmp_path)


def test_directories_and_models_given_as_artifacts(artifact, tmp_path, capsys):
    assert "is a directory, not a model file" in error_of(capsys, "ir", tmp_path)
    assert "is a directory, not a tfc artifact" in error_of(capsys, "run", tmp_path)
    err = error_of(capsys, "run", tmp_path / "m.tfm")
    assert "m.tfm is a model, not a compiled artifact: compile it first" in err
    assert "compile it first" in error_of(capsys, "bench", tmp_path / "m.tfm")


@pytest.mark.parametrize("feed, message", [
    ("x=", "feed 'x': '' is neither a .npy/.npz file"),
    ("x=missing.npy", "no such file or directory: missing.npy"),
    ("x={d}/i.npy", "feed 'x' has dtype i32, expected f32[B,3]"),
    ("x={d}/s.npy", "feed 'x' has shape [2,5], expected f32[B,3]"),
    ("=1", "expected NAME=FILE.npy"),
    ("y=1", "unknown feed 'y'"),
])
def test_bad_feeds(feed, message, artifact, capsys):
    d = artifact.parent
    np.save(d / "i.npy", np.zeros((2, 3), np.int32))
    np.save(d / "s.npy", np.zeros((2, 5), np.float32))
    for command in ("run", "bench"):
        err = error_of(capsys, command, artifact, "--feed", feed.format(d=d))
        assert message in err, err


def test_unknown_entry(artifact, capsys):
    for command in ("run", "bench"):
        assert "unknown entry 'nope'" in error_of(capsys, command, artifact, "--entry", "nope")


def test_out_of_memory_is_an_error_not_a_bug(artifact, capsys):
    err = error_of(capsys, "bench", artifact, "--batch", 10**15)
    assert err.startswith("error: out of memory: Unable to allocate")


def test_opt_of_a_model_says_to_print_its_ir(tmp_path, capsys):
    (tmp_path / "m.tfm").write_text(MODEL_TFM)
    err = error_of(capsys, "opt", tmp_path / "m.tfm")
    assert "tfc opt reads textual IR (.tfir)" in err and "tfc ir" in err


def test_empty_option_values_are_not_ignored(artifact, tmp_path, capsys):
    assert "no devices given" in error_of(capsys, "calibrate", "--devices", "",
                                          "-o", tmp_path / "d.json")
    assert "no devices given" in error_of(capsys, "ir", tmp_path / "m.tfm", "--devices", "")
    assert "unknown entry ''" in error_of(capsys, "bench", artifact, "--entry", "")
    assert not (tmp_path / "d.json").exists()
