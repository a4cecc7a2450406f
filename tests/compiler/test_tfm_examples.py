"""Every ``examples/*.tfm`` and its Python twin ``<name>_tfm.py`` compile to the same IR,
and the ``tfc`` command takes ``.tfm`` files as it takes ``model.py``."""

import contextlib
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tfc.cli import main
from tfc.compiler.frontend import load_model
from tfc.compiler.tfm import parse_tfm
from tfc.ir.printer import print_module
from tfc.passes import run_passes
from tfc.runtime.program import Program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TFM_FILES = sorted(EXAMPLES.glob("*.tfm"))
_LOC_COMMENT = re.compile(r"[ \t]+# \S+:\d+(:\d+)?$", re.M)


def ir_text(path: Path) -> str:
    """The IR after ``canonicalize,cse``, printed without the ``# file:line`` comments
    (the one thing that must differ: they point into each file)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        module = load_model(path)
    finally:
        sys.path.remove(str(EXAMPLES))
    return _LOC_COMMENT.sub("", print_module(run_passes(module, ["canonicalize", "cse"])))


def one_blas_thread() -> contextlib.AbstractContextManager:
    """OpenBLAS's threads only slow the reference backend's small matrix products."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def test_the_examples_include_the_mlp_and_the_cnn():
    assert {"mlp.tfm", "cnn.tfm"} <= {p.name for p in TFM_FILES}


@pytest.mark.parametrize("path", TFM_FILES, ids=lambda p: p.name)
def test_tfm_and_python_twin_compile_to_the_same_ir(path):
    twin = path.with_name(f"{path.stem}_tfm.py")
    assert twin.is_file(), f"{path.name} has no Python twin {twin.name}"
    tfm_text, py_text = ir_text(path), ir_text(twin)
    assert "graph @train_step(" in tfm_text and "# " not in tfm_text
    assert tfm_text == py_text


def test_mlp_trains_like_its_twin():
    """50 full-batch Adam steps from the same initial values: the same losses bit for bit,
    and the test accuracy the Python twin reaches."""
    pytest.importorskip("sklearn")
    sys.path.insert(0, str(EXAMPLES))
    try:
        from data import digits_split
    finally:
        sys.path.remove(str(EXAMPLES))
    x_train, x_test, y_train, y_test = digits_split()
    accuracy = []
    with one_blas_thread():
        for path in (EXAMPLES / "mlp.tfm", EXAMPLES / "mlp_tfm.py"):
            p = Program(run_passes(load_model(path), ["canonicalize", "cse", "dce"]),
                        backend="reference")
            losses = [float(p.run("train_step", x=x_train, y=y_train)["loss"])
                      for _ in range(50)]
            assert losses[-1] < 0.2 * losses[0]
            accuracy.append(float(p.run("evaluate", x=x_test, y=y_test)["accuracy"]))
    assert accuracy[0] == accuracy[1] and accuracy[0] >= 0.95


def test_cli_compile_ir_and_run(tmp_path, capsys):
    art = tmp_path / "mlp.tfc"
    assert main(["compile", str(EXAMPLES / "mlp.tfm"), "-o", str(art), "-q"]) == 0
    assert main(["ir", str(EXAMPLES / "mlp.tfm"), "--after", "cse"]) == 0
    out = capsys.readouterr().out
    assert "graph @predict(%x: f32[B,64])" in out and "mlp.tfm:" in out
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.random((16, 64), dtype=np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 10, 16).astype(np.int32))
    assert main(["run", str(art), "--backend", "reference", "--entry", "train_step",
                 "--feed", f"x={tmp_path / 'x.npy'}", "--feed", f"y={tmp_path / 'y.npy'}",
                 "--steps", "3"]) == 0
    assert "loss" in capsys.readouterr().out


def test_cli_reports_tfm_errors_with_a_caret(tmp_path, capsys):
    bad = tmp_path / "bad.tfm"
    bad.write_text("input x: f32[B, 4]\nentry f(x) { return relux(x) }\n")
    assert main(["compile", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"error: {bad}:2:21: unknown op 'relux' (did you mean 'relu'?)" in err
    assert "  entry f(x) { return relux(x) }\n" + " " * 22 + "^" in err


def test_the_documented_example_builds():
    doc = (EXAMPLES.parent / "docs" / "language.md").read_text()
    example = doc.split("## A complete example")[1].split("```\n")[1]
    assert set(parse_tfm(example, "language.md").entries) == {"predict", "evaluate",
                                                                "train_step"}
