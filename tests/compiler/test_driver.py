"""The compile driver: model -> passes -> artifact (tests live beside the runtime's)."""

import io

import numpy as np
import pytest

from tfc.compiler.driver import (compile_model, compile_to_artifact, compile_with_report,
                                 count_ops)
from tfc.errors import TfcError
from tfc.ir.printer import print_module
from tfc.runtime import load

MODEL = """\
var @w : f32[2]

graph @__init__() -> () {
  %0 = constant dense<f32[2]: 1.0, 2.0> : f32[2]
  %1 = constant dense<f32[2]: 1.0, 1.0> : f32[2]
  %2 = mul %0, %1 : f32[2]
  %3 = neg %0 : f32[2]
  var.assign @w, %2
  return
}

graph @predict(%x: f32[B,2]) -> (y: f32[B,2]) {
  %w = var.read @w : f32[2]
  %0 = add %x, %w : f32[B,2]
  %1 = add %x, %w : f32[B,2]
  %2 = mul %0, %1 : f32[B,2]
  return %2
}
"""


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.tfir"
    path.write_text(MODEL)
    return path


def test_compile_runs_the_pipeline_on_every_graph(model):
    module, report = compile_with_report(model, backend="reference")
    assert report.pipeline == ["canonicalize", "cse", "dce"]
    assert [name for name, _ in report.pass_seconds] == report.pipeline
    assert report.ops_before == 9 and report.ops_after == count_ops(module)
    assert report.ops_after < report.ops_before
    text = print_module(module)
    assert "neg" not in text  # dce ran on __init__ too
    assert text.count("add") == 1  # cse ran on predict


def test_print_after(model):
    stream = io.StringIO()
    compile_model(model, "cse,dce", print_after="cse", stream=stream)
    assert stream.getvalue().startswith("// -----// IR Dump After cse //----- //")
    with pytest.raises(TfcError, match="unknown pass 'cs'"):
        compile_model(model, "cs")


def test_compile_to_artifact(model, tmp_path):
    out = tmp_path / "m.tfc"
    program = compile_to_artifact(model, out)
    loaded = load(out)
    np.testing.assert_array_equal(loaded.variables["w"], [1, 2])
    assert print_module(loaded.module) == print_module(program.module).split("graph @__init__")[0] \
        + "graph @" + print_module(program.module).split("graph @__init__")[1].split("graph @", 1)[1]
    x = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(loaded.run("predict", x=x)["y"], (x + [1, 2]) ** 2)
    # recompiling an artifact keeps its state
    loaded.set_variable("w", np.array([5, 6], np.float32))
    loaded.save(out)
    again = compile_to_artifact(out, tmp_path / "again.tfc", "dce")
    np.testing.assert_array_equal(again.variables["w"], [5, 6])


def test_missing_model(tmp_path):
    with pytest.raises(TfcError, match="no such model file"):
        compile_model(tmp_path / "nope.py")
