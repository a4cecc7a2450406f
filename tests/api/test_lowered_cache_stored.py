"""A lowered-cache hit whose native code the llvm entry cache holds runs that code without
decoding the lowered module (``lowered_cache.Lowering``, ``LLVMBackend.compile_stored``):
the module is decoded, through the verifier, only when something needs its IR (new feed
shapes, ``exe.module``). Whatever is missing, corrupt or different is a miss or a clean
recompile with the same values."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

import tfc
from tfc import background
from tfc.api import lowered_cache
from tfc.backends.llvm.runtime import entry_cache
from tfc.ir.printer import print_memory_plans, print_module


@pytest.fixture
def counts(monkeypatch):
    """How many modules were decoded, verified and lowered (the passes ran), by name."""
    import tfc.ir.verifier
    import tfc.pipeline
    seen = {"decoded": 0, "verified": 0, "lowered": 0}

    def counting(name, real):
        def wrapped(*args, **kwargs):
            seen[name] += 1
            return real(*args, **kwargs)
        return wrapped
    monkeypatch.setattr(lowered_cache, "module_from_bytes",
                        counting("decoded", lowered_cache.module_from_bytes))
    monkeypatch.setattr(tfc.ir.verifier, "verify_module",
                        counting("verified", tfc.ir.verifier.verify_module))
    real_lower = tfc.pipeline.lower

    def lowering(module, *args, **kwargs):
        if "run" in module.graphs:
            seen["lowered"] += 1
        return real_lower(module, *args, **kwargs)
    monkeypatch.setattr(tfc.pipeline, "lower", lowering)
    return seen


def _model(seed: int = 0):
    """A small training step with a symbolic batch, built the same way each call."""
    rng = np.random.default_rng(seed)
    x = tfc.placeholder(tfc.float32, [None, 8], name="x")
    w = tfc.Variable(rng.normal(size=(8, 5)).astype(np.float32), name="w")
    b = tfc.Variable(np.zeros(5, np.float32), name="b")
    y = tfc.nn.relu(tfc.matmul(x, w) + b)
    loss = tfc.reduce_mean(y * y)
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    return x, loss, train


def _feed(n: int) -> np.ndarray:
    return (np.arange(n * 8, dtype=np.float32).reshape(n, 8) % 7) / 5 - 0.5


def _steps(batches=(4,), backend="llvm", pipeline=None):
    """The loss of one training step per batch size (a fresh graph and session, as
    another process would build them), and the step's executable."""
    with tfc.Graph().as_default():
        x, loss, train = _model()
        with tfc.Session(backend=backend, pipeline=pipeline) as sess:
            sess.run(tfc.global_variables_initializer())
            losses = [sess.run([loss, train], {x: _feed(n)})[0] for n in batches]
            (exe,) = [c.executable for c in sess._cache.values() if c.feed_names]
    background.flush()  # (its cache writes land: as at a process's exit)
    return losses, exe


def _another_process():
    background.flush()
    lowered_cache._IN_PROCESS.clear()


def _stored_zips(fresh_cache):
    """The lowered-cache files of the training step's request (the one with a fetch)."""
    out = []
    for f in sorted((fresh_cache / "lowered").glob("*.zip")):
        with zipfile.ZipFile(f) as zf:
            if b"fetch0" in zf.read(lowered_cache.SIGNATURE):
                out.append(f)
    assert out
    return out


def _rewrite(path, **members: bytes) -> None:
    with zipfile.ZipFile(path) as zf:
        parts = {n: zf.read(n) for n in zf.namelist()}
    parts.update(members)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for n, data in parts.items():
            zf.writestr(n, data)
    path.write_bytes(buf.getvalue())


def test_a_hit_with_stored_code_decodes_nothing(fresh_cache, counts):
    first, made = _steps()
    assert counts["lowered"] == 2 and counts["decoded"] == 0  # the initializer and step
    _another_process()
    again, exe = _steps()
    assert counts == {"decoded": 0, "verified": 0, "lowered": 2}
    assert again == first
    assert exe._pending is not None and exe._graph_compiler is None
    assert "entry cache" in exe.report.seconds
    assert exe.cache_key == made.cache_key  # (the entry key, known before decoding)


