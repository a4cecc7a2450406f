"""Native code in this process: the host target machine, object code loaded into MCJIT
engines, and the cache of object code.

llvmlite 0.50 (LLVM 22) has only the new pass manager and raises on ``llvm.initialize()``;
the target machine must name the host CPU and its features or the code is plain SSE
(see DEPENDENCIES.md). Object code is tied to that CPU, so everything cached or stored is
keyed by ``host_key()`` (CPU name + features + llvmlite version + a fingerprint of this
backend's sources).

The compile cache lives in ``$TFC_CACHE_DIR`` (default ``~/.cache/tfc``): one ``.o`` file
per hash of (printed IR, host key). A hit skips optimization and code generation
(``tfc.backends.llvm.jit``), which is what makes a second compile of the same graph fast.
Writes are atomic (temp file + rename), so concurrent processes never read a torn file; a
broken entry is ignored. ``entry_cache`` sits above it, keyed by the tfc IR, and skips the
lowering too.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def _init() -> None:
    if "tm" in _STATE:
        return
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    _STATE["cpu"], _STATE["features"] = cpu, features
    _STATE["triple"] = llvm.get_process_triple()
    _STATE["tm"] = tm = _new_target_machine()
    _STATE["layout"] = str(tm.target_data)


def _new_target_machine(opt: int = 3) -> llvm.TargetMachine:
    """Static relocations and the large code model: an entry's code is several objects
    linked in one engine (``kernel_units``), and MCJIT's GOT for position-independent
    objects broke across them (a kernel crashed once an object loaded before it referred
    to it); with absolute 64-bit addresses nothing depends on where each object and the
    libraries it calls are mapped."""
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=str(_STATE["cpu"]),
                                        features=str(_STATE["features"]), opt=opt,
                                        reloc="static", codemodel="large", jit=True)


def target_machine(opt: int = 3) -> llvm.TargetMachine:
    """The target machine for this host (one per code-generation level ``opt``, created
    once; host CPU and features; O3 unless asked)."""
    with _LOCK:
        _init()
        if opt != 3 and f"tm{opt}" not in _STATE:
            _STATE[f"tm{opt}"] = _new_target_machine(opt)
    return _STATE["tm" if opt == 3 else f"tm{opt}"]


def host_key() -> str:
    """What object code depends on: CPU name, its features, the LLVM build, and the code
    that generated it and runs with it (a fingerprint of this backend's sources: the
    layouts its runtime and kernels agree on change with them, and object code from
    another version must be rebuilt, never linked)."""
    target_machine()
    return (f"{_STATE['triple']}|{_STATE['cpu']}|{_STATE['features']}|"
            f"llvmlite {llvmlite.__version__}|tfc-native {_code_fingerprint()}")


_BACKEND_ROOT = Path(__file__).resolve().parents[1]  # tfc/backends/llvm


def backend_sources() -> list[Path]:
    """The llvm backend's source files: code generation and this runtime package."""
    return sorted(f for f in _BACKEND_ROOT.rglob("*.py") if "__pycache__" not in f.parts)


