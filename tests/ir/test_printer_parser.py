"""The textual IR: print -> parse -> print is the identity, parsed IR is type-checked, and
every malformed input is a ParseError at the right line and column."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfc.errors import Location, ParseError, TypeMismatch
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op, VariableDecl
from tfc.ir.parser import parse_module
from tfc.ir.printer import format_elements, format_tensor, print_graph, print_module
from tfc.ir.types import DType, TensorType

IR_FILES = Path(__file__).resolve().parents[1] / "ir_files"


pytestmark = pytest.mark.usefixtures("ir_test_ops")  # test.region, test.attrs: conftest


def roundtrip(text: str) -> str:
    """The canonical text of ``text``, checked to be a fixed point of print . parse."""
    printed = print_module(parse_module(text))
    assert print_module(parse_module(printed)) == printed
    return printed


def t(s: str) -> TensorType:
    dtype, dims = s.rstrip("]").split("[")
    return TensorType(DType(dtype), tuple(int(d) if d.isdigit() else d
                                          for d in dims.split(",") if d))


# ---- hand-written modules, already in canonical form ---------------------------------------

MODEL = """\
var @W : f32[784,10]                                  # model.py:9
var @b : f32[10] {device="/cpu:0"}
var @step : i64[] {device="/cpu:0", trainable=false}  # model.py:10:5

graph @predict(%x: f32[B,784], %y: i32[B]) -> (probs: f32[B,784], "loss:0": f32[]) {
  %W = var.read @W : f32[784,10]                      # model.py:12
  %0 = constant dense<f32[784]: 0.5> : f32[784]
  %1 = add %x, %0 : f32[B,784] on "/cpu:1"            # model.py:13
  %2 = sum %1 {axes=[1], keepdims=true} : f32[B,1]    # <stdin>:3:14
  %3 = max %1 : f32[]
  %k = argmax %y {output_type=i32} : i32[]
  %c = cast %k {dtype=f32} : f32[] on "/job:worker/task:0/gpu:1"
  %h = mul %3, %c : f32[]
  %h_1 = neg %h : f32[]
  %dense/kernel.x-1 = exp %h_1 : f32[]
  %"odd name" = sqrt %dense/kernel.x-1 : f32[]
  %4 = var.read @step : i64[]
  %5 = constant dense<i64[]: 1> : i64[]
  %6 = add %4, %5 : i64[]
  var.assign @step, %6                                # model.py:20
  var.assign_add @W, %W on "/cpu:0"
  return %1, %"odd name"
}

graph @__init__() -> () {
  %0 = constant dense<f32[784,10]: 0.0> : f32[784,10]
  var.assign @W, %0
  return
}
"""


def test_model_roundtrips_exactly() -> None:
    assert roundtrip(MODEL) == MODEL


def test_parsed_model_structure() -> None:
    m = parse_module(MODEL, "m.tfir")
    assert list(m.variables) == ["W", "b", "step"]
    assert m.variables["W"].loc == Location("model.py", 9)
    assert m.variables["b"] == VariableDecl("b", t("f32[10]"), "/cpu:0", True, None)
    assert m.variables["step"] == VariableDecl("step", t("i64[]"), "/cpu:0", False,
                                               Location("model.py", 10, 5))
    g = m.graphs["predict"]
    assert g.arg_names == ["x", "y"] and g.result_names == ["probs", "loss:0"]
    read, const, add, s = g.ops[:4]
    assert read.attrs["var"] == "W" and read.results[0].name == "W"
    assert const.results[0].name is None  # '%0' is a number, not a name
    assert np.array_equal(const.attrs["value"], np.full(784, 0.5, np.float32))
    assert add.device == "/cpu:1" and add.loc == Location("model.py", 13)
    assert s.attrs == {"axes": (1,), "keepdims": True}
    assert s.loc == Location("<stdin>", 3, 14)
    assert g.ops[4].attrs == {"axes": None, "keepdims": False}  # defaults filled in
    assert g.results[1].name == "odd name"
    assert list(m.graphs) == ["predict", "__init__"] and m.graphs["__init__"].results == []


def test_printer_names_values() -> None:
    g = Graph("g")
    x = g.add_arg(t("f32[3]"), "x")
    b = Builder(g)
    a1 = b("exp", x, name="h")
    a2 = b("exp", a1, name="h")     # duplicate: made unique
    a3 = b("exp", a2, name="h_1")   # collides with the suffix given above
    a4 = b("exp", a3, name="42")    # digits only: a number
    a5 = b("exp", a4)
    a6 = b("exp", a5, name="x")     # same as the argument
    g.set_results([a6], ["out"])
    text = print_graph(g)
    assert text == """\
