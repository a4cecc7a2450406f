"""Cutting a request out of the built graph (``tfc.api.extract``): the copy (``Op.clone``)
shares the built ops' read-only attrs instead of freezing them again, makes its ops with the cycle
collector paused, and stays a copy: passes over it never touch the built graph."""

from __future__ import annotations

import gc

import numpy as np

import tfc
from tfc.api import extract as extract_module
from tfc.ir import core as ir
from tfc.ir.printer import print_graph


def _model():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [4, 3], name="x")
        w = tfc.Variable(np.ones((3, 2), np.float32), name="w")
        h = tfc.nn.relu(tfc.matmul(x, w) * 2.0 + 0.5)
        loss = tfc.reduce_mean(h)
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    return g, x, loss, train


def test_the_copy_shares_attrs_and_freezes_nothing(monkeypatch):
    g, x, loss, train = _model()
    frozen: list[object] = []
    real = ir.freeze_attr

    def counting(v):
        frozen.append(v)
        return real(v)
    monkeypatch.setattr(ir, "freeze_attr", counting)
    enabled: list[bool] = []
    real_clone = ir.Op.clone

    def spying(op, inputs, regions=None):
        enabled.append(gc.isenabled())
        return real_clone(op, inputs, regions)
    monkeypatch.setattr(ir.Op, "clone", spying)
    tops = [op for op in train.ir_ops()]
    out = extract_module.extract(g.ir, "run", [("x", x.value)], [("loss", loss.value)], tops)
    assert enabled and not any(enabled)  # the collector paused while copying
    assert gc.isenabled()  # and on again after
    assert not frozen
    by_kind: dict[str, list[ir.Op]] = {}
    for op in g.ir.ops:
        by_kind.setdefault(op.kind, []).append(op)
    for op in out.ops:
        assert op not in g.ir.ops
        assert any(op.attrs is b.attrs for b in by_kind[op.kind])  # shared, not rebuilt


def test_a_session_leaves_the_built_graph_as_it_was():
    g, x, loss, train = _model()
    before = print_graph(g.ir)
    inputs = [list(op.inputs) for op in g.ir.ops]
    with g.as_default():
        sess = tfc.Session()
        sess.run(tfc.global_variables_initializer())
        first = sess.run([loss, train], {x: np.ones((4, 3), np.float32)})[0]
        second = sess.run(loss, {x: np.ones((4, 3), np.float32)})
    assert second < first
    assert print_graph(g.ir) == before
    assert [list(op.inputs) for op in g.ir.ops] == inputs


def test_a_view_copies_nothing_and_encodes_as_the_copy():
    """``extract(borrow=True)`` holds the built ops themselves and the fed values as its
    arguments, and has the copy's content: the same bytecode where the feeds are named
    as the values are (what ``Session`` keys its lowered-module cache by)."""
    from tfc.ir.bytecode import module_to_bytes
    g, x, loss, train = _model()
    tops = list(train.ir_ops())
    request = (g.ir, "run", [("x", x.value)], [("fetch0", loss.value)], tops)
    before = print_graph(g.ir)
    view = extract_module.extract(*request, borrow=True)
    copy = extract_module.extract(*request)
    built = {id(op) for op in g.ir.ops}
    assert view.ops and all(id(op) in built for op in view.ops)
    assert not any(id(op) in built for op in copy.ops)
    assert view.args == [x.value] and view.results == [loss.value]
    assert x.value.op is None and x.value.index == 0  # (not claimed by the view)
    assert view.signature() == copy.signature()
    decls = {n: v.decl for n, v in g.variables.items()}
    assert (module_to_bytes(ir.Module({"run": view}, decls))
            == module_to_bytes(ir.Module({"run": copy}, decls)))
    assert print_graph(g.ir) == before


def test_a_cached_session_leaves_the_built_graph_as_it_was(tmp_path, monkeypatch):
    """A request lowered (a miss) and one found in the caches (a view stands in for the
    lowered graph) both leave the built graph untouched."""
    from tfc import background
    from tfc.api import lowered_cache
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(lowered_cache, "_IN_PROCESS", type(lowered_cache._IN_PROCESS)())
    results = []
    for _ in range(2):  # a miss, then (another graph of the same content) a stored hit
        background.flush()  # (the miss's writes land, as at a process's exit)
        lowered_cache._IN_PROCESS.clear()
        g, x, loss, train = _model()
        before = print_graph(g.ir)
        inputs = [list(op.inputs) for op in g.ir.ops]
        with g.as_default():
            sess = tfc.Session(backend="llvm")  # (llvm's entry cache, in cuda mode too)
            sess.run(tfc.global_variables_initializer())
            results.append(sess.run([loss, train], {x: np.ones((4, 3), np.float32)})[0])
            (compiled,) = [c for c in sess._cache.values() if c.feed_names]
        assert print_graph(g.ir) == before
        assert [list(op.inputs) for op in g.ir.ops] == inputs
    assert results[0] == results[1]
    assert compiled.executable._pending is not None  # (the second was the stored hit)


def test_a_copy_of_a_view_is_the_extract_of_its_request():
    """``copy_view`` (what a ``Session`` miss lowers) is ``extract`` of the request the
    view was cut for: the same text, new ops and arguments (named as the feeds), and the
    ops the view held then, even after the built graph has grown."""
    g, x, loss, train = _model()
    tops = list(train.ir_ops())
    with g.as_default():
        y = tfc.placeholder(tfc.float32, [2], name="y")
        doubled = y * 2.0
    request = (g.ir, "run", [("feed_x", x.value), ("y", y.value)],
               [("fetch0", loss.value), ("fetch1", doubled.value)], tops)
    view = extract_module.extract(*request, borrow=True)
    want = extract_module.extract(*request)
    with g.as_default():
        tfc.Variable(np.zeros(2, np.float32), name="later") + 1.0  # (the graph grows)
    got = extract_module.copy_view(view, ["feed_x", "y"])
    assert print_graph(got) == print_graph(want)
    assert [a.name for a in got.args] == ["feed_x", "y"] and got.args[0] is not x.value
    built = {id(op) for op in g.ir.ops}
    assert got.ops and not any(id(op) in built for op in got.ops)
    assert got.result_names == ["fetch0", "fetch1"] and got.signature() == want.signature()
