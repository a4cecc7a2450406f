"""Finding OpenBLAS and libc (``tfc.backends.llvm.runtime.symbols``) without the slow generic
routes, the routes kept as fallbacks, and the error when scipy-openblas32 is missing."""

from __future__ import annotations

import ctypes
import importlib.util
import os

import pytest

from tfc.backends.llvm.runtime import symbols
from tfc.errors import TfcError


def test_openblas_path_is_the_packages_library() -> None:
    import scipy_openblas32
    path = symbols.openblas_path()
    assert path is not None and os.path.isfile(path)
    assert os.path.samefile(path, os.path.join(scipy_openblas32.get_lib_dir(),
                                               f"lib{scipy_openblas32.get_library()}.so"))


def test_openblas_has_the_symbols_we_bind() -> None:
    lib = symbols.openblas()
    for name in (symbols.SGEMM, symbols.DGEMM, *symbols.GETRF.values(), *symbols.GETRI.values()):
        assert getattr(lib, name)


def test_fallback_through_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(symbols, "openblas_path", lambda: None)
    assert getattr(symbols._load_openblas(), symbols.SGEMM)


def test_missing_openblas_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(TfcError, match="pip install scipy-openblas32") as e:
        symbols.openblas_path()
    assert isinstance(e.value, ImportError)  # as the failed import used to be


def test_libc_has_the_symbols_we_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in symbols._C_SYMBOLS:
        assert getattr(symbols.libc(), name)
    # Not glibc's soname: the process's own symbols (or find_library) serve.
    monkeypatch.setattr(symbols.sys, "platform", "unknown")
    other = symbols._find_libc()
    assert isinstance(other, ctypes.CDLL)
    for name in symbols._C_SYMBOLS:
        assert getattr(other, name)


def test_overlapping_blas_limits_keep_the_smallest_and_restore_the_count_last_out():
    """Holders of the process-wide OpenBLAS limit may leave in any order: the count in
    force is the smallest asked for, and the last one out restores the original."""
    from tfc.backends.llvm.runtime.symbols import (get_num_threads, limited_threads,
                                                   set_num_threads)

    symbols.small_gemms(False)  # (a small step run earlier would hold OpenBLAS at one)
    before = get_num_threads()
    set_num_threads(3)
    try:
        first, second = limited_threads(2), limited_threads(1)
        first.__enter__()
        assert get_num_threads() == 2
        second.__enter__()
        assert get_num_threads() == 1
        first.__exit__(None, None, None)  # the first in leaves first
        assert get_num_threads() == 1
        second.__exit__(None, None, None)
        assert get_num_threads() == 3
        with pytest.raises(ValueError), limited_threads(2):
            assert get_num_threads() == 2
            raise ValueError("a failing step")
        assert get_num_threads() == 3
    finally:
        set_num_threads(before)