graph @g(%x: f32[3]) -> (out: f32[3]) {
  %h = exp %x : f32[3]
  %h_1 = exp %h : f32[3]
  %h_1_1 = exp %h_1 : f32[3]
  %0 = exp %h_1_1 : f32[3]
  %1 = exp %0 : f32[3]
  %x_1 = exp %1 : f32[3]
  return %x_1
}
"""
    assert roundtrip(text) == text
    assert str(Module({"g": g})) == text


def test_multiple_results_and_no_results() -> None:
    g = Graph("g")
    x = g.add_arg(t("f32[2]"))
    Builder(g).op("test.region", x, x, result_types=[t("f32[2]"), t("i32[]"), t("bool[2]")])
    op2 = Builder(g).op("test.region", result_types=[t("f32[]"), t("f32[]")])
    op2.results[1].name = "second"
    Builder(g).op("test.region", *op2.results, result_types=[])
    g.set_results([op2.results[0], x])
    text = print_module(Module({"g": g}))
    assert text == """\
graph @g(%0: f32[2]) -> (out0: f32[], out1: f32[2]) {
  %1, %2, %3 = test.region %0, %0 : f32[2], i32[], bool[2]
  %4, %second = test.region : f32[], f32[]
  test.region %4, %second
  return %4, %0
}
"""
    assert roundtrip(text) == text
    parsed = parse_module(text).graphs["g"]
    assert [len(op.results) for op in parsed.ops] == [3, 2, 0]
    assert parsed.ops[2].inputs == parsed.ops[1].results


# ---- attrs --------------------------------------------------------------------------------

ATTRS = """\
graph @attrs() -> () {
  test.attrs {a_any=[1, 2.5, "s", [true, none], [], f64, dense<i32[2]: 1, 2>], a_bool=false, \
a_dtype=bool, a_float=1e-05, \
a_floats=[1.0, -0.0, inf, -inf, nan, 5e-324, 1.7976931348623157e+308], a_int=-3, \
a_ints=[0, 1, -1], a_shape=[B, 784, ?, "not a symbol"], \
a_str="tab\\t \\"q\\" \\u00e9 \\ud83d\\ude00", \
a_tensor=dense<f16[2,2]: 0.1, 6.55e+04, -6e-08, nan>}
  test.attrs {a_float=1.0, a_shape=[], a_tensor=dense<bool[3]: true, false, true>}
  test.attrs {a_float=inf, a_shape=[3], a_tensor=dense<f64[2]: 0.1, 1e+300>}
  test.attrs {a_float=-inf, a_tensor=dense<f32[0,2]>}
  test.attrs {a_float=nan, a_tensor=dense<i32[2,3]: 7>}
  return
}
"""


def test_every_attr_kind_roundtrips() -> None:
    assert roundtrip(ATTRS) == ATTRS
    ops = parse_module(ATTRS).graphs["attrs"].ops
    a = ops[0].attrs
    assert a["a_any"][:4] == (1, 2.5, "s", (True, None))
    assert a["a_any"][4:6] == ((), DType.f64)
    assert a["a_any"][6].dtype == np.int32
    assert a["a_bool"] is False and a["a_dtype"] is DType.bool and a["a_int"] == -3
    assert a["a_float"] == 1e-05 and a["a_ints"] == (0, 1, -1)
    fl = a["a_floats"]
    assert fl[:2] == (1.0, 0.0) and math.copysign(1, fl[1]) == -1
    assert fl[2] == math.inf and fl[3] == -math.inf and math.isnan(fl[4])
    assert fl[5] == 5e-324 and fl[6] == 1.7976931348623157e+308
    assert a["a_shape"] == ("B", 784, "?", "not a symbol")
    assert a["a_str"] == 'tab\t "q" \u00e9 \U0001F600'
    tensor = a["a_tensor"]
    assert tensor.dtype == np.float16 and tensor.shape == (2, 2)
    assert tensor[0, 0] == np.float16(0.1) and np.isnan(tensor[1, 1])
    assert ops[1].attrs["a_float"] == 1.0 and ops[1].attrs["a_shape"] == ()
    assert ops[1].attrs["a_tensor"].tolist() == [True, False, True]
    assert ops[3].attrs["a_tensor"].shape == (0, 2)
    assert ops[4].attrs["a_tensor"].tolist() == [[7] * 3] * 2


def test_attr_printing_of_python_values() -> None:
    g = Graph("g")
    Builder(g).op("test.attrs", a_float=2, a_ints=[1, 2], a_any=1,
                  a_str="é", a_shape=["B", 3, "?"])
    g.set_results([])
    text = print_graph(g)
    assert 'a_float=2.0' in text and 'a_any=1' in text and 'a_str="\\u00e9"' in text
    assert "a_shape=[B, 3, ?]" in text
    assert roundtrip(text) == text


def test_words_in_shape_attrs_are_symbols_even_when_keywords() -> None:
    text = "graph @g() -> () {\n  test.attrs {a_shape=[true, none, f32, nan, inf]}\n" \
           "  return\n}\n"
    (op,) = parse_module(text).graphs["g"].ops
    assert op.attrs["a_shape"] == ("true", "none", "f32", "nan", "inf")
    assert roundtrip(text) == text


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_tensor_elements_shortest_and_exact(dtype: type) -> None:
    rng = np.random.default_rng(0)
    if dtype == np.float16:
        bits = np.arange(2 ** 16, dtype=np.uint16)  # every f16 value
    else:
        itype = np.uint32 if dtype == np.float32 else np.uint64
        bits = rng.integers(0, np.iinfo(itype).max, 50_000, dtype=itype, endpoint=True)
    values = bits.view(dtype)
    texts = format_elements(values)
    back = np.array(texts, dtype=np.float64).astype(dtype)
    same = (back.view(bits.dtype) == values.view(bits.dtype)) | (np.isnan(back) &
                                                                 np.isnan(values))
    assert same.all()
    assert format_elements(np.array([0.1, 1.0, 1e-5, 3e38], np.float32)) == [
        "0.1", "1.0", "1e-05", "3e+38"]
    assert format_elements(np.array([0.1], np.float16)) == ["0.1"]


def test_splats() -> None:
    assert format_tensor(np.zeros((784, 10), np.float32)) == "dense<f32[784,10]: 0.0>"
    assert format_tensor(np.full(3, np.nan)) == "dense<f64[3]: nan>"
    # -0.0 and 0.0 compare equal but print differently: no splat
    assert format_tensor(np.array([0.0, -0.0], np.float32)) == "dense<f32[2]: 0.0, -0.0>"
    assert format_tensor(np.array([True, True])) == "dense<bool[2]: true>"
    assert format_tensor(np.array(3, np.int64)) == "dense<i64[]: 3>"
    assert format_tensor(np.array([1, 2], np.int32)) == "dense<i32[2]: 1, 2>"


# ---- regions ------------------------------------------------------------------------------

REGIONS = """\
graph @main(%x: f32[3], %p: bool[]) -> (r: f32[3]) {
  %0 = exp %x : f32[3]
  %r, %1 = test.region %p, %0, %x {note="two regions"} : f32[3], i32[] (
    graph @then(%0: f32[3], %x: f32[3]) -> (out0: f32[3], n: i32[]) {
      %1 = add %0, %x : f32[3]
      %2 = test.region %1 : f32[3] (
        graph @inner(%0: f32[3]) -> (out0: f32[3]) {
          %1 = neg %0 : f32[3]
          return %1
        }
      )                                               # model.py:30
      %3 = constant dense<i32[]: 0> : i32[]
      return %2, %3
    }
    graph @else(%a: f32[3], %b: f32[3]) -> (out0: f32[3], out1: i32[]) {
      %0 = constant dense<i32[]: 1> : i32[]
      return %a, %0
    }
  ) on "/cpu:0"                                       # model.py:31
  return %r
}
"""


def test_regions_roundtrip_with_fresh_numbering() -> None:
    assert roundtrip(REGIONS) == REGIONS
    g = parse_module(REGIONS).graphs["main"]
    op = g.ops[1]
    assert [r.name for r in op.regions] == ["then", "else"]
    assert op.device == "/cpu:0" and op.loc == Location("model.py", 31)
    then = op.regions[0]
    assert then.args[0] is not g.ops[0].results[0]  # %0 of the region is its own
    inner = then.ops[1]
    assert inner.loc == Location("model.py", 30) and inner.regions[0].name == "inner"
    assert then.result_names == ["out0", "n"]
    assert [op.kind for op in g.walk()] == ["exp", "test.region", "add", "test.region", "neg",
                                            "constant", "constant"]


def test_regions_are_isolated_from_above() -> None:
    text = REGIONS.replace("%1 = add %0, %x : f32[3]", "%1 = add %0, %p : f32[3]")
    with pytest.raises(ParseError) as e:
        parse_module(text)
    assert e.value.loc == Location("<string>", 5, 20)
    assert "undefined value %p" in e.value.message


def test_region_using_outer_value_prints_but_does_not_parse() -> None:
    g = Graph("g")
    x = g.add_arg(t("f32[3]"), "x")
    region = Graph("body")
    region.add_arg(t("f32[3]"), "a")
    y = Builder(region)("neg", x)  # from above: invalid IR, still printable for debugging
    region.set_results([y])
    Builder(g).op("test.region", x, regions=[region], result_types=[t("f32[3]")])
    text = print_graph(g)
    assert "%0 = neg %<undefined x:f32[3]>" in text
    with pytest.raises(ParseError):
        parse_module(text)


# ---- sample files -------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(IR_FILES.glob("roundtrip_*.tfir")), ids=lambda p: p.name)
def test_sample_files_are_canonical(path: Path) -> None:
    """Each file, less its leading ``//`` comment lines, is exactly what the printer writes."""
    text = path.read_text()
    canonical = "".join(line for line in text.splitlines(keepends=True)
                        if not line.startswith("//"))
    assert print_module(parse_module(text, str(path))) == canonical


