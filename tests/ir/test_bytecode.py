"""The IR bytecode: bytecode -> module -> text equals the module's own text for every
module we have, every attr kind survives bit-exactly, and corrupt bytecode is a located
BytecodeError (never a Python exception)."""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from tfc.errors import Location, ParseError, TfcError
from tfc.ir.builder import Builder
from tfc.ir.bytecode import FORMAT, VERSION, BytecodeError, module_from_bytes, module_to_bytes
from tfc.ir.core import Graph, Module, VariableDecl
from tfc.ir.parser import parse_module
from tfc.ir.printer import print_module
from tfc.ir.types import DType, TensorType

ROOT = Path(__file__).resolve().parents[2]
IR_FILES = ROOT / "tests" / "ir_files"
EXAMPLES = ROOT / "examples"
pytestmark = pytest.mark.usefixtures("ir_test_ops")  # test.attrs: conftest


def check_round_trip(module: Module, filename: str = "m.tfcb") -> Module:
    """Decode the module's bytecode and check that it prints like the module and encodes
    to the same bytes again (so names, attrs and tables are kept exactly)."""
    data = module_to_bytes(module)
    back = module_from_bytes(data, filename)
    assert print_module(back) == print_module(module)
    assert module_to_bytes(back) == data
    return back


def t(s: str) -> TensorType:
    dtype, dims = s.rstrip("]").split("[")
    return TensorType(DType(dtype), tuple(int(d) if d.isdigit() else d
                                          for d in dims.split(",") if d))


# ---- every module we have -------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(IR_FILES.glob("*.tfir")), ids=lambda p: p.name)
def test_ir_files_round_trip(path: Path) -> None:
    text = path.read_text()
    try:
        module = parse_module(text, str(path))
    except ParseError:
        if "// ERROR:" not in text:
            raise
        return  # a test of a parse error (tests/passes/test_filecheck.py checks it)
    check_round_trip(module)


# softmax_digits fits sklearn's logistic regression while it builds (seconds); its ops
# (matmul, bias_add, softmax, argmax) all appear in the other examples.
_EXAMPLES = sorted(p for p in [*EXAMPLES.glob("*.py"), *EXAMPLES.glob("*.tfm")]
                   if p.stem not in ("data", "softmax_digits"))


@pytest.mark.parametrize("path", _EXAMPLES, ids=lambda p: p.name)
def test_example_modules_round_trip(path: Path) -> None:
    """Each example compiled by the native pipeline (fusion regions, folded constants)."""
    pytest.importorskip("sklearn")
    from tfc.compiler.driver import compile_model
    sys.path.insert(0, str(EXAMPLES))
    try:
        module = compile_model(path, backend="llvm")
    finally:
        sys.path.remove(str(EXAMPLES))
    back = check_round_trip(module)
    assert list(back.graphs) == list(module.graphs)
    assert back.variables == module.variables


def test_multi_device_partitions_round_trip() -> None:
    """Partitioned graphs: send/recv ops with their keys and peer devices, ops on devices."""
    from tfc.passes.partition import partition_module
    from tfc.testing import split_mlp_module
    m = split_mlp_module(["/cpu:0", "/cpu:1"])
    parts = partition_module(m, "train")
    module = Module({}, m.variables)
    for i, p in enumerate(parts.values()):
        p.graph.name = f"train_{i}"  # each partition is named after its entry
        module.add_graph(p.graph)
    back = check_round_trip(module)
    kinds = {op.kind for g in back.graphs.values() for op in g.walk()}
    assert {"send", "recv"} <= kinds
    devices = {op.device for g in back.graphs.values() for op in g.walk()}
    assert {"/cpu:0", "/cpu:1"} <= devices


def test_mlp_training_module_with_fusion_and_memory_plan() -> None:
    """What an artifact of the benchmark's MLP holds (plans are derived: not stored)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from bench_workloads import Data, build_mlp_module
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from tfc.pipeline import Target, lower
    params = Data().mlp_params((8, 6, 4))
    module = lower(build_mlp_module(params), Target("llvm"))
    back = check_round_trip(module)
    assert back.memory_plans == {} and any(op.kind == "fusion" for op in
                                          back.graphs["train_step"].walk())


# ---- what is kept exactly ---------------------------------------------------------------------

MODEL = """\
var @W : f32[784,10]                                  # model.py:9
var @b : f32[10] {device="/cpu:0"}
var @step : i64[] {device="/cpu:0", trainable=false}  # model.py:10:5

