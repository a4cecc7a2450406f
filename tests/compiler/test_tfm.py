"""The .tfm model language: what each construct builds, and located errors with a caret."""

import numpy as np
import pytest

from tfc.compiler.tfm import parse_tfm
from tfc.errors import FeedError, ParseError, TfcError, TypeMismatch, UnknownOp
from tfc.ir.printer import print_module
from tfc.ir.types import DType, TensorType
from tfc.runtime.program import Program

HEAD = """\
input x: f32[B, 4]
input y: i32[B]
param w: f32[4, 3] = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]
param b: f32[3] = 0.5
"""

X = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
W = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], np.float32)


def program(src: str) -> Program:
    return Program(parse_tfm(src, "m.tfm"), backend="reference")


def run(src: str, entry: str = "f", **feeds) -> dict[str, np.ndarray]:
    return program(src).run(entry, **feeds)


# ---- declarations ----------------------------------------------------------------------------

def test_inputs_params_and_entries():
    m = parse_tfm(HEAD + "entry predict(x) { return probs = softmax(x @ w + b), x }\n",
                  "m.tfm")
    g = m.entries["predict"]
    assert g.arg_names == ["x"] and g.args[0].type == TensorType(DType.f32, ("B", 4))
    assert g.result_names == ["probs", "x"]
    assert [str(v.type) for v in m.variables.values()] == ["f32[4,3]", "f32[3]"]
    out = Program(m, backend="reference").run("predict", x=X)
    logits = X @ W + 0.5
    e = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(out["probs"], e / e.sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(out["x"], X)


def test_symbolic_and_unknown_dims():
    m = parse_tfm("input s: f32[N, ?, 3]\nentry f(s) { return t = s * 2 }", "m.tfm")
    assert str(m.entries["f"].args[0].type) == "f32[N,?,3]"


@pytest.mark.parametrize("init, expected", [
    ("zeros", np.zeros((2, 3))),
    ("ones", np.ones((2, 3))),
    ("2.5", np.full((2, 3), 2.5)),
    ("-1", np.full((2, 3), -1.0)),
    ("fill(value=3)", np.full((2, 3), 3.0)),
    ("[[1, 2, 3], [4, 5, 6]]", np.arange(1, 7).reshape(2, 3)),
    ("ones * 2 - 1", np.ones((2, 3))),
])
def test_param_initializers(init, expected):
    p = program(f"param v: f32[2, 3] = {init}\nentry f() {{ return v }}")
    np.testing.assert_array_equal(p.run("f")["v"], expected.astype(np.float32))


def test_random_initializers_take_the_params_type_and_explicit_seeds():
    p = program("param g: f32[20, 30] = glorot_uniform(seed=7)\n"
                "param n: f64[500] = random.normal(stddev=0.1, seed=3)\n"
                "param u: f32[4] = random.uniform(minval=2, maxval=3)\n"
                "entry f() { return g, n, u }")
    out = p.run("f")
    limit = np.sqrt(6 / 50)
    assert out["g"].dtype == np.float32 and np.abs(out["g"]).max() <= limit
    assert out["g"].std() > limit / 3
    assert out["n"].dtype == np.float64 and 0.08 < out["n"].std() < 0.12
    assert np.all((out["u"] >= 2) & (out["u"] < 3))
    text = print_module(p.module)
    assert "seed=7" in text and "seed=3" in text and "seed=1" in text  # u: the graph's seed


def test_param_options():
    m = parse_tfm('param c: i32[] = 0 {trainable=false, device="/cpu:0"}\n'
                  "entry f() { return c }", "m.tfm")
    var = m.variables["c"]
    assert not var.trainable and var.device == "/cpu:0" and str(var.type) == "i32[]"


# ---- expressions -------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, fn", [
    ("x + 1", lambda x: x + 1), ("x - 1", lambda x: x - 1), ("2 * x", lambda x: 2 * x),
    ("x / 2", lambda x: x / 2), ("x ** 2", lambda x: x ** 2), ("-x", lambda x: -x),
    ("x @ w", lambda x: x @ W), ("1 + x * 2 ** 2", lambda x: 1 + x * 4),
    ("-x ** 2", lambda x: -(x ** 2)), ("(1 + x) * 2", lambda x: (1 + x) * 2),
    ("x - 1 - 1", lambda x: x - 2), ("x > 0.5", lambda x: x > 0.5),
    ("x <= 0.5", lambda x: x <= 0.5), ("x == 0.5", lambda x: x == 0.5),
    ("x != 0.5", lambda x: x != 0.5),
])
def test_operators_follow_python(expr, fn):
    out = run(HEAD + f"entry f(x) {{ return r = {expr} }}", x=X)["r"]
    np.testing.assert_allclose(out, fn(X), rtol=1e-6)


