"""cse: what is merged (pure ops, commutative operands, reads of one variable) and what
never is (random ops, assigns, ops of unknown effect, region ops)."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.ir import registry
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import OpDef
from tfc.ir.types import DType, TensorType
from tfc.passes import run_passes

F32_3 = TensorType(DType.f32, (3,))
NOTE = {"note": None}  # test.region's one attr


def new_graph(*types: TensorType) -> tuple[Graph, Builder, list[Value]]:
    g = Graph("main")
    args = [g.add_arg(t, f"a{i}") for i, t in enumerate(types)]
    return g, Builder(g), args


def cse(g: Graph, **variables: TensorType) -> Graph:
    m = Module({g.name: g}, {k: VariableDecl(k, t) for k, t in variables.items()})
    run_passes(m, "cse", verify=True)
    return g


def kinds(g: Graph) -> list[str]:
    return [op.kind for op in g.ops]


def test_merges_identical_ops_and_updates_uses() -> None:
    g, b, (x, y) = new_graph(F32_3, F32_3)
    e1, e2 = b("exp", x), b("exp", x)
    s1, s2 = b("add", e1, y), b("add", e2, y)  # equal once e2 is replaced by e1
    g.set_results([s1, s2, e2])
    cse(g)
    assert kinds(g) == ["exp", "add"]
    assert g.results == [s1, s1, e1]


def test_commutative_operands_are_canonicalized() -> None:
    g, b, (x, y) = new_graph(F32_3, F32_3)
    g.set_results([b("mul", x, y), b("mul", y, x), b("sub", x, y), b("sub", y, x)])
    cse(g)
    assert kinds(g) == ["mul", "sub", "sub"]
    assert g.results[0] is g.results[1]


def test_attrs_types_and_devices_distinguish() -> None:
    g, b, (x,) = new_graph(TensorType(DType.f32, (2, 3)))
    s0, s1, s_all = b("sum", x, axes=[0]), b("sum", x, axes=[1]), b("sum", x)
    c1 = b("cast", x, dtype=DType.f64)
    c2 = b("cast", x, dtype=DType.f16)
    b.device = "/cpu:1"
    e1 = b("exp", x)
    b.device = "/cpu:2"
    e2 = b("exp", x)
    g.set_results([s0, s1, s_all, c1, c2, e1, e2])
    cse(g)
    assert len(g.ops) == 7


def test_equal_constants_merge() -> None:
    g, b, _ = new_graph()
    c1 = b("constant", value=np.float32([1, 2]))
    c2 = b("constant", value=np.float32([1, 2]))
    c3 = b("constant", value=np.float64([1, 2]))
    g.set_results([c1, c2, c3])
    cse(g)
    assert kinds(g) == ["constant", "constant"] and g.results[1] is c1


def test_reads_of_one_variable_merge() -> None:
    g, b, (x,) = new_graph(F32_3)
    r1 = b("var.read", var="W", result_types=[F32_3])
    b.op("var.assign", x, var="W")  # lands at the end of the step: reads are unaffected
    r2 = b("var.read", var="W", result_types=[F32_3])
    r3 = b("var.read", var="V", result_types=[F32_3])
    g.set_results([b("add", r1, r2), r3])
    cse(g, W=F32_3, V=F32_3)
    assert kinds(g) == ["var.read", "var.assign", "var.read", "add"]
    assert g.ops[-1].inputs == [r1, r1]


class FakeEffect(OpDef):
    """A stand-in op with the traits given, registered only for one test."""

    num_inputs = 1

    def __init__(self, name: str, traits: frozenset[str]) -> None:
        self.name, self.traits = name, traits

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, ctx, inputs, attrs):
        return [inputs[0]]


@pytest.mark.parametrize("traits", [{registry.RANDOM}, {registry.PURE, registry.RANDOM},
                                    {registry.STATEFUL}, set()])
def test_random_stateful_and_unknown_ops_never_merge(monkeypatch: pytest.MonkeyPatch,
                                                     traits: set[str]) -> None:
    monkeypatch.setitem(registry._REGISTRY, "test.fx", FakeEffect("test.fx", frozenset(traits)))
    g, b, (x,) = new_graph(F32_3)
    g.set_results([b("test.fx", x), b("test.fx", x)])
    cse(g)
    assert kinds(g) == ["test.fx", "test.fx"]


def test_real_random_ops_never_merge() -> None:
    if "random.uniform" not in registry.all_ops():
        pytest.skip("random.uniform is not in the registry yet")
    g, b, _ = new_graph()
    u1 = b("random.uniform", shape=[3], seed=1)
    u2 = b("random.uniform", shape=[3], seed=1)
    g.set_results([u1, u2])
    cse(g)
    assert kinds(g) == ["random.uniform", "random.uniform"]


@pytest.mark.usefixtures("ir_test_ops")  # test.region: tests/conftest.py
def test_region_ops_are_not_merged_but_their_regions_are_cse_d() -> None:
    g, b, (x,) = new_graph(F32_3)

    def region() -> Graph:
        r = Graph("body")
        a = r.add_arg(F32_3, "r")
        rb = Builder(r)
        r.set_results([rb("add", rb("exp", a), rb("exp", a))])
        return r

    ops = [g.append(Op("test.region", [x], NOTE, [F32_3], regions=[region()])) for _ in range(2)]
    g.set_results([op.result for op in ops])
    cse(g)
    assert kinds(g) == ["test.region", "test.region"]
    for op in g.ops:
        assert [o.kind for o in op.regions[0].ops] == ["exp", "add"]


def test_results_are_unchanged_numerically() -> None:
    g, b, (x, y) = new_graph(F32_3, F32_3)
    t1 = b("mul", b("tanh", x), b("add", x, y))
    t2 = b("mul", b("add", y, x), b("tanh", x))
    g.set_results([b("sub", t1, t2), b("div", t1, t2)])
    feeds = [np.float32([0.5, -1, 2]), np.float32([1, 2, 3])]
    before = run_graph(g, feeds, ExecContext({}))
    cse(g)
    assert kinds(g) == ["tanh", "add", "mul", "sub", "div"]
    for a, e in zip(run_graph(g, feeds, ExecContext({})), before):
        np.testing.assert_array_equal(a, e)



def test_the_registry_is_asked_once_per_kind(trait_queries) -> None:
    """cse reads what a kind allows (merged at all, commutative) once per kind per
    graph, not once per op: 40 ops of 3 kinds ask as often as 4 do."""
    from tfc.passes.cse import cse_graph

    def graph(n: int) -> Graph:
        g, b, (x, y) = new_graph(F32_3, F32_3)
        outs = []
        for _ in range(n):
            outs.append(b("mul", b("add", b("exp", x), y), x))
        g.set_results(outs)
        return g

    small, big = graph(2), graph(20)
    assert trait_queries(lambda: cse_graph(small)) == trait_queries(lambda: cse_graph(big))
    assert kinds(big) == ["exp", "add", "mul"]
