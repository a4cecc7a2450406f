"""Literals in a .tfm file: integers are integers (``gather(x, [1, 2])`` has i32
indices, as TensorFlow's ``tf.constant([1, 2])``), a literal takes its tensor operands'
dtype where the op needs that, and a literal out of range is an error at its place."""

import numpy as np
import pytest

from tfc.compiler.tfm import parse_tfm
from tfc.errors import TfcError
from tfc.ir.printer import print_module
from tfc.runtime import Program

BACKENDS = ["reference", "llvm"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_list_is_int32_indices(backend):
    m = parse_tfm("input x: f32[200, 3]\n"
                  "entry predict(x) { return y = gather(x, [1, 2, 100]) }\n", "g.tfm")
    assert "constant dense<i32[3]: 1, 2, 100> : i32[3]" in print_module(m)
    x = np.arange(600, dtype=np.float32).reshape(200, 3)
    y = Program(m, backend=backend).run("predict", x=x)["y"]
    np.testing.assert_array_equal(y, x[[1, 2, 100]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_literals_take_the_operands_dtype_where_the_op_needs_it(backend):
    m = parse_tfm("input x: f32[2, 3]\n"
                  "entry f(x) { return a = maximum(x, 0), b = matmul(x, [[1], [2], [3]]),"
                  " c = where(x > 0, x, 0.5), d = one_hot([0, 2], depth=3) }\n", "l.tfm")
    x = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    out = Program(m, backend=backend).run("f", x=x)
    np.testing.assert_array_equal(out["a"], np.maximum(x, 0))
    np.testing.assert_array_equal(out["b"], x @ np.array([[1], [2], [3]], np.float32))
    np.testing.assert_array_equal(out["c"], np.where(x > 0, x, np.float32(0.5)))
    np.testing.assert_array_equal(out["d"], np.eye(3, dtype=np.float32)[[0, 2]])


@pytest.mark.parametrize("expr, col, message", [
    ("x + 1.5e999", 32, "literal 1.5e999 is out of range"),
    ("x * [1.0, 1e400, 2.0]", 38, "literal 1e400 is out of range"),
    ("h * 1e6", 30, "value 1000000.0 is out of range for f16"),
])
def test_literal_out_of_range(expr, col, message):
    text = f"input x: f32[3]\ninput h: f16[3]\nentry f(x, h) {{ return y = {expr} }}\n"
    with pytest.raises(TfcError, match=message) as e:
        parse_tfm(text, "r.tfm")
    assert (e.value.loc.file, e.value.loc.line, e.value.loc.column) == ("r.tfm", 3, col)
