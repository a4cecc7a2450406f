"""tools/bench_embedding.py: the bytes it counts are the cross-task transfers, and sampled
softmax moves far less than the full softmax, which ships the whole output embedding."""

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "bench_embedding.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_embedding", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sampled_softmax_sends_less_than_the_full_softmax():
    bench = load()
    sampled, full = bench.part_softmax(vocab=4000, batch=32, sampled=16, steps=1,
                                        backend="reference")
    # full: each worker gets both shards of [4000, 64] f32 and sends back dense gradients
    assert full["bytes"] >= 2 * 2 * 4000 * 64 * 4
    assert 0 < sampled["bytes"] < full["bytes"] / 10
