"""The entry cache: a second compile of the same entry neither runs the passes nor lowers,
starts from the bindings the first one met, and never hands out code of another graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tfc.backends.llvm import LLVMBackend
from tfc.backends.llvm.runtime import entry_cache
from tfc.ir.types import DType
from tfc.passes import run_passes
from tfc.testing import compile_lowered

F32 = DType.f32
RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    return tmp_path


def _module(h, scale: float = 2.0):
    def body(b, a):
        return b("softmax", b("mul", b("matmul", a[0], a[1]), b("constant", value=np.array(scale, np.float32))))
    return h.make_module([("x", F32, ("B", 4)), ("w", F32, (4, 3))], body)


def _feeds(n: int = 5):
    return [RNG.normal(size=(n, 4)).astype(np.float32),
            RNG.normal(size=(4, 3)).astype(np.float32)]


def test_a_second_compile_lowers_nothing_and_keeps_the_bindings(h, cache_dir):
    m = _module(h)
    first = compile_lowered(LLVMBackend(), m, "f")
    assert first.cache_key is not None and not first.report.cached
    feeds = _feeds()
    want = first(feeds, {}, 0).fetches[0]
    assert len(list((cache_dir / "entries").glob("*.zip"))) == 1
    again = compile_lowered(LLVMBackend(), m, "f")  # as a new process would: from disk
    assert again.report.cached and "entry cache" in again.report.seconds
    assert ((5, 4), (4, 3)) in again._bindings  # written back after the first step
    np.testing.assert_array_equal(again(feeds, {}, 0).fetches[0], want)
    assert again._graph_compiler is None  # neither compile nor step lowered the graph
    nine = _feeds(9)
    h.assert_same(again(nine, {}, 0), h.run_both(m, nine)[1])  # a new shape lowers
    assert again._graph_compiler is not None
    third = compile_lowered(LLVMBackend(), m, "f")
    assert {((5, 4), (4, 3)), ((9, 4), (4, 3))} <= set(third._bindings)


def test_another_graph_or_setting_is_another_entry(h):
    m2, m3 = _module(h, 2.0), _module(h, 3.0)  # they differ in one constant's value
    a = compile_lowered(LLVMBackend(), m2, "f")
    b = compile_lowered(LLVMBackend(), m3, "f")
    assert a.cache_key != b.cache_key and not b.report.cached
    feeds = _feeds()
    h.assert_same(b(feeds, {}, 0), h.run_both(m3, feeds)[1])
    keys = {a.cache_key, compile_lowered(LLVMBackend(threads=1), m2, "f").cache_key,
            compile_lowered(LLVMBackend(profile=True), m2, "f").cache_key}
    assert len(keys) == 3
    # the same graph planned alone compiles as it is; lowered (fused, then planned), it
    # is another graph with its own key
    planned = run_passes(_module(h, 2.0), "memory")
    assert (LLVMBackend().compile(planned, "f").cache_key
            != compile_lowered(LLVMBackend(), _module(h, 2.0), "f").cache_key)


def test_a_broken_entry_is_a_miss_and_is_replaced(h, cache_dir):
    m = _module(h)
    key = compile_lowered(LLVMBackend(), m, "f").cache_key
    path = cache_dir / "entries" / f"{key}.zip"
    path.write_bytes(b"not a zip")
    assert entry_cache.get(key) is None
    exe = compile_lowered(LLVMBackend(), m, "f")
    assert exe._graph_compiler is not None  # lowered again
    feeds = _feeds()
    h.assert_same(exe(feeds, {}, 0), h.run_both(m, feeds)[1])
    assert entry_cache.get(key) is not None


def test_graphs_with_big_constants_are_not_cached(h, cache_dir, monkeypatch):
    monkeypatch.setattr(entry_cache, "MAX_CONSTANT_BYTES", 3)  # a 4-byte scalar is too big
    exe = compile_lowered(LLVMBackend(), _module(h), "f")
    exe(_feeds(), {}, 0)
    assert exe.cache_key is None and not (cache_dir / "entries").exists()


def test_use_cache_false_writes_nothing(h, cache_dir):
    exe = compile_lowered(LLVMBackend(use_cache=False), _module(h), "f")
    exe(_feeds(), {}, 0)
    assert exe.cache_key is None and not (cache_dir / "entries").exists()


def test_key_covers_every_tfc_source():
    """An entry's tables and code depend on the passes, the op registry and the backend
    (code generation and runtime alike): the key's fingerprint hashes all of tfc."""
    import tfc.ir.parser
    import tfc.passes.fusion
    from tfc.backends.llvm import kernels_loop
    from tfc.backends.llvm.runtime import pool
    files = set(entry_cache.tfc_sources())
    for module in (tfc.passes.fusion, tfc.ir.parser, kernels_loop, pool, entry_cache):
        assert Path(module.__file__).resolve() in files, module.__name__
    assert any(f.suffix == ".lark" for f in files)  # the IR grammar


