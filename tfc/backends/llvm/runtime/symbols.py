"""The symbols native code calls: OpenBLAS (``scipy-openblas32``), libc, libm, libgcc.

``scipy-openblas32`` ships OpenBLAS with every symbol prefixed (``scipy_cblas_sgemm``)
precisely so that other packages can link it without clashing with numpy's copy; its
``blasint`` is 32-bit. We load the shared library with ctypes and hand each symbol's
address to LLVM (``llvm.add_symbol``), so JIT-compiled code — and object code loaded
back from a cache or an artifact — calls the BLAS directly, with no Python in between.

The same registration gives the JIT the C library functions the kernels call
(``pthread_create``/``pthread_join`` for the thread pool, ``memcpy``/``memset``) and the
math functions LLVM calls on CPUs without FMA, SSE4.1 or F16C, so symbol resolution never
depends on what the process happens to export.

Both libraries are found without the slow generic routes, since every fresh ``tfc run``
pays for them: the OpenBLAS file is looked up in the package's directory
(``importlib.util.find_spec``) rather than by importing ``scipy_openblas32`` (whose
``__init__`` imports ``importlib.metadata`` for its version string, ~20 ms), and libc by
its soname or from the process itself rather than ``ctypes.util.find_library`` (which runs
``ldconfig``/``gcc`` in subprocesses). The generic routes remain the fallbacks.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

import llvmlite.binding as llvm

from tfc.errors import TfcError

SGEMM = "scipy_cblas_sgemm"
DGEMM = "scipy_cblas_dgemm"
# LAPACKE's ``_work`` entry points: no NaN scan of the input, no allocation (the caller
# passes the workspace).
GETRF = {"f32": "scipy_LAPACKE_sgetrf_work", "f64": "scipy_LAPACKE_dgetrf_work"}
GETRI = {"f32": "scipy_LAPACKE_sgetri_work", "f64": "scipy_LAPACKE_dgetri_work"}
POTRF = {"f32": "scipy_LAPACKE_spotrf_work", "f64": "scipy_LAPACKE_dpotrf_work"}  # linalg25
TRSM = {"f32": "scipy_cblas_strsm", "f64": "scipy_cblas_dtrsm"}  # linalg25
_C_SYMBOLS = ("pthread_create", "pthread_join", "memcpy", "memset", "memmove",
              "pthread_detach", "pthread_sigmask", "syscall", "sched_yield")
# What LLVM calls where the CPU has no instruction for an intrinsic: ``llvm.fma`` without
# FMA, ``llvm.floor``/``llvm.rint`` without SSE4.1 (libm), half conversions without F16C
# (libgcc). CPUs with AVX2 never need them; elsewhere, unresolved, such code would call
# address 0. The library functions give the instructions' exact results (fma rounds once).
_LIBM_SYMBOLS = ("fma", "fmaf", "floor", "floorf", "ceil", "ceilf", "trunc", "truncf",
                 "rint", "rintf", "nearbyint", "nearbyintf", "roundeven", "roundevenf",
                 "fmod", "fmodf")  # (frem, floormod's, is always a call of fmod)
_LIBGCC_SYMBOLS = ("__extendhfsf2", "__truncsfhf2", "__truncdfhf2")

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_libc: ctypes.CDLL | None = None


class OpenBLASMissing(TfcError, ImportError):
    """scipy-openblas32 is not installed (an ``ImportError`` too, as before)."""


_MISSING = ("the llvm backend needs OpenBLAS from the 'scipy-openblas32' package, which "
            "is not installed: pip install scipy-openblas32 (or run on the numpy "
            "interpreter: TFC_BACKEND=reference)")


def openblas() -> ctypes.CDLL:
    """The scipy-openblas32 shared library, loaded once."""
    global _lib
    loaded = False
    with _lock:
        if _lib is None:
            lib = _load_openblas()
            _register(lib)
            _lib = lib
            loaded = True
    if loaded:  # (outside _lock: the hook reads the count through this function)
        from tfc.backends.cores import on_reserved
        on_reserved(_reserve)
    return _lib


def _load_openblas() -> ctypes.CDLL:
    """Open the library: straight from the package's ``lib`` directory when it holds
    the one shared object we expect, else as the package itself finds it."""
    path = openblas_path()
    if path is not None:
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass  # let the package try (it may know a dependency's directory)
    try:
        import scipy_openblas32
    except ImportError as e:
        raise OpenBLASMissing(_MISSING) from e
    path = os.path.join(scipy_openblas32.get_lib_dir(),
                        f"lib{scipy_openblas32.get_library()}.so")
    if not os.path.exists(path):  # other platforms: the package has loaded it
        dll = getattr(scipy_openblas32, "dll", None)
        if dll is not None:
            return dll
    return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def openblas_path() -> str | None:
    """The path of scipy-openblas32's shared library, found without importing the package
    (the file ``scipy_openblas32.get_lib_dir()`` / ``get_library()`` name); ``None`` where
    this layout does not hold (not ELF, several candidates), so the caller imports it.
    Raises ``OpenBLASMissing`` when the package is not installed."""
    try:
        spec = importlib.util.find_spec("scipy_openblas32")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise OpenBLASMissing(_MISSING)
    if not sys.platform.startswith(("linux", "freebsd")):
        return None
    for root in spec.submodule_search_locations or ():
        lib_dir = os.path.join(root, "lib")
        try:
            names = [n for n in os.listdir(lib_dir) if n.startswith("libscipy_openblas")]
        except OSError:
            continue
        # The package loads ``names[0]``; take the file only when there is no choice.
        if len(names) == 1 and names[0].endswith(".so"):
            return os.path.join(lib_dir, names[0])
    return None


def libc() -> ctypes.CDLL:
    """The C library, loaded once: by the soname of glibc (already mapped, so ``dlopen``
    only returns its handle), else the process's own symbols (which include libc's), and
    only then ``ctypes.util.find_library("c")`` with its subprocesses."""
    global _libc
    if _libc is None:
        _libc = _find_libc()
    return _libc


def _find_libc() -> ctypes.CDLL:
    if sys.platform.startswith("linux"):
        try:
            return ctypes.CDLL("libc.so.6")
        except OSError:
            pass  # not glibc (musl, ...)
    try:
        own = ctypes.CDLL(None)
        if all(hasattr(own, name) for name in _C_SYMBOLS):
            return own
    except (OSError, TypeError):  # TypeError: Windows has no dlopen(NULL)
        pass
    from ctypes.util import find_library
    return ctypes.CDLL(find_library("c") or None)


def _register(lib: ctypes.CDLL) -> None:
    for name in (SGEMM, DGEMM, *GETRF.values(), *GETRI.values(), *POTRF.values(),
                 *TRSM.values()):
        llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    register_system_symbols()


def register_system_symbols() -> None:
    """The C library and math functions (no BLAS): all that code without matrix products
    needs, on any CPU."""
    for names, found in ((_C_SYMBOLS, libc()), (_LIBM_SYMBOLS, _shared("libm.so.6", "m")),
                         (_LIBGCC_SYMBOLS, _shared("libgcc_s.so.1", "gcc_s"))):
        for name in names:
            try:
                fn = getattr(found, name)
            except AttributeError:
                continue  # resolved from the process instead (or, unused, not at all)
            llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)


def _shared(soname: str, short: str) -> ctypes.CDLL | None:
    """A system library by its Linux soname, else wherever ``find_library`` finds it."""
    try:
        return ctypes.CDLL(soname)
    except OSError:
        pass
    from ctypes.util import find_library
    path = find_library(short)
    try:
        return ctypes.CDLL(path) if path else None
    except OSError:
        return None


def register_symbols() -> None:
    """Make the BLAS and C symbols known to LLVM (before any engine is finalized), and
    the kernels' thread pool (``pool``), which object code binds weakly."""
    openblas()
    from tfc.backends.llvm.runtime.pool import register_runtime
    register_runtime()


