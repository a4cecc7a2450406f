"""Matrix products through OpenBLAS (``scipy-openblas32``), called from native code.

``scipy-openblas32`` ships OpenBLAS with every symbol prefixed (``scipy_cblas_sgemm``)
precisely so that other packages can link it without clashing with numpy's copy; its
``blasint`` is 32-bit. We load the shared library with ctypes and hand each symbol's
address to LLVM (``llvm.add_symbol``), so JIT-compiled code — and object code loaded
back from a cache or an artifact — calls the BLAS directly, with no Python in between.

The same registration gives the JIT the C library functions the kernels call
(``pthread_create``/``pthread_join`` for the thread pool, ``memcpy``/``memset``), so
symbol resolution never depends on what the process happens to export.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SGEMM = "scipy_cblas_sgemm"
DGEMM = "scipy_cblas_dgemm"
# LAPACKE's ``_work`` entry points: no NaN scan of the input, no allocation (the caller
# passes the workspace). Column-major calls on row-major data factor the transpose.
COL_MAJOR = 102
GETRF = {"f32": "scipy_LAPACKE_sgetrf_work", "f64": "scipy_LAPACKE_dgetrf_work"}
GETRI = {"f32": "scipy_LAPACKE_sgetri_work", "f64": "scipy_LAPACKE_dgetri_work"}
_C_SYMBOLS = ("pthread_create", "pthread_join", "memcpy", "memset", "memmove")

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def openblas() -> ctypes.CDLL:
    """The scipy-openblas32 shared library, loaded once."""
    global _lib
    with _lock:
        if _lib is None:
            import scipy_openblas32
            path = os.path.join(scipy_openblas32.get_lib_dir(),
                                f"lib{scipy_openblas32.get_library()}.so")
            if not os.path.exists(path):  # other platforms: let the package find it
                _lib = scipy_openblas32.dll if hasattr(scipy_openblas32, "dll") else None
            if _lib is None:
                _lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            _register(_lib)
    return _lib


def _register(lib: ctypes.CDLL) -> None:
    for name in (SGEMM, DGEMM, *GETRF.values(), *GETRI.values()):
        llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
    for name in _C_SYMBOLS:
        try:
            fn = getattr(libc, name)
        except AttributeError:
            continue  # resolved from the process instead
        llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)


def register_symbols() -> None:
    """Make the BLAS and C symbols known to LLVM (before any engine is finalized), and
    the kernels' thread pool (``parallel``), which object code binds weakly."""
    openblas()
    from tfc.backends.llvm.parallel import register_runtime
    register_runtime()


def set_num_threads(n: int) -> None:
    """OpenBLAS's own thread count (its pool is separate from the kernels' threads)."""
    openblas().scipy_openblas_set_num_threads(int(n))


def declare_gemm(module: ir.Module, name: str, ftype: ir.Type) -> ir.Function:
    """``void cblas_?gemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)``."""
    if name in module.globals:
        return module.globals[name]
    i32, ptr = ir.IntType(32), ir.PointerType()
    fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i32, i32, i32, ftype, ptr, i32,
                                           ptr, i32, ftype, ptr, i32])
    return ir.Function(module, fnty, name)


def declare_getrf(module: ir.Module, name: str) -> ir.Function:
    """``lapack_int LAPACKE_?getrf_work(layout, m, n, a, lda, ipiv)`` (32-bit ints):
    LU with partial pivoting in place; ``info > 0`` when ``U[info-1, info-1]`` is 0."""
    if name in module.globals:
        return module.globals[name]
    i32, ptr = ir.IntType(32), ir.PointerType()
    return ir.Function(module, ir.FunctionType(i32, [i32, i32, i32, ptr, i32, ptr]), name)


def declare_getri(module: ir.Module, name: str) -> ir.Function:
    """``lapack_int LAPACKE_?getri_work(layout, n, a, lda, ipiv, work, lwork)``: the inverse
    from ``getrf``'s factors, in place."""
    if name in module.globals:
        return module.globals[name]
    i32, ptr = ir.IntType(32), ir.PointerType()
    return ir.Function(module, ir.FunctionType(i32, [i32, i32, ptr, i32, ptr, ptr, i32]), name)
