"""Run generated CUDA kernels on the CPU: the same C text, compiled by g++ with a header
(``emulator/cuda_emu.h``) that emulates CUDA's execution model.

This is how the kernels' numbers are tested on machines without a GPU: only the launch
layer (cupy) is left untested there. The header runs each block on an OS thread and each
CUDA thread as a fiber that switches at ``__syncthreads`` and warp operations; barriers
and warp shuffles behave as on a GPU (threads that returned early drop out of barriers,
shuffles read the values their source lanes posted), and a block that can make no
progress is reported as a deadlock, never a hang (the header's comment has the details).

The order in which fibers run between two synchronization points is an option
(``ORDERS``): a kernel that lacks a barrier reads shared memory before or after another
thread wrote it depending on that order, so running a test under ``ascending`` and
``descending`` (and ``warps_reversed``, ``shuffled``) exposes it. ``TFC_CUDA_EMU_ORDER``
sets the default order, so a whole test run can use another one.

A launch that runs past a time limit (``default_timeout()``) fails as an endless loop
rather than hanging: a watchdog interrupts the fiber that runs.

What it cannot catch: out-of-bounds accesses (they hit the process's memory as any C
code's would; AddressSanitizer works on the compiled file) and the GPU's looser accuracy
of math functions (``prelude`` states the ulp bounds tests must allow).

Each module is compiled once into a shared library cached under
``$TFC_CACHE_DIR/cuda/emu/`` by the SHA-256 of its text, the emulator's files and the
compiler. The scheduler is a separate library (``emulator/cuda_emu_runtime.cpp``),
compiled once and loaded before any module, so a module compiles only its kernels and a
small header (about 0.1 s of g++ rather than 0.5 s).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from tfc.atomic import atomic_write
from tfc.backends.cuda.kernel import Kernel, module_source
from tfc.backends.cuda.nvrtc import cache_dir, numbered_lines
from tfc.errors import TfcError

HEADER_DIR = Path(__file__).resolve().parent / "emulator"
RUNTIME = "cuda_emu_runtime.cpp"
ORDERS = ("ascending", "descending", "warps_reversed", "shuffled")
FLAGS = ("-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-ffp-contract=off",
         "-fno-fast-math", "-U_FORTIFY_SOURCE", "-w")
MAX_BLOCK = 1024
# CUDA's limit on dynamic shared memory without an opt-in attribute; a GPU refuses more.
MAX_DYNAMIC_SHARED = 48 * 1024
_ERROR_SIZE = 4096

# The numpy dtypes an array may have for a pointer parameter of each C type (``bool``
# and ``uint8_t`` are interchangeable: both are one byte, 0 or 1).
_DTYPES: dict[str, tuple[str, ...]] = {
    "float": ("float32",), "double": ("float64",), "tfc_f16": ("float16",),
    "int8_t": ("int8",), "signed char": ("int8",), "char": ("int8", "uint8"),
    "int16_t": ("int16",), "short": ("int16",),
    "int32_t": ("int32",), "int": ("int32",),
    "int64_t": ("int64",), "long": ("int64",), "long long": ("int64",),
    "uint8_t": ("uint8", "bool"), "unsigned char": ("uint8", "bool"), "bool": ("bool", "uint8"),
    "uint16_t": ("uint16",), "unsigned short": ("uint16",),
    "uint32_t": ("uint32",), "unsigned int": ("uint32",), "unsigned": ("uint32",),
    "uint64_t": ("uint64",), "unsigned long": ("uint64",), "unsigned long long": ("uint64",),
}
# Scalar parameters: the ctypes type a Python value is passed as.
_SCALARS: dict[str, type] = {
    "long long": ctypes.c_longlong, "int64_t": ctypes.c_int64, "long": ctypes.c_long,
    "int": ctypes.c_int, "int32_t": ctypes.c_int32, "unsigned int": ctypes.c_uint,
    "uint32_t": ctypes.c_uint32, "unsigned long long": ctypes.c_ulonglong,
    "uint64_t": ctypes.c_uint64, "float": ctypes.c_float, "double": ctypes.c_double,
}


class EmulatorError(TfcError):
    """A kernel that does not compile as C++, a launch that does not fit the kernel, or
    a kernel that faults or deadlocks under the emulator."""


def base_type(ctype: str) -> str:
    """The C type a parameter points to or holds: ``"const float* __restrict__"`` ->
    ``"float"``."""
    words = [w for w in re.split(r"[\s*]+", ctype) if w and w not in
             ("const", "volatile", "__restrict__", "__restrict", "restrict")]
    return " ".join(words)


@functools.lru_cache(maxsize=1)
def _compiler() -> tuple[str, str] | None:
    """``(path, version line)`` of g++ (``$CXX`` first), or None."""
    cxx = shutil.which(os.environ.get("CXX") or "g++") or shutil.which("g++")
    if cxx is None:
        return None
    run = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        return None
    return cxx, run.stdout.splitlines()[0] if run.stdout else cxx


def available() -> bool:
    """Whether kernels can run here under the emulator (a C++20 compiler found)."""
    return _compiler() is not None


def default_order() -> str:
    """The fiber order used when none is given: ``$TFC_CUDA_EMU_ORDER`` or ascending."""
    order = os.environ.get("TFC_CUDA_EMU_ORDER") or "ascending"
    if order not in ORDERS:
        raise EmulatorError(f"TFC_CUDA_EMU_ORDER={order!r} is not one of {', '.join(ORDERS)}")
    return order


def default_workers() -> int:
    """OS threads that run blocks: ``$TFC_CUDA_EMU_WORKERS`` or the CPUs (at most 8)."""
    value = os.environ.get("TFC_CUDA_EMU_WORKERS")
    try:
        return max(1, int(value)) if value else max(1, min(8, os.cpu_count() or 1))
    except ValueError:
        raise EmulatorError(f"TFC_CUDA_EMU_WORKERS={value!r} is not a number of threads") from None


def default_timeout() -> float:
    """Seconds a launch may run: ``$TFC_CUDA_EMU_TIMEOUT`` or 120 (tests use small shapes,
    which take milliseconds; a kernel that loops forever fails instead of hanging)."""
    value = os.environ.get("TFC_CUDA_EMU_TIMEOUT")
    try:
        return max(0.0, float(value)) if value else 120.0
    except ValueError:
        raise EmulatorError(f"TFC_CUDA_EMU_TIMEOUT={value!r} is not a number of seconds") from None


def _trampoline(kernel: Kernel) -> str:
    """An ``extern "C"`` entry the Python side calls: it hands the header the kernel's
    body as a function of the argument array, called once per CUDA thread."""
    args = []
    for i, p in enumerate(kernel.params):
        if p.is_pointer:
            args.append(f"({p.ctype})a[{i}]")
        else:
            args.append(f"*({p.ctype}*)a[{i}]")
    return (f"static void tfc_body_{kernel.name}(void* args) {{\n"
            f"  void** a = (void**)args;\n  (void)a;\n"
            f"  {kernel.name}({', '.join(args)});\n}}\n"
            f'extern "C" int tfc_launch_{kernel.name}(void** args, long long grid, '
            f"long long block, long long shared, int order, unsigned seed, int workers, "
            f"double timeout, char* error, long long error_size) {{\n"
            f'  return tfc_emu_launch("{kernel.name}", tfc_body_{kernel.name}, args, grid, '
            f"block, shared, order, seed, workers, timeout, error, error_size);\n}}\n")


def emulator_source(kernels: Sequence[Kernel]) -> str:
    """The C++ translation unit of a module: the kernels' text and a launch entry each."""
    return module_source(kernels) + "\n" + "\n".join(_trampoline(k) for k in kernels)


