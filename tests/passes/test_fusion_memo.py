"""fusion's regions built once per content (``tfc.passes.fusion._template``) and its
grouper's cost on deep models: a region copied from a template is the region the group
would get built anew, with its own layer's names and locations; an edited model fuses
the same with the templates of the unedited one in memory as with none; and grouping a
training step's updates no longer walks the backward pass once per layer."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import tfc.passes.fusion as fusion
from tfc.errors import Location
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op
from tfc.ir.printer import print_module
from tfc.ir.registry import OpDef, lookup
from tfc.ir.types import DType, TensorType
from tfc.passes import run_passes
from tfc.testing_graphs import random_graph

PIPELINE = "canonicalize,cse,dce,fusion"
F32 = DType.f32


def mlp(layers: int, edited: int | None = None) -> Module:
    """An MLP's forward pass and loss, each layer built on a line of its own (as a model
    written layer by layer is) with named weights; layer ``edited`` scales its ReLU."""
    g = Graph("main")
    x = g.add_arg(TensorType(F32, (8, 16)), "x")
    y = g.add_arg(TensorType(DType.i32, (8,)), "y")
    h = x
    for i in range(layers):
        b = Builder(g, loc=Location("model.py", 100 + i))
        w = b("constant", value=np.full((16, 16), 0.01 * (i + 1), np.float32), name=f"W{i}")
        bias = b("constant", value=np.arange(16, dtype=np.float32) + i, name=f"b{i}")
        h = b("add", b("matmul", h, w), bias, name=f"pre{i}")
        if i < layers - 1:
            h = b("relu", h, name=f"act{i}")
            if i == edited:
                h = b("mul", h, b("constant", value=np.array(1.5, np.float32)), name=f"scaled{i}")
    b = Builder(g, loc=Location("model.py", 99))
    loss = b("mean", b("sparse_softmax_cross_entropy", h, y))
    g.set_results([loss])
    return Module({"main": g})


def fused_text(m: Module) -> str:
    return print_module(run_passes(m, PIPELINE, verify=True))


def fused_cold(m: Module, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as mp:
        mp.setattr(fusion, "_TEMPLATES", {})
        mp.setattr(fusion, "_COMPOSITES", {})
        mp.setattr(fusion, "MAX_TEMPLATES", 0)
        return fused_text(m)


def test_layers_share_a_template_and_keep_their_own_names_and_locations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "_TEMPLATES", {})
    out = run_passes(mlp(12), PIPELINE, verify=True)
    ops = [op for op in out.graphs["main"].ops if op.kind == "fusion"]
    assert len(ops) == 13  # 11 hidden layers, the last one with the loss, the mean
    assert len(fusion._TEMPLATES) == 3
    for i, op in enumerate(ops[:11]):
        region = op.regions[0]
        assert op.loc == Location("model.py", 100 + i)
        assert {inner.loc for inner in region.ops} == {op.loc}
        assert [a.name for a in region.args] == [v.name for v in op.inputs]
        assert [a.name for a in region.args][1:] == [f"b{i}"]
        assert {r.name for inner in region.ops for r in inner.results} >= {f"pre{i}",
                                                                          f"act{i}"}
    loss = ops[11].regions[0]  # the last layer's add, then the loss at line 99
    assert [inner.loc for inner in loss.ops][:2] == [Location("model.py", 111),
                                                      Location("model.py", 99)]
    assert {inner.loc for inner in loss.ops} == {Location("model.py", 111),
                                                 Location("model.py", 99)}


def test_an_edited_model_fuses_with_the_unedited_ones_templates_as_with_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "_TEMPLATES", {})
    fused_text(mlp(16))  # the templates of the model before the edit
    warm = fused_text(mlp(16, edited=8))
    assert warm == fused_cold(mlp(16, edited=8), monkeypatch)
    assert "scaled8" in warm


def test_random_graphs_fuse_with_templates_as_without(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """Seeded random graphs (diamonds, rows, views, reductions over any axes, splat
    constants): fused after all of them have left their templates, each prints as it
    does with no template kept."""
    seeds = range(60)
    cold = [fused_cold(random_graph(s, (15, 40)).module, monkeypatch) for s in seeds]
    monkeypatch.setattr(fusion, "_TEMPLATES", {})
    for s in seeds:
        fused_text(random_graph(s, (15, 40)).module)
    shared = len(fusion._TEMPLATES)
    for s, want in zip(seeds, cold):
        assert fused_text(random_graph(s, (15, 40)).module) == want, f"seed {s}"
    assert len(fusion._TEMPLATES) == shared  # every region came from a template


def test_a_step_whose_updates_read_one_constant_groups_in_linear_work(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each layer's reduction joins its update ``lr * sum`` at the end of the step; the
    learning rate, a constant every update reads, was an ancestor the group lacked, so
    each join re-closed the ancestor sets of every op from the layer on (quadratic: 0.27
    s of fusion at 256 layers). A constant is no ancestor now: no join re-closes."""
    layers = 40
    g = Graph("main")
    b = Builder(g)
    h = g.add_arg(TensorType(F32, (4, 4)), "x")
    w = g.add_arg(TensorType(F32, (4, 4)), "w")
    sums = []
    for _ in range(layers):
        h = b("matmul", h, w)
        sums.append(b("sum", h, axes=[0]))
    lr = b("constant", value=np.array(0.01, np.float32))
    g.set_results([b("mul", lr, s) for s in sums])
    contracted = []
    contract = fusion._Grouper.contract

    def counting(self: fusion._Grouper, group: fusion._Group) -> None:
        contracted.append(group)
        contract(self, group)

    monkeypatch.setattr(fusion._Grouper, "contract", counting)
    out = run_passes(Module({"main": g}), PIPELINE, verify=True)
    assert sum(op.kind == "fusion" for op in out.graphs["main"].ops) == layers
    assert contracted == []