def test_comments_and_layout_are_free() -> None:
    text = """
    // leading comment
    graph @g(%x:f32[ B , 3 ])->(y:f32[B,3]){%y=exp %x:f32[B,3]   // trailing comment
    %z = neg %y : f32[B,3]#m.py:1
    return %z}
    var @v : f32[] {trainable=true}
    """
    assert roundtrip(text) == """\
var @v : f32[]

graph @g(%x: f32[B,3]) -> (y: f32[B,3]) {
  %y = exp %x : f32[B,3]
  %z = neg %y : f32[B,3]                              # m.py:1
  return %z
}
"""


def test_result_names_default_and_locations_with_odd_files() -> None:
    text = ('graph @g(%x: f32[]) -> (f32[]) {\n'
            '  %0 = exp %x : f32[]  # /tmp/a-b_c/<model>.py:7\n'
            '  %1 = exp %0 : f32[]  # C:/x.tfc!ir/main.tfir:3:9\n'
            '  return %1\n}\n')
    g = parse_module(text).graphs["g"]
    assert g.result_names == ["out0"]
    assert g.ops[0].loc == Location("/tmp/a-b_c/<model>.py", 7)
    assert g.ops[1].loc == Location("C:/x.tfc!ir/main.tfir", 3, 9)
    assert "(out0: f32[])" in roundtrip(text)