graph @predict(%x: f32[B,784], %y: i32[?]) -> (probs: f32[B,784], "loss:0": f32[]) {
  %W = var.read @W : f32[784,10]                      # model.py:12
  %0 = constant dense<f32[784]: 0.5> : f32[784]
  %1 = add %x, %0 : f32[B,784] on "/cpu:1"            # model.py:13
  %2 = sum %1 {axes=[1], keepdims=true} : f32[B,1]    # /tmp/<stdin> odd:name.py:3:14
  %3 = max %1 : f32[]
  %k = argmax %y {output_type=i32} : i32[]
  %c = cast %k {dtype=f32} : f32[] on "/job:worker/task:0/gpu:1"
  %h = mul %3, %c : f32[]
  %"odd name" = sqrt %h : f32[]
  %4 = var.read @step : i64[]
  %5 = constant dense<i64[]: 1> : i64[]
  %6 = add %4, %5 : i64[]
  var.assign @step, %6                                # model.py:20
  var.assign_add @W, %W on "/cpu:0"
  return %1, %"odd name"
}
"""


def test_variables_devices_locations_and_names_are_kept() -> None:
    m = check_round_trip(parse_module(MODEL, "model.tfir"))
    assert m.variables["step"] == VariableDecl("step", t("i64[]"), "/cpu:0", False,
                                               Location("model.py", 10, 5))
    assert m.variables["b"] == VariableDecl("b", t("f32[10]"), "/cpu:0", True, None)
    g = m.graphs["predict"]
    assert [a.type for a in g.args] == [t("f32[B,784]"), t("i32[?]")]
    assert g.arg_names == ["x", "y"] and g.result_names == ["probs", "loss:0"]
    assert g.ops[2].device == "/cpu:1" and g.ops[2].loc == Location("model.py", 13)
    assert g.ops[3].loc == Location("/tmp/<stdin> odd:name.py", 3, 14)
    assert g.ops[0].results[0].name == "W" and g.ops[1].results[0].name is None
    assert g.results[1].name == "odd name" and g.results[1] is g.ops[8].results[0]
    assert g.ops[4].attrs == {"axes": None, "keepdims": False}  # defaults filled in


def test_every_attr_kind_is_kept_bit_exactly() -> None:
    g = Graph("attrs")
    b = Builder(g)
    f16 = np.array([[0.1, 65504.0], [-6e-08, np.nan]], np.float16)
    payload = np.array([np.nan, -0.0, 0.0, 1.0], np.float64)
    payload.view(np.uint64)[0] |= 0x123  # a NaN with a payload: bytes, not text, keep it
    i64 = np.array([np.iinfo(np.int64).min, -1, np.iinfo(np.int64).max], np.int64)
    b.op("test.attrs", a_int=-(2 ** 62), a_float=-0.0, a_bool=False, a_str="é \t\"\U0001F600",
         a_ints=[0, 1, -1], a_floats=[1.0, -0.0, math.inf, -math.inf, math.nan, 5e-324,
                                      1.7976931348623157e308],
         a_dtype=DType.bool, a_shape=["B", 784, "?", "not a symbol"], a_tensor=f16,
         a_any=[1, 2.5, "s", [True, None], [], DType.f64, np.arange(3, dtype=np.int32)],
         a_var="layer/w")
    b.op("test.attrs", a_float=math.inf, a_tensor=payload, a_any=1.0, a_shape=[])
    b.op("test.attrs", a_float=math.nan, a_tensor=i64, a_any=math.nan)
    b.op("test.attrs", a_float=-math.inf, a_tensor=np.zeros((0, 2), np.float32))
    b.op("test.attrs", a_tensor=np.array([True, False, True]))
    b.op("test.attrs", a_tensor=np.full((300, 4), -0.0, np.float32))  # splat
    b.op("test.attrs", a_tensor=np.array([0.0, -0.0], np.float32))  # not a splat
    b.op("test.attrs", a_tensor=np.array(2.5))  # a scalar
    g.set_results([])
    ops = check_round_trip(Module({"attrs": g})).graphs["attrs"].ops
    a = ops[0].attrs
    assert a["a_int"] == -(2 ** 62) and type(a["a_int"]) is int
    assert type(a["a_float"]) is float and math.copysign(1, a["a_float"]) == -1
    assert a["a_bool"] is False and a["a_str"] == "é \t\"\U0001F600"
    assert a["a_ints"] == (0, 1, -1) and a["a_dtype"] is DType.bool
    fl = a["a_floats"]
    assert fl[:2] == (1.0, 0.0) and math.copysign(1, fl[1]) == -1
    assert fl[2] == math.inf and fl[3] == -math.inf and math.isnan(fl[4])
    assert fl[5] == 5e-324 and fl[6] == 1.7976931348623157e308
    assert a["a_shape"] == ("B", 784, "?", "not a symbol") and a["a_var"] == "layer/w"
    assert a["a_any"][:6] == (1, 2.5, "s", (True, None), (), DType.f64)
    assert a["a_any"][6].dtype == np.int32 and a["a_any"][6].tolist() == [0, 1, 2]
    for op, want in zip(ops, [f16, payload, i64, np.zeros((0, 2), np.float32),
                              np.array([True, False, True]),
                              np.full((300, 4), -0.0, np.float32),
                              np.array([0.0, -0.0], np.float32), np.array(2.5)]):
        got = op.attrs["a_tensor"]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes() and not got.flags.writeable
    assert ops[1].attrs["a_float"] == math.inf and type(ops[1].attrs["a_any"]) is float
    assert math.isnan(ops[2].attrs["a_float"]) and math.isnan(ops[2].attrs["a_any"])


def test_encoding_is_documented_json() -> None:
    """Plain JSON (no NaN/Infinity tokens), interned types and files, splats compact."""
    g = Graph("g")
    x = g.add_arg(t("f32[B,3]"), "x")
    b = Builder(g, loc=Location("model.py", 7))
    c = b("constant", value=np.zeros((100, 3), np.float32))
    y = b("add", b("exp", x), b("sum", c, axes=[0]))
    b.op("test.attrs", a_float=math.nan)
    g.set_results([y], ["y"])
    data = module_to_bytes(Module({"g": g}))
    doc = json.loads(data, parse_constant=lambda s: pytest.fail(f"non-JSON token {s}"))
    # version 1 where no region refers to another (version 2): what older tfc reads
    assert doc["format"] == FORMAT and doc["version"] == 1 and VERSION == 2
    assert doc["files"] == ["model.py"]
    assert doc["types"][0] == ["f32", ["B", 3]]
    ops = doc["graphs"][0]["ops"]
    assert ops[0]["op"] == "constant" and ops[0]["loc"] == [0, 7, None]
    assert ops[0]["attrs"]["value"] == {"tensor": "f32", "shape": [100, 3],
                                        "splat": "AAAAAA=="}
    assert ops[-1]["attrs"]["a_float"] == {"float": "nan"} and "types" not in ops[-1]
    assert doc["graphs"][0]["results"] == [4] and doc["graphs"][0]["result_names"] == ["y"]
    assert len(data) < 1500


def test_modules_that_cannot_be_encoded() -> None:
    g = Graph("g")
    b = Builder(g)
    b.op("test.attrs", a_any={"a": 1})
    with pytest.raises(BytecodeError, match=r"cannot encode @g: op 0 'test.attrs': attr "
                                            r"a_any=\{'a': 1\} of type dict"):
        module_to_bytes(Module({"g": g}))
    outer = Graph("outer")
    x = outer.add_arg(t("f32[3]"), "x")
    inner = Graph("inner")
    Builder(inner)("exp", x)  # uses a value from above the graph
    with pytest.raises(BytecodeError, match="cannot encode @inner: op 0 'exp' uses a value "
                                            "not defined before it"):
        module_to_bytes(Module({"inner": inner}))


# ---- corrupt input ---------------------------------------------------------------------------

SMALL = """\
var @w : f32[3]  # m.py:1

