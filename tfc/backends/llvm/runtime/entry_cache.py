"""The entry cache: an entry's object code and run-time tables, keyed by its tfc IR.

The object-code cache (``native``), keyed by the printed LLVM IR, saves LLVM's optimization
and code generation; but to reach that key the graph must be lowered in Python, which is
most of what a cached compile costs. This cache sits one level up. Its key is everything
the native code depends on:
- the module's bytecode (the lowered entry graph with its locations, which error
  messages carry, and the variables' declarations) and the entry's memory plan;
- the options that shape the code (threads, the parallel threshold, profiling);
- the host key (CPU, LLVM build, a fingerprint of the backend's sources);
- a fingerprint of all of tfc's sources, since the passes and shape rules shape the
  code as well.
A hit skips the lowering in Python and LLVM, and starts from the stored bindings (the feed
shapes met before), as loading an artifact does. Bindings met later are written back, so
the next process finds them too.

One zip per key in ``$TFC_CACHE_DIR/entries``, in the artifact's form: the object code,
the tables as JSON, the constants as ``.npy`` (no pickle). Writes are atomic (temp file +
rename); an entry that cannot be read is a miss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tfc import background
from tfc.backends.llvm.runtime import native
from tfc.ir.bytecode import module_to_bytes
from tfc.ir.core import Module

if TYPE_CHECKING:
    from tfc.backends.llvm.runtime.executable import NativeMeta

CODE, TABLES = "code.o", "tables.json"
# Graphs that carry more constant data than this (pretrained weights baked into an
# __init__ graph, say) are not cached here: every entry would store its own copy, and
# encoding them for the key would cost what lowering saves. The object-code cache still applies.
MAX_CONSTANT_BYTES = 1 << 20


_TFC_ROOT = Path(__file__).resolve().parents[3]  # tfc/


def tfc_sources() -> list[Path]:
    """Every tfc source file: the passes and shape rules shape the code too."""
    return sorted(f for f in _TFC_ROOT.rglob("*")
                  if f.suffix in (".py", ".lark") and "__pycache__" not in f.parts)


@functools.cache
def sources_fingerprint() -> str:
    """A hash of every tfc source file, once per process. Reading and hashing all of them
    (about 2.7 MB) cost ~10 ms in every process; the content hash of each file is kept in
    ``$TFC_CACHE_DIR/sources.json`` by its (path, size, mtime_ns), as a ``.pyc`` keeps its
    source's, so a process that finds the sources unchanged only lists them (~1 ms)."""
    return fingerprint_files(_TFC_ROOT, _source_stats(_TFC_ROOT),
                             native.cache_dir() / "sources.json")


def _source_stats(root: Path) -> list[tuple[str, str, int, int]]:
    """(relative path, path, size, mtime_ns) of the files ``tfc_sources`` lists, found
    with ``os.scandir`` (a third of ``rglob``'s cost, the stats included)."""
    out: list[tuple[str, str, int, int]] = []
    stack = [str(root)]
    base = len(str(root)) + 1
    while stack:
        with os.scandir(stack.pop()) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__":
                        stack.append(e.path)
                elif e.name.endswith((".py", ".lark")):
                    st = e.stat()
                    out.append((e.path[base:].replace(os.sep, "/"), e.path, st.st_size,
                                st.st_mtime_ns))
    out.sort()
    return out


# A file changed less than this long before its hash was recorded is hashed again next
# time: an edit within the same mtime tick and of the same size would otherwise go unseen.
_RACY_NS = 2_000_000_000


