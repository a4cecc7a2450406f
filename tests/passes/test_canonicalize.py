"""canonicalize: constant folding, algebraic identities, and that results are unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import Location
from tfc.ir import registry
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import PURE, RANDOM, OpDef
from tfc.ir.types import DType, TensorType
from tfc.ir.verifier import verify_module
from tfc.passes import run_passes

F32_3 = TensorType(DType.f32, (3,))
LOC = Location("model.py", 7)
NOTE = {"note": None}  # test.region's one attr


def new_graph(*types: TensorType) -> tuple[Graph, Builder, list[Value]]:
    g = Graph("main")
    args = [g.add_arg(t, f"a{i}") for i, t in enumerate(types)]
    return g, Builder(g, loc=LOC), args


def canon(g: Graph) -> Graph:
    run_passes(Module({g.name: g}), "canonicalize", verify=True)
    return g


def const(b: Builder, x) -> Value:
    return b("constant", value=np.asarray(x))


def kinds(g: Graph) -> list[str]:
    return [op.kind for op in g.ops]


def test_folds_arithmetic_into_one_constant() -> None:
    g, b, _ = new_graph()
    s = b("add", const(b, np.float32([1, 2, 3])), const(b, np.float32(10)), name="s")
    p = b("mul", s, const(b, np.float32([2, 2, 2])))
    g.set_results([p, s], ["p", "s"])
    canon(g)
    assert kinds(g) == ["constant", "constant"]
    p_op, s_op = g.results[0].op, g.results[1].op
    np.testing.assert_array_equal(p_op.attrs["value"], np.float32([22, 24, 26]))
    np.testing.assert_array_equal(s_op.attrs["value"], np.float32([11, 12, 13]))
    assert p_op.loc == LOC and g.results[1].name == "s"
    assert g.results[0].type == F32_3


def test_folds_reductions_and_comparisons() -> None:
    g, b, _ = new_graph()
    c = const(b, np.arange(6, dtype=np.int32).reshape(2, 3))
    s = b("sum", c, axes=[1])
    gt = b("greater", s, const(b, np.int32(4)))
    g.set_results([s, gt])
    canon(g)
    np.testing.assert_array_equal(g.results[0].op.attrs["value"], np.int32([3, 12]))
    np.testing.assert_array_equal(g.results[1].op.attrs["value"], [False, True])
    assert kinds(g) == ["constant", "constant"]


def test_does_not_fold_a_result_that_grows_too_much() -> None:
    g, b, _ = new_graph()
    big = b("add", const(b, np.zeros((2000, 1), np.float32)),
            const(b, np.zeros((1, 1000), np.float32)))
    g.set_results([big])
    canon(g)
    assert kinds(g) == ["constant", "constant", "add"]


def test_does_not_fold_integer_division_by_zero() -> None:
    g, b, _ = new_graph()
    q = b("div", const(b, np.int32(1)), const(b, np.int32(0)))
    g.set_results([q])
    canon(g)
    assert kinds(g)[-1] == "div"


def test_float_division_by_zero_folds_to_inf() -> None:
    g, b, _ = new_graph()
    g.set_results([b("div", const(b, np.float32(1)), const(b, np.float32(0)))])
    canon(g)
    assert g.results[0].op.attrs["value"] == np.inf


class FakeUniform(OpDef):
    """A stand-in RANDOM op with one input, registered only for a test."""

    name = "test.uniform"
    num_inputs = 1
    traits = frozenset({PURE, RANDOM})

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, ctx, inputs, attrs):
        return [np.random.default_rng().random(inputs[0].shape).astype(inputs[0].dtype)]


def test_never_folds_random_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "test.uniform", FakeUniform())
    g, b, _ = new_graph()
    g.set_results([b("test.uniform", const(b, np.float32([1, 2, 3])))])
    canon(g)
    assert kinds(g) == ["constant", "test.uniform"]


@pytest.mark.parametrize("kind,zero_first,splat", [
    ("add", False, 0), ("add", True, 0), ("sub", False, 0),
    ("mul", False, 1), ("mul", True, 1), ("div", False, 1),
])
def test_identities_return_x(kind: str, zero_first: bool, splat: int) -> None:
    g, b, (x,) = new_graph(TensorType(DType.f32, ("B", 3)))
    c = const(b, np.full((3,), splat, np.float32))
    y = b(kind, c, x) if zero_first else b(kind, x, c)
    g.set_results([b("exp", y)])
    canon(g)
    assert kinds(g) == ["exp"]
    assert g.ops[0].inputs == [x]


def test_identity_kept_when_it_broadcasts() -> None:
    g, b, (x,) = new_graph(F32_3)
    y = b("add", x, const(b, np.zeros((2, 3), np.float32)))
    g.set_results([y])
    canon(g)
    assert kinds(g) == ["constant", "add"]


def test_zero_minus_x_and_non_splats_are_kept() -> None:
    g, b, (x,) = new_graph(F32_3)
    r1 = b("sub", const(b, np.float32(0)), x)
    r2 = b("mul", x, const(b, np.float32([1, 1, 2])))
    g.set_results([r1, r2])
    canon(g)
    assert kinds(g).count("sub") == 1 and kinds(g).count("mul") == 1


def test_float_times_zero_is_not_folded() -> None:
    g, b, (x,) = new_graph(F32_3)
    g.set_results([b("mul", x, const(b, np.float32(0)))])
    canon(g)
    assert "mul" in kinds(g)
    with np.errstate(invalid="ignore"):
        out = run_graph(g, [np.float32([np.inf, np.nan, 1])], ExecContext({}))[0]
    assert np.isnan(out[0]) and np.isnan(out[1]) and out[2] == 0


def test_integer_times_zero_folds_to_zeros() -> None:
    g, b, (x,) = new_graph(TensorType(DType.i32, (2, 3)))
    g.set_results([b("mul", const(b, np.int32(0)), x)])
    canon(g)
    assert kinds(g) == ["constant"]
    np.testing.assert_array_equal(g.results[0].op.attrs["value"], np.zeros((2, 3), np.int32))


def test_identity_neg_neg_and_same_dtype_cast() -> None:
    g, b, (x,) = new_graph(F32_3)
    y = b("identity", b("neg", b("neg", b("cast", x, dtype=DType.f32))))
    g.set_results([y], ["y"])
    canon(g)
    assert g.ops == [] and g.results == [x] and g.result_names == ["y"]


def test_cast_to_another_dtype_is_kept() -> None:
    g, b, (x,) = new_graph(F32_3)
    g.set_results([b("cast", x, dtype=DType.f64)])
    canon(g)
    assert kinds(g) == ["cast"]


def test_identity_on_another_device_is_a_copy() -> None:
    g, b, (x,) = new_graph(F32_3)
    e = b("exp", x)
    b.device = "/gpu:0"
    g.set_results([b("identity", e)])
    canon(g)
    assert kinds(g) == ["exp", "identity"]


def test_rewrites_reach_a_fixed_point() -> None:
    g, b, (x,) = new_graph(F32_3)
    zero = b("sub", const(b, np.float32(1)), const(b, np.float32(1)))  # folds to 0
    y = b("add", b("identity", b("identity", x)), zero)
    z = b("mul", y, b("add", zero, const(b, np.float32(1))))
    g.set_results([z])
    canon(g)
    assert g.ops == [] and g.results == [x]


@pytest.mark.usefixtures("ir_test_ops")  # test.region: tests/conftest.py
def test_region_graphs_are_canonicalized() -> None:
    g, b, (x,) = new_graph(F32_3)
    region = Graph("body")
    r = region.add_arg(F32_3, "r")
    region.set_results([Builder(region)("identity", r)])
    g.append(Op("test.region", [x], NOTE, [F32_3], regions=[region]))  # a stand-in region op
    g.set_results([g.ops[0].result])
    canon(g)
    assert region.ops == [] and region.results == [r]
    assert kinds(g) == ["test.region"]  # ops owning regions are left alone


def test_results_are_unchanged_numerically() -> None:
    g, b, (x, y) = new_graph(TensorType(DType.f32, ("B", 3)), F32_3)
    c = b("exp", const(b, np.float32([0.5, 1, 2])))
    t = b("mul", b("add", x, c), b("div", y, const(b, np.float32(1))))
    u = b("sub", b("neg", b("neg", t)), b("mul", const(b, np.float32(0)), c))
    g.set_results([u, b("sum", u, axes=None)])
    feeds = [np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32),
             np.float32([1, -2, 3])]
    before = run_graph(g, feeds, ExecContext({}))
    canon(g)
    after = run_graph(g, feeds, ExecContext({}))
    for a, e in zip(after, before):
        np.testing.assert_array_equal(a, e)  # folding runs the same reference kernels
    assert "neg" not in kinds(g) and "div" not in kinds(g)


def test_reshape_and_transpose_identities() -> None:
    ops = registry.all_ops()
    if "reshape" not in ops or "transpose" not in ops:
        pytest.skip("reshape/transpose are not in the registry yet")
    g, b, (x,) = new_graph(TensorType(DType.f32, (2, 3, 4)))
    same = b("reshape", x, shape=[2, 3, 4])
    t1 = b("transpose", same, perm=[1, 2, 0])
    t2 = b("transpose", t1, perm=[2, 0, 1])  # composes to the identity
    t3 = b("transpose", b("transpose", t2, perm=[1, 0, 2]), perm=[0, 2, 1])
    r = b("reshape", b("reshape", t3, shape=[6, 4]), shape=[24])
    g.set_results([t2, t3, r])
    feed = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    before = run_graph(g, [feed], ExecContext({}))
    canon(g)
    assert g.results[0] is x
    assert kinds(g) == ["transpose", "reshape"]
    assert tuple(g.ops[0].attrs["perm"]) == (1, 2, 0)
    for a, e in zip(run_graph(g, [feed], ExecContext({})), before):
        np.testing.assert_array_equal(a, e)
    verify_module(Module({"main": g}))


def need(*kinds_: str) -> None:
    missing = [k for k in kinds_ if k not in registry.all_ops()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in the registry yet")


def test_shape_of_static_type_and_rank_fold() -> None:
    need("shape", "rank")
    g, b, (x, y) = new_graph(TensorType(DType.f32, (2, 5)), TensorType(DType.f32, ("B", 5)))
    g.set_results([b("shape", x, out_type=DType.i64), b("rank", y), b("shape", y)])
    canon(g)
    np.testing.assert_array_equal(g.results[0].op.attrs["value"], np.int64([2, 5]))
    assert g.results[1].op.attrs["value"] == 2
    assert g.results[2].op.kind == "shape"  # B is known only at run time


def test_generators_fold_small_or_splat_results() -> None:
    need("zeros", "range")
    g, b, _ = new_graph()
    z = b("zeros", shape=[1000, 100])
    r_small = b("range", limit=10.0)
    r_big = b("range", limit=5000.0)
    g.set_results([z, r_small, r_big])
    canon(g)
    assert [v.op.kind for v in g.results] == ["constant", "constant", "range"]
    np.testing.assert_array_equal(g.results[1].op.attrs["value"], np.arange(10, dtype=np.int32))


def test_the_registry_is_asked_once_per_kind(trait_queries) -> None:
    """What a kind allows (rewritten at all, erased when unused) is read once per kind
    per graph, not once per op and sweep: 40 ops of 2 kinds ask as often as 4 do."""
    from tfc.passes.canonicalize import canonicalize_graph

    def graph(n: int) -> Graph:
        g, b, (x, y) = new_graph(F32_3, F32_3)
        g.set_results([b("tanh", b("mul", x, y)) for _ in range(n)])
        b("exp", x)  # dead: erased
        return g

    small, big = graph(2), graph(20)
    assert trait_queries(lambda: canonicalize_graph(small)) == trait_queries(
        lambda: canonicalize_graph(big))
    assert [op.kind for op in big.ops] == ["mul", "tanh"] * 20


def test_a_sweep_makes_no_call_per_op_of_a_kind_without_a_rule() -> None:
    """An op of a kind with no ``simplify_`` rule, whose first input is no constant, is
    kept without a Python call (the sweep reads its kind's rule by subscript and makes
    the new op list only at the first change; erasing tests uses inline): a chain of 40
    such ops costs as many Python calls as a chain of 4."""
    import sys

    from tfc.passes.canonicalize import canonicalize_graph

    def calls(n: int) -> int:
        g, b, (x,) = new_graph(F32_3)
        v = x
        for _ in range(n):
            v = b("tanh", b("exp", v))
        g.set_results([v])
        made = [0]

        def count(frame: object, event: str, arg: object) -> None:
            if event == "call":
                made[0] += 1

        sys.setprofile(count)
        try:
            canonicalize_graph(g)
        finally:
            sys.setprofile(None)
        assert len(g.ops) == 2 * n
        return made[0]

    assert calls(2) == calls(20)