graph @main(%x: f32[B,3]) -> (y: f32[B,3]) {
  %w = var.read @w : f32[3]
  %0 = constant dense<f32[3]: 1.0, 2.0, 3.0> : f32[3]
  %1 = add %w, %0 : f32[3]                           # m.py:3
  %2 = mul %x, %1 : f32[B,3]
  %r = cond %2, %x : f32[B,3] (
    graph @then(%a: f32[B,3]) -> (r: f32[B,3]) {
      return %a
    }
    graph @else(%a: f32[B,3]) -> (r: f32[B,3]) {
      %e = exp %a : f32[B,3]
      return %e
    }
  )
  return %r
}
""".replace("%r = cond %2, %x", "%p = constant dense<bool[]: true> : bool[]\n  %r = cond %p, %x")


def small_doc() -> dict[str, Any]:
    return json.loads(module_to_bytes(parse_module(SMALL)))


def decode(doc: Any) -> Module:
    return module_from_bytes(json.dumps(doc).encode(), "art.tfc!module.tfcb")


def edited(change: Any) -> dict[str, Any]:
    doc = small_doc()
    change(doc)
    return doc


def _op(doc: dict[str, Any], i: int) -> dict[str, Any]:
    return doc["graphs"][0]["ops"][i]


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=3),
     "IR bytecode version 3, but this tfc reads version 2 at most; upgrade tfc"),
    (lambda d: d.update(version="1"), "invalid bytecode version '1'"),
    (lambda d: d.update(format="tfc"), "not IR bytecode \\(format is 'tfc'"),
    (lambda d: d.pop("graphs"), "lacks the field 'graphs'"),
    (lambda d: d.update(types={}), "field 'types' should be a list, not an object"),
    (lambda d: _op(d, 2).update(op="addd"),
     "@main: op 2 'addd': unknown op 'addd' \\(did you mean 'add'\\?\\)"),
    (lambda d: _op(d, 2).update(types=[1]),
     "@main: op 2 'add' \\(m.py:3\\): result types are stored as f32\\[B,3\\] but inferred "
     "as f32\\[3\\]"),
    (lambda d: _op(d, 3)["in"].__setitem__(1, 99),
     "@main: op 3 'mul': uses value 99, which is not defined \\(yet\\)"),
    (lambda d: _op(d, 3)["in"].__setitem__(1, 4),
     "@main: op 3 'mul': uses value 4, which is not defined \\(yet\\): 4 values are"),
    (lambda d: _op(d, 1)["attrs"]["value"].update(data="AAAA!AA"),
     "@main: op 1 'constant': attr value: bad base64 in 'data'"),
    (lambda d: _op(d, 1)["attrs"]["value"].update(data="AAAAAA=="),
     "attr value: f32\\[3\\] needs 12 bytes of 'data', not 4"),
    (lambda d: _op(d, 1)["attrs"]["value"].update(shape=[3, -1]),
     "a tensor's shape is a list of sizes, not \\[3, -1\\]"),
    (lambda d: _op(d, 1)["attrs"]["value"].update(tensor="f8"), "unknown tensor dtype 'f8'"),
    (lambda d: _op(d, 1)["attrs"].update(valu=1),
     "constant: unknown attr 'valu' \\(did you mean 'value'\\?\\)"),
    (lambda d: _op(d, 1)["attrs"].update(value={"float": "1"}),
     "attr value: bad float '1' \\(inf, -inf or nan\\)"),
    (lambda d: _op(d, 1)["attrs"].update(value={"dtype": "f8"}), "unknown dtype 'f8'"),
    (lambda d: _op(d, 1)["attrs"].update(value={"x": 1}), "attr value: cannot decode"),
    (lambda d: _op(d, 1)["attrs"].update(value=[1]),
     "constant: attr value=\\(1,\\) is not of kind tensor"),
    (lambda d: _op(d, 3).update(names=["a", "b"]), "2 result names but 1 result types"),
    (lambda d: _op(d, 3).update(loc=[7, 1, None]), "bad file index 7 \\(the table has 1\\)"),
    (lambda d: _op(d, 3).update(loc="m.py:3"), "a location is \\[file, line, column\\|null\\]"),
    (lambda d: _op(d, 3).update(device=3), "device should be a string or null, not a number"),
    (lambda d: d["types"].__setitem__(0, ["f8", [3]]), "types\\[0\\]: unknown dtype 'f8'"),
    (lambda d: d["types"].__setitem__(0, ["f32", ["3x"]]), "types\\[0\\]: invalid dimension"),
    (lambda d: d["types"].__setitem__(0, ["f32", [True]]), "types\\[0\\]: bad dims"),
    (lambda d: _op(d, 0).update(types=[42]), "bad type index 42"),
    (lambda d: d["graphs"].append(d["graphs"][0]), "graph @main is defined twice"),
    (lambda d: d["variables"].append(d["variables"][0]), "variable @w is declared twice"),
    (lambda d: d["variables"][0].update(trainable="yes"),
     "variable @w: field 'trainable' should be a boolean, not a string"),
    (lambda d: d["graphs"][0].update(results=[6, 8]),
     "@main: uses value 8, which is not defined"),
    (lambda d: d["graphs"][0].update(result_names=[]),
     "@main: result_names should be 1 strings, not \\[\\]"),
    (lambda d: _op(d, 5)["regions"][1]["ops"][0].update(op="log2"),
     "@main: op 5 'cond' region @else: op 0 'log2': unknown op"),
    (lambda d: _op(d, 5)["regions"][1]["ops"][0]["in"].__setitem__(0, 1),
     "region @else: op 0 'exp': uses value 1, which is not defined"),
    (lambda d: d["graphs"][0]["ops"].__setitem__(0, []), "@main: op 0: an op is an object"),
])
def test_corrupt_bytecode_is_a_located_error(change: Any, message: str) -> None:
    with pytest.raises(BytecodeError) as e:
        decode(edited(change))
    assert str(e.value).startswith("art.tfc!module.tfcb: ")
    assert re.search(message, str(e.value)), str(e.value)


def test_what_the_verifier_checks_is_left_to_it() -> None:
    """As with parsed text: a region op that lost a region decodes, and the verifier
    (which loading artifacts runs) rejects it."""
    from tfc.ir.verifier import verify_module
    module = decode(edited(lambda d: _op(d, 5)["regions"].pop()))
    with pytest.raises(TfcError, match=re.escape("@main: op 5 'cond': cond: has 1 regions, "
                                                  "expected 2 (then, else)")):
        verify_module(module)


def test_truncated_or_not_json() -> None:
    data = module_to_bytes(parse_module(SMALL))
    for n in (0, 1, len(data) // 2, len(data) - 1):
        with pytest.raises(BytecodeError, match=r"^x.tfcb: not valid IR bytecode \(truncated "
                                                r"or corrupt JSON"):
            module_from_bytes(data[:n], "x.tfcb")
    with pytest.raises(BytecodeError, match="not valid IR bytecode"):
        module_from_bytes(b"\xff\xfe\x00garbage", "x.tfcb")
    with pytest.raises(BytecodeError, match=r"x.tfcb: not IR bytecode \(format is 'a list'"):
        module_from_bytes(b"[1, 2]", "x.tfcb")
    with pytest.raises(BytecodeError, match="nested too deeply"):
        module_from_bytes(b"[" * 100_000 + b"]" * 100_000, "x.tfcb")


def _mutations(node: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every node of a JSON tree."""
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else ()
    for k, v in list(items):
        yield node, k
        yield from _mutations(v)


