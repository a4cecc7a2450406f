"""Program: initial values from __init__, runs, fetches, variable persistence, atomic steps."""

import ctypes

import numpy as np
import pytest

from tfc.backends.reference import ReferenceBackend
from tfc.errors import ExecutionError, FeedError, TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import INIT_GRAPH, Graph, Module, VariableDecl
from tfc.ir.types import DType, TensorType
from tfc.runtime import Program

W = TensorType(DType.f32, (3,))
COUNT = TensorType(DType.i64, ())


def make_module() -> Module:
    """var @layer/w f32[3], var @count i64[]; predict(x) = x * w; train doubles w, counts."""
    m = Module()
    m.variables["layer/w"] = VariableDecl("layer/w", W)
    m.variables["count"] = VariableDecl("count", COUNT, trainable=False, device="/cpu:0")

    init = m.add_graph(Graph(INIT_GRAPH))
    b = Builder(init)
    b.op("var.assign", b("constant", value=np.array([1, 2, 3], np.float32)), var="layer/w")
    b.op("var.assign", b("constant", value=np.array(0, np.int64)), var="count")

    pred = m.add_graph(Graph("predict"))
    x = pred.add_arg(TensorType(DType.f32, ("B", 3)), "x")
    b = Builder(pred)
    w = b("var.read", var="layer/w", result_types=[W])
    pred.set_results([b("mul", x, w)], ["y"])

    train = m.add_graph(Graph("train"))
    scale = train.add_arg(TensorType(DType.f32, ()), "scale")
    b = Builder(train)
    w = b("var.read", var="layer/w", result_types=[W])
    b.op("var.assign", b("mul", w, scale), var="layer/w")
    b.op("var.assign_add", b("constant", value=np.array(1, np.int64)), var="count")
    c = b("var.read", var="count", result_types=[COUNT])
    train.set_results([c, w], ["count", "w_before"])
    return m


def test_init_and_run():
    p = Program(make_module())
    assert p.step == 0
    assert set(p.variables) == {"layer/w", "count"}
    np.testing.assert_array_equal(p.variables["layer/w"], [1, 2, 3])
    out = p.run("predict", x=np.ones((2, 3), np.float32))
    assert list(out) == ["y"]
    np.testing.assert_array_equal(out["y"], [[1, 2, 3], [1, 2, 3]])
    assert p.step == 1


def test_variables_persist_across_runs():
    p = Program(make_module())
    for i in range(3):
        out = p.run("train", {"scale": 2.0})
        assert out["count"] == i  # reads see the start of the step
        np.testing.assert_array_equal(out["w_before"], np.array([1, 2, 3]) * 2.0 ** i)
    np.testing.assert_array_equal(p.variables["layer/w"], [8, 16, 24])
    assert p.variables["count"] == 3 and p.variables["count"].dtype == np.int64
    y = p.run("predict", x=[[1, 1, 1]])["y"]
    np.testing.assert_array_equal(y, [[8, 16, 24]])


def test_fetches_are_the_callers_own():
    p = Program(make_module())
    out = p.run("train", scale=1.0)
    out["w_before"][:] = 99  # a fetch of a variable is a copy
    np.testing.assert_array_equal(p.variables["layer/w"], [1, 2, 3])
    with pytest.raises(ValueError):
        p.variables["layer/w"][0] = 5  # stored values are read-only


class Aliasing:
    """The reference backend, except that ``predict`` returns a writeable array over
    ``layer/w``'s own memory (as a native backend that wraps a pointer might)."""

    name = "aliasing"
    pipeline = ""

    def compile(self, module, entry):
        real = ReferenceBackend().compile(module, entry)

        def run(feeds, variables, step):
            result = real(feeds, variables, step)
            if entry == "predict":
                w = variables["layer/w"]
                ptr = ctypes.cast(w.ctypes.data, ctypes.POINTER(ctypes.c_float))
                result.fetches[0] = np.ctypeslib.as_array(ptr, w.shape)
            return result
        return run


def test_a_writeable_fetch_over_variable_memory_is_copied():
    p = Program(make_module(), backend=Aliasing())
    out = p.run("predict", x=np.ones((1, 3), np.float32))
    out["y"][:] = 99
    np.testing.assert_array_equal(p.variables["layer/w"], [1, 2, 3])


