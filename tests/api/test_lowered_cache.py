"""The lowered-module cache in front of the passes: a Session request whose graph was
lowered before (same content, another session or process) runs no pass, and gets the
same values; anything that changes the lowered module (a shape, a dtype, the fetches, the
pipeline) is a miss."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc import background
from tfc.api import lowered_cache


@pytest.fixture
def pass_runs(monkeypatch):
    """How many times the pipeline lowered a module (the passes ran)."""
    import tfc.pipeline
    calls = []
    real = tfc.pipeline.lower

    def counting(module, *args, **kwargs):
        calls.append(sorted(module.graphs))
        return real(module, *args, **kwargs)

    monkeypatch.setattr(tfc.pipeline, "lower", counting)
    return calls


def _forget_code(fresh_cache) -> None:
    """Drop the llvm entry cache (as another thread count or an evicted entry would): a
    hit of this cache is then decoded (``Lowering.module``), not stood in for."""
    background.flush()  # (the writes queued so far land first: as at a process's exit)
    for f in (fresh_cache / "entries").glob("*.zip"):
        f.unlink()


def _run(backend, width=8, dtype=np.float32, fetch_both=True, pipeline=None):
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.as_dtype(dtype), [4, width], name="x")
        w = tfc.Variable(np.full((width, 3), 0.5, dtype), name="w")
        y = tfc.nn.relu(tfc.matmul(x, w) - 1.0)
        loss = tfc.reduce_sum(y * y)
        with tfc.Session(backend=backend, pipeline=pipeline) as sess:
            sess.run(tfc.global_variables_initializer())
            xv = (np.arange(4 * width).reshape(4, width) / 7).astype(dtype)
            out = sess.run([y, loss] if fetch_both else [y, y], {x: xv})
    background.flush()  # (its cache writes land: as at a process's exit)
    return out


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_a_request_lowered_before_runs_no_pass(backend, fresh_cache, pass_runs):
    first = _run(backend)
    runs = sum("run" in g for g in pass_runs)
    assert runs == 2  # the initializer's request and the step's
    again = _run(backend)  # another graph, same content: in this process
    lowered_cache._IN_PROCESS.clear()
    from_disk = _run(backend)  # as another process finds it
    assert sum("run" in g for g in pass_runs) == runs
    for got in (again, from_disk):
        np.testing.assert_array_equal(got[0], first[0])
        assert got[1] == first[1]
    assert list((fresh_cache / "lowered").glob("*.zip"))


@pytest.mark.parametrize("change", [dict(width=6), dict(dtype=np.float64),
                                    dict(fetch_both=False), dict(pipeline="")])
def test_what_changes_the_lowered_module_is_a_miss(change, fresh_cache, pass_runs):
    _run("llvm")
    before = sum("run" in g for g in pass_runs)
    _run("llvm", **change)
    assert sum("run" in g for g in pass_runs) > before


def test_an_unreadable_entry_is_lowered_again(fresh_cache, pass_runs):
    first = _run("llvm")
    lowered_cache._IN_PROCESS.clear()
    for f in (fresh_cache / "lowered").glob("*.zip"):
        f.write_bytes(b"not a zip")
    again = _run("llvm")
    assert sum("run" in g for g in pass_runs) == 4
    np.testing.assert_array_equal(again[0], first[0])


def test_a_module_read_from_disk_goes_through_the_verifier(fresh_cache, pass_runs,
                                                           monkeypatch):
    """A cache file is input like an artifact: the verifier is the gate before native
    code. One that does not verify is lowered again (the passes run), not run."""
    import tfc.ir.verifier
    from tfc.errors import VerifyError
    first = _run("llvm")
    runs = len(pass_runs)
    lowered_cache._IN_PROCESS.clear()
    checked = []

    def refuse(module, copies=None):
        checked.append(sorted(module.graphs))
        raise VerifyError("a corrupt cache entry")
    monkeypatch.setattr(tfc.ir.verifier, "verify_module", refuse)
    _forget_code(fresh_cache)  # (else the stored code runs, nothing decoded: see below)
    again = _run("llvm")
    assert checked  # the disk entries were verified ...
    assert len(pass_runs) == 2 * runs  # ... refused, and lowered again
    np.testing.assert_array_equal(again[0], first[0])


def _tamper_types(fresh_cache) -> int:
    """Give one op of every stored ``run`` module another result type (still a type of the
    table, so the bytecode decodes); returns how many files changed."""
    import io
    import json
    import zipfile
    changed = 0
    for f in (fresh_cache / "lowered").glob("*.zip"):
        with zipfile.ZipFile(f) as zf:
            parts = {n: zf.read(n) for n in zf.namelist()}
        doc = json.loads(parts[lowered_cache.IR])
        if [g["name"] for g in doc["graphs"]] != ["run"] or len(doc["types"]) < 2:
            continue
        op = next(o for o in doc["graphs"][0]["ops"] if o.get("types"))
        op["types"][0] = (op["types"][0] + 1) % len(doc["types"])
        parts[lowered_cache.IR] = json.dumps(doc).encode()
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            for n, data in parts.items():
                zf.writestr(n, data)
        f.write_bytes(buf.getvalue())
        changed += 1
    return changed


def test_a_module_read_from_disk_with_wrong_types_is_lowered_again(fresh_cache, pass_runs):
    """Reading a module back does not infer its types (the verifier does, once): a stored
    result type that is not the inferred one is still refused, by the verifier."""
    first = _run("llvm")
    runs = len(pass_runs)
    lowered_cache._IN_PROCESS.clear()
    assert _tamper_types(fresh_cache) == 1
    _forget_code(fresh_cache)
    again = _run("llvm")
    assert len(pass_runs) == runs + 1  # the step's request lowered again
    np.testing.assert_array_equal(again[0], first[0])
    assert again[1] == first[1]


def test_reading_a_module_back_infers_each_op_once(fresh_cache, monkeypatch):
    """The decode takes the stored types; the verifier infers them (it did both: the
    re-inference was most of reading a 256-layer model back)."""
    import tfc.ir.bytecode
    _run("llvm")
    lowered_cache._IN_PROCESS.clear()
    decoded = []
    real = tfc.ir.bytecode.infer_types

    def counting(*args, **kwargs):
        decoded.append(args[0])
        return real(*args, **kwargs)
    monkeypatch.setattr(tfc.ir.bytecode, "infer_types", counting)
    _run("llvm")
    assert decoded == []


def test_a_hit_is_the_module_a_miss_makes(fresh_cache):
    """The module read back prints as the lowered one, plans included, and is known to the
    entry cache by the same key (``Module.source_key``)."""
    from tfc.api.extract import extract
    from tfc.ir import core as ir
    from tfc.ir.printer import print_memory_plans, print_module
    from tfc.pipeline import Target, lower
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [4, 8], name="x")
        w = tfc.Variable(np.full((8, 3), 0.5, np.float32), name="w")
        loss = tfc.reduce_sum(tfc.nn.relu(tfc.matmul(x, w)))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)

    def module() -> ir.Module:  # a fresh one each time: lowering works in place
        graph = extract(g.ir, "run", [("x", x.value)], [("fetch0", loss.value)],
                        list(train.ir_ops()), what="test")
        return ir.Module({"run": graph}, {n: v.decl for n, v in g.variables.items()})
    target = Target("llvm")
    made = lowered_cache.lowered(module(), "run", target, "fusion,memory",
                                 lambda m: lower(m, target, passes="fusion,memory"))
    lowered_cache._IN_PROCESS.clear()
    read = lowered_cache.lowered(module(), "run", target, "fusion,memory",
                                 lambda m: pytest.fail("lowered again"))
    for m in (made, read):
        assert m.source_key is not None
    assert read.source_key == made.source_key
    assert (print_module(read) + print_memory_plans(read)
            == print_module(made) + print_memory_plans(made))


def test_a_region_read_as_a_copy_is_verified_once(fresh_cache, monkeypatch):
    """A deep model's fusion regions repeat one body per layer; the bytecode stores each
    body once and the others as copies of it (version 2), and reading the module back from
    disk verifies each body once: the copies are what passed (``verify_module(copies)``)."""
    import json
    import zipfile

    from tfc.ir import verifier
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [4, 8], name="x")
        h = x
        for i in range(4):
            w = tfc.Variable(np.full((8, 8), 0.1, np.float32), name=f"w{i}")
            b = tfc.Variable(np.zeros(8, np.float32), name=f"b{i}")
            h = tfc.nn.relu(tfc.matmul(h, w) + b)
        loss = tfc.reduce_sum(h)
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        xv = np.ones((4, 8), np.float32)
        with tfc.Session(backend="llvm") as sess:
            sess.run(tfc.global_variables_initializer())
            first = sess.run([loss, train], {x: xv})[0]
        background.flush()  # (as at a process's exit: the writes land, then it is gone)
        lowered_cache._IN_PROCESS.clear()
        _forget_code(fresh_cache)
        checked = []
        real = verifier._GraphVerifier.run
        monkeypatch.setattr(verifier._GraphVerifier, "run",
                            lambda self: checked.append(self.graph.name) or real(self))
        with tfc.Session(backend="llvm") as sess:
            sess.run(tfc.global_variables_initializer())
            assert sess.run([loss, train], {x: xv})[0] == first

    def regions(node):
        if isinstance(node, dict):
            if "like" in node or "ops" in node and "results" in node and "args" in node:
                yield node
            for v in node.values():
                yield from regions(v)
        elif isinstance(node, list):
            for v in node:
                yield from regions(v)
    stored = []
    background.flush()
    for f in (fresh_cache / "lowered").glob("*.zip"):
        with zipfile.ZipFile(f) as zf:
            stored.extend(regions(json.loads(zf.read(lowered_cache.IR))["graphs"]))
    copies = [r["name"] for r in stored if "like" in r]
    assert len(copies) >= 3  # (a region per layer, the most alike)
    assert len(checked) == len(stored) - len(copies)
    assert not set(copies) & set(checked)
