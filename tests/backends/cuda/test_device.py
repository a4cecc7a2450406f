"""How a CUDA executable finds its device (``tfc.backends.cuda.device``): the emulator on
request, else a GPU through cupy, else an error that says what is missing."""

from __future__ import annotations

import sys
from typing import Any

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


def _gpu_module(device_name: str) -> Any:
    import tfc
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 3], name="x")
        with g.device(device_name):
            y = tfc.nn.relu(x * 2.0)
        tfc.entry("f", feeds={"x": x}, fetches={"y": y})
    module = g.as_module()
    module.devices = [device_name]
    return module


@pytest.mark.parametrize("index", [0, 1, 3])
def test_the_placed_gpu_is_the_one_the_executable_runs_on(
        monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    """``/gpu:N`` reaches the executable (not ``$TFC_CUDA_DEVICE``'s GPU, which is only
    the default for a graph placed on no GPU): GPU N is asked for, and N beyond the GPUs
    the driver sees is a clear error naming the placement."""
    from tfc.backends.cuda import CUDABackend
    from tfc.testing import compile_lowered
    exe = compile_lowered(CUDABackend(), _gpu_module(f"/gpu:{index}"), "f")
    assert exe.device_index == index
    monkeypatch.setenv(device.DEVICE_ENV, "")
    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy(1))
    asked: list[int | None] = []
    real = device.cuda_device

    def spy(i: int | None = None) -> Any:
        asked.append(i)
        if i == 0:  # (the fake cupy cannot make a GPU device)
            raise TfcError("GPU 0 asked for")
        return real(i)
    monkeypatch.setattr(device, "cuda_device", spy)
    monkeypatch.setattr(device, "_devices", {})
    with pytest.raises(TfcError) as e:
        exe([np.ones((2, 3), np.float32)], {}, 0)
    assert asked == [index], e.value
    if index >= 1:
        assert str(e.value) == (f"no CUDA device: the graph is placed on /gpu:{index} but "
                                f"the driver sees 1 GPU")
    # the emulator still runs a graph placed on any GPU
    monkeypatch.setattr(device, "cuda_device", real)
    monkeypatch.setenv(device.DEVICE_ENV, device.EMULATED)
    exe = compile_lowered(CUDABackend(), _gpu_module(f"/gpu:{index}"), "f")
    out = exe([np.ones((2, 3), np.float32)], {}, 0).fetches[0]
    np.testing.assert_array_equal(out, np.full((2, 3), 2, np.float32))


def test_a_graph_on_no_gpu_in_particular_takes_the_environments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tfc.backends.cuda.executable import placed_gpu
    module = _gpu_module("/gpu:2")
    assert placed_gpu(module, module.graphs["f"]) == 2
    module.devices = ["/cpu:0", "/gpu:0", "/gpu:1"]
    for op in module.graphs["f"].ops:
        op.device = None
    assert placed_gpu(module, module.graphs["f"]) is None  # (runs on the CPU default)
    module.devices = []
    assert placed_gpu(module, module.graphs["f"]) is None
    monkeypatch.setenv(device.DEVICE_ENV, "1")
    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy(1))
    monkeypatch.setattr(device, "_devices", {})
    with pytest.raises(TfcError, match="TFC_CUDA_DEVICE=1 but the driver sees 1 GPU"):
        device.cuda_device(None)