@functools.cache
def _code_fingerprint() -> str:
    h = hashlib.sha256()
    for f in backend_sources():
        h.update(f.relative_to(_BACKEND_ROOT).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def triple_and_layout() -> tuple[str, str]:
    target_machine()
    return str(_STATE["triple"]), str(_STATE["layout"])


@dataclass
class Loaded:
    """A JIT engine that holds native code alive; ``address(name)`` of a function in it."""

    engine: llvm.ExecutionEngine

    def address(self, name: str) -> int:
        addr = self.engine.get_function_address(name)
        if not addr:
            raise RuntimeError(f"llvm: no function {name!r} in the compiled module")
        return addr

    def global_address(self, name: str) -> int:
        """The address of global variable ``name``, 0 when the module has none."""
        try:
            return int(self.engine.get_global_value_address(name) or 0)
        except Exception:  # llvmlite versions differ on a missing name
            return 0


# Several objects in one blob (an entry's kernel units and the step table's runner,
# ``jit.compile_split``):
# this tag, the count, then each object's length and bytes (little-endian u64s).
_BUNDLE_TAG = b"tfc-objects-v1\n"


def bundle(objects: list[bytes]) -> bytes:
    """``objects`` as one blob that ``load_object`` links into one engine."""
    parts = [_BUNDLE_TAG, len(objects).to_bytes(8, "little")]
    for obj in objects:
        parts += [len(obj).to_bytes(8, "little"), obj]
    return b"".join(parts)


def unbundle(blob: bytes) -> list[bytes]:
    """The objects of a ``bundle`` (a plain object file: itself alone); an ``ArtifactError``
    for a bundle cut short."""
    from tfc.errors import ArtifactError
    if not blob.startswith(_BUNDLE_TAG):
        return [blob]
    pos = len(_BUNDLE_TAG)

    def u64() -> int:
        nonlocal pos
        if pos + 8 > len(blob):
            raise ArtifactError("truncated object bundle")
        pos += 8
        return int.from_bytes(blob[pos - 8:pos], "little")

    objects = []
    for _ in range(u64()):
        n = u64()
        if pos + n > len(blob):
            raise ArtifactError("truncated object bundle")
        objects.append(blob[pos:pos + n])
        pos += n
    return objects


def load_object(obj: bytes) -> Loaded:
    """Load object code (one object, or a ``bundle`` linked together: an object's references
    resolve to the symbols of those before it) into a fresh MCJIT engine (no optimization,
    no code generation).

    Undefined symbols (BLAS, libm, pthreads) resolve through ``llvm.add_symbol`` entries
    made by ``tfc.backends.llvm.runtime.symbols.register_symbols`` and the process's own symbols.
    The engine owns (and frees) its target machine, so each gets a new one.
    """
    triple, _ = triple_and_layout()
    with _LOCK:
        tm = _new_target_machine()
    empty = llvm.parse_assembly(f'target triple = "{triple}"\n')
    engine = llvm.create_mcjit_compiler(empty, tm)
    for part in unbundle(obj):
        engine.add_object_file(llvm.ObjectFileRef.from_data(part))
    engine.finalize_object()
    return Loaded(engine)


# ---- the compile cache ----------------------------------------------------------------

def cache_dir() -> Path:
    return Path(os.environ.get("TFC_CACHE_DIR") or Path.home() / ".cache" / "tfc")


def cache_key(ir_text: str) -> str:
    h = hashlib.sha256()
    h.update(host_key().encode())
    h.update(b"\0")
    h.update(ir_text.encode())
    return h.hexdigest()


# A cached object file starts with this tag and the SHA-256 of the code after it: code
# that is not what LLVM wrote (a truncated file after a power loss, a flipped bit) would
# crash the process or compute wrong numbers when linked, so it is a miss instead.
_OBJECT_TAG = b"tfc-object-sha256\n"


def cache_get(key: str) -> bytes | None:
    """The object code cached under ``key``; None when there is none or it fails its
    digest (files of older tfc versions, which have none, too)."""
    path = cache_dir() / "llvm" / f"{key}.o"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(_OBJECT_TAG) + 32
    obj = data[head:]
    if data[:len(_OBJECT_TAG)] != _OBJECT_TAG or \
            hashlib.sha256(obj).digest() != data[len(_OBJECT_TAG):head]:
        return None  # cache_put replaces it
    return obj


def cache_put(key: str, obj: bytes) -> None:
    """Store object code; failures (read-only home, full disk) only cost a recompile."""
    d = cache_dir() / "llvm"
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    except OSError:
        return
    try:  # no fsync: a torn file fails its digest and is a miss
        with os.fdopen(fd, "wb") as f:
            f.write(_OBJECT_TAG + hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, d / f"{key}.o")
    except OSError:
        Path(tmp).unlink(missing_ok=True)
