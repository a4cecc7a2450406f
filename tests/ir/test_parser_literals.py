"""A float literal of the textual IR out of its dtype's range is an error at its place,
never a silent ``inf``; spelled infinities still parse."""

import numpy as np
import pytest

import tfc
from tfc.errors import ParseError, TypeMismatch
from tfc.ir.parser import parse_module


def graph(body: str) -> str:
    return f"graph @g() -> () {{\n  {body}\n  return\n}}\n"


@pytest.mark.parametrize("body, col, message", [
    ("%0 = fill {shape=[2], value=1.5e999} : f32[2]", 31, "literal 1.5e999 is out of range"),
    ("%0 = constant dense<f32[2]: 1.0, 1e999> : f32[2]", 36,
     "bad f32 element '1e999' (out of range for f32)"),
    ("%0 = constant dense<f64[1]: -2e308> : f64[1]", 31,
     "bad f64 element '-2e308' (out of range for f64)"),
    ("%0 = constant dense<f16[1]: 70000.0> : f16[1]", 31,
     "bad f16 element '70000.0' (out of range for f16)"),
])
def test_out_of_range_float_literals(body, col, message):
    with pytest.raises(ParseError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        parse_module(graph(body), "r.tfir")
    assert (e.value.loc.line, e.value.loc.column) == (2, col)


def test_infinities_spelled_out_still_parse():
    m = parse_module(graph("%0 = constant dense<f32[3]: inf, -inf, 1.0> : f32[3]"), "i.tfir")
    value = m.graphs["g"].ops[0].attrs["value"]
    np.testing.assert_array_equal(value, np.array([np.inf, -np.inf, 1.0], np.float32))


def test_python_literal_out_of_range_for_a_narrow_float():
    g = tfc.Graph()
    with g.as_default():
        h = tfc.placeholder(tfc.float16, [3])
        with pytest.raises(TypeMismatch, match="value 1000000.0 is out of range for f16"):
            h * 1e6
        h * 65504.0  # the largest f16 is fine