def set_num_threads(n: int) -> None:
    """OpenBLAS's own thread count (its pool is separate from the kernels' threads)."""
    openblas().scipy_openblas_set_num_threads(int(n))


def get_num_threads() -> int:
    """OpenBLAS's own thread count (``set_num_threads``)."""
    return int(openblas().scipy_openblas_get_num_threads())


# ``limited_threads``: the requests in force (one entry per holder), the cores other threads
# of the process hold (``tfc.backends.cores``), whether the latest step's GEMMs were all
# small (``small_gemms``) and the count OpenBLAS had before the first of these; guarded by
# ``_limit_lock`` (``_small`` is read without it: a stale read only costs a lock).
_limit_lock = threading.Lock()
_limits: list[int] = []
_reserved = 0
_small = False
_unlimited = 0


def _apply(n: int) -> None:
    if get_num_threads() != n:
        set_num_threads(n)


def _in_force() -> int:
    """The count while limits, reservations or small GEMMs hold: one for small GEMMs,
    else the smallest limit (else the saved count) less one thread per reserved core, at
    least one."""
    if _small:
        return 1
    return max(1, (min(_limits) if _limits else _unlimited) - _reserved)


def _save_unlimited() -> None:
    """Before the first limit, reservation or small-GEMM step: the count to restore
    after the last."""
    global _unlimited
    if not _limits and not _reserved and not _small:
        _unlimited = get_num_threads()


