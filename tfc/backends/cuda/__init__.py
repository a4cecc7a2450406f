"""The CUDA backend: fused kernels generated as CUDA C (``codegen``), compiled by NVRTC
(``nvrtc``) and launched through cupy, matrix products through cuBLAS; the same kernel
text also runs on the CPU under an emulation of CUDA's execution model (``emulator``),
which is how it is tested on machines without a GPU (``TFC_CUDA_DEVICE=emulated``)."""

from tfc.backends.cuda.backend import CUDABackend
from tfc.backends.cuda.executable import CUDAExecutable

__all__ = ["CUDABackend", "CUDAExecutable"]