def _compile(source: str, what: str, *extra: str) -> Path:
    """Compile ``source`` with g++ into a shared library cached under the cache dir by the
    SHA-256 of the text, the emulator's files and the compiler (``what`` names it in
    errors). Kernel libraries leave the runtime's symbols undefined: they resolve against
    the runtime, loaded first with RTLD_GLOBAL."""
    compiler = _compiler()
    if compiler is None:
        raise EmulatorError("the CUDA emulator needs a C++20 compiler (g++ 10 or later); "
                            "none found (set CXX)")
    cxx, version = compiler
    h = hashlib.sha256()
    for part in (version, " ".join(FLAGS + extra), _emulator_files(), source):
        h.update(part.encode())
        h.update(b"\0")
    path = cache_dir() / "emu" / f"{h.hexdigest()}.so"
    if path.exists():
        return path
    with tempfile.TemporaryDirectory(prefix="tfc-emu-") as tmp:
        src, out = Path(tmp) / "kernels.cpp", Path(tmp) / "kernels.so"
        src.write_text(source)
        run = subprocess.run([cxx, *FLAGS, *extra, f"-I{HEADER_DIR}", "-o", str(out), str(src)],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0:
            log = run.stderr.replace(str(src), "kernels.cpp")
            lines = {int(m.group(1)) for m in re.finditer(r"kernels\.cpp:(\d+):\d+: error", log)}
            raise EmulatorError(f"{what} do not compile as C++ for the CUDA emulator "
                                f"({version}):\n{log.rstrip()}\n{numbered_lines(source, lines)}")
        data = out.read_bytes()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda f: f.write(data))
    except OSError:  # no cache: load it from a private copy
        fd, private = tempfile.mkstemp(suffix=".so", prefix="tfc-emu-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return Path(private)
    return path


@functools.lru_cache(maxsize=1)
def _emulator_files() -> str:
    return "".join((HEADER_DIR / name).read_text() for name in ("cuda_emu.h", RUNTIME))


@functools.lru_cache(maxsize=1)
def _load_runtime() -> ctypes.CDLL:
    """The runtime library (scheduler, barriers, shuffles), once per process, its symbols
    global so that every kernel library links against this one copy."""
    source = (HEADER_DIR / RUNTIME).read_text()
    path = _compile(source, "the emulator's runtime files")
    return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


class EmulatedModule:
    """Kernels compiled for the CPU emulator, launched like a CUDA module's functions.

    ``order`` is the fiber order (``ORDERS``; default ``default_order()``), ``workers``
    the OS threads that run blocks, ``seed`` the ``shuffled`` order's seed, ``timeout``
    the seconds a launch may take before it fails as an endless loop (default
    ``default_timeout()``; 0: no limit)."""

    def __init__(self, kernels: Sequence[Kernel], *, order: str | None = None,
                 workers: int | None = None, seed: int = 0,
                 timeout: float | None = None) -> None:
        names = [k.name for k in kernels]
        if len(set(names)) != len(names):
            raise EmulatorError(f"kernel names repeat in one module: {sorted(names)}")
        self.kernels = {k.name: k for k in kernels}
        self.order = _check_order(order if order is not None else default_order())
        self.workers = workers if workers is not None else default_workers()
        self.seed = seed
        self.timeout = timeout if timeout is not None else default_timeout()
        self.source = emulator_source(kernels)
        _load_runtime()
        self._lib = ctypes.CDLL(str(_compile(self.source, "the kernels")))
        self._entries = {}
        for k in kernels:
            entry = getattr(self._lib, f"tfc_launch_{k.name}")
            entry.restype = ctypes.c_int
            entry.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong,
                              ctypes.c_longlong, ctypes.c_int, ctypes.c_uint, ctypes.c_int,
                              ctypes.c_double, ctypes.c_char_p, ctypes.c_longlong]
            self._entries[k.name] = entry

    def launch(self, kernel: Kernel, grid: int, block: int, shared_bytes: int,
               args: Sequence[np.ndarray | int | float], *, order: str | None = None) -> None:
        """Run ``kernel`` on ``grid`` blocks of ``block`` threads; arrays are passed as
        pointers (C-contiguous, of the parameter's dtype, writable for non-const ones),
        numbers as the scalar parameter's C type. Raises ``EmulatorError`` when the
        launch does not fit the kernel or the kernel faults or deadlocks."""
        if self.kernels.get(kernel.name) != kernel:
            raise EmulatorError(f"kernel {kernel.name} is not in this module")
        if not 1 <= block <= MAX_BLOCK:
            raise EmulatorError(f"kernel {kernel.name}: block of {block} threads "
                                f"(CUDA allows 1..{MAX_BLOCK})")
        if not 1 <= grid < 2**31:
            raise EmulatorError(f"kernel {kernel.name}: grid of {grid} blocks")
        if not 0 <= shared_bytes <= MAX_DYNAMIC_SHARED:
            raise EmulatorError(f"kernel {kernel.name}: {shared_bytes} bytes of dynamic shared "
                                f"memory (CUDA allows {MAX_DYNAMIC_SHARED} without opting in)")
        pointers, keep = _arguments(kernel, args)
        error = ctypes.create_string_buffer(_ERROR_SIZE)
        order_index = ORDERS.index(_check_order(order if order is not None else self.order))
        status = self._entries[kernel.name](pointers, grid, block, shared_bytes, order_index,
                                            self.seed & 0xFFFFFFFF, self.workers,
                                            self.timeout, error, _ERROR_SIZE)
        del keep
        if status != 0:
            raise EmulatorError(f"kernel {kernel.name} (grid {grid}, block {block}, "
                                f"{ORDERS[order_index]} order): {error.value.decode()}")