def small_gemms(small: bool) -> None:
    """The run path's call before a step (``LLVMExecutable.fast_step``): whether all of
    its GEMMs are too small to gain from OpenBLAS's threads (``blas_policy``). OpenBLAS
    then runs on one thread until a step with a large GEMM comes; each call that changes
    nothing costs one comparison."""
    global _small
    if small is _small:
        return
    openblas()  # (loaded first: loading calls ``_reserve``, which takes ``_limit_lock``)
    with _limit_lock:
        _save_unlimited()
        _small = small
        _apply(_in_force())


def _reserve(cores: int) -> None:
    """``tfc.backends.cores``'s hook: ``cores`` are held by threads that are not
    OpenBLAS's (a prefetch producer making a batch), so GEMMs leave them free: a
    fork-join GEMM whose half is descheduled holds its caller up (the module note of
    ``tfc.backends.cores`` has the numbers)."""
    global _reserved
    with _limit_lock:
        _save_unlimited()
        before = _in_force()
        _reserved = cores
        if _in_force() != before:  # (a small step's one thread stays one: no calls)
            _apply(_in_force())


@contextmanager
def limited_threads(n: int) -> Iterator[None]:
    """OpenBLAS on at most ``n`` threads while the block runs.

    OpenBLAS has one thread count for the whole process, so every holder goes through
    here (the multi-device executor's steps, ``tfc calibrate``): the first one in saves
    the count, the count in force is the smallest that any current holder asked for, and
    the last one out restores the saved count. Holders may overlap in any order and on
    any threads (two partitioned programs stepping at once) and the count always comes
    back. The rule while a limit is held: every GEMM of the process runs at that count,
    those of a single-device program on another thread included. OpenBLAS offers no
    per-call count; and while a partitioned step runs, its devices already take the
    cores, so a concurrent GEMM on the full count would only oversubscribe them. Cores
    that other threads reserve (``tfc.backends.cores``: ``_reserve``) count against the
    limit too."""
    n = max(1, int(n))
    openblas()  # (loaded first: loading calls ``_reserve``, which takes ``_limit_lock``)
    with _limit_lock:
        _save_unlimited()
        _limits.append(n)
        _apply(_in_force())
    try:
        yield
    finally:
        with _limit_lock:
            _limits.remove(n)
            _apply(_in_force())