def _attrs_doc() -> dict[str, Any]:
    g = Graph("attrs")
    Builder(g).op("test.attrs", a_float=math.inf, a_dtype=DType.f16, a_shape=["B", 3],
                  a_any=[math.nan, DType.i32, np.zeros(3, np.int64)],
                  a_tensor=np.array([1.0, -0.0], np.float16))
    g.set_results([])
    return json.loads(module_to_bytes(Module({"attrs": g})))


@pytest.mark.parametrize("make", [small_doc, _attrs_doc], ids=["small", "attrs"])
def test_any_edit_is_a_bytecode_error_or_a_valid_module(make: Any) -> None:
    """Replace each node of the tree by values of other JSON kinds: decoding either
    succeeds or raises BytecodeError, never another exception."""
    base = make()
    count = len(list(_mutations(base)))
    for i in range(count):
        for replacement in (None, -1, 10 ** 30, 0.5, "x", True, [], {}, [0], {"tensor": 1}):
            doc = copy.deepcopy(base)
            container, key = list(_mutations(doc))[i]
            container[key] = replacement
            try:
                decode(doc)
            except BytecodeError:
                pass


# ---- repeated regions (version 2) -------------------------------------------------------------

REPEATED = """\
graph @main(%x: f32[B,3], %p: bool[]) -> (y: f32[B,3]) {
  %a = cond %p, %x : f32[B,3] (
    graph @then0(%t: f32[B,3]) -> (r: f32[B,3]) {
      %e = exp %t : f32[B,3]
      return %e
    }
    graph @else0(%t: f32[B,3]) -> (r: f32[B,3]) {
      return %t
    }
  )
  %b = cond %p, %a : f32[B,3] (
    graph @then1(%u: f32[B,3]) -> (r: f32[B,3]) {
      %e = exp %u : f32[B,3]
      return %e
    }
    graph @else1(%v: f32[B,3]) -> (r: f32[B,3]) {
      return %v
    }
  )
  %c = cond %p, %b : f32[B,3] (
    graph @then2(%t: f32[B,3]) -> (r: f32[B,3]) {
      %e = log %t : f32[B,3]
      return %e
    }
    graph @else2(%t: f32[B,3]) -> (r: f32[B,3]) {
      return %t
    }
  )
  return %c
}
"""