def test_empty_module() -> None:
    assert print_module(parse_module("")) == ""
    assert print_module(parse_module("// nothing\n")) == ""


def test_target_says_the_devices_and_fp16_transfers() -> None:
    text = ('target {devices=["/cpu:0", "/cpu:1"], fp16_transfers=true}\n\n'
            'var @v : f32[] {device="/cpu:1"}\n')
    assert roundtrip(text) == text
    m = parse_module(text)
    assert m.devices == ["/cpu:0", "/cpu:1"] and m.fp16_transfers
    # device names are made canonical; the default target prints nothing
    assert parse_module('target {devices=["cpu:1", "cpu:0"]}').devices == ["/cpu:1", "/cpu:0"]
    assert print_module(parse_module("target {}")) == ""
    assert print_module(Module(devices=["/cpu:0"])) == 'target {devices=["/cpu:0"]}\n'


# ---- errors -------------------------------------------------------------------------------

def error_of(text: str) -> ParseError:
    with pytest.raises(ParseError) as e:
        parse_module(text, "bad.tfir")
    return e.value


GOOD = "graph @g(%x: f32[3], %i: i32[3]) -> (y: f32[3]) {\n  %y = exp %x : f32[3]\n" \
       "  return %y\n}\n"


@pytest.mark.parametrize("old,new,line,col,parts", [
    # missing closing brace: reported at the end of the input
    ("return %y\n}\n", "return %y\n", 3, 12, ["unexpected end of input", "'}'"]),
    # missing brace, then another graph
    ("}\n", "graph @h() -> () {\n  return\n}\n", 4, 1, ["unexpected 'graph'", "expected '}'"]),
    ("%x: f32[3],", "%x: f33[3],", 1, 14, ["unexpected", "expected type"]),
    ("%y = exp %x : f32[3]", "%y = exp %x : f32[3, $]", 2, 24, ["bad dimension '$'"]),
    ("%y = exp", "%y = epx", 2, 8, ["unknown op 'epx'", "did you mean 'exp'?"]),
    ("exp %x", "exp %q", 2, 12, ["undefined value %q"]),
    ("exp %x : f32[3]", "exp %x : f32[4]", 2, 3,
     ["exp: result types are printed as f32[4] but inferred as f32[3]"]),
    ("exp %x : f32[3]", "exp %i : f32[3]", 2, 3, ["exp: input has dtype i32"]),
    ("exp %x : f32[3]", "exp %x", 2, 3, ["printed as none but inferred as f32[3]"]),
    ("exp %x : f32[3]", "exp %x : f32[3], f32[3]", 2, 3, ["inferred as f32[3]"]),
    ("exp %x", "exp %x, $x", 2, 16, ["unexpected character '$'"]),
    ("exp %x : f32[3]", "exp %x {axis=1} : f32[3]", 2, 16, ["exp: unknown attr 'axis'"]),
    ("exp %x : f32[3]", "exp %x : f32[3]  # just a comment", 2, 25,
     ["expected '# FILE:LINE'"]),
    ("%y = exp", "%x = exp", 2, 3, ["value %x is defined twice"]),
    ("return %y", "return %y, %y", 3, 10, ["declares 1 results but returns 2"]),
    ("%y = exp", "%y = = exp", 2, 8, ["unexpected '='", "expected op kind"]),
])
def test_parse_errors(old: str, new: str, line: int, col: int, parts: list[str]) -> None:
    assert old in GOOD
    err = error_of(GOOD.replace(old, new, 1))
    assert err.loc == Location("bad.tfir", line, col), str(err)
    for p in parts:
        assert p in err.message, f"{p!r} not in {err.message!r}"
    # the offending line and a caret under the column
    src_line = GOOD.replace(old, new, 1).split("\n")[line - 1]
    assert f"\n  {src_line}\n  {' ' * (col - 1)}^" in err.message


