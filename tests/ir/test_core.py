"""Values, ops (frozen attrs), graphs and modules."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import Location, TfcError
from tfc.ir.core import (INIT_GRAPH, Graph, Module, Op, Value, VariableDecl, attr_key,
                         freeze_attr)
from tfc.ir.types import DType, TensorType

F23 = TensorType(DType.f32, (2, 3))


def _graph() -> tuple[Graph, Value, Value, Op, Op]:
    g = Graph("g")
    x = g.add_arg(F23, "x")
    y = g.add_arg(F23, "y")
    a = g.append(Op("add", [x, y], {}, [F23]))
    m = g.append(Op("mul", [a.result, x], {}, [F23]))
    g.set_results([m.result], ["z"])
    return g, x, y, a, m


# ---- attrs --------------------------------------------------------------------------

def test_attrs_are_frozen():
    arr = np.arange(4.0)
    op = Op("k", [], {"perm": [1, 0], "nested": [[1, 2], (3,)], "value": arr,
                      "n": np.int64(3), "f": np.float32(0.5)}, [])
    assert op.attrs["perm"] == (1, 0) and op.attrs["nested"] == ((1, 2), (3,))
    assert type(op.attrs["n"]) is int and type(op.attrs["f"]) is float
    with pytest.raises(TypeError):
        op.attrs["perm"] = (0, 1)  # type: ignore[index]
    with pytest.raises(ValueError):
        op.attrs["value"][0] = 9.0
    arr[0] = 9.0  # the op holds its own copy
    assert op.attrs["value"][0] == 0.0


def test_attrs_sorted_and_keyed():
    a = Op("k", [], {"b": 1, "a": [1.0, 2.0]}, [])
    b = Op("k", [], {"a": (1.0, 2.0), "b": 1}, [])
    assert list(a.attrs) == ["a", "b"]
    assert a.attrs_key() == b.attrs_key()
    hash(a.attrs_key())
    # 1 and 1.0 and True are different attrs; NaN equals itself as a key
    assert attr_key(1) != attr_key(1.0) != attr_key(True)
    assert attr_key(float("nan")) == attr_key(float("nan"))


def test_array_attr_keys():
    x = freeze_attr(np.array([1, 2], dtype=np.int32))
    assert attr_key(x) == attr_key(freeze_attr(np.array([1, 2], dtype=np.int32)))
    assert attr_key(x) != attr_key(freeze_attr(np.array([1, 2], dtype=np.int64)))
    assert attr_key(x) != attr_key(freeze_attr(np.array([[1, 2]], dtype=np.int32)))


# ---- values and ops -----------------------------------------------------------------

def test_results_know_their_op():
    loc = Location("model.py", 12)
    op = Op("split", [], {}, [F23, F23], names=["lo"], device="cpu:0", loc=loc)
    lo, hi = op.results
    assert (lo.op, lo.index, lo.name) == (op, 0, "lo")
    assert (hi.op, hi.index, hi.name) == (op, 1, None)
    assert lo.type == F23 and lo.dtype == DType.f32 and lo.shape == (2, 3)
    assert op.device == "cpu:0" and repr(op) == "<Op split at model.py:12>"
    assert "split#1" in repr(hi)
    with pytest.raises(TfcError, match="split has 2 results, not one") as e:
        op.result
    assert e.value.loc == loc


def test_replace_input():
    g, x, y, a, m = _graph()
    m.replace_input(x, y)
    assert m.inputs == [a.result, y]


# ---- graphs -------------------------------------------------------------------------

def test_graph_helpers():
    g, x, y, a, m = _graph()
    assert g.arg("y") is y and x.index == 0 and y.index == 1 and x.op is None
    with pytest.raises(KeyError):
        g.arg("w")
    assert g.arg_names == ["x", "y"]
    assert g.signature() == "@g(x: f32[2,3], y: f32[2,3]) -> (z: f32[2,3])"
    assert "with 2 ops" in repr(g)
    uses = g.uses()
    assert uses[x] == [a, m] and uses[y] == [a] and uses[a.result] == [m]
    assert m.result not in uses


def test_graph_default_names():
    g = Graph("h", args=[Value(F23), Value(F23, name="b")])
    assert g.arg_names == ["arg0", "b"] and g.args[1].index == 1
    g.set_results(list(g.args))
    assert g.result_names == ["out0", "out1"]
    assert Graph("e", results=g.args).result_names == ["out0", "out1"]


def test_walk_visits_regions_after_their_parent():
    inner = Graph("body")
    inner.append(Op("inner", [], {}, []))
    g = Graph("outer")
    first = g.append(Op("first", [], {}, []))
    loop = g.append(Op("while", [], {}, [], regions=[inner]))
    last = g.append(Op("last", [], {}, []))
    assert [o.kind for o in g.walk()] == ["first", "while", "inner", "last"]
    assert list(g.walk())[0] is first and loop.regions == [inner] and g.ops[-1] is last


# ---- modules ------------------------------------------------------------------------

def test_module_entries_exclude_init():
    mod = Module()
    init = mod.add_graph(Graph(INIT_GRAPH))
    train = mod.add_graph(Graph("train_step"))
    predict = mod.add_graph(Graph("predict"))
    assert INIT_GRAPH == "__init__"
    assert mod.graphs == {"__init__": init, "train_step": train, "predict": predict}
    assert mod.entries == {"train_step": train, "predict": predict}
    assert Module().entries == {}


def test_variable_decl():
    mod = Module(variables={"W": VariableDecl("W", TensorType(DType.f32, (784, 10)))})
    w = mod.variables["W"]
    assert w.trainable and w.device is None and str(w.type) == "f32[784,10]"


def test_attrs_key_fast_path_is_the_general_rule() -> None:
    """``Op.attrs_key``'s shortcuts for plain values and arrays (cse's keys, fusion's
    templates) give ``attr_key``'s tuple for every kind of attr value: what merges, and
    which ops share a region template, is decided by the general rule."""
    f32_3 = TensorType(DType.f32, (3,))
    x = Value(f32_3)
    scalar = TensorType(DType.f32, ())
    ops = [Op("constant", [], {"value": np.arange(3, dtype=np.float32)}, [f32_3]),
           Op("constant", [], {"value": np.float64(2.5)}, [scalar]),
           Op("var.read", [], {"var": "W"}, [f32_3]),
           Op("sum", [x], {"axes": (0,), "keepdims": False}, [scalar]),
           Op("sum", [x], {"axes": None, "keepdims": True}, [scalar]),
           Op("fill", [], {"shape": (3,), "value": float("nan")}, [f32_3]),
           Op("test.any", [x], {"a": 1, "b": True, "c": 1.0, "d": "s", "e": ((1, 2), (3,)),
                                "f": np.int64(4), "g": np.zeros((2, 0), np.int32)}, [f32_3]),
           Op("exp", [x], {}, [f32_3])]
    for op in ops:
        assert op.attrs_key() == tuple((k, attr_key(v)) for k, v in op.attrs.items())
    assert ops[3].attrs_key() != ops[4].attrs_key()


def test_clone_is_the_constructor_without_its_checks(monkeypatch) -> None:
    """``Op.clone`` makes what ``Op(...)`` with the op's fields makes (kind, inputs, the
    same frozen attrs view, result types and names, device, location, regions) without
    running the constructor (extract copies every op of a request with it)."""
    t = TensorType(DType.f32, (2, 3))
    g = Graph("g")
    a = g.add_arg(t, "a")
    region = Graph("r")
    op = Op("split", [a], {"axis": 1, "sizes": [1, 2]}, [t, t], device="/cpu:0",
            loc=Location("m.py", 3), regions=[region], names=["left"])
    b = g.add_arg(t, "b")
    calls: list[str] = []
    real = Op.__init__

    def counting(self, *args, **kwargs):
        calls.append(args[0])
        real(self, *args, **kwargs)
    monkeypatch.setattr(Op, "__init__", counting)
    copy = op.clone([b])
    monkeypatch.undo()
    assert not calls
    want = Op(op.kind, [b], op.attrs, [r.type for r in op.results], device=op.device,
              loc=op.loc, regions=op.regions, names=[r.name for r in op.results])
    for made in (copy, want):
        assert made.kind == "split" and made.inputs == [b] and made.inputs is not op.inputs
        assert made.attrs is op.attrs and made.device == "/cpu:0" and made.loc == op.loc
        assert made.regions == [region] and made.regions is not op.regions
        assert [(r.type, r.name, r.index, r.op) for r in made.results] == \
            [(t, "left", 0, made), (t, None, 1, made)]
    other = op.clone([a], [Graph("s")])
    assert [r.name for r in other.regions] == ["s"]