def _full_regions_only(monkeypatch: Any) -> None:
    """Encode as version 1 did: every region in full."""
    from tfc.ir import bytecode
    monkeypatch.setattr(bytecode._Encoder, "region", lambda self, r: self.graph(r))


def test_a_region_repeated_is_written_once(monkeypatch: Any) -> None:
    """Fusion regions repeat one body per layer: a region with the content of one written
    before (up to its name and its arguments' names) refers to it (version 2), is read
    back as a copy of it under its own names, and decodes each distinct body once."""
    module = parse_module(REPEATED)
    data = module_to_bytes(module)
    doc = json.loads(data)
    assert doc["version"] == 2
    regions = [r for op in doc["graphs"][0]["ops"] for r in op["regions"]]
    assert [r.get("like") for r in regions] == [None, None, 0, 1, None, 1]
    assert regions[2] == {"name": "then1", "like": 0, "arg_names": ["u"]}
    from tfc.ir import bytecode
    read = []
    real = bytecode._Decoder.graph
    monkeypatch.setattr(bytecode._Decoder, "graph",
                        lambda self, g, parent: read.append(g.get("name")) or real(
                            self, g, parent))
    back = check_round_trip(module)
    assert read == ["main", "then0", "else0", "then2"]
    ops = back.graphs["main"].ops
    assert ops[1].regions[0].ops[0] is not ops[0].regions[0].ops[0]  # a copy: its own ops
    assert ops[1].regions[0].args[0].name == "u"


def test_version_1_bytecode_with_regions_in_full_still_reads(monkeypatch: Any) -> None:
    module = parse_module(REPEATED)
    with monkeypatch.context() as m:
        _full_regions_only(m)
        old = module_to_bytes(module)
    assert json.loads(old)["version"] == 1
    back = module_from_bytes(old)
    assert print_module(back) == print_module(module)
    assert module_to_bytes(back) == module_to_bytes(module)  # now written as version 2


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(like=5), "bad region index 5 \\(the table has 2\\)"),
    (lambda r: r.update(like=True), "bad region index True"),
    (lambda r: r.update(arg_names=["u", "w"]), "arg_names should be 1 names"),
    (lambda r: r.update(arg_names=[3]), "an argument name should be a string or null"),
    (lambda r: r.pop("name"), "lacks the field 'name'"),
])
def test_a_bad_region_reference_is_a_located_error(change: Any, message: str) -> None:
    doc = json.loads(module_to_bytes(parse_module(REPEATED)))
    change(doc["graphs"][0]["ops"][1]["regions"][0])
    with pytest.raises(BytecodeError) as e:
        decode(doc)
    assert str(e.value).startswith("art.tfc!module.tfcb: @main: op 1 'cond'")
    assert re.search(message, str(e.value)), str(e.value)


def test_a_region_reference_is_not_version_1() -> None:
    doc = json.loads(module_to_bytes(parse_module(REPEATED)))
    doc["version"] = 1
    with pytest.raises(BytecodeError, match="region @then1: lacks the field 'args'"):
        decode(doc)


