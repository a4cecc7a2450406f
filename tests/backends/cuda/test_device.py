"""How a CUDA executable finds its device (``tfc.backends.cuda.device``): the emulator on
request, else a GPU through cupy, else an error that says what is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tfc.backends.cuda import device
from tfc.errors import TfcError


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "_devices", {})


def test_emulated_device_is_selected_by_the_environment(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setenv(device.DEVICE_ENV, device.EMULATED)
    dev = device.cuda_device()
    assert isinstance(dev, device.EmulatedDevice) and dev is device.cuda_device()
    assert dev.xp is np and device.device_problem() is None
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    d = dev.to_device(a)
    assert d is not a and np.array_equal(d, a)
    dev.upload(d, a[::-1].copy())
    later = dev.to_host_later([d])
    d[...] = 0  # a later copy sees the array as it was when queued
    assert np.array_equal(later[0], a[::-1])


def test_a_bad_device_name_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(device.DEVICE_ENV, "gpu0")
    with pytest.raises(TfcError, match="TFC_CUDA_DEVICE='gpu0' is neither a GPU index nor "
                                       "'emulated'"):
        device.cuda_device()


def test_without_cupy_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.delenv(device.DEVICE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(TfcError, match=r"^no CUDA device: cupy is not installed .*"
                                       r"pip install -e '\.\[cuda\]'"):
        device.cuda_device()
    assert device.device_problem().startswith("no CUDA device: cupy is not installed")


class _Runtime:
    def __init__(self, count: int | None) -> None:
        self.count = count

    def getDeviceCount(self) -> int:
        if self.count is None:
            raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is "
                               "insufficient for CUDA runtime version")
        return self.count


class _FakeCupy:
    """Just enough of cupy for ``cuda_device`` to count GPUs."""

    def __init__(self, count: int | None) -> None:
        self.cuda = type("cuda", (), {"runtime": _Runtime(count)})()


@pytest.mark.parametrize("count,which,message", [
    (None, "", "no CUDA device: the CUDA driver cannot be used (RuntimeError: "
               "cudaErrorInsufficientDriver"),
    (0, "", "no CUDA device: the CUDA driver sees no GPU"),
    (2, "3", "no CUDA device: TFC_CUDA_DEVICE=3 but the driver sees 2 GPUs"),
])
def test_no_gpu_errors_say_what_was_found(monkeypatch: pytest.MonkeyPatch, count: int | None,
                                          which: str, message: str) -> None:
    monkeypatch.setenv(device.DEVICE_ENV, which)
    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy(count))
    with pytest.raises(TfcError) as e:
        device.cuda_device()
    assert str(e.value).startswith(message)