def test_new_feed_shapes_after_a_stored_hit_decode_verify_and_agree(fresh_cache, counts):
    """A shape the stored tables have no binding for lowers the entry again: from the
    lowered module, decoded now and through the verifier, and with the values of a
    compile from scratch."""
    want, _ = _steps((4, 6))
    _another_process()
    for f in (fresh_cache / "entries").glob("*.zip"):  # (the code knows batch 4 only)
        f.unlink()
    _steps((4,))
    _another_process()
    before = dict(counts)
    got, exe = _steps((4, 6))
    assert got == want
    assert counts["lowered"] == before["lowered"]  # no pass ran
    assert counts["decoded"] == before["decoded"] + 1  # the step's module, once
    assert counts["verified"] == before["verified"] + 1
    assert exe._pending is None and exe._graph_compiler is not None


def test_the_lowered_module_is_there_on_demand(fresh_cache, counts):
    """``exe.module`` of a stored hit is the lowered module (decoded then), printing as
    the one the miss made."""
    _, made = _steps()
    _another_process()
    _, exe = _steps()
    assert counts["decoded"] == 0
    assert exe.module is exe.module and exe.graph is exe.module.graphs["run"]
    assert counts["decoded"] == 1 and counts["verified"] == 1
    assert (print_module(exe.module) + print_memory_plans(exe.module)
            == print_module(made.module) + print_memory_plans(made.module))


def test_a_corrupt_lowered_file_with_stored_code_is_lowered_again_when_needed(
        fresh_cache, counts):
    """The stored code runs (it was not made from the file); the corrupt IR is never
    used: when new shapes need the IR, the module is lowered again."""
    want, _ = _steps((4, 6))
    _another_process()
    for f in (fresh_cache / "entries").glob("*.zip"):
        f.unlink()
    _steps((4,))
    for f in _stored_zips(fresh_cache):
        _rewrite(f, **{lowered_cache.IR: b"{not bytecode"})
    _another_process()
    before = counts["lowered"]
    got, exe = _steps((4, 6))
    assert got == want
    assert counts["lowered"] == before + 1  # the step's, for batch 6


def test_a_missing_lowered_file_is_a_miss(fresh_cache, counts):
    want, _ = _steps()
    for f in (fresh_cache / "lowered").glob("*.zip"):
        f.unlink()
    _another_process()
    got, exe = _steps()
    assert got == want
    assert counts["lowered"] == 4  # both requests lowered again
    assert exe._pending is None


def test_a_corrupt_entry_file_is_compiled_again(fresh_cache, counts):
    want, _ = _steps()
    for f in (fresh_cache / "entries").glob("*.zip"):
        f.write_bytes(b"PK\x03\x04 not a zip")
    _another_process()
    got, exe = _steps()
    assert got == want
    assert counts["lowered"] == 2  # the lowered module was read back ...
    assert counts["decoded"] == 2 and counts["verified"] == 2  # ... and verified
    assert "entry cache" not in exe.report.seconds and exe._pending is None


def test_a_lowered_file_recording_another_signature_is_decoded(fresh_cache, counts):
    """The stand-in is used only where the stored lowered module records its signature."""
    want, _ = _steps()
    for f in (fresh_cache / "lowered").glob("*.zip"):
        _rewrite(f, **{lowered_cache.SIGNATURE: b"(x: f32[?,8]) -> (); "})
    _another_process()
    got, exe = _steps()
    assert got == want
    assert counts["decoded"] == 2 and counts["lowered"] == 2
    assert exe._pending is None


