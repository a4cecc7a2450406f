"""The op registry: lookup, attr checking, registration, and a walk over every op.

The walk builds each op on its example (``tfc.op_examples``), runs its numpy reference
and asks its cost, so an op registered without ``infer``, ``reference`` or a working
``cost`` fails here.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

from tfc.errors import Location, TfcError, TypeMismatch, UnknownOp
from tfc.ir import registry
from tfc.ir.core import Graph
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import (ALL, FLOAT, PURE, RANDOM, STATEFUL, AttrSpec, Cost,
                             OpDef, all_ops, expect_dtype, infer_types, lookup, make_op,
                             normalize_axes, normalize_axis, register, same_dtype)
from tfc.ir.types import DType, TensorType
from tfc.op_examples import DTYPES, VAR_SHAPE, feeds, value, var_name, variants
from tfc.ops.math import Unary
from tfc.runtime.rendezvous import Rendezvous

F23 = TensorType(DType.f32, (2, 3))

# The ops the issue requires (TensorFlow paper, Table 1, as tfc names them).
REQUIRED_OPS = """
add sub mul div pow neg abs exp log sqrt rsqrt tanh sigmoid relu sin cos maximum minimum
greater less equal not_equal greater_equal less_equal logical_and logical_or logical_not
where cast sum mean max min prod argmax argmin reshape transpose broadcast_to concat slice
split stack pad gather one_hot shape rank tile expand_dims squeeze fill zeros ones range
shuffle matmul matrix_inverse matrix_determinant softmax log_softmax softmax_cross_entropy
sparse_softmax_cross_entropy sigmoid_cross_entropy bias_add conv2d max_pool avg_pool
random.uniform random.normal random.truncated_normal var.read var.assign var.assign_add
var.assign_sub
""".split()


def _t(dtype: str, *shape: Any) -> TensorType:
    return TensorType(DType(dtype), shape)


OPS = sorted(n for n in all_ops() if not n.startswith("test."))  # not ops other tests register


@pytest.mark.parametrize("name", OPS)
def test_every_op_has_infer_reference_and_cost(name: str) -> None:
    opdef = lookup(name)
    assert opdef.name == name
    for method in ("infer", "reference"):
        assert getattr(type(opdef), method) is not getattr(OpDef, method), \
            f"{name} does not define {method}"
    for attr, spec in opdef.attrs.items():
        assert spec.kind in registry._ATTR_CHECKS, f"{name}.{attr}: unknown kind {spec.kind}"
    assert not ({PURE, RANDOM} <= opdef.traits or {PURE, STATEFUL} <= opdef.traits), \
        f"{name}: random and stateful ops cannot be pure"

    from tfc.ops.control import RegionOp
    if isinstance(opdef, RegionOp):
        return  # built with regions, run in tests/ops/test_control.py
    # f32 where the op takes it (tfc.op_examples builds every op)
    example = next(variants(name, (DType.f32, *DTYPES)), None)
    assert example is not None, f"no example builds {name}: add one to tfc.op_examples"
    _, ins, attrs, outs = example

    # the reference runs and gives the inferred types (checked by the interpreter)
    g = Graph("example")
    args = [g.add_arg(t, f"a{i}") for i, t in enumerate(ins)]
    op = g.append(make_op(name, args, attrs, result_types=outs))
    g.set_results(op.results)
    rng = np.random.default_rng(0)
    rendezvous = Rendezvous()
    if name == "recv":  # what its send would have delivered
        rendezvous.send(attrs["key"], value(outs[0], rng))
    variables = {var_name(dt): value(TensorType(dt, VAR_SHAPE), rng) for dt in DTYPES}
    ctx = ExecContext(variables, step=3, rendezvous=rendezvous)
    got = run_graph(g, feeds(name, ins, rng), ctx)
    assert len(got) == len(outs)

    for symbol_size in (1, 8):
        cost = opdef.cost(ins, outs, op.attrs, symbol_size)
        assert isinstance(cost, Cost), f"{name}: cost is not a Cost"
        assert math.isfinite(cost.flops) and cost.flops >= 0, f"{name}: flops {cost.flops}"
        assert math.isfinite(cost.bytes) and cost.bytes >= 0, f"{name}: bytes {cost.bytes}"


def test_required_ops_are_registered() -> None:
    missing = [n for n in REQUIRED_OPS if n not in all_ops()]
    assert not missing, f"ops the issue requires are missing: {missing}"


def test_random_ops_draw_by_seed() -> None:
    for name, opdef in all_ops().items():
        if opdef.has(RANDOM):
            assert "seed" in opdef.attrs and opdef.attrs["seed"].kind == "int", name


def test_every_op_has_a_gradient_or_declares_none() -> None:
    """Autodiff asks ``OpDef.gradient`` of every differentiable op on a path; an op that
    neither overrides it nor sets ``differentiable = False`` would fail only when a user
    first differentiates through it."""
    missing = [name for name in OPS
               if lookup(name).differentiable
               and type(lookup(name)).gradient is OpDef.gradient]
    assert not missing, f"ops with neither a gradient nor differentiable = False: {missing}"


# ---- lookup and attrs ---------------------------------------------------------------

def test_lookup_suggests_the_nearest_name() -> None:
    with pytest.raises(UnknownOp, match=re.escape("unknown op 'sigmod' (did you mean 'sigmoid'?)")):
        lookup("sigmod")
    with pytest.raises(UnknownOp) as e:
        lookup("qqqqqqqq")
    assert str(e.value) == "unknown op 'qqqqqqqq'"  # no quotes from KeyError, no hint
    assert isinstance(e.value, KeyError)


def test_unknown_attr_suggests_the_nearest() -> None:
    with pytest.raises(TypeMismatch, match=re.escape(
            "sum: unknown attr 'axis' (did you mean 'axes'?) (known: axes, keepdims)")):
        infer_types("sum", [F23], {"axis": 0})
    with pytest.raises(TypeMismatch, match="add: unknown attr 'foo' \\(known: none\\)"):
        infer_types("add", [F23, F23], {"foo": 1})


def test_missing_and_ill_kinded_attrs() -> None:
    with pytest.raises(TypeMismatch, match="cast: missing required attr 'dtype'"):
        infer_types("cast", [F23], {})
    with pytest.raises(TypeMismatch, match="cast: attr dtype='f32' is not of kind dtype"):
        infer_types("cast", [F23], {"dtype": "f32"})
    with pytest.raises(TypeMismatch, match="not of kind bool"):
        infer_types("sum", [F23], {"keepdims": 1})
    with pytest.raises(TypeMismatch, match="not of kind ints"):
        infer_types("sum", [F23], {"axes": [0.5]})


def test_attrs_defaults_and_conversion() -> None:
    _, full, types = infer_types("sum", [F23], {"axes": [np.int64(1)]})
    assert full == {"axes": (1,), "keepdims": False}
    assert types == [TensorType(DType.f32, (2,))]
    _, full, _ = infer_types("sum", [F23], {"axes": None})  # None allowed: default is None
    assert full["axes"] is None
    spec = AttrSpec("float", 0.0)
    assert spec.check("op", "x", 2) == 2.0 and type(spec.check("op", "x", 2)) is float


def test_arity_and_located_errors() -> None:
    loc = Location("model.py", 7)
    with pytest.raises(TypeMismatch, match="add takes 2 inputs, got 1") as e:
        infer_types("add", [F23], {}, loc)
    assert e.value.loc == loc and str(e.value).startswith("model.py:7: ")
    with pytest.raises(TypeMismatch, match=re.escape("f32[2,3] and f32[4,3] do not broadcast")):
        infer_types("add", [F23, _t("f32", 4, 3)], {})


def test_make_op() -> None:
    g = Graph("g")
    x = g.add_arg(F23, "x")
    op = make_op("add", [x, x], device="cpu:1")
    assert op.result.type == F23 and op.device == "cpu:1" and dict(op.attrs) == {}
    with pytest.raises(TfcError, match="var.read: result types must be given"):
        make_op("var.read", [], {"var": "W"})
    read = make_op("var.read", [], {"var": "W"}, result_types=[F23])
    assert read.result.type == F23 and read.attrs["var"] == "W"


# ---- registration -------------------------------------------------------------------

def test_register_twice_is_an_error() -> None:
    with pytest.raises(TfcError, match="op 'add' is defined twice"):
        register(Unary("add", np.negative))
    assert lookup("add").traits >= {PURE}  # the original is untouched


def test_register_needs_a_name() -> None:
    with pytest.raises(TfcError, match="has no name"):
        register(OpDef())


def test_register_a_class_and_find_it() -> None:
    class Twice(OpDef):
        name = "test_registry.twice"
        num_inputs = 1

        def infer(self, inputs, attrs):
            return [inputs[0]]

        def reference(self, ctx, inputs, attrs):
            return [inputs[0] * 2]

    try:
        assert register(Twice) is Twice  # usable as a class decorator
        assert isinstance(lookup("test_registry.twice"), Twice)
        with pytest.raises(TfcError, match="defined twice"):
            register(Twice)
    finally:
        registry.unregister("test_registry.twice")
    with pytest.raises(UnknownOp):
        lookup("test_registry.twice")


def test_registered_is_scoped() -> None:
    class Once(OpDef):
        name = "test_registry.once"
        num_inputs = 1

    with registry.registered(Once):
        assert isinstance(lookup("test_registry.once"), Once)
    with pytest.raises(UnknownOp):
        lookup("test_registry.once")
    with pytest.raises(RuntimeError), registry.registered(Once()):
        raise RuntimeError  # removed again when the block fails
    assert "test_registry.once" not in registry.all_ops()


def test_default_cost() -> None:
    cost = lookup("add").cost([F23, F23], [F23], {})
    assert cost == Cost(flops=6, bytes=3 * 24)
    sym = TensorType(DType.f32, ("B", 3))
    assert lookup("exp").cost([sym], [sym], {}, symbol_size=10).flops == 10 * 30


# ---- helpers ------------------------------------------------------------------------

def test_dtype_helpers() -> None:
    expect_dtype("exp", F23, FLOAT)
    with pytest.raises(TypeMismatch, match="exp: input has dtype i32, expected one of "
                                           "f16, f32, f64"):
        expect_dtype("exp", _t("i32", 2), FLOAT)
    assert same_dtype("add", [F23, F23]) == DType.f32
    with pytest.raises(TypeMismatch, match=re.escape(
            "add: inputs have different dtypes: f32[2,3] and i32[2] (use cast)")):
        same_dtype("add", [F23, _t("i32", 2)])
    assert DType.bool in ALL


def test_axis_helpers() -> None:
    assert normalize_axis("op", -1, 3) == 2
    with pytest.raises(TypeMismatch, match="axis 0 is out of range for rank 0"):
        normalize_axis("op", 0, 0)  # a scalar has no axes
    with pytest.raises(TypeMismatch, match="op: axis 3 is out of range for rank 3"):
        normalize_axis("op", 3, 3)
    with pytest.raises(TypeMismatch, match="axis -4 is out of range"):
        normalize_axis("op", -4, 3)
    assert normalize_axes("op", None, 3) == (0, 1, 2)
    assert normalize_axes("op", [-1, 0], 3) == (0, 2)
    with pytest.raises(TypeMismatch, match=re.escape("op: repeated axis in [1, -2]")):
        normalize_axes("op", [1, -2], 3)