def test_result_type_mismatch_of_return() -> None:
    err = error_of("graph @g(%x: f32[3], %i: i32[3]) -> (y: f32[3]) {\n  return %i\n}\n")
    assert err.loc == Location("bad.tfir", 2, 10)
    assert "result %i has type i32[3], but the signature says f32[3]" in err.message


@pytest.mark.parametrize("text,line,col,part", [
    ("graph @g() -> () {\n  %0 = constant dense<f32[3]: 1.0, x, 3.0> : f32[3]\n  return\n}",
     2, 36, "bad f32 element 'x'"),
    ("graph @g() -> () {\n  %0 = constant dense<f32[3]: 1.0, 2.0> : f32[3]\n  return\n}",
     2, 30, "has 2 elements, expected 3"),
    ("graph @g() -> () {\n  %0 = constant dense<i32[1]: 3000000000> : i32[1]\n  return\n}",
     2, 31, "bad i32 element '3000000000'"),
    ("graph @g() -> () {\n  %0 = constant dense<f16[1]: 1e6> : f16[1]\n  return\n}",
     2, 31, "bad f16 element '1e6'"),
    ("graph @g() -> () {\n  %0 = constant dense<f32[B]: 1.0> : f32[B]\n  return\n}",
     2, 23, "needs a static shape"),
    ("graph @g() -> () {\n  %0 = constant {value=1.0} : f32[]\n  return\n}",
     2, 18, "constant: attr value=1.0 is not of kind tensor"),
    ("graph @g(%x: f32[3]) -> () {\n  %0 = sum %x {axes=[B]} : f32[]\n  return\n}",
     2, 22, "unknown word 'B'"),
    ("graph @g(%x: f32[3]) -> () {\n  %0 = sum %x {axes=[0], axes=[0]} : f32[]\n  return\n}",
     2, 26, "attr 'axes' is given twice"),
    ("var @v : f32[] {device=3}\n", 1, 17, "var @v: unknown or ill-typed attr device=3"),
    ("var @v : f32[]\nvar @v : f32[]\n", 2, 5, "variable @v is declared twice"),
    ("graph @g() -> () {\n  return\n}\ngraph @g() -> () {\n  return\n}\n", 4, 7,
     "graph @g is defined twice"),
    ("graph @g() -> () {\n  %0, %0 = test.region : f32[], f32[]\n  return\n}", 2, 7,
     "value %0 is defined twice"),
    ("graph @g() -> () {\n  %0, %1 = test.region : f32[]\n  return\n}", 2, 3,
     "2 result names but 1 result types"),
    ("graph @g() -> () {\n  %0 = var.read @W\n  return\n}", 2, 3,
     "1 result names but 0 result types"),
    ('graph @g() -> () {\n  return\n} "stray"', 3, 3, "unexpected '\"stray\"'"),
    ('target {devices=["/cpu:0"]}\ntarget {fp16_transfers=true}', 2, 9,
     "the target is given twice (first at line 1)"),
    ("target {devices=3}", 1, 9, "target: unknown or ill-typed attr devices=3"),
    ("target {cores=2}", 1, 9, "target: unknown or ill-typed attr cores=2"),
    ('target {devices=["/cpu:0", "/cpu:0"]}', 1, 9, "target: device /cpu:0 is listed twice"),
    ('target {devices=["/tpu:0"]}', 1, 9, "target: "),
    ("graph @g() -> () {\n  return\n} @", 3, 3, "unexpected character '@'"),
])
def test_more_parse_errors(text: str, line: int, col: int, part: str) -> None:
    err = error_of(text)
    assert err.loc == Location("bad.tfir", line, col), str(err)
    assert part in err.message, err.message


