"""CUDA C to PTX, without a GPU: NVRTC through ctypes, else ``nvcc -ptx``.

Compiling needs no device, so every machine with NVRTC (the ``nvidia-cuda-nvrtc==13.0.*``
wheel, which the dev and cuda extras install) checks the generated kernels: a kernel that
does not compile fails with NVRTC's log and the numbered source lines around each error.

NVRTC is looked for, in order: the wheel's ``nvidia/cu13/lib/libnvrtc.so.13`` (its
``libnvrtc-builtins`` loaded first with ``RTLD_GLOBAL``, which NVRTC needs and cannot find
on its own from a wheel), then a ``libnvrtc.so`` the dynamic loader or ``$CUDA_HOME`` /
``$CUDA_PATH`` / ``/usr/local/cuda`` provide; without one, ``nvcc -ptx`` when it is on
``PATH``. Options always include ``--fmad=false`` (no FMA contraction: ``a*b+c`` rounds
twice, as numpy and the LLVM backend compute it) and ``-std=c++17``.

PTX is cached on disk under ``$TFC_CACHE_DIR/cuda/`` (default ``~/.cache/tfc/cuda``),
keyed by the SHA-256 of the source, the options and the compiler's version, written
atomically; a second compile of the same kernels costs a file read.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tfc.atomic import atomic_write
from tfc.errors import TfcError

DEFAULT_ARCH = "compute_90"
BASE_OPTIONS = ("--fmad=false", "-std=c++17")
_CONTEXT_LINES = 3


class CudaCompileError(TfcError):
    """CUDA C that NVRTC (or nvcc) rejects; the message has the log and the source lines
    around each error."""


@dataclass(frozen=True)
class _Compiler:
    """One way to turn CUDA C into PTX: ``identity`` names it (and its version) in cache
    keys and messages; ``compile(source, name, options)`` returns ``(ptx or None, log)``."""

    identity: str
    compile: Callable[[str, str, tuple[str, ...]], tuple[str | None, str]]


def cache_dir() -> Path:
    """Where PTX is cached: ``$TFC_CACHE_DIR/cuda`` (the LLVM backend's cache root)."""
    return Path(os.environ.get("TFC_CACHE_DIR") or Path.home() / ".cache" / "tfc") / "cuda"


def _wheel_lib_dirs() -> list[Path]:
    """The ``lib`` folders of the nvidia-cuda-nvrtc wheels installed (cu13 first)."""
    try:  # the namespace package of NVIDIA's wheels, found without importing it
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    dirs = []
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13/lib", "cuda_nvrtc/lib", "cu12/lib"):
            d = Path(root) / sub
            if any(d.glob("libnvrtc.so*")):
                dirs.append(d)
    return dirs


def _candidate_libraries() -> list[tuple[Path | str, Path | None]]:
    """``(libnvrtc, folder holding its builtins or None)`` to try, in order."""
    found: list[tuple[Path | str, Path | None]] = []
    for d in _wheel_lib_dirs():
        for lib in sorted(d.glob("libnvrtc.so.*")):
            if ".alt." not in lib.name:
                found.append((lib, d))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            for lib in sorted(Path(os.environ[env], "lib64").glob("libnvrtc.so.*")):
                found.append((lib, lib.parent))
    for lib in sorted(Path("/usr/local/cuda/lib64").glob("libnvrtc.so.*")):
        found.append((lib, lib.parent))
    found += [("libnvrtc.so.13", None), ("libnvrtc.so.12", None), ("libnvrtc.so", None)]
    return found


def _load_nvrtc() -> ctypes.CDLL | None:
    for lib, folder in _candidate_libraries():
        try:
            if folder is not None:
                for builtins in sorted(folder.glob("libnvrtc-builtins.so.*")):
                    if ".alt." not in builtins.name:
                        ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(str(lib))
        except OSError:
            continue
    return None


def _check(lib: ctypes.CDLL, code: int, what: str) -> None:
    if code != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        message = lib.nvrtcGetErrorString(code).decode()
        raise CudaCompileError(f"NVRTC {what} failed: {message}")


def _nvrtc_compiler(lib: ctypes.CDLL) -> _Compiler:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")

    def compile_with_nvrtc(source: str, name: str,
                           options: tuple[str, ...]) -> tuple[str | None, str]:
        prog = ctypes.c_void_p()
        _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(),
                                           0, None, None), "nvrtcCreateProgram")
        try:
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            status = lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            _check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "log size")
            log = ctypes.create_string_buffer(size.value)
            _check(lib, lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            log_text = log.value.decode(errors="replace")
            if status != 0:
                return None, log_text
            _check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            ptx = ctypes.create_string_buffer(size.value)
            _check(lib, lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
            return ptx.value.decode(), log_text
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    return _Compiler(f"NVRTC {major.value}.{minor.value}", compile_with_nvrtc)


def _nvcc_compiler(nvcc: str) -> _Compiler:
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip().splitlines()
    identity = "nvcc " + (version[-1] if version else "unknown")

    def compile_with_nvcc(source: str, name: str,
                          options: tuple[str, ...]) -> tuple[str | None, str]:
        flags = [o.replace("--gpu-architecture=", "-arch=") for o in options]
        with tempfile.TemporaryDirectory(prefix="tfc-nvcc-") as tmp:
            src, out = Path(tmp) / name, Path(tmp) / "out.ptx"
            src.write_text(source)
            run = subprocess.run([nvcc, "-ptx", *flags, "-o", str(out), str(src)],
                                 capture_output=True, text=True, check=False, cwd=tmp)
            log = (run.stdout + run.stderr).replace(str(src), name)
            return (out.read_text() if run.returncode == 0 else None), log

    return _Compiler(identity, compile_with_nvcc)


@functools.lru_cache(maxsize=1)
def _compiler() -> _Compiler | None:
    lib = _load_nvrtc()
    if lib is not None:
        try:
            return _nvrtc_compiler(lib)
        except (CudaCompileError, AttributeError):
            pass
    nvcc = shutil.which("nvcc")
    return _nvcc_compiler(nvcc) if nvcc else None


def available() -> bool:
    """Whether CUDA C can be compiled here (NVRTC found, or nvcc on PATH)."""
    return _compiler() is not None


def compiler_identity() -> str:
    """Which compiler ``compile_ptx`` uses, with its version ("NVRTC 13.0")."""
    compiler = _compiler()
    if compiler is None:
        raise CudaCompileError(_MISSING)
    return compiler.identity


_MISSING = ("no CUDA C compiler: install NVRTC (pip install 'nvidia-cuda-nvrtc==13.0.*', "
            "part of tfc's cuda and dev extras) or put nvcc on PATH")


def options_for(arch: str) -> tuple[str, ...]:
    """The compiler options for a virtual architecture such as ``compute_90``."""
    if not re.fullmatch(r"compute_\d+[a-z]?", arch):
        raise CudaCompileError(f"bad CUDA architecture {arch!r} (expected e.g. 'compute_90')")
    return (f"--gpu-architecture={arch}", *BASE_OPTIONS)


def compile_ptx(source: str, *, arch: str = DEFAULT_ARCH, name: str = "tfc.cu",
                use_cache: bool = True) -> str:
    """PTX for ``source``, compiled for ``arch``; raises ``CudaCompileError`` with the log
    and the source lines around each error when it does not compile."""
    compiler = _compiler()
    if compiler is None:
        raise CudaCompileError(_MISSING)
    options = options_for(arch)
    key = hashlib.sha256("\0".join((compiler.identity, *options, source)).encode()).hexdigest()
    path = cache_dir() / f"{key}.ptx"
    if use_cache:
        try:
            return path.read_text()
        except (OSError, UnicodeDecodeError):
            pass
    ptx, log = compiler.compile(source, name, options)
    if ptx is None:
        raise CudaCompileError(
            f"CUDA C does not compile ({name}, {compiler.identity}, {arch}):\n"
            f"{log.rstrip()}\n{source_context(source, log, name)}")
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, lambda f: f.write(ptx.encode()))
        except OSError:  # a read-only or full cache only costs a recompile
            pass
    return ptx


def source_context(source: str, log: str, name: str = "tfc.cu") -> str:
    """The numbered source lines around each line the log reports an error on (NVRTC's
    ``name(12): error: ...`` and nvcc's ``name(12): error ...``), the line marked ``>``."""
    return numbered_lines(source, {int(m.group(1)) for m in re.finditer(
        rf"{re.escape(name)}\((\d+)\): (?:catastrophic )?error", log)})


def numbered_lines(source: str, error_lines: set[int]) -> str:
    """``source``'s lines within a few of each of ``error_lines`` (1-based), numbered, the
    error lines marked ``>``; the whole source when no line is named."""
    lines = source.splitlines()
    wanted = sorted(n for n in error_lines if 1 <= n <= len(lines))
    ranges = [(max(1, n - _CONTEXT_LINES), min(len(lines), n + _CONTEXT_LINES)) for n in wanted]
    out: list[str] = []
    last = 0
    for lo, hi in ranges or [(1, len(lines))]:
        if lo <= last:
            lo = last + 1
        elif last:
            out.append("   ...")
        for n in range(lo, hi + 1):
            out.append(f"{'>' if n in wanted else ' '}{n:5d} | {lines[n - 1]}")
        last = max(last, hi)
    return "\n".join(out)


__all__ = ["CudaCompileError", "DEFAULT_ARCH", "available", "compile_ptx", "compiler_identity",
           "numbered_lines", "options_for", "source_context"]
