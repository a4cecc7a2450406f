"""The lowered-module cache in front of the passes: a Session request whose graph was
lowered before (same content, another session or process) runs no pass, and gets the
same values; anything that changes the lowered module (a shape, a dtype, the fetches, the
pipeline) is a miss."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.api import lowered_cache


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(lowered_cache, "_IN_PROCESS", type(lowered_cache._IN_PROCESS)())
    return tmp_path


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


def _run(backend, width=8, dtype=np.float32, fetch_both=True, pipeline=None):
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.as_dtype(dtype), [4, width], name="x")
        w = tfc.Variable(np.full((width, 3), 0.5, dtype), name="w")
        y = tfc.nn.relu(tfc.matmul(x, w) - 1.0)
        loss = tfc.reduce_sum(y * y)
        with tfc.Session(backend=backend, pipeline=pipeline) as sess:
            sess.run(tfc.global_variables_initializer())
            xv = (np.arange(4 * width).reshape(4, width) / 7).astype(dtype)
            return sess.run([y, loss] if fetch_both else [y, y], {x: xv})


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

    def refuse(module):
        checked.append(sorted(module.graphs))
        raise VerifyError("a corrupt cache entry")
    monkeypatch.setattr(tfc.ir.verifier, "verify_module", refuse)
    again = _run("llvm")
    assert checked  # the disk entries were verified ...
    assert len(pass_runs) == 2 * runs  # ... refused, and lowered again
    np.testing.assert_array_equal(again[0], first[0])
