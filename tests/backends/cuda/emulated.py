"""What the CUDA backend's end-to-end tests share: the CPU emulator (a module importing
this is skipped where g++ cannot build it), ``ON_GPU`` and the fixture that picks the
device. Off a GPU every test runs on the emulator; under ``TFC_BACKEND=cuda`` on a machine
with a GPU the same tests run on it, which checks the launch layer (cupy, cuBLAS, the
stream) too."""

from __future__ import annotations

import os

import pytest

from tfc.backends.cuda import device as cuda_device

emulator = pytest.importorskip("tfc.backends.cuda.emulator")
if not emulator.available():
    pytest.skip("the CUDA emulator needs g++ (C++20)", allow_module_level=True)

ON_GPU = os.environ.get("TFC_BACKEND") == "cuda" and \
    os.environ.get(cuda_device.DEVICE_ENV, "") != cuda_device.EMULATED and \
    cuda_device.device_problem() is None


def emulated_off_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator, but the GPU under ``TFC_BACKEND=cuda`` on a machine with one."""
    if not ON_GPU:
        monkeypatch.setenv(cuda_device.DEVICE_ENV, cuda_device.EMULATED)
