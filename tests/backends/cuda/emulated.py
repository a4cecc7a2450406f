"""What the CUDA backend's end-to-end tests share: the CPU emulator (a module importing
this is skipped where g++ cannot build it), ``ON_GPU`` and the fixture that picks the
device. Off a GPU every test runs on the emulator; under ``TFC_BACKEND=cuda`` on a machine
with a GPU the same tests run on it, which checks the launch layer (cupy, cuBLAS, the
stream) too."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
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


class Copies:
    """Counts a device's (the emulator's or a GPU's) device->host copies (their shapes)
    and uploads (the emulator's feed copies among them; a GPU's go through staging)."""

    def __init__(self, dev: Any) -> None:
        self.dev, self.to_host, self.uploads, self.on_device = dev, [], [], []

    def __enter__(self) -> "Copies":
        dev = self.dev
        real_host, real_later = dev.to_host, dev.to_host_later
        real_upload, real_copy = dev.upload, dev.copy_on_device

        def to_host(a: Any) -> np.ndarray:
            self.to_host.append(a.shape)
            return real_host(a)

        def to_host_later(arrays: Any) -> list[np.ndarray]:
            self.to_host.extend(a.shape for a in arrays)
            return real_later(arrays)

        def upload(dst: Any, src: Any) -> None:
            self.uploads.append(src.shape)
            real_upload(dst, src)

        def copy_on_device(dst: Any, src: Any) -> None:
            self.on_device.append(src.shape)
            real_copy(dst, src)
        dev.to_host, dev.to_host_later = to_host, to_host_later
        dev.upload, dev.copy_on_device = upload, copy_on_device
        return self

    def clear(self) -> None:
        self.to_host.clear()
        self.uploads.clear()
        self.on_device.clear()

    def __exit__(self, *exc: Any) -> None:
        for name in ("to_host", "to_host_later", "upload", "copy_on_device"):
            delattr(self.dev, name)


def split_mlp_feeds(step: int, batch: int = 4) -> dict[str, np.ndarray]:
    """A batch, seeded by ``step``, for ``tfc.testing.split_mlp_module``'s default sizes
    (6 inputs, 3 classes)."""
    rng = np.random.default_rng(step)
    return {"x": rng.normal(size=(batch, 6)).astype(np.float32),
            "y": rng.integers(0, 3, batch).astype(np.int32)}