def test_unknown_entry_lists_entries():
    p = Program(make_module())
    with pytest.raises(TfcError) as e:
        p.run("predcit", x=np.ones((1, 3), np.float32))
    msg = str(e.value)
    assert "unknown entry 'predcit' (did you mean 'predict'?)" in msg
    assert "predict(x: f32[B,3]) -> (y: f32[B,3])" in msg and "train(" in msg
    with pytest.raises(TfcError, match="unknown entry"):
        p.run(INIT_GRAPH)


def test_entries_signatures():
    sig = Program(make_module()).entries
    assert list(sig) == ["predict", "train"]
    assert str(sig["train"]) == "train(scale: f32[]) -> (count: i64[], w_before: f32[3])"
    assert sig["predict"].to_json() == {
        "feeds": [{"name": "x", "dtype": "f32", "shape": ["B", 3]}],
        "fetches": [{"name": "y", "dtype": "f32", "shape": ["B", 3]}]}


def test_feed_errors_leave_state_untouched():
    p = Program(make_module())
    with pytest.raises(FeedError, match="entry 'train': missing feed 'scale'"):
        p.run("train")
    with pytest.raises(FeedError, match="given twice"):
        p.run("train", {"scale": 1.0}, scale=2.0)
    assert p.step == 0 and p.variables["count"] == 0


class Faulty:
    """The reference backend, except that entries fail after computing their updates."""

    name = "faulty"
    pipeline = ""

    def __init__(self, fail: str) -> None:
        self.fail = fail

    def compile(self, module, entry):
        real = ReferenceBackend().compile(module, entry)
        if entry == INIT_GRAPH:
            return real

        def run(feeds, variables, step):
            result = real(feeds, variables, step)
            if self.fail == "raise":
                raise ExecutionError("boom")
            result.updates["count"] = np.float32(1)  # the wrong dtype
            return result
        return run


@pytest.mark.parametrize("fail", ["raise", "bad update"])
def test_failed_step_applies_no_update(fail):
    p = Program(make_module(), backend=Faulty(fail))
    with pytest.raises(ExecutionError, match="boom" if fail == "raise" else
                       r"entry 'train': variable @count has dtype f32, expected i64\[\]"):
        p.run("train", scale=3.0)
    assert p.step == 0 and p.variables["count"] == 0
    np.testing.assert_array_equal(p.variables["layer/w"], [1, 2, 3])


def test_explicit_variables_are_checked():
    m = make_module()
    p = Program(m, {"layer/w": np.array([4, 5, 6], np.float32), "count": np.int64(7)}, step=5)
    assert p.step == 5 and p.variables["count"] == 7
    with pytest.raises(TfcError, match=r"variable @count \(i64\[\]\) has no initial value"):
        Program(m, {"layer/w": np.zeros(3, np.float32)})
    with pytest.raises(TfcError, match=r"variable @layer/w has dtype f64, expected f32\[3\]"):
        Program(m, {"layer/w": np.zeros(3), "count": np.int64(0)})
    with pytest.raises(TfcError, match=r"variable @layer/w has shape \[4\], expected f32\[3\]"):
        Program(m, {"layer/w": np.zeros(4, np.float32), "count": np.int64(0)})
    with pytest.raises(TfcError, match="unknown variable @bias"):
        Program(m, {"layer/w": np.zeros(3, np.float32), "count": np.int64(0),
                    "bias": np.zeros(1)})
    src = np.array([4, 5, 6], np.float32)
    p = Program(m, {"layer/w": src, "count": np.int64(0)})
    src[0] = 0  # the program copied it
    assert p.variables["layer/w"][0] == 4 and src.flags.writeable


def test_missing_init_graph_names_the_variable():
    m = make_module()
    del m.graphs[INIT_GRAPH]
    with pytest.raises(TfcError, match=r"variable @layer/w \(f32\[3\]\) has no initial value"):
        Program(m)


def test_set_variable():
    p = Program(make_module())
    p.set_variable("layer/w", np.array([0, 0, 1], np.float32))
    np.testing.assert_array_equal(p.run("predict", x=[[5, 5, 5]])["y"], [[0, 0, 5]])
    with pytest.raises(TfcError, match="did you mean 'count'"):
        p.set_variable("cont", np.int64(1))