def test_errors_are_parse_errors_not_lark_or_python() -> None:
    for text in ["graph", "graph @", "var @v :", "graph @g(%x: f32[3]) -> (", "}", "%",
                 "graph @g() -> () { %0 = constant dense<f32[2]: 1.0, 2.0 : f32[2] return }",
                 "graph @g() -> () { test.attrs {a_any=[[[1]]]]} return }", "\x00", "var @v",
                 'var @"unterminated : f32[]', "graph @g() -> () { return } # x.py:1"]:
        with pytest.raises(ParseError) as e:
            parse_module(text)
        assert e.value.loc is not None and e.value.loc.line >= 1


# ---- property: random well-typed modules round-trip ---------------------------------------

SHAPES = [(), (3,), (2, 3), ("B", 3), ("B",), (1, 3)]
DTYPES = [DType.f32, DType.f64, DType.i32, DType.bool]
UNARY = ["neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "floor", "sign",
         "square", "identity", "logical_not", "rsqrt", "sin", "cos"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "greater", "less", "equal",
          "not_equal", "logical_and", "logical_or", "greater_equal", "less_equal"]
REDUCE = ["sum", "mean", "max", "min", "prod"]
NAMES = [None, None, None, "h", "h", "h_1", "7", "x", "a.b/c-d", "odd name", "loss:0"]
DEVICES = [None, None, "/cpu:0", "/job:ps/task:1/gpu:0"]


def _locs() -> st.SearchStrategy:
    return st.one_of(st.none(), st.builds(
        Location, st.sampled_from(["model.py", "a/b-c_d.py", "<stdin>", "x:y.py"]),
        st.integers(1, 10_000), st.one_of(st.none(), st.integers(1, 200))))


