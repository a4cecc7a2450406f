"""The graph-building API: types, names, scopes, devices, locations, overloads."""

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch

HERE = __file__


def line_of(marker: str) -> int:
    for i, line in enumerate(open(HERE), 1):
        if marker in line and "line_of" not in line:
            return i
    raise AssertionError(marker)


def test_placeholder_none_dims_become_symbols():
    x = tfc.placeholder(tfc.float32, [None, 784], name="x")
    s = tfc.placeholder(tfc.int32, [None, None])
    assert str(x.type) == "f32[B,784]"
    assert x.shape == (None, 784)
    assert s.type.shape[0] == "B" and s.type.shape[1] not in ("B", "?")
    assert x.name == "x" and s.name == "Placeholder"


def test_explicit_symbols_and_broadcasting():
    x = tfc.placeholder(tfc.float32, ["N", 3])
    y = x + tfc.constant([1.0, 2.0, 3.0])
    assert str(y.type) == "f32[N,3]"


def test_python_scalars_take_the_tensor_dtype():
    x = tfc.placeholder(tfc.float64, [2])
    assert (x * 2).dtype == tfc.float64
    assert (1 - x).dtype == tfc.float64
    i = tfc.placeholder(tfc.int32, [2])
    assert (i + 1).dtype == tfc.int32
    with pytest.raises(TypeMismatch, match="does not fit i32"):
        i + 1.5


def test_constant_defaults_follow_tensorflow():
    assert tfc.constant(1.0).dtype == tfc.float32
    assert tfc.constant(3).dtype == tfc.int32
    assert tfc.constant(True).dtype == tfc.bool
    assert tfc.constant(np.zeros(2)).dtype == tfc.float64
    assert tfc.constant(np.int64(3)).dtype == tfc.int64  # numpy scalars keep their dtype
    assert tfc.constant(np.float64(3)).dtype == tfc.float64
    assert tfc.constant(0).type.shape == ()
    assert tfc.constant(2.0, shape=[2, 3]).type.shape == (2, 3)