def fingerprint_files(root: Path, stats: list[tuple[str, str, int, int]],
                      memo_path: Path) -> str:
    """A hash of the files ``stats`` lists (``_source_stats``): each file's relative path
    and the sha256 of its content, the latter from ``memo_path`` where the file's size and
    mtime are those recorded with it, else read (and recorded, best effort)."""
    try:
        memo = json.loads(memo_path.read_bytes())
        if not isinstance(memo, dict) or memo.get("root") != str(root) or not isinstance(
                memo.get("files"), dict):
            memo = {}
    except (OSError, ValueError):
        memo = {}
    known = memo.get("files", {})
    fresh: dict[str, list[object]] = {}
    h = hashlib.sha256()
    changed = False
    for rel, path, size, mtime in stats:
        got = known.get(rel)
        if (isinstance(got, list) and len(got) == 3 and got[0] == size and got[1] == mtime
                and isinstance(got[2], str)):
            digest = got[2]
        else:
            digest = _file_digest(path)
            changed = True
        fresh[rel] = [size, mtime, digest]
        h.update(rel.encode())
        h.update(b"\0")
        h.update(digest.encode())
        h.update(b"\0")
    if changed or len(fresh) != len(known):
        _write_memo(memo_path, root, fresh)
    return h.hexdigest()


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _write_memo(memo_path: Path, root: Path, files: dict[str, list[object]]) -> None:
    """Record ``files``' hashes, but not of files changed in the last ``_RACY_NS``;
    failures (read-only home, full disk) only cost the hashing next time."""
    import time
    recent = time.time_ns() - _RACY_NS
    kept = {rel: v for rel, v in files.items() if isinstance(v[1], int) and v[1] < recent}
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo_path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"root": str(root), "files": kept}, f, separators=(",", ":"))
            os.replace(tmp, memo_path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def entry_key(module: Module, entry: str, options: str) -> str | None:
    """The cache key of ``entry`` of ``module`` compiled with ``options``; ``None`` for a
    graph with more than ``MAX_CONSTANT_BYTES`` of constants. A module that knows what it
    was lowered from (``Module.source_key``: the lowered-module cache's key) is known by
    that, else by its encoding and memory plan (hashing a 256-layer model's encoding
    cost more than a one-layer edit's new kernels)."""
    graph = module.graphs[entry]
    if graph.constant_bytes() > MAX_CONSTANT_BYTES:
        return None
    if module.source_key is not None:  # what the lowered module (graphs, plans) came from
        return source_entry_key(module.source_key, entry, options)
    # the code follows the memory plan as well as the graph (the plan a module was lowered
    # with, or the one an artifact stored)
    plan = module.memory_plans[entry]
    planned = json.dumps(plan.to_json(graph), sort_keys=True, separators=(",", ":"))
    h = hashlib.sha256()
    for part in (native.host_key(), sources_fingerprint(), options, planned, entry):
        h.update(part.encode())
        h.update(b"\0")
    h.update(module_to_bytes(Module({entry: graph}, module.variables)))
    return h.hexdigest()


def source_entry_key(source_key: str, entry: str, options: str) -> str:
    """``entry_key`` of a module known by ``source_key`` (``Module.source_key``): a hash of
    that key, so known before the lowered module is decoded (``LLVMBackend.compile_stored``).
    A graph over ``MAX_CONSTANT_BYTES`` has no entry stored under it (``entry_key`` gave
    None when it was compiled): looking it up is a miss, never another graph's code."""
    return _hash(native.host_key(), sources_fingerprint(), options, "source", source_key,
                 entry)


def _hash(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _path(key: str) -> Path:
    return native.cache_dir() / "entries" / f"{key}.zip"


def get(key: str) -> tuple[bytes, NativeMeta] | None:
    """The object code and tables stored under ``key``; ``None`` when there are none or
    they cannot be read."""
    from tfc.backends.llvm.runtime.executable import NativeMeta
    path = _path(key)
    background.wait_for(path)  # (a write of it this process queued: ``put``)
    try:
        with zipfile.ZipFile(path) as zf:
            code = zf.read(CODE)
            return code, NativeMeta.read_zip(zf, json.loads(zf.read(TABLES)))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError):
        return None


def put(key: str, code: bytes, meta: NativeMeta) -> None:
    """Store ``code`` and ``meta`` under ``key``: now, or on the worker thread where the
    caller defers (``tfc.background``: ``Session``'s compiles; ``get`` waits for it)."""
    path = _path(key)
    background.later(path, functools.partial(_put, path, code, meta))


def _put(path: Path, code: bytes, meta: NativeMeta) -> None:
    """``put`` in ``path``, now; failures (read-only home, full disk) only cost a
    lowering next time."""
    d = path.parent
    table, arrays = meta.to_members("const/")
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as zf:
                zf.writestr(TABLES, json.dumps(table))
                zf.writestr(CODE, code)
                for name, arr in arrays.items():
                    with zf.open(name, "w", force_zip64=True) as fh:
                        np.save(fh, arr, allow_pickle=False)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