def _constant(draw: Any, dtype: DType, shape: tuple) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    if dtype == DType.bool:
        elem = st.booleans()
    elif dtype == DType.i32:
        elem = st.integers(-2 ** 31, 2 ** 31 - 1)
    else:
        width = 32 if dtype == DType.f32 else 64
        elem = st.one_of(st.floats(width=width), st.sampled_from(
            [0.0, -0.0, math.inf, -math.inf, math.nan, 0.1, 1e-45 if width == 32 else 5e-324]))
    if draw(st.booleans()):
        return np.full(shape, draw(elem), dtype.np)
    return np.array(draw(st.lists(elem, min_size=size, max_size=size)),
                    dtype.np).reshape(shape)


def _random_graph(draw: Any, module: Module, name: str, depth: int,
                  arg_types: Sequence[TensorType] | None = None) -> Graph:
    """A well-typed graph of random ops; at ``depth`` > 0 some ops own random regions."""
    g = Graph(name)
    if arg_types is None:
        arg_types = [TensorType(draw(st.sampled_from(DTYPES)), draw(st.sampled_from(SHAPES)))
                     for _ in range(draw(st.integers(0, 3)))]
    values = [g.add_arg(at, draw(st.sampled_from(["x", "y", "7", "x", None])))
              for at in arg_types]
    kinds = ["unary", "binary", "reduce", "constant", "cast", "argmax", "read", "assign"]
    for _ in range(draw(st.integers(0, 12 if depth else 4))):
        b = Builder(g, loc=draw(_locs()), device=draw(st.sampled_from(DEVICES)))
        name = draw(st.sampled_from(NAMES))
        what = draw(st.sampled_from(kinds + (["region"] if depth else [])))
        try:
            if what == "constant" or not values:
                value = _constant(draw, draw(st.sampled_from(DTYPES[:3] + [DType.bool])),
                                  draw(st.sampled_from([s for s in SHAPES if "B" not in s])))
                op = b.op("constant", value=value, name=name)
            elif what == "unary":
                op = b.op(draw(st.sampled_from(UNARY)), draw(st.sampled_from(values)),
                          name=name)
            elif what == "binary":
                op = b.op(draw(st.sampled_from(BINARY)), draw(st.sampled_from(values)),
                          draw(st.sampled_from(values)), name=name)
            elif what == "reduce":
                x = draw(st.sampled_from(values))
                axes = draw(st.one_of(st.none(), st.lists(
                    st.integers(-x.type.rank, max(x.type.rank - 1, 0)), max_size=2,
                    unique=True)))
                op = b.op(draw(st.sampled_from(REDUCE)), x, axes=axes,
                          keepdims=draw(st.booleans()), name=name)
            elif what == "cast":
                op = b.op("cast", draw(st.sampled_from(values)),
                          dtype=draw(st.sampled_from(list(DType))), name=name)
            elif what == "argmax":
                op = b.op("argmax", draw(st.sampled_from(values)),
                          axis=draw(st.integers(-2, 1)),
                          output_type=draw(st.sampled_from([DType.i32, DType.i64])))
            elif what == "read" and module.variables:
                var = draw(st.sampled_from(sorted(module.variables)))
                op = b.op("var.read", var=var, result_types=[module.variables[var].type],
                          name=name)
            elif what == "assign" and module.variables:
                op = b.op(draw(st.sampled_from(["var.assign", "var.assign_add"])),
                          draw(st.sampled_from(values)),
                          var=draw(st.sampled_from(sorted(module.variables))))
            elif what == "region":
                operands = draw(st.lists(st.sampled_from(values), max_size=3))
                regions = [_random_graph(draw, module, f"r{i}", depth - 1,
                                         [v.type for v in operands])
                           for i in range(draw(st.integers(1, 2)))]
                op = b.op("test.region", *operands, regions=regions,
                          result_types=[r.type for r in regions[0].results])
            else:
                continue
        except TypeMismatch:
            continue
        values.extend(op.results)
    results = draw(st.lists(st.sampled_from(values), max_size=3)) if values else []
    g.set_results(results, [draw(st.sampled_from(["out", "loss", "y:0", "7"])) + str(i)
                            for i in range(len(results))])
    return g


