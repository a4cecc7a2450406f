"""``estimate_entry``: the one prediction of a compiled entry's step that ``tfc bench``,
profile-guided placement's report and ``tools/bench_placement.py`` all print."""

import numpy as np
import pytest

from tfc.passes.cost_model import MeasuredCosts, op_signature
from tfc.passes.placement import estimate_placed
from tfc.pipeline import Target, lower
from tfc.runtime.estimate import estimate_entry, unfused_graph
from tfc.runtime.pgo import _estimates
from tfc.runtime.profiler import bench_entry
from tfc.runtime import load
from tfc.runtime.program import Program
from tfc.testing import split_mlp_module

FEEDS = {"x": np.ones((16, 6), np.float32), "y": np.zeros(16, np.int32)}


@pytest.mark.parametrize("devices", [(), ("/cpu:0", "/cpu:1")],
                         ids=["one device", "partitioned"])
def test_tfc_bench_and_profile_runs_predict_the_same_step(devices):
    module = lower(split_mlp_module(list(devices) or [None]), Target("llvm", devices))
    assert ("train" in module.partitions) == bool(devices)
    report = bench_entry(Program(module, backend="llvm"), "train", FEEDS, steps=1, warmup=1)
    assert report.estimated_s is not None and report.estimated_s > 0
    assert report.estimated_s == estimate_entry(module, "train", 16)
    assert _estimates(module, 16, None)["train"] == report.estimated_s


@pytest.mark.parametrize("devices", [(), ("/cpu:0", "/cpu:1")],
                         ids=["one device", "partitioned"])
def test_an_artifact_is_predicted_as_the_module_it_was_saved_from(devices, tmp_path):
    """``tfc bench`` estimates a loaded artifact, profile runs the module just lowered:
    an artifact keeps no record of what its fusions were made of, so both estimate the
    graph as compiled, and print the same."""
    # wide enough that a fused kernel and its ops estimate differently
    module = lower(split_mlp_module(list(devices) or [None], sizes=(64, 256, 256, 10)),
                   Target("llvm", devices))
    path = tmp_path / "m.tfc"
    Program(module, backend="llvm").save(path)
    loaded = load(path, backend="llvm")
    feeds = {"x": np.ones((16, 64), np.float32), "y": np.zeros(16, np.int32)}
    report = bench_entry(loaded, "train", feeds, steps=1, warmup=1)
    assert report.estimated_s == pytest.approx(estimate_entry(module, "train", 16))
    assert report.estimated_s == pytest.approx(_estimates(module, 16, None)["train"])


def test_measured_costs_reach_the_ops_inside_fusions():
    """A lowered one-device entry is fused; profile runs measure the unfused ops, so its
    estimate with measured costs must be made on the graph the placer saw: costing the
    ``fusion`` ops themselves would never find a measured op inside them."""
    module = lower(split_mlp_module([None]), Target("llvm"))
    fused = module.graphs["train"]
    assert any(op.kind == "fusion" for op in fused.ops)
    unfused, _ = unfused_graph(fused)
    relu = [op for op in unfused.ops if op.kind == "relu"]
    assert relu
    measured = MeasuredCosts(threads=2, seconds={op_signature(relu[0], 16): 0.5},
                             symbol_size=16)
    without = estimate_entry(module, "train", 16)
    with_measured = estimate_entry(module, "train", 16, measured)
    assert with_measured >= without + 0.5 * len(relu) - 1e-9
    # the fused graph as such does not see them
    assert estimate_placed(fused, ["/cpu:0"], 16, measured=measured) < 0.5