def test_slash_divides_integers_as_python_does():
    """``/`` on i32 tensors is true division in f64 (``Tensor.__truediv__``, TF's truediv),
    not the IR's flooring ``div``: 7 / 2 is 3.5 and -7 / 2 is -3.5, in a .tfm as in a .py."""
    y = np.array([7, -7, 1, 0], np.int32)
    out = run(HEAD + "entry f(y) { return q = y / 2, r = y / y }", y=y)
    assert out["q"].dtype == np.float64 and out["r"].dtype == np.float64
    np.testing.assert_array_equal(out["q"], [3.5, -3.5, 0.5, 0.0])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(out["r"], y.astype(np.float64) / y)


def test_registry_ops_with_keyword_attrs():
    src = HEAD + """
entry f(x) {
  s = sum(x, axes=[1], keepdims=true)
  r = reshape(x, shape=[-1, 2])
  c = cast(argmax(x @ w, axis=1, output_type=i32), dtype=f64)
  a, z = split(x, num=2, axis=1)
  return s, r, c, a, z, t = transpose(x, perm=[1, 0])
}
"""
    out = run(src, x=X)
    np.testing.assert_allclose(out["s"], X.sum(1, keepdims=True), rtol=1e-6)
    assert out["r"].shape == (4, 2) and out["c"].dtype == np.float64
    np.testing.assert_array_equal(out["a"], X[:, :2])
    np.testing.assert_array_equal(out["z"], X[:, 2:])
    np.testing.assert_array_equal(out["t"], X.T)


def test_attrs_take_names_bound_to_constants():
    src = "k = 2\nentry f() { return z = zeros(shape=[k, 3]) }"
    m = parse_tfm(src, "m.tfm")
    assert [str(v.type) for v in m.entries["f"].results] == ["f32[2,3]"]
    with pytest.raises(TypeMismatch, match="m.tfm:1:40: broadcast_to: shape .B,4."):
        parse_tfm("input x: f32[B, 4]\nentry f(x) { return broadcast_to(x, shape=[B, 4]) }"
                  .replace("\n", " "), "m.tfm")


def test_name_attr_names_the_value():
    text = print_module(parse_tfm(HEAD + 'entry f(x) { return p = softmax(x @ w, name="probs") }',
                                  "m.tfm"))
    assert "%probs = softmax" in text


def test_functions_locals_and_keyword_arguments():
    src = HEAD + """
fn affine(h, scale) {
  z = h @ w
  return z * scale + b
}
fn twice(v) = affine(affine(v, scale=1)[0:0] + v, 2)
top = 3
entry f(x) {
  h = affine(x, scale=top)
  return h, g = affine(scale=1, h=x)
}
"""
    with pytest.raises(ParseError):  # no indexing in the language
        parse_tfm(src, "m.tfm")
    src = src.replace("fn twice(v) = affine(affine(v, scale=1)[0:0] + v, 2)\n", "")
    out = run(src, x=X)
    np.testing.assert_allclose(out["h"], (X @ W) * 3 + 0.5, rtol=1e-6)
    np.testing.assert_allclose(out["g"], X @ W + 0.5, rtol=1e-6)


