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
as the lowered module's identity instead of encoding it again. Kept in this process (the
most recent ``MAX_IN_PROCESS``) and on disk under ``$TFC_CACHE_DIR/lowered`` (one zip per
key, written atomically; one that cannot be read is a miss). For ``Session``, a miss's
module is encoded and written on a worker thread once the request's first step has run
(``tfc.background``: joined at exit; a lookup of the key waits for it). Graphs with more than
``MAX_CONSTANT_BYTES`` of constants are not cached (hashing baked-in weights costs what
the passes save), nor modules whose lowering leaves what bytecode does not hold
(partition tables: several devices).

A hit need not be decoded at all (``find``, ``Lowering``): where the backend's own cache
holds the code of the lowered module by this key (the llvm entry cache:
``LLVMBackend.compile_stored``), what runs is that code, and the lowered IR is needed
only later, if ever (new feed shapes, a report of the IR): ``Lowering.module`` decodes
it then, through the verifier as above. Until then the module lowered *from* stands in
for it: the passes keep an entry graph's signature (its feeds' and fetches' names and
types) and the variables' declarations, and the stored entry records the lowered one's
(``SIGNATURE``), so the stand-in is used only where the two are the same. The verifier
stays the gate: no IR read from disk reaches native code without it, and the code that
runs was never derived from this IR in this process (see ``compile_stored``). The module
keyed need not be one to lower either: ``Session`` keys a view of its request that
borrows the built graph's ops (``extract(borrow=True)``, the same content without the
copy) and gives ``find`` what cuts out a copy, to lower on a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Callable

from tfc import background
from tfc.errors import TfcError
from tfc.ir.bytecode import module_from_bytes, module_to_bytes
from tfc.ir.core import Graph, Module
from tfc.passes.manager import paused_gc

MAX_CONSTANT_BYTES = 1 << 20
MAX_IN_PROCESS = 64
IR, PLANS = "module.tfb", "plans.json"
# the lowered entry's signature and variables (``signature``): where it is the module's
# it was lowered from, that module can stand in for it (``Lowering.stand_in``)
SIGNATURE = "signature.txt"
# key -> (IR, plans, signature) of modules read back and verified, or made, in this process
_IN_PROCESS: OrderedDict[str, tuple[bytes, bytes, bytes]] = OrderedDict()
_REMEMBERING = threading.Lock()


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


def signature(module: Module, entry: str) -> bytes:
    """What of a lowered module an executable's native code meets before its IR: the
    entry graph's feeds and fetches (names, types: ``Graph.signature``) and the declared
    variables (names, types). The passes keep all of it."""
    decls = ", ".join(f"@{n}: {d.type}" for n, d in module.variables.items())
    return f"{module.graphs[entry].signature()}; {decls}".encode()


def _encode(module: Module, entry: str) -> tuple[bytes, bytes, bytes] | None:
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
    return ir, json.dumps(plans, separators=(",", ":")).encode(), signature(module, entry)


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


def _file(d: Path, key: str) -> Path:
    return d / f"{key}.zip"


def _read(key: str) -> tuple[bytes, bytes, bytes] | None:
    """The parts stored under ``key`` (the signature empty where the file has none:
    the module is then decoded before it is used); ``None`` when it cannot be read."""
    try:
        with zipfile.ZipFile(_file(cache_dir(), key)) as zf:
            names = set(zf.namelist())
            return (zf.read(IR), zf.read(PLANS),
                    zf.read(SIGNATURE) if SIGNATURE in names else b"")
    except (OSError, KeyError, zipfile.BadZipFile, EOFError, zlib.error):
        return None


def _write(key: str, parts: tuple[bytes, bytes, bytes], d: Path) -> None:
    """Store ``parts`` under ``key`` in ``d``; failures (read-only home, full disk) only
    cost the passes next time."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as zf:
                zf.writestr(IR, parts[0])
                zf.writestr(PLANS, parts[1])
                zf.writestr(SIGNATURE, parts[2])
            os.replace(tmp, _file(d, key))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def _remember(key: str, parts: tuple[bytes, bytes, bytes]) -> None:
    with _REMEMBERING:  # (the cache writes' worker remembers too: tfc.background)
        _IN_PROCESS[key] = parts
        _IN_PROCESS.move_to_end(key)
        while len(_IN_PROCESS) > MAX_IN_PROCESS:
            del _IN_PROCESS[next(iter(_IN_PROCESS))]


def lowered(module: Module, entry: str, target: object, pipeline: object,
            lower: Callable[[Module], Module]) -> Module:
    """``lower(module)``, or the module it returned for the same content before (in this
    process or another: see the module docstring). The module returned is a fresh one
    either way, the caller's to keep."""
    return find(module, entry, target, pipeline, lower).module()


