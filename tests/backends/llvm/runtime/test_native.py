"""The object-code cache (``runtime.native``, used by ``jit.compile_ir``): code that is not
what LLVM wrote (a torn or corrupted file) is a miss, compiled again, never linked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfc.backends.llvm import jit
from tfc.backends.llvm.runtime import native

IR = """
define i32 @answer() {
  ret i32 42
}
"""


@pytest.fixture(autouse=True)
def cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    return tmp_path


def cached_file(cache_dir):
    (path,) = (cache_dir / "llvm").glob("*.o")
    return path


@pytest.mark.parametrize("damage", [
    lambda data: data[:len(data) // 2],
    lambda data: data[:-40] + bytes(b ^ 0xFF for b in data[-40:-8]) + data[-8:],
    lambda data: data[50:],  # no tag: a file of an older tfc, raw object code
    lambda data: b"",
], ids=["truncated", "flipped", "untagged", "empty"])
def test_damaged_cache_files_are_misses(cache_dir, damage):
    obj, cached = jit.compile_ir(IR)
    assert not cached and jit.compile_ir(IR) == (obj, True)
    path = cached_file(cache_dir)
    path.write_bytes(damage(path.read_bytes()))
    assert jit.compile_ir(IR) == (obj, False)  # compiled again, and stored again
    assert jit.compile_ir(IR) == (obj, True)
    assert native.load_object(obj).address("answer")
    assert [p.name for p in (cache_dir / "llvm").iterdir()] == [path.name]  # no temps


def test_host_key_covers_code_generation_and_runtime_sources():
    """Object code depends on the kernels that were generated and on the runtime they call
    (pool, symbols): the fingerprint in the host key hashes both packages, so code cached
    by another version of either is rebuilt, never linked."""
    from tfc.backends.llvm import kernels_loop, parallel
    from tfc.backends.llvm.runtime import pool, symbols
    files = set(native.backend_sources())
    for module in (kernels_loop, parallel, jit, pool, symbols, native):
        assert Path(module.__file__).resolve() in files, module.__name__