def test_operators_build_the_expected_ops():
    a = tfc.placeholder(tfc.float32, [2, 2])
    b = tfc.placeholder(tfc.float32, [2, 2])
    kinds = {
        "add": a + b, "sub": a - b, "mul": a * b, "div": a / b, "pow": a ** b,
        "matmul": a @ b, "neg": -a, "abs": abs(a), "less": a < b, "less_equal": a <= b,
        "greater": a > b, "greater_equal": a >= b, "floordiv": a // b, "floormod": a % b,
    }
    for kind, t in kinds.items():
        assert t.value.op.kind == kind
    c = a > b
    assert (c & c).value.op.kind == "logical_and"
    assert (c | c).value.op.kind == "logical_or"
    assert (~c).value.op.kind == "logical_not"
    assert (c ^ c).value.op.kind == "logical_xor"
    assert (2.0 // a).value.op.kind == "floordiv" and (2.0 % a).value.op.kind == "floormod"


def test_tensor_has_no_truth_value_and_compares_by_identity():
    a = tfc.placeholder(tfc.float32, [2])
    with pytest.raises(TypeError, match="truth value"):
        bool(a)
    assert a == a and not (a == tfc.identity(a))


def test_slicing():
    x = tfc.placeholder(tfc.float32, [None, 3, 4])
    assert str(x[0].type) == "f32[3,4]"
    assert str(x[:, 1:, ::2].type) == "f32[B,2,2]"
    assert str(x[..., -1].type) == "f32[B,3]"
    assert str(x[:, None, 0].type) == "f32[B,1,4]"
    with pytest.raises(TypeMismatch, match="too many indices"):
        x[0, 0, 0, 0]


def test_name_scopes_and_unique_names():
    with tfc.name_scope("layer"):
        w1 = tfc.Variable(np.zeros(2, np.float32), name="W")
        w2 = tfc.Variable(np.zeros(2, np.float32), name="W")
        with tfc.name_scope("inner"):
            t = tfc.identity(w1, name="out")
    with tfc.name_scope("layer"):
        p = tfc.placeholder(tfc.float32, [1], name="p")
    assert (w1.name, w2.name) == ("layer/W", "layer/W_1")
    assert t.name == "layer/inner/out"
    assert p.name == "layer_1/p"


def test_device_scopes_are_recorded_on_ops_and_variables():
    with tfc.device("/cpu:1"):
        v = tfc.Variable(np.zeros(2, np.float32), name="v")
        y = v * 2.0
    with tfc.device("GPU:0"):
        z = y + 1.0
    assert v.device == "/cpu:1" and y.device == "/cpu:1"
    assert z.device == "/gpu:0"
    assert tfc.identity(z).device is None


def test_every_op_records_the_users_file_and_line():
    x = tfc.placeholder(tfc.float32, [None, 3])
    y = tfc.nn.softmax(x * 2.0)  # the softmax line
    assert y.value.op.loc.file == HERE
    assert y.value.op.loc.line == line_of("# the softmax line")
    mul = y.value.op.inputs[0].op
    assert mul.kind == "mul" and mul.loc.line == line_of("# the softmax line")


def test_shape_mismatch_names_file_line_and_both_shapes():
    x = tfc.placeholder(tfc.float32, [None, 3])
    w = tfc.Variable(np.zeros((4, 2), np.float32))
    with pytest.raises(TypeMismatch) as err:
        x @ w  # the bad matmul
    msg = str(err.value)
    assert f"{HERE}:{line_of('# the bad matmul')}" in msg
    assert "f32[B,3]" in msg and "f32[4,2]" in msg


def test_variable_types_and_assign_checks():
    v = tfc.Variable(tfc.zeros([2, 3]), name="v")
    assert v.shape == (2, 3) and v.dtype == tfc.float32 and v.trainable
    assert v.assign(tfc.ones([2, 3])).op.kind == "var.assign"
    with pytest.raises(TypeMismatch, match="assigns a f32\\[3\\] to @v, declared f32\\[2,3\\]"):
        v.assign(tfc.ones([3]))
    # a batch dim is not a fixed size: the native update would copy past the value
    with pytest.raises(TypeMismatch, match="assigns a f32\\[B,3\\] to @v.*not a fixed size"):
        v.assign(tfc.placeholder(tfc.float32, [None, 3]))
    with pytest.raises(TypeMismatch, match="static shape"):
        tfc.Variable(tfc.placeholder(tfc.float32, [None]))
    with pytest.raises(TypeMismatch, match="expected a f64 tensor"):
        tfc.Variable(tfc.zeros([2]), dtype=tfc.float64)


def test_ops_from_two_graphs_do_not_mix():
    a = tfc.placeholder(tfc.float32, [2])
    with tfc.Graph().as_default():
        b = tfc.placeholder(tfc.float32, [2])
    with pytest.raises(tfc.TfcError, match="another graph"):
        a + b


def test_unknown_attr_and_op_errors_are_located():
    x = tfc.placeholder(tfc.float32, [2, 3])
    with pytest.raises(TypeMismatch, match="axis 5 is out of range"):
        tfc.reduce_sum(x, axis=5)
    from tfc.api.tensor import apply
    with pytest.raises(tfc.TfcError, match="did you mean 'matmul'"):
        apply("matmull", x, x)


def test_the_operators_the_type_checker_sees_are_the_ones_installed():
    """``TensorOperators`` declares (for mypy) the operators ``tfc.api.tensor`` installs on
    Tensor and Variable: an operator installed but not declared is a false type error in
    user code, one declared but not installed an AttributeError the checker hides."""
    import ast
    import inspect

    import tfc.api.graph as graph_module
    from tfc.api.graph import Tensor, TensorOperators, Variable

    tree = ast.parse(inspect.getsource(graph_module))
    cls = next(n for n in tree.body
               if isinstance(n, ast.ClassDef) and n.name == "TensorOperators")
    declared = {n.name for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)}
    installed = {name for name, fn in vars(Tensor).items()
                 if getattr(fn, "__module__", None) == "tfc.api.tensor"}
    assert installed and declared == installed
    assert all(vars(Variable)[name] is vars(Tensor)[name] for name in installed)
    assert TensorOperators.__slots__ == () and not hasattr(tfc.constant(1.0), "__dict__")
