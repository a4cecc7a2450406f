"""dce: unused pure, random and read ops go; assigns and ops of unknown effect stay."""

from __future__ import annotations

import pytest

from tfc.ir import registry
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.registry import OpDef
from tfc.ir.types import DType, TensorType
from tfc.passes import run_passes

F32_3 = TensorType(DType.f32, (3,))
NOTE = {"note": None}  # test.region's one attr


def new_graph(*types: TensorType) -> tuple[Graph, Builder, list[Value]]:
    g = Graph("main")
    args = [g.add_arg(t, f"a{i}") for i, t in enumerate(types)]
    return g, Builder(g), args


def dce(g: Graph, **variables: TensorType) -> Graph:
    m = Module({g.name: g}, {k: VariableDecl(k, t) for k, t in variables.items()})
    run_passes(m, "dce", verify=True)
    return g


def kinds(g: Graph) -> list[str]:
    return [op.kind for op in g.ops]


def test_removes_unused_chains_keeps_args() -> None:
    g, b, (x, y) = new_graph(F32_3, F32_3)
    b("neg", b("exp", y))  # dead chain
    keep = b("tanh", x)
    g.set_results([keep])
    dce(g)
    assert kinds(g) == ["tanh"] and len(g.args) == 2


def test_keeps_assigns_and_what_they_need() -> None:
    g, b, (x,) = new_graph(F32_3)
    w = b("var.read", var="W", result_types=[F32_3])
    b.op("var.assign_sub", b("mul", w, x), var="W")
    b.op("var.assign", b("exp", x), var="V")
    dce(g, W=F32_3, V=F32_3)
    assert kinds(g) == ["var.read", "mul", "var.assign_sub", "exp", "var.assign"]


def test_removes_dead_reads() -> None:
    g, b, (x,) = new_graph(F32_3)
    b("var.read", var="W", result_types=[F32_3])
    used = b("var.read", var="V", result_types=[F32_3])
    g.set_results([b("add", used, x)])
    dce(g, W=F32_3, V=F32_3)
    assert kinds(g) == ["var.read", "add"] and g.ops[0].attrs["var"] == "V"


class FakeEffect(OpDef):
    """A stand-in op with the traits given, registered only for one test."""

    num_inputs = 1

    def __init__(self, name: str, traits: frozenset[str]) -> None:
        self.name, self.traits = name, traits

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, ctx, inputs, attrs):
        return [inputs[0]]


@pytest.mark.parametrize("traits,removed", [
    ({registry.RANDOM}, True), ({registry.PURE}, True),
    ({registry.STATEFUL}, False), (set(), False),
])
def test_by_traits(monkeypatch: pytest.MonkeyPatch, traits: set[str], removed: bool) -> None:
    monkeypatch.setitem(registry._REGISTRY, "test.fx", FakeEffect("test.fx", frozenset(traits)))
    g, b, (x,) = new_graph(F32_3)
    b("test.fx", x)
    dce(g)
    assert kinds(g) == ([] if removed else ["test.fx"])


def test_unused_random_op_is_removed() -> None:
    if "random.uniform" not in registry.all_ops():
        pytest.skip("random.uniform is not in the registry yet")
    g, b, _ = new_graph()
    b("random.uniform", shape=[3], seed=1)
    dce(g)
    assert g.ops == []


@pytest.mark.usefixtures("ir_test_ops")  # test.region: tests/conftest.py
def test_regions_are_cleaned_and_effects_inside_keep_the_op() -> None:
    g, b, (x,) = new_graph(F32_3)

    def region(assign: bool) -> Graph:
        r = Graph("body")
        a = r.add_arg(F32_3, "r")
        rb = Builder(r)
        rb("exp", a)  # dead inside the region
        if assign:
            rb.op("var.assign", a, var="W")
        r.set_results([a])
        return r

    pure_region_op = g.append(Op("test.region", [x], NOTE, [F32_3], regions=[region(False)]))
    effect_op = g.append(Op("test.region", [x], NOTE, [F32_3], regions=[region(True)]))
    dce(g, W=F32_3)
    assert g.ops == [effect_op]
    assert [o.kind for o in effect_op.regions[0].ops] == ["var.assign"]
    assert pure_region_op not in g.ops


def test_the_registry_is_asked_once_per_kind(trait_queries) -> None:
    """Whether an op without regions has an effect depends on its kind only: asked once
    per kind per graph (20 dead ops of one kind ask as often as 2)."""
    from tfc.passes.dce import dce_graph

    def graph(n: int) -> Graph:
        g, b, (x,) = new_graph(F32_3)
        for _ in range(n):
            b("exp", x)  # dead
        g.set_results([b("tanh", x)])
        return g

    small, big = graph(2), graph(20)
    assert trait_queries(lambda: dce_graph(small)) == trait_queries(
        lambda: dce_graph(big))
    assert kinds(big) == ["tanh"]