def test_a_lowered_file_without_a_signature_is_decoded(fresh_cache, counts):
    """Files written before the signature was stored are decoded, as they were."""
    want, _ = _steps()
    for f in (fresh_cache / "lowered").glob("*.zip"):
        with zipfile.ZipFile(f) as zf:
            parts = {n: zf.read(n) for n in zf.namelist() if n != lowered_cache.SIGNATURE}
        with zipfile.ZipFile(f, "w") as zf:
            for n, data in parts.items():
                zf.writestr(n, data)
    _another_process()
    got, _ = _steps()
    assert got == want
    assert counts["decoded"] == 2 and counts["lowered"] == 2


def test_changed_sources_are_a_miss(fresh_cache, counts, monkeypatch):
    want, _ = _steps()
    _another_process()
    monkeypatch.setattr(entry_cache, "sources_fingerprint", lambda: "another tfc")
    got, exe = _steps()
    assert got == want
    assert counts["lowered"] == 4 and counts["decoded"] == 0


def test_other_code_options_decode_and_compile(fresh_cache, counts, monkeypatch):
    """The lowered module is the same for another thread count; its code is not: the
    stored module is decoded and compiled, never the other count's code run."""
    from tfc.backends.llvm.runtime.pool import default_threads
    want, made = _steps()
    monkeypatch.setenv("TFC_NUM_THREADS", "2" if default_threads() == 1 else "1")
    _another_process()
    got, exe = _steps()
    assert got == want
    assert exe.cache_key != made.cache_key
    assert counts["lowered"] == 2 and counts["decoded"] == 2


def test_another_target_does_not_hit(fresh_cache, counts):
    """The reference backend lowers for another target: no llvm module is found."""
    want, _ = _steps()
    got, exe = _steps(backend="reference")
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert counts["lowered"] == 4 and counts["decoded"] == 0


def test_another_pipeline_does_not_hit(fresh_cache, counts):
    want, _ = _steps()
    got, exe = _steps(pipeline="cse")
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert counts["lowered"] == 4 and counts["decoded"] == 0 and exe._pending is None


def test_a_lowered_module_with_another_signature_is_refused(fresh_cache):
    """Belt and braces: a decoded module whose entry signature or variables differ from
    those of the graph that stood for it is an ``ArtifactError`` when adopted, not used."""
    from tfc.errors import ArtifactError
    _steps()
    _another_process()
    _, exe = _steps()
    renamed = exe._pending()
    renamed.graphs["run"].result_names[0] = "renamed"
    with pytest.raises(ArtifactError, match="does not keep the signature"):
        exe._adopt(renamed)
    _another_process()
    _, exe = _steps()
    unvaried = exe._pending()
    del unvaried.variables["w"]
    with pytest.raises(ArtifactError, match="does not keep the signature"):
        exe._adopt(unvaried)
    _another_process()
    _, exe = _steps()
    assert exe._adopt(exe._pending()) is None and exe._pending is None  # the real one


def test_a_module_lowered_later_is_of_the_content_keyed(fresh_cache, counts):
    """A stored hit whose lowered file turns out corrupt when new shapes need it lowers
    the request as it was keyed, not as the graph has grown since (a variable made after
    the first run): what it stores under the key is that content, so the next process
    finds it whole (its signature recorded as the key's)."""
    _steps((4,))
    for f in _stored_zips(fresh_cache):
        _rewrite(f, **{lowered_cache.IR: b"{not bytecode"})
    _another_process()
    with tfc.Graph().as_default():
        x, loss, train = _model()
        with tfc.Session(backend="llvm") as sess:  # (llvm's entry cache, in cuda mode too)
            sess.run(tfc.global_variables_initializer())
            sess.run([loss, train], {x: _feed(4)})
            tfc.Variable(np.zeros(3, np.float32), name="later")
            before = counts["lowered"]
            sess.run([loss, train], {x: _feed(6)})  # (lowered again: the file is corrupt)
            assert counts["lowered"] == before + 1
    _another_process()
    before = dict(counts)
    _, exe = _steps((4,))
    assert counts == before and exe._pending is not None  # found whole: nothing decoded