def test_any_edit_of_a_version_2_document_is_a_bytecode_error_or_a_module() -> None:
    base = json.loads(module_to_bytes(parse_module(REPEATED)))
    count = len(list(_mutations(base)))
    for i in range(count):
        for replacement in (None, -1, 0, 3, "x", True, [], {}, [0]):
            doc = copy.deepcopy(base)
            container, key = list(_mutations(doc))[i]
            container[key] = replacement
            try:
                decode(doc)
            except BytecodeError:
                pass


def test_ops_with_the_same_attrs_share_them_decoded() -> None:
    """Each distinct attrs object is decoded once (a constant's tensor too): the ops share
    the frozen view, which the verifier's check memo keys on."""
    g = Graph("g")
    b = Builder(g)
    xs = [b("constant", value=np.array(1.5, np.float32)) for _ in range(3)]
    xs.append(b("constant", value=np.array(-0.0, np.float32)))
    xs.append(b("constant", value=np.array(0.0, np.float32)))
    g.set_results(xs)
    ops = check_round_trip(Module({"g": g})).graphs["g"].ops
    assert ops[0].attrs is ops[1].attrs is ops[2].attrs
    assert ops[3].attrs is not ops[4].attrs  # -0.0 is not 0.0
    assert np.signbit(ops[3].attrs["value"]) and not np.signbit(ops[4].attrs["value"])


def _shared_doc() -> dict[str, Any]:
    """Ops that repeat their attrs (read through the decoder's fast path after the first)."""
    g = Graph("main")
    x = g.add_arg(t("f32[3,3]"), "x")
    b = Builder(g, loc=Location("m.py", 4))
    y = b("matmul", x, x, transpose_b=True)
    y = b("matmul", y, x, transpose_b=True)
    y = b("matmul", y, x, transpose_b=False)
    y = b("add", y, b("var.read", var="w", result_types=[t("f32[3,3]")]))
    y = b("add", y, b("var.read", var="w", result_types=[t("f32[3,3]")]))
    g.set_results([y], ["y"])
    return json.loads(module_to_bytes(Module({"main": g}, {"w": VariableDecl("w", t("f32[3,3]"))})))


@pytest.mark.parametrize("make", [_shared_doc, lambda: json.loads(
    module_to_bytes(parse_module(REPEATED)))], ids=["shared", "repeated"])
def test_the_fast_reading_accepts_nothing_the_checked_one_rejects(make: Any) -> None:
    """``infer=False`` (then the verifier, as the lowered-module cache does) reads ops as
    the encoder writes them with type tests only: after any edit, a module it accepts
    (and the verifier passes) is one the checked reading accepts, and prints the same."""
    from tfc.ir.verifier import verify_module
    base = make()
    count = len(list(_mutations(base)))
    accepted = 0
    for i in range(count):
        for replacement in (None, -1, 0, 1, 0.0, 2, "x", "w", True, False, [], {}, [0]):
            doc = copy.deepcopy(base)
            container, key = list(_mutations(doc))[i]
            container[key] = replacement
            data = json.dumps(doc).encode()
            try:
                fast = module_from_bytes(data, "f", infer=False)
                verify_module(fast)
            except TfcError:
                continue
            accepted += 1
            assert print_module(module_from_bytes(data, "f")) == print_module(fast), doc
    assert accepted > count  # (many edits are names and locations: still modules)


# ---- the encoder writes text; the memos of both sides ------------------------------------------

NESTED = """\
graph @main(%x: f32[3], %p: bool[]) -> (y: f32[3]) {
  %a = cond %p, %x : f32[3] (
    graph @then0(%t: f32[3], %q: bool[]) -> (r: f32[3]) {
      %e = cond %q, %t : f32[3] (
        graph @in0(%s: f32[3]) -> (r: f32[3]) {
          %f = exp %s : f32[3]
          return %f
        }
        graph @out0(%s: f32[3]) -> (r: f32[3]) {
          return %s
        }
      )
      return %e
    }
    graph @else0(%t: f32[3], %q: bool[]) -> (r: f32[3]) {
      return %t
    }
  )
  %b = cond %p, %a : f32[3] (
    graph @then1(%t: f32[3], %q: bool[]) -> (r: f32[3]) {
      %e = cond %q, %t : f32[3] (
        graph @in0(%s: f32[3]) -> (r: f32[3]) {
          %f = exp %s : f32[3]
          return %f
        }
        graph @out0(%s: f32[3]) -> (r: f32[3]) {
          return %s
        }
      )
      return %e
    }
    graph @else1(%t: f32[3], %q: bool[]) -> (r: f32[3]) {
      return %t
    }
  )
  return %b
}
"""

