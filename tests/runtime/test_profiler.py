"""``bench_entry``'s report: the cost model's prediction beside the measured step, for
every program (one device too)."""

import numpy as np
import pytest

from tfc.passes.placement import estimate_placed
from tfc.pipeline import Target, lower
from tfc.runtime.profiler import BenchReport, bench_entry
from tfc.runtime.program import Program
from tfc.testing import split_mlp_module

FEEDS = {"x": np.ones((16, 6), np.float32), "y": np.zeros(16, np.int32)}


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_a_one_device_program_gets_a_prediction_at_the_feeds_batch(backend):
    module = split_mlp_module([None])
    program = Program(module, backend=backend)
    report = bench_entry(program, "train", FEEDS, steps=2, warmup=1)
    graph = program.module.graphs["train"]
    assert report.estimated_s == pytest.approx(estimate_placed(graph, ["/cpu:0"], 16))
    assert report.estimated_s != estimate_placed(graph, ["/cpu:0"], 128)  # the feeds' batch
    assert "predicted" in report.summary() and "measured / predicted" in report.summary()


def test_a_lowered_program_is_predicted_from_its_fused_graph():
    module = lower(split_mlp_module([None]), Target("llvm"))
    assert any(op.kind == "fusion" for op in module.graphs["train"].ops)
    report = bench_entry(Program(module, backend="llvm"), "train", FEEDS, steps=1, warmup=1)
    assert report.estimated_s == pytest.approx(
        estimate_placed(module.graphs["train"], ["/cpu:0"], 16))


def test_the_summary_gives_measured_over_predicted():
    report = BenchReport("e", 3, [2e-3, 2e-3, 2e-3], estimated_s=1e-3)
    assert "predicted 1.000 ms (measured / predicted 2.00)" in report.summary()
    assert "predicted" not in BenchReport("e", 1, [1e-3]).summary()
