"""memory{gemm_updates=true}: no arena buffers for the values that a weight update folded
into its GEMM absorbs (``tfc.passes.gemm_update``: the weight gradient and its scaled
copy, which the llvm backend never writes), and the folded matmul scheduled after every
other reader of its variable (where the backend can make the update in place)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from tfc.errors import TfcError
from tfc.passes import gemm_update, run_passes
from tfc.passes.memory import MemoryPlan, plan_memory

from tests.passes.test_memory import (BINDINGS, assert_same_as_reference, check_live_intervals,
                                      check_plan, check_topological, f32, mlp_module,
                                      new_graph)

FOLDED = "canonicalize,cse,dce,fusion,memory{gemm_updates=true}"
PLAIN = "canonicalize,cse,dce,fusion,memory"
SIZES = (12, 16, 8, 5)


def _lowered(passes: str):
    module = run_passes(mlp_module(SIZES), passes, verify=True)
    return module.graphs["train_step"], module.memory_plans["train_step"]


def _absorbed(g) -> set:
    return gemm_update.absorbed_values(gemm_update.find(g))


def test_the_values_updates_absorb_get_no_buffer() -> None:
    g, p = _lowered(FOLDED)
    absorbed = _absorbed(g)
    # three layers: each weight's gradient product and its scale by the learning rate
    assert len(absorbed) == 6
    assert {v.op.kind for v in absorbed} == {"matmul", "fusion"}
    assert set(p.unplanned) == absorbed
    position = {op: t for t, op in enumerate(g.ops)}
    assert [position[v.op] for v in p.unplanned] == sorted(position[v.op] for v in p.unplanned)
    assert not absorbed & {v for b in p.buffers for v in b.values}
    assert not absorbed & (set(p.buffer_of) | set(p.alias_of) | set(p.live))
    check_topological(g)
    check_plan(g, p)
    check_live_intervals(g, p)
    assert "not planned (absorbed by weight updates folded into GEMMs)" in p.report({"B": 7})
    # without the option (a backend that computes the gradients: CUDA) they are planned
    g0, p0 = _lowered(PLAIN)
    assert not p0.unplanned and _absorbed(g0) <= set(p0.buffer_of) | set(p0.alias_of)
    for bindings in BINDINGS:
        assert p.arena_bytes(bindings) < p0.arena_bytes(bindings)


def test_a_folded_matmul_runs_after_the_other_readers_of_its_variable() -> None:
    """Else a later read (the backward product ``dy @ W^T``) sees the update, or the
    backend makes it in a copy of the weight (``GraphCompiler.in_place_updates``)."""
    g, _ = _lowered(FOLDED)
    position = {op: t for t, op in enumerate(g.ops)}
    reads = {op.result: op.attrs["var"] for op in g.ops if op.kind == "var.read"}
    updates = set(gemm_update.find(g).values())
    assert len(updates) == 3
    for u in updates:
        name = u.assign.attrs["var"]
        readers = [op for op in g.ops if op is not u.matmul
                   and any(reads.get(v) == name for v in op.inputs)]
        assert readers and max(position[op] for op in readers) < position[u.matmul]


def test_the_plan_still_computes_the_step() -> None:
    """The graph run in schedule order with every planned value only in its arena bytes
    (the values left out kept aside, as the folded update never writes them)."""
    g, p = _lowered(FOLDED)
    rng = np.random.default_rng(5)
    variables = {f"W{i}": rng.normal(size=(a, c)).astype(np.float32)
                 for i, (a, c) in enumerate(zip(SIZES, SIZES[1:]))}
    variables |= {f"b{i}": rng.normal(size=c).astype(np.float32)
                  for i, c in enumerate(SIZES[1:])}
    feeds = [rng.normal(size=(7, SIZES[0])).astype(np.float32),
             rng.integers(0, SIZES[-1], size=7).astype(np.int32)]
    assert_same_as_reference(g, p, feeds, variables, {"B": 7})


def test_plans_with_values_left_out_survive_json() -> None:
    g, p = _lowered(FOLDED)
    data = json.loads(json.dumps(p.to_json(g)))
    assert len(data["unplanned"]) == 6
    again = MemoryPlan.from_json(g, data)
    assert again.unplanned == p.unplanned and again.to_json(g) == data
    assert again.report({"B": 7}) == p.report({"B": 7})
    # a plan that leaves out a value no update absorbs, or misses one it leaves out, is
    # refused
    planned = p.buffers[0].values[0]
    number = {v: k for k, v in enumerate([*g.args, *(r for op in g.ops for r in op.results)])}
    bad = copy.deepcopy(data)
    bad["unplanned"].append(number[planned])
    with pytest.raises(ValueError, match="no GEMM update absorbs"):
        MemoryPlan.from_json(g, bad)
    bad = copy.deepcopy(data)
    del bad["unplanned"]
    with pytest.raises(ValueError, match="do not hold exactly"):
        MemoryPlan.from_json(g, bad)
    # the plain plan writes no such field (plans read back as before)
    g0, p0 = _lowered(PLAIN)
    assert "unplanned" not in p0.to_json(g0)


def test_without_updates_the_option_changes_nothing() -> None:
    """A graph without a foldable update (an inference step) plans the same either way."""
    def built():
        g, b, (x, w) = new_graph(f32("B", 8), f32(8, 8))
        g.set_results([b("sum", b("relu", b("matmul", b("exp", x), w)))])
        return g
    plain, folded = built(), built()
    want = plan_memory(plain)
    got = plan_memory(folded, gemm_updates=True)
    assert not got.unplanned
    assert got.to_json(folded) == want.to_json(plain)


@pytest.mark.parametrize("text", ["memory{gemm_updates=maybe}", "memory{gemm_updates=}"])
def test_a_bad_option_value_is_a_clear_error(text: str) -> None:
    with pytest.raises(TfcError, match="bad value .* for option 'gemm_updates': expected "
                                       "true or false"):
        run_passes(mlp_module(SIZES), text)


@pytest.mark.parametrize("device,folds", [("/gpu:0", False), ("/cpu:1", True)])
def test_a_graph_placed_on_a_gpu_plans_what_cuda_computes(device: str, folds: bool) -> None:
    """A module for CPUs and GPUs runs the llvm backend's memory pass for both; a graph
    on a GPU runs on CUDA, which computes the gradients (no folded updates there)."""
    module = run_passes(mlp_module(SIZES), "canonicalize,cse,dce,fusion")
    module.devices = ["/cpu:0", "/cpu:1", "/gpu:0"]
    g = module.graphs["train_step"]
    for op in g.ops:
        op.device = device
    run_passes(module, "memory{gemm_updates=true}")
    p = module.memory_plans["train_step"]
    assert (set(p.unplanned) == _absorbed(g)) is folds
    assert bool(p.unplanned) is folds
    check_plan(g, p)