# REPEATED as the encoder that built a JSON tree and dumped it wrote it (before session 17):
# the text the encoder writes now is the same, byte for byte (the lowered-module cache's
# keys did not change)
REPEATED_BYTES = (
    b'{"format":"tfc-ir-bytecode","version":2,"types":[["f32",["B",3]],["bool",[]]],'
    b'"files":[],"variables":[],"graphs":[{"name":"main","args":[[0,"x"],[1,"p"]],"ops":['
    b'{"op":"cond","in":[1,0],"types":[0],"names":["a"],"regions":[{"name":"then0","args":'
    b'[[0,"t"]],"ops":[{"op":"exp","in":[0],"types":[0],"names":["e"]}],"results":[1],'
    b'"result_names":["r"]},{"name":"else0","args":[[0,"t"]],"ops":[],"results":[0],'
    b'"result_names":["r"]}]},{"op":"cond","in":[1,2],"types":[0],"names":["b"],"regions":'
    b'[{"name":"then1","like":0,"arg_names":["u"]},{"name":"else1","like":1,"arg_names":'
    b'["v"]}]},{"op":"cond","in":[1,3],"types":[0],"names":["c"],"regions":[{"name":'
    b'"then2","args":[[0,"t"]],"ops":[{"op":"log","in":[0],"types":[0],"names":["e"]}],'
    b'"results":[1],"result_names":["r"]},{"name":"else2","like":1,"arg_names":["t"]}]}],'
    b'"results":[4],"result_names":["y"]}]}')


def _modules_we_have() -> Iterator[Module]:
    """The IR files, the modules above and random graphs, as traced and lowered."""
    from tfc.pipeline import Target, lower
    from tfc.testing_graphs import random_graph
    for path in sorted(IR_FILES.glob("*.tfir")):
        try:
            yield parse_module(path.read_text(), str(path))
        except ParseError:
            pass
    for text in (MODEL, SMALL, REPEATED, NESTED):
        yield parse_module(text)
    for seed in range(12):
        module = random_graph(seed).module
        yield module
        try:
            yield lower(module, Target("llvm"))
        except TfcError:
            pass


def test_the_text_is_compact_json() -> None:
    """The encoder writes the text itself: it is what json.dumps writes of the tree it
    holds (compact, ASCII, keys in the documented order), for every module we have."""
    for module in _modules_we_have():
        data = module_to_bytes(module)
        assert json.dumps(json.loads(data), separators=(",", ":")).encode() == data
    assert module_to_bytes(parse_module(REPEATED)) == REPEATED_BYTES


def test_a_region_without_regions_is_keyed_by_its_text(monkeypatch: Any) -> None:
    """A region with no regions in it is encoded once, its text (but its names) its key:
    no second walk of it to key it (which was a third of encoding a lowered MLP). A region
    with regions in it is keyed by its content (its text names its regions by number)."""
    from tfc.ir import bytecode
    keyed: list[str] = []
    real = bytecode._Encoder.content
    monkeypatch.setattr(bytecode._Encoder, "content",
                        lambda self, g: keyed.append(g.name) or real(self, g))
    data = module_to_bytes(parse_module(REPEATED))
    assert keyed == [] and data == REPEATED_BYTES
    doc = json.loads(module_to_bytes(parse_module(NESTED)))
    assert keyed == ["then0", "in0", "out0", "then1", "in0", "out0"]
    regions = [r for op in doc["graphs"][0]["ops"] for r in op["regions"]]
    assert [r.get("like") for r in regions] == [None, None, 2, 3]  # in0, out0, then0, else0
    check_round_trip(parse_module(NESTED))


def test_plain_attrs_met_first_are_read_by_the_fast_path(monkeypatch: Any) -> None:
    """Attrs of strings, integers, booleans and nulls (and lists of them) decode to
    themselves (the lists as tuples): the first op with them is read as the others
    (without a second, checked reading); one location is one object, whichever reading
    made it."""
    from tfc.ir import bytecode
    g = Graph("main")
    b = Builder(g, loc=Location("m.py", 4))
    reads = [b("var.read", var=f"w{i}", result_types=[t("f32[3]")]) for i in range(5)]
    s = b("sum", reads[0], axes=[0])  # (a list of integers: a tuple)
    c = b("constant", value=np.array(1.5, np.float32))  # (decoded where errors are located)
    g.set_results([*reads, s, c])
    module = Module({"main": g}, {f"w{i}": VariableDecl(f"w{i}", t("f32[3]"), loc=Location(
        "m.py", 4)) for i in range(5)})
    checked: list[str] = []
    real = bytecode._Decoder.op_checked
    monkeypatch.setattr(bytecode._Decoder, "op_checked",
                        lambda self, o, *a: checked.append(o["op"]) or real(self, o, *a))
    back = module_from_bytes(module_to_bytes(module), infer=False)
    assert checked == ["constant"]
    assert print_module(back) == print_module(module)
    ops = back.graphs["main"].ops
    assert ops[5].attrs["axes"] == (0,)
    for m in (back, module_from_bytes(module_to_bytes(module))):  # (the checked reading)
        locs = [op.loc for op in m.graphs["main"].ops] + [v.loc for v in m.variables.values()]
        assert all(loc is locs[0] for loc in locs)
    assert ops[0].attrs["var"] == "w0" and type(ops[0].attrs).__name__ == "mappingproxy"


