"""Bindings (``tfc.backends.binding``): a graph of static types takes its types' shapes
without inferring each op again, and those are the shapes inference gives; a symbolic
graph is still inferred and checked per call."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.backends import binding
from tfc.errors import FeedError
from tfc.pipeline import lower_entry


def _training_step(batch: int | None):
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [batch, 8], name="x")
        y = tfc.placeholder(tfc.int32, [batch], name="y")
        h = x
        for i in range(3):
            h = tfc.nn.relu(tfc.matmul(h, tfc.Variable(np.ones((8, 8), np.float32) * 0.1,
                                                        name=f"W{i}")))
        loss = tfc.reduce_mean(
            tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    return lower_entry(g.as_module(), "step", "llvm")


def _inferred(module, graph, feed_shapes):
    shapes: dict = {}
    binding.infer_graph(graph, feed_shapes, module, shapes)
    return shapes


def test_a_static_graph_takes_its_types_shapes_without_inferring(monkeypatch):
    module = _training_step(4)
    graph = module.graphs["step"]
    feed_shapes = [(4, 8), (4,)]
    want = _inferred(module, graph, feed_shapes)
    calls = []
    monkeypatch.setattr(binding, "infer_graph", lambda *a: calls.append(a))
    got = binding.bind(module, graph, feed_shapes)
    assert calls == []  # nothing inferred again
    assert got.shapes == want and got.symbols == {}
    assert all(isinstance(d, int) for s in got.shapes.values() for d in s)


def test_a_symbolic_graph_is_inferred_per_call():
    module = _training_step(None)
    graph = module.graphs["step"]
    got = binding.bind(module, graph, [(5, 8), (5,)])
    assert got.shapes[graph.results[0]] == ()
    assert got.shapes == _inferred(module, graph, [(5, 8), (5,)])
    assert any(s[:1] == (5,) for s in got.shapes.values())
    with pytest.raises(FeedError, match="dim B is 5"):
        binding.bind(module, graph, [(5, 8), (6,)])  # the batch disagrees


def test_static_shapes_tests_each_distinct_shape_once(monkeypatch):
    module = _training_step(4)
    graph = module.graphs["step"]
    tested: list[tuple] = []
    real = binding._all_ints
    monkeypatch.setattr(binding, "_all_ints", lambda s: tested.append(s) or real(s))
    shapes: dict = {}
    assert binding.static_shapes(graph, shapes)
    assert len(tested) == len(set(tested)) == len(set(shapes.values())) < len(shapes)
    assert shapes == _inferred(module, graph, [(4, 8), (4,)])
    tested.clear()
    symbolic = _training_step(None).graphs["step"]
    assert not binding.static_shapes(symbolic, {})
    assert tested and not real(tested[-1])  # stops at the first symbolic shape