def _check_order(order: str) -> str:
    if order not in ORDERS:
        raise EmulatorError(f"unknown fiber order {order!r}: one of {', '.join(ORDERS)}")
    return order


def _arguments(kernel: Kernel, args: Sequence[np.ndarray | int | float]
               ) -> tuple[ctypes.Array, list[object]]:
    """The ``void*`` array the launch entry takes, and the objects it points into (kept
    alive for the call)."""
    params = kernel.params
    if len(args) != len(params):
        raise EmulatorError(f"kernel {kernel.name} takes {len(params)} arguments "
                            f"({', '.join(p.name for p in params)}), got {len(args)}")
    pointers = (ctypes.c_void_p * max(1, len(params)))()
    keep: list[object] = []
    for i, (p, a) in enumerate(zip(params, args)):
        where = f"kernel {kernel.name}, argument {p.name} ({p.ctype})"
        base = base_type(p.ctype)
        if p.is_pointer:
            if not isinstance(a, np.ndarray):
                raise EmulatorError(f"{where}: expected an array, got {type(a).__name__}")
            allowed = _DTYPES.get(base)
            if allowed is not None and a.dtype.name not in allowed:
                raise EmulatorError(f"{where}: array of {a.dtype}, expected {allowed[0]}")
            if not a.flags.c_contiguous:
                raise EmulatorError(f"{where}: the array is not C-contiguous")
            if "const" not in p.ctype.split("*")[0] and not a.flags.writeable:
                raise EmulatorError(f"{where}: the kernel writes it but the array is read-only")
            pointers[i] = a.ctypes.data
            keep.append(a)
        else:
            scalar_type = _SCALARS.get(base)
            if scalar_type is None:
                raise EmulatorError(f"{where}: scalar parameters of type {base} are not supported")
            if isinstance(a, np.ndarray) or not isinstance(a, (int, float, np.integer,
                                                               np.floating)):
                raise EmulatorError(f"{where}: expected a number, got {type(a).__name__}")
            if scalar_type not in (ctypes.c_float, ctypes.c_double) and not isinstance(
                    a, (int, np.integer)):
                raise EmulatorError(f"{where}: expected an integer, got {a!r}")
            value = scalar_type(a)
            keep.append(value)
            pointers[i] = ctypes.addressof(value)
    return pointers, keep


__all__ = ["EmulatedModule", "EmulatorError", "ORDERS", "available", "base_type",
           "default_order", "default_timeout", "default_workers", "emulator_source"]
