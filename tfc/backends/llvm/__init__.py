"""The LLVM CPU backend: graphs compiled to native code (llvmlite), BLAS for matrix products."""

from tfc.backends.llvm.backend import CompileReport, LLVMBackend
from tfc.backends.llvm.runtime.executable import LLVMExecutable

__all__ = ["CompileReport", "LLVMBackend", "LLVMExecutable"]