def find(module: Module, entry: str, target: object, pipeline: object,
         lower: Callable[[Module], Module],
         source: Callable[[], Module] | None = None) -> "Lowering":
    """The ``Lowering`` of ``module``: its key and what is stored under it, read but not
    decoded; ``Lowering.module()`` is then what ``lowered`` returns. ``source``: what
    makes a module of ``module``'s content to lower, where ``module`` must stay as it is
    (a view that borrows another graph's ops: ``extract(borrow=True)``); only then may
    ``module`` stand in for the lowered one (``Lowering.stand_in``)."""
    with paused_gc():  # (as ``lowered``: the key's encoding makes many objects)
        return Lowering(module, entry, target, pipeline, lower, source)


class Lowering:
    """The lowered module of ``module`` for (``entry``, ``target``, ``pipeline``), made
    on demand: ``key`` (None: not cached) and the stored parts are known at once; the
    module is decoded (verified, for a file) or lowered only when ``module()`` is
    called, once."""

    def __init__(self, module: Module, entry: str, target: object, pipeline: object,
                 lower: Callable[[Module], Module],
                 source: Callable[[], Module] | None = None) -> None:
        self.source, self.entry, self.target, self.pipeline = module, entry, target, pipeline
        self._lower = lower
        self._copy = source  # (see ``find``)
        self.key = module_key(module, entry, target, pipeline)
        if self.key is not None:
            background.wait_for(_file(cache_dir(), self.key))  # (a write this process queued)
        known = _IN_PROCESS.get(self.key) if self.key is not None else None
        self._parts = known or (_read(self.key) if self.key is not None else None)
        self._verified = known is not None  # (what this process decoded or made)
        self._module: Module | None = None

    def stand_in(self) -> Module | None:
        """``source`` (the module lowered from), to stand for the lowered module where a
        caller needs only its signature and variables and would rather not decode it
        (see the module docstring): only where a lowered module is stored and records the
        same ones (``signature``), and ``source`` is never lowered itself (``find``)."""
        if self._copy is None or self._parts is None or \
                self._parts[2] != signature(self.source, self.entry):
            return None
        return self.source

    def module(self) -> Module:
        """The lowered module: the stored one decoded (a file's through the verifier),
        else (none stored, or one that does not decode or verify) ``lower``'s, stored."""
        if self._module is None:
            with paused_gc():  # (the decode's objects live on: see paused_gc)
                self._module = self._make()
            self._parts = None  # (made: what made it is not needed)
        return self._module

    def _make(self) -> Module:
        key = self.key
        if key is not None and self._parts is not None:
            try:
                result = _decode(*self._parts[:2], self.target, verify=not self._verified)
            except (TfcError, ValueError, KeyError):  # unreadable: lower it again
                pass
            else:
                _remember(key, self._parts)
                result.source_key = key
                return result
        result = self._lower(self._copy() if self._copy is not None else self.source)
        if key is not None and not result.partitions:  # (what ``_encode`` stores)
            entry, d = self.entry, cache_dir()  # (the directory of now, not the write's)
            # (on the worker where the caller defers: ``tfc.background``; nothing changes
            # the module once lowered: the backend compiles it as it is)
            background.later(_file(d, key), lambda: _store(key, result, entry, d))
            # what a hit returns, the miss's module is too (a module whose attrs bytecode
            # cannot hold is then not stored, but known by its key all the same: what
            # the key hashes decides the lowered module, whether it is stored or not)
            result.source_key = key
        return result


def _store(key: str, module: Module, entry: str, d: Path) -> None:
    """Remember the lowered ``module`` under ``key`` and write it in ``d`` (where it can
    be encoded)."""
    parts = _encode(module, entry)
    if parts is not None:
        _remember(key, parts)
        _write(key, parts, d)