def test_verifying_each_copied_region_once_is_exact() -> None:
    """``verify_module(module, copies)`` skips the regions the decoder read as copies of a
    region that passed: after any edit of the bytecode of modules with repeated regions, it
    passes or fails (with the same message) exactly as verifying every region does."""
    from tfc.ir.verifier import verify_module
    from tfc.pipeline import Target, lower
    from tfc.testing_graphs import random_graph
    bases = [parse_module(REPEATED), parse_module(NESTED)]
    bases += [lower(random_graph(seed).module, Target("llvm")) for seed in range(4)]
    skipped = 0
    for base in bases:
        doc = json.loads(module_to_bytes(base))
        count = len(list(_mutations(doc)))
        for i in range(0, count, max(1, count // 60)):
            for replacement in (0, 1, "x"):
                edit = copy.deepcopy(doc)
                container, key = list(_mutations(edit))[i]
                container[key] = replacement
                data = json.dumps(edit).encode()
                copies: dict[int, Graph] = {}
                try:
                    module = module_from_bytes(data, infer=False, copies=copies)
                except BytecodeError:
                    continue
                outcomes = []
                for which in (copies, None):
                    try:
                        verify_module(module if which else module_from_bytes(
                            data, infer=False), which)
                        outcomes.append("passes")
                    except TfcError as e:
                        outcomes.append(str(e))
                assert outcomes[0] == outcomes[1], (edit, outcomes)
                skipped += bool(copies) and outcomes[0] != "passes"
    assert skipped > 20  # (edits the verifier refuses, of modules with copies)


def test_a_copy_is_made_from_its_region_by_position(monkeypatch: Any) -> None:
    """A reference to a region without regions in it is read as a copy built from the
    region's ops by position (no Graph.clone, whose map of old values to new ones cost
    half of reading a copy); it is what the clone would be: the same text, its own ops
    and values, the attrs, types and locations shared. A region with regions in it is
    cloned."""
    cloned: list[str] = []
    real = Graph.clone
    monkeypatch.setattr(Graph, "clone", lambda self: cloned.append(self.name) or real(self))
    for text, clones in ((REPEATED, []), (NESTED, ["then0", "in0", "out0"])):
        module = parse_module(text)
        back = check_round_trip(module)
        assert cloned == clones
        cloned.clear()
        ops = back.graphs["main"].ops
        for first, copy_ in zip(ops[0].regions, ops[1].regions):
            clone = real(first)
            clone.name = copy_.name
            for a, b in zip(clone.args, copy_.args):
                a.name = b.name
            assert print_module(Module({"r": copy_})) == print_module(Module({"r": clone}))
            for a, b in zip(first.ops, copy_.ops):
                assert a is not b and a.attrs is b.attrs and a.loc is b.loc
                assert [r.type for r in a.results] == [r.type for r in b.results]
                assert not set(a.results) & set(b.results)


def test_lists_read_by_the_fast_path_keep_their_element_types() -> None:
    """``[1]``, ``[true]`` and ``[1.0]`` are three attrs (equal in Python, not in JSON):
    each decodes to its own tuple, in either reading."""
    g = Graph("attrs")
    b = Builder(g)
    for v in ([1], [True], [1.0], [1], [None, "a"]):
        b.op("test.attrs", a_any=v)
    g.set_results([])
    data = module_to_bytes(Module({"attrs": g}))
    for infer in (False, True):
        got = [op.attrs["a_any"] for op in module_from_bytes(data, infer=infer)
               .graphs["attrs"].ops]
        assert [[type(x) for x in v] for v in got] == [[int], [bool], [float], [int],
                                                        [type(None), str]]
        assert got == [(1,), (True,), (1.0,), (1,), (None, "a")]


def test_attr_values_written_by_content_are_told_apart() -> None:
    """Small arrays and tuples of ints are written once per content (``value_text``):
    values that compare (and hash) equal but encode differently keep their own text,
    whichever the encoder met first, and each op decodes to its own value."""
    g = Graph("memo")
    b = Builder(g)
    values = [(1, 0), (True, False), (1, 0), (1.0, 0.0),  # True == 1, 1.0 == 1
              np.array([1, 0], np.int32), np.array([1, 0], np.int64),
              np.array([1.0, 0.0], np.float32), np.array([[1, 0]], np.int32),
              np.array([1, 0], np.int32), np.array([True, False]),
              np.arange(20, dtype=np.float32)]  # (80 bytes: not by content)
    for v in values:
        b.op("test.attrs", a_any=v, a_int=3)
    g.set_results([])
    data = module_to_bytes(Module({"memo": g}))
    ops = json.loads(data)["graphs"][0]["ops"]
    texts = [json.dumps(op["attrs"]["a_any"], separators=(",", ":")) for op in ops]
    assert texts[0] == texts[2] == "[1,0]" and texts[1] == "[true,false]"
    assert texts[3] == "[1.0,0.0]"
    assert len({texts[i] for i in (4, 5, 6, 7, 9)}) == 5 and texts[4] == texts[8]
    back = check_round_trip(Module({"memo": g})).graphs["memo"].ops
    for op, v in zip(back, values):
        got = op.attrs["a_any"]
        if isinstance(v, np.ndarray):
            assert got.dtype == v.dtype.newbyteorder("=") and got.shape == v.shape
            assert got.tolist() == v.tolist()
        else:
            assert [type(x) for x in got] == [type(x) for x in v] and got == v
