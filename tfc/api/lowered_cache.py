"""Lowered modules remembered by the content of the module before the passes.

``Session.run`` cuts a graph out for each request, runs the optimization passes and the
backend's lowering passes over it, and only then asks the backend for code, which the
backend finds in its caches by the lowered IR. For a model met before (the same script
run again), the passes were the largest part of what a cached compile cost (1.8 s of a
256-layer MLP's cached first step). This cache sits in front of them: its key is
everything the lowered module depends on, known before any pass runs:

- the module's bytecode (the graph with its feed and fetch names, dtypes, shapes and
  source locations, and the variables' declarations);
- the pass pipeline and the target (its backend);
- a fingerprint of every tfc source file (passes, shape rules, the version).

A hit skips every pass: the lowered module is read back (its bytecode and memory plans,
as an artifact stores them), and one read from disk goes through the IR verifier, as an
artifact does (decoded without inferring its types: the verifier infers them, once). The
module returned carries the key as ``Module.source_key``, which the llvm entry cache takes
as the lowered module's identity instead of encoding it again. Kept in this process (the most recent ``MAX_IN_PROCESS``)
and on disk under ``$TFC_CACHE_DIR/lowered`` (one zip per key, written atomically; one
that cannot be read is a miss). Graphs with more than ``MAX_CONSTANT_BYTES`` of
constants are not cached (hashing baked-in weights costs what the passes save), nor
modules whose lowering leaves what bytecode does not hold (partition tables: several
devices).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Callable

from tfc.errors import TfcError
from tfc.ir.bytecode import module_from_bytes, module_to_bytes
from tfc.ir.core import Graph, Module
from tfc.passes.manager import paused_gc

MAX_CONSTANT_BYTES = 1 << 20
MAX_IN_PROCESS = 64
IR, PLANS = "module.tfb", "plans.json"
_IN_PROCESS: OrderedDict[str, tuple[bytes, bytes]] = OrderedDict()


def cache_dir() -> Path:
    return Path(os.environ.get("TFC_CACHE_DIR") or Path.home() / ".cache" / "tfc") / "lowered"


def module_key(module: Module, entry: str, target: object, pipeline: object) -> str | None:
    """The key of ``module`` lowered for ``target`` after ``pipeline``; ``None`` when it
    is not to be cached (large constants, attrs the bytecode cannot hold)."""
    from tfc.backends.llvm.runtime.entry_cache import sources_fingerprint
    graph = module.graphs[entry]
    if graph.constant_bytes() > MAX_CONSTANT_BYTES:
        return None
    try:
        data = module_to_bytes(module)
    except TfcError:
        return None
    h = hashlib.sha256()
    for part in (sources_fingerprint(), repr(target), repr(pipeline), entry):
        h.update(part.encode())
        h.update(b"\0")
    h.update(data)
    return h.hexdigest()


def _encode(module: Module) -> tuple[bytes, bytes] | None:
    if module.partitions:
        return None
    try:
        ir = module_to_bytes(Module(module.graphs, module.variables,
                                    devices=list(module.devices),
                                    fp16_transfers=module.fp16_transfers))
    except TfcError:
        return None
    plans = {name: plan.to_json(module.graphs[name])
             for name, plan in module.memory_plans.items() if name in module.graphs}
    return ir, json.dumps(plans, separators=(",", ":")).encode()


def _decode(ir: bytes, plans: bytes, target: object, verify: bool = False) -> Module:
    """The lowered module stored as ``ir`` and ``plans``; ``verify``: through the IR
    verifier too (a file read from disk is input like an artifact: the verifier is the
    gate before native code)."""
    from tfc.passes.memory import MemoryPlan
    copies: dict[int, Graph] = {}  # (regions read as copies: verified as what they copy)
    module = module_from_bytes(ir, infer=not verify,  # the verifier infers: once is enough
                               copies=copies)
    if verify:
        from tfc.ir.verifier import verify_module
        verify_module(module, copies)
    module.memory_plans = {name: MemoryPlan.from_json(module.graphs[name], plan)
                           for name, plan in json.loads(plans).items()}
    module.lowered_for = target
    return module


def _read(key: str) -> tuple[bytes, bytes] | None:
    try:
        with zipfile.ZipFile(cache_dir() / f"{key}.zip") as zf:
            return zf.read(IR), zf.read(PLANS)
    except (OSError, KeyError, zipfile.BadZipFile, EOFError):
        return None


def _write(key: str, parts: tuple[bytes, bytes]) -> None:
    """Store ``parts`` under ``key``; failures (read-only home, full disk) only cost the
    passes next time."""
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as zf:
                zf.writestr(IR, parts[0])
                zf.writestr(PLANS, parts[1])
            os.replace(tmp, d / f"{key}.zip")
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def _remember(key: str, parts: tuple[bytes, bytes]) -> None:
    _IN_PROCESS[key] = parts
    _IN_PROCESS.move_to_end(key)
    while len(_IN_PROCESS) > MAX_IN_PROCESS:
        del _IN_PROCESS[next(iter(_IN_PROCESS))]


def lowered(module: Module, entry: str, target: object, pipeline: object,
            lower: Callable[[Module], Module]) -> Module:
    """``lower(module)``, or the module it returned for the same content before (in this
    process or another: see the module docstring). The module returned is a fresh one
    either way, the caller's to keep."""
    with paused_gc():  # (the decode's objects live on: see paused_gc)
        return _lowered(module, entry, target, pipeline, lower)


def _lowered(module: Module, entry: str, target: object, pipeline: object,
             lower: Callable[[Module], Module]) -> Module:
    key = module_key(module, entry, target, pipeline)
    if key is not None:
        known = _IN_PROCESS.get(key)
        parts = known or _read(key)
        if parts is not None:
            try:
                result = _decode(*parts, target, verify=known is None)
            except (TfcError, ValueError, KeyError):  # unreadable: lower it again
                pass
            else:
                _remember(key, parts)
                result.source_key = key
                return result
    result = lower(module)
    if key is not None:
        parts = _encode(result)
        if parts is not None:
            _remember(key, parts)
            _write(key, parts)
            result.source_key = key  # what a hit returns, the miss's module is too
    return result