@st.composite
def modules(draw: Any) -> Module:
    module = Module()
    for i in range(draw(st.integers(0, 3))):
        vt = TensorType(draw(st.sampled_from(DTYPES)),
                        tuple(d for d in draw(st.sampled_from(SHAPES)) if isinstance(d, int)))
        module.variables[f"v{i}"] = VariableDecl(
            f"v{i}", vt, draw(st.sampled_from(DEVICES)), draw(st.booleans()), draw(_locs()))
    for gi in range(draw(st.integers(1, 2))):
        name = draw(st.sampled_from(["main", "train_step", "a.b/c"])) + str(gi)
        module.graphs[name] = _random_graph(draw, module, name, depth=2)
    return module


def _same_tensor(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return bool(np.all(((a == b) & (np.signbit(a) == np.signbit(b))) |
                           (np.isnan(a) & np.isnan(b))))
    return bool(np.array_equal(a, b))


def _same_ops(a: Op, b: Op) -> bool:
    if (a.kind, a.device, a.loc) != (b.kind, b.device, b.loc):
        return False
    if [r.type for r in a.results] != [r.type for r in b.results]:
        return False
    for k, v in a.attrs.items():
        w = b.attrs[k]
        if isinstance(v, np.ndarray):
            if not _same_tensor(v, w):
                return False
        elif not (v == w or (isinstance(v, float) and math.isnan(v) and math.isnan(w))):
            return False
    return True


def _same_graphs(g: Graph, p: Graph) -> None:
    """Same signature, ops (attrs compared bit-exactly) and dataflow edges, recursively."""
    assert [a.type for a in p.args] == [a.type for a in g.args]
    assert p.result_names == g.result_names and len(p.ops) == len(g.ops)
    index = {v: i for i, v in enumerate(g.args)}
    index.update({r: (i, j) for i, op in enumerate(g.ops) for j, r in enumerate(op.results)})
    pindex = {v: i for i, v in enumerate(p.args)}
    pindex.update({r: (i, j) for i, op in enumerate(p.ops) for j, r in enumerate(op.results)})
    for a, b in zip(g.ops, p.ops):
        assert _same_ops(a, b)
        assert [index[v] for v in a.inputs] == [pindex[v] for v in b.inputs]
        assert len(a.regions) == len(b.regions)
        for ra, rb in zip(a.regions, b.regions):
            _same_graphs(ra, rb)
    assert [index[v] for v in g.results] == [pindex[v] for v in p.results]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_random_modules_roundtrip(module: Module) -> None:
    printed = print_module(module)
    parsed = parse_module(printed)
    assert print_module(parsed) == printed
    assert parsed.variables == module.variables
    assert list(parsed.graphs) == list(module.graphs)
    for name, g in module.graphs.items():
        _same_graphs(g, parsed.graphs[name])


# ---- size (speed is measured in tools/, never asserted in tests) -----------------------------

def test_ten_thousand_ops_round_trip() -> None:
    g = Graph("big")
    x = g.add_arg(t("f32[B,64]"), "x")
    b = Builder(g, loc=Location("model.py", 3))
    vals = [x]
    for i in range(10_000):
        a = vals[(i * 7919) % len(vals)]
        kind = i % 4
        if kind == 0:
            v = b("add", a, vals[-1])
        elif kind == 1:
            v = b("exp", a)
        elif kind == 2:
            v = b("tanh", a)
        else:
            v = b("sum", a, axes=[1], keepdims=True)
        vals.append(v)
    g.set_results([vals[-1]], ["y"])
    m = Module({"big": g})
    text = print_module(m)
    parsed = parse_module(text)
    assert len(parsed.graphs["big"].ops) == 10_000
    assert print_module(parsed) == text


@pytest.mark.parametrize("kind,value,column", [
    ("reshape %x", "[[-1]]", 28), ("reshape %x", "[[]]", 20), ("reshape %x", "[3, [1, 2]]", 31),
    ("random.uniform", "[[-1]]", 32)])
def test_a_list_inside_a_shape_attr_is_a_parse_error(kind: str, value: str, column: int) -> None:
    """It was ``internal error: AttributeError: 'Tree' object has no attribute 'line'``."""
    text = (f"graph @g(%x: f32[4]) -> () {{\n  %y = {kind} {{shape={value}}} : f32[4]\n"
            "  return\n}\n")
    with pytest.raises(ParseError) as e:
        parse_module(text, "m.tfir")
    assert str(e.value).startswith(f"m.tfir:2:{column}: a shape's dims are sizes, symbols or "
                                   "'?', not a list")