def test_a_module_that_knows_its_source_is_not_encoded_for_the_key(h, monkeypatch):
    """A module the lowered-module cache returned carries its key (``source_key``): the
    entry key is made from that (other sources, other keys), not from encoding it again."""
    from tfc.pipeline import Target, lower
    m = lower(_module(h), Target("llvm"))
    plain = entry_cache.entry_key(m, "f", "o")
    m.source_key = "a"
    monkeypatch.setattr(entry_cache, "module_to_bytes",
                        lambda *a: pytest.fail("the module was encoded again"))
    by_source = entry_cache.entry_key(m, "f", "o")
    assert by_source not in (None, plain)
    assert entry_cache.entry_key(m, "f", "p") != by_source
    m.source_key = "b"
    assert entry_cache.entry_key(m, "f", "o") != by_source


def test_the_sources_fingerprint_reads_only_changed_files(tmp_path, monkeypatch):
    """Each file's content hash is kept by its (path, size, mtime_ns), as a .pyc keeps its
    source's: an unchanged tree is listed, not read; an edited file is read and changes
    the fingerprint; one edited just now is not trusted to its mtime next time."""
    import os
    root = tmp_path / "pkg"
    (root / "sub" / "__pycache__").mkdir(parents=True)
    files = {"a.py": b"x = 1\n", "sub/b.py": b"y = 2\n", "g.lark": b"start: X\n"}
    old = 1_000_000_000_000_000_000  # mtimes well in the past: trusted
    for rel, data in files.items():
        (root / rel).write_bytes(data)
        os.utime(root / rel, ns=(old, old))
    (root / "sub" / "__pycache__" / "b.cpython.pyc").write_bytes(b"junk")
    (root / "notes.txt").write_bytes(b"not a source")
    memo = tmp_path / "cache" / "sources.json"
    read = []
    real = entry_cache._file_digest
    monkeypatch.setattr(entry_cache, "_file_digest", lambda p: read.append(p) or real(p))

    def fingerprint():
        stats = entry_cache._source_stats(root)
        return entry_cache.fingerprint_files(root, stats, memo)

    first = fingerprint()
    assert sorted(Path(p).relative_to(root).as_posix() for p in read) == sorted(files)
    read.clear()
    assert fingerprint() == first and read == []  # nothing changed: nothing read
    (root / "a.py").write_bytes(b"x = 3\n")  # same size, another mtime
    edited = fingerprint()
    assert edited != first and [Path(p).name for p in read] == ["a.py"]
    read.clear()
    assert fingerprint() == edited and [Path(p).name for p in read] == ["a.py"]  # racy
    os.utime(root / "a.py", ns=(old, old))  # same size and mtime as recorded first:
    read.clear()                            # the memo is not asked about it (racy before)
    assert fingerprint() == edited and [Path(p).name for p in read] == ["a.py"]
    read.clear()
    assert fingerprint() == edited and read == []
    memo.write_text("{not json")  # a corrupt memo is a cold one
    assert fingerprint() == edited and len(read) == 3
    (root / "sub" / "b.py").unlink()
    assert fingerprint() != edited


def test_the_sources_fingerprint_lists_what_tfc_sources_lists():
    stats = entry_cache._source_stats(entry_cache._TFC_ROOT)
    assert [Path(p) for _, p, _, _ in sorted(stats, key=lambda s: s[1])] == sorted(
        entry_cache.tfc_sources())


def test_stored_bindings_say_whether_their_gemms_are_small(h, cache_dir, monkeypatch):
    """A stored binding records ``gemms_are_small``'s answer, so an executable made from
    the entry (``compile_stored``: no lowered IR at hand) need not ask the graph; tables
    written before it was recorded still load (it is asked then), and a bad value is a
    clean miss."""
    import json
    import zipfile

    from tfc.backends.llvm.runtime import executable
    from tfc.backends.llvm.runtime.executable import NativeMeta
    m = _module(h)
    first = compile_lowered(LLVMBackend(), m, "f")
    first(_feeds(), {}, 0)
    (path,) = (cache_dir / "entries").glob("*.zip")
    hit = entry_cache.get(first.cache_key)
    assert hit is not None
    (rec,) = hit[1].bindings
    assert rec.small_gemms == (True,)  # (one 5x4x3 matmul)
    asked = []
    real = executable.gemms_are_small
    monkeypatch.setattr(executable, "gemms_are_small",
                        lambda *a: asked.append(1) or real(*a))
    again = compile_lowered(LLVMBackend(), m, "f")
    assert asked == [] and again._bindings[rec.feeds].small_gemms is True
    with zipfile.ZipFile(path) as zf:
        parts = {n: zf.read(n) for n in zf.namelist()}
    table = json.loads(parts[entry_cache.TABLES])
    for value, want in (("yes", None), (None, None)):
        table["bindings"][0]["small_gemms"] = value
        if value is None:
            del table["bindings"][0]["small_gemms"]  # (as written before)
        parts[entry_cache.TABLES] = json.dumps(table).encode()
        with zipfile.ZipFile(path, "w") as zf:
            for n, data in parts.items():
                zf.writestr(n, data)
        if value == "yes":
            assert entry_cache.get(first.cache_key) is None
            with pytest.raises(ValueError, match="bad binding"):
                NativeMeta.from_json(table, hit[1].constants)
        else:
            old = compile_lowered(LLVMBackend(), m, "f")
            assert asked == [1] and old._bindings[rec.feeds].small_gemms is True
