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
    """A hash of every tfc source file (about 1 MB: ~5 ms, once per process)."""
    h = hashlib.sha256()
    for f in tfc_sources():
        h.update(str(f.relative_to(_TFC_ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


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
        return _hash(native.host_key(), sources_fingerprint(), options, "source",
                     module.source_key, entry)
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
    try:
        with zipfile.ZipFile(_path(key)) as zf:
            code = zf.read(CODE)
            return code, NativeMeta.read_zip(zf, json.loads(zf.read(TABLES)))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError):
        return None


def put(key: str, code: bytes, meta: NativeMeta) -> None:
    """Store ``code`` and ``meta`` under ``key``; failures (read-only home, full disk)
    only cost a lowering next time."""
    d = _path(key).parent
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
            os.replace(tmp, _path(key))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