@pytest.mark.parametrize("steps", [(15, 40), (150, 300)])
def test_contracting_a_group_closes_the_sets_as_a_pass_over_every_op_would(
        steps: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """``contract`` walks from the group along uses and through the groups it meets;
    on seeded random graphs every contraction leaves the ancestor sets exactly as
    testing every visited op did."""
    contract = fusion._Grouper.contract
    calls = []

    def checked(self: fusion._Grouper, group: fusion._Group) -> None:
        want, new = list(self.anc), group.anc | group.bits
        for j in range(len(want)):
            if (want[j] | (1 << j)) & group.bits:
                want[j] |= new
        contract(self, group)
        assert self.anc == want
        calls.append(group)

    monkeypatch.setattr(fusion._Grouper, "contract", checked)
    for seed in range(100 if steps[0] < 100 else 6):
        run_passes(random_graph(seed, steps).module, PIPELINE)
    assert len(calls) > 20


def _scaled(value: float, dtype: DType = F32, axis: int = 1, kind: str = "mul",
            shape: tuple[int, ...] = (4, 6)) -> Module:
    """``sum(kind(exp(x), c), axis)`` with a splat constant ``c``: one group."""
    g = Graph("main")
    b = Builder(g)
    x = g.add_arg(TensorType(dtype, shape), "x")
    c = b("constant", value=np.array(value, dtype.np))
    g.set_results([b("sum", b(kind, b("exp", x), c), axes=[axis])])
    return Module({"main": g})


@pytest.mark.parametrize("variant", [
    lambda: _scaled(2.0),  # another constant
    lambda: _scaled(float(np.nextafter(np.float32(0.5), np.float32(1)))),  # one ulp off
    lambda: _scaled(0.5, DType.f64),  # another dtype
    lambda: _scaled(0.5, axis=0),  # another attr
    lambda: _scaled(0.5, kind="add"),  # another kind
    lambda: _scaled(0.5, shape=(4, 7)),  # another shape
], ids=["value", "ulp", "dtype", "axis", "kind", "shape"])
def test_groups_that_differ_in_anything_but_names_and_places_share_no_template(
        variant: Callable[[], Module], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "_TEMPLATES", {})
    fused_text(_scaled(0.5))
    assert fused_text(variant()) == fused_cold(variant(), monkeypatch)


def test_the_registry_is_asked_per_kind_not_per_op(monkeypatch: pytest.MonkeyPatch,
                                                   trait_queries) -> None:
    """Classifying an op (``classify``, ``cheap``) reads its kind's traits once per
    definition in the process, not once per op: fusing 24 layers asks the registry as
    often as fusing 6 (both have the same kinds, and the same 3 templates)."""
    counts = []
    for layers in (6, 24):
        m = mlp(layers)
        run_passes(m, "canonicalize,cse,dce")
        for memo in ("_TEMPLATES", "_COMPOSITES", "_KIND_CLASSES", "_CHEAP_KINDS"):
            monkeypatch.setattr(fusion, memo, {}, raising=False)
        counts.append(trait_queries(lambda: run_passes(m, "fusion")))
    assert counts[0] == counts[1]


def test_the_priority_order_is_kept_only_when_it_is_topological() -> None:
    """``_topological`` returns the ops sorted by priority when that order is a
    topological one (what the heap gives then), else the heap's order."""
    g = Graph("main")
    b = Builder(g)
    x = g.add_arg(TensorType(F32, (4,)), "x")
    a = b("exp", x)
    c = b("neg", a)
    d = b("tanh", x)
    ops = list(g.ops)
    assert fusion._topological(ops, {ops[0]: 0, ops[1]: 1, ops[2]: 2}) == ops
    assert fusion._topological(ops, {ops[0]: 2, ops[1]: 0, ops[2]: 1}) == [
        ops[2], ops[0], ops[1]]  # neg waits for exp; tanh goes first
    assert c.op is ops[1] and d.op is ops[2]


def _fusing(layers: int, monkeypatch: pytest.MonkeyPatch,
            patch: Callable[[pytest.MonkeyPatch], object]) -> None:
    """``mlp(layers)`` through canonicalize, cse and dce, then fusion alone with no
    template kept and ``patch(mp)`` (patching, with ``mp``, what a test counts) in
    force."""
    m = mlp(layers)
    run_passes(m, "canonicalize,cse,dce")
    with monkeypatch.context() as mp:
        mp.setattr(fusion, "_TEMPLATES", {})
        mp.setattr(fusion, "_COMPOSITES", {})
        patch(mp)
        run_passes(m, "fusion")


def test_a_graph_looks_each_kind_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Classifying a graph's ops (``_classified``, ``_Grouper.cheap_op``) looks each
    kind up in the registry once per graph, not once per op: fusing 24 layers looks up
    as often as fusing 6 (the same kinds, the same 3 templates)."""
    counts = []
    for layers in (6, 24):
        asked = [0]

        def counting(kind: str) -> OpDef:
            asked[0] += 1
            return lookup(kind)

        _fusing(layers, monkeypatch, lambda mp: mp.setattr(fusion, "lookup", counting))
        counts.append(asked[0])
    assert counts[0] == counts[1]


def test_template_copies_construct_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """A region is copied from its template with ``assembled_op`` (attrs frozen and
    types checked once per template): fusing 24 layers runs ``Op.__init__`` as often as
    fusing 6 (building the 3 templates, and their first fusion ops, through ``make_op``)."""
    counts = []
    real = Op.__init__
    for layers in (6, 24):
        built = [0]

        def counting(self: Op, *args: object, **kwargs: object) -> None:
            built[0] += 1
            real(self, *args, **kwargs)  # type: ignore[arg-type]

        _fusing(layers, monkeypatch, lambda mp: mp.setattr(Op, "__init__", counting))
        counts.append(built[0])
    assert counts[0] == counts[1] > 0