def test_ops_are_located_at_the_tfm_source():
    m = parse_tfm(HEAD + "entry f(x) {\n  return r = relu(x @ w)\n}", "m.tfm")
    ops = {op.kind: op.loc for op in m.entries["f"].ops}
    assert str(ops["matmul"]) == "m.tfm:6:21" and str(ops["relu"]) == "m.tfm:6:14"
    assert str(m.variables["w"].loc) == "m.tfm:3:7"


# ---- training ----------------------------------------------------------------------------------

def test_train_sgd_step_matches_numpy():
    src = HEAD + """
train step(x, y) {
  loss = mean(sparse_softmax_cross_entropy(x @ w + b, y))
  minimize loss over w with sgd(learning_rate=0.5)
  return loss
}
"""
    p = program(src)
    y = np.array([0, 2], np.int32)
    loss = p.run("step", x=X, y=y)["loss"]
    logits = X @ W + 0.5
    prob = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(loss, -np.log(prob[[0, 1], y]).mean(), rtol=1e-6)
    grad = X.T @ (prob - np.eye(3)[y]) / 2
    np.testing.assert_allclose(p.variables["w"], W - 0.5 * grad, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(p.variables["b"], np.full(3, 0.5, np.float32))  # not in `over`


@pytest.mark.parametrize("opt, slots", [
    ("adam(learning_rate=0.01, beta1=0.8)", {"w/Adam", "w/Adam_1", "beta1_power"}),
    ("momentum(0.1, 0.9, use_nesterov=true)", {"w/Momentum"}),
    ("rmsprop(learning_rate=0.1)", {"w/RMSProp", "w/RMSProp_1"}),
    ("adagrad(learning_rate=0.1)", {"w/Adagrad"}),
])
def test_optimizers_and_their_slots(opt, slots):
    m = parse_tfm(HEAD + f"train t(x) {{ minimize mean(x @ w) with {opt} }}", "m.tfm")
    assert slots <= set(m.variables)
    assert "t" in m.entries


# ---- errors ------------------------------------------------------------------------------------

ERRORS = [
    # (source after HEAD, error class, line, column, text in the message)
    ("entry f(x) { return x @ }", ParseError, 5, 25, "unexpected '}'"),
    ("entry f(x) { return x $ 1 }", ParseError, 5, 23, "unexpected character '$'"),
    ("entry f(x) { return x", ParseError, 5, 22, "unexpected end of input"),
    ("param v f32[2] = zeros", ParseError, 5, 9, "expected ':'"),
    ("entry f(x) { return relux(x) }", UnknownOp, 5, 21, "did you mean 'relu'?"),
    ("entry f(x) { return random.normall(shape=[2], seed=1) }", UnknownOp, 5, 21,
     "did you mean 'random.normal'?"),
    ("entry f(x) { return argmax(x, axsi=1) }", TypeMismatch, 5, 31,
     "unknown attr 'axsi' (did you mean 'axis'?)"),
    ('entry f(x) { return argmax(x, axis="1") }', TypeMismatch, 5, 36, "is not of kind int"),
    ("entry f(x) { return argmax(x, output_type=f23) }", TypeMismatch, 5, 43,
     "did you mean 'f32'?"),
    ("entry f(x) { return w @ w }", TypeMismatch, 5, 23, "inner dims 3 and 4 differ"),
    ("entry f(x) { return x + b }", TypeMismatch, 5, 23, "f32[B,4]"),
    ("entry f(x) { h = x\n  return relu(hh) }", ParseError, 6, 15,
     "undefined name 'hh' (did you mean 'h'?)"),
    ("entry f(x) { return relu(ww) }", ParseError, 5, 26, "did you mean 'w'?"),
    ("entry f(z) { return x }", FeedError, 5, 9, "not defined"),
    ("entry f() { return x @ w }", FeedError, 5, 7, "needs placeholder 'x'"),
    ("param v: f33[2] = zeros", TypeMismatch, 5, 10, "did you mean 'f32'?"),
    ("param v: f32[2] = [1, 2, 3]", TypeMismatch, 5, 19, "declared f32[2]"),
    ("param v: f32[2] = x", ParseError, 5, 19, "cannot use 'x'"),
    ("param v: f32[2] = glorot_uniform(sed=1)", ParseError, 5, 34, "known: seed"),
    ("param v: f32[B] = zeros", TypeMismatch, 5, 10, "static shape"),
    ("param v: f32[2] = zeros {trainble=false}", ParseError, 5, 26,
     "did you mean 'trainable'?"),
    ("train t(x) { minimize mean(x @ w) with adma(0.1) }", UnknownOp, 5, 40,
     "did you mean 'adam'?"),
    ("train t(x) { minimize mean(x @ w) with adam(learnin_rate=0.1) }", ParseError, 5, 45,
     "did you mean 'learning_rate'?"),
    ("train t(x) { minimize mean(x @ w) with sgd() }", ParseError, 5, 40,
     "missing setting 'learning_rate'"),
    ("train t(x) { minimize mean(x @ w) over ww with sgd(0.1) }", ParseError, 5, 40,
     "did you mean 'w'?"),
    ("train t(x) { return x }", ParseError, 5, 7, "has no `minimize"),
    ("entry f(x) { minimize mean(x @ w) with sgd(0.1) }", ParseError, 5, 14,
     "belongs in a `train`"),
    ("train t(y) { minimize mean(cast(y, dtype=f32)) with sgd(0.1) }", TfcError, 5, 14,
     "no gradients"),
    ("fn f(a) = a @ w\nentry g(x) { return f(w) }", TypeMismatch, 5, 13,
     "called at line 6:21"),
    ("fn f(a) = f(a)\nentry g(x) { return f(x) }", ParseError, 5, 11, "recursion"),
    ("fn relu(a) = a", ParseError, 5, 4, "would hide"),
    ("fn f(a) = a\nentry g(x) { return f(x, x) }", ParseError, 6, 26, "takes 1 argument"),
    ('entry f(x) { return x + "a" }', TypeMismatch, 5, 25, "not a tensor"),
    ("entry f(x) { return split(x, num=2) }", TypeMismatch, 5, 21, "2 results"),
    ("entry f(x) { h = x\n h = x\n return h }", ParseError, 6, 2, "already defined"),
    ("entry f(x) { return x }\nentry f(x) { return x }", TfcError, 6, 7, "declared twice"),
    ("entry f(x) { return relu }", ParseError, 5, 21, "is an op; call it"),
    ("entry f(x) { return var.read(var=\"w\") }", UnknownOp, 5, 21, "not callable"),
    ("entry f(x) { return cond(x) }", UnknownOp, 5, 21, "sub-graphs"),
    ("entry f(x) { return relu(x, x) }", TypeMismatch, 5, 21, "relu takes 1 inputs, got 2"),
    ("entry f(x) { return mean(x, axes=[3]) }", TypeMismatch, 5, 21, "out of range"),
    ("entry f(x) { return argmax(x, axis=x) }", TypeMismatch, 5, 36, "not a constant"),
    ("entry f(x) { return a = x, a = x }", ParseError, 5, 28, "returns 'a' twice"),
    ("entry f(x) { return x\n y = x }", ParseError, 6, 2, "after `return`"),
    ("entry f(x) { }", ParseError, 5, 7, "returns nothing"),
]


@pytest.mark.parametrize("src, cls, line, column, text", ERRORS, ids=[e[4] for e in ERRORS])
def test_errors_are_located_with_a_caret(src, cls, line, column, text):
    with pytest.raises(cls) as info:
        parse_tfm(HEAD + src, "m.tfm")
    e = info.value
    assert (e.loc.file, e.loc.line, e.loc.column) == ("m.tfm", line, column), str(e)
    assert text in str(e)
    src_line = (HEAD + src).split("\n")[line - 1]
    assert f"\n  {src_line}\n  {' ' * (column - 1)}^" in str(e)
    assert str(e).startswith(f"m.tfm:{line}:{column}: ")


def test_a_model_without_entries_is_an_error():
    with pytest.raises(TfcError, match="declares no entry points"):
        parse_tfm(HEAD, "m.tfm")


def test_comments_semicolons_and_reserved_words():
    src = HEAD + "# comment\nk = 2; z = x * k  # trailing\nentry f(x) { return z }\n"
    np.testing.assert_allclose(run(src, x=X)["z"], X * 2)
    for word in ("over", "with", "return"):
        with pytest.raises(ParseError, match=f"'{word}'"):
            parse_tfm(HEAD + f"entry f(x) {{ {word} = x; return x }}", "m.tfm")


# ---- the package's layout ----------------------------------------------------------------------

def test_public_names_stay_importable():
    import tfc.compiler.tfm as tfm
    from tfc.compiler.tfm.builder import INITIALIZERS, KEYWORDS, OPTIMIZERS, ModelBuilder

    assert tfm.INITIALIZERS is INITIALIZERS and tfm.OPTIMIZERS is OPTIMIZERS
    assert {"adam", "sgd"} <= set(OPTIMIZERS) and "glorot_uniform" in INITIALIZERS
    assert "minimize" in KEYWORDS
    builder = ModelBuilder("", "m.tfm")
    for rule in ("input_decl", "param_decl", "binding", "fn_def", "entry_def", "train_def"):
        assert callable(getattr(builder, rule))  # build() dispatches on the grammar's rules


def test_scopes_fall_back_to_their_parent_and_shadow_it():
    from lark import Token

    from tfc.compiler.tfm.scope import Scope

    top = Scope()
    top.define(Token("NAME", "k"), 1)
    inner = Scope(top)
    assert inner.find("k") == (1, top) and inner.find("q") is None
    inner.define(Token("NAME", "k"), 2)
    assert inner.find("k") == (2, inner) and top.find("k") == (1, top)
    assert sorted(inner.visible()) == ["k", "k"]


def test_log1p_expm1_softplus_are_tfm_ops():
    """Registry ops are .tfm functions with no frontend change: log1p (keeping x * 1e-9,
    where log(1 + x) gives 0), expm1 and softplus, on the llvm backend."""
    src = HEAD + ("entry f(x) { return a = log1p(x * 1e-9), e = expm1(x @ w), "
                  "s = softplus(x @ w + b) }\n")
    out = Program(parse_tfm(src, "m.tfm"), backend="llvm").run("f", x=X)
    z = (X @ W).astype(np.float64)
    np.testing.assert_allclose(out["a"], X * np.float32(1e-9), rtol=1e-6)
    np.testing.assert_allclose(out["e"], np.expm1(z), rtol=1e-6)
    np.testing.assert_allclose(out["s"], np.logaddexp(0, z + 0.5), rtol=1e-6)


def test_floormod_round_and_is_inf_are_tfm_ops():
    """The new registry ops are .tfm functions too: floormod with TF's sign rule
    (-x % 0.4 takes the divisor's sign), round ties to even (x * 2 holds 0.5, 1.5 ...:
    0, 2, 2, 4), is_inf with a bool result (1 / 0), squared_difference; on the llvm
    backend and the reference."""
    src = HEAD + ("entry f(x) { return m = floormod(neg(x), 0.4), r = round(x * 2), "
                  "n = is_inf(reciprocal(x)), q = squared_difference(x @ w, b) }\n")
    t = np.fmod(-X, np.float32(0.4))
    for backend in ("llvm", "reference"):
        out = Program(parse_tfm(src, "m.tfm"), backend=backend).run("f", x=X)
        np.testing.assert_array_equal(out["m"], np.where(t != 0, t + np.float32(0.4), t))
        assert (out["m"] >= 0).all()
        np.testing.assert_array_equal(out["r"], np.rint(X * 2))
        assert out["n"].dtype == np.bool_
        np.testing.assert_array_equal(out["n"], X == 0)
        np.testing.assert_allclose(out["q"], np.square(X @ W - 0.5), rtol=1e-6)
