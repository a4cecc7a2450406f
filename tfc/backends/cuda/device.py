"""Where a CUDA executable runs: the one place that differs between a GPU and the emulator.

Both kinds of device offer the same small interface, which the executable (and the
library of array ops, ``library``) is written against:

- ``xp``: the array module (``cupy`` on a GPU, ``numpy`` under the emulator). Library ops
  are written once with ``xp``, so the code a GPU runs is the code CI runs.
- ``load(kernels, ptx) -> handle``: the module of an entry's kernels, ready to launch
  (a GPU loads the PTX; the emulator compiles the same CUDA C text with g++).
- ``launch(handle, kernel, grid, block, shared_bytes, args)``: one kernel launch on the
  device's stream; ``args`` are device arrays (pointers) and ``numpy.int64`` scalars
  (the ``long long sym_<S>`` parameters).
- ``launcher(handle, kernel, grid, block, shared_bytes, args) -> Callable[[], None]``:
  that launch prepared once (what a binding's action list holds: no per-step argument
  work).
- ``to_device(a)``, ``to_host(a)``, ``empty(shape, dtype)``, ``synchronize()``.
- ``array_type``: the type of arrays the caller made on the device, which a step takes
  as feeds without a host round trip (``copy_on_device(dst, src)``): ``cupy.ndarray``,
  or under the emulator ``EmulatedArray`` (a numpy array marked as the device's).

``cuda_device()`` is how an executable finds its device: ``$TFC_CUDA_DEVICE=emulated``
selects the emulator (tests and CI, no GPU needed); otherwise the GPU through cupy, or a
``TfcError("no CUDA device: ...")`` that says what was found (no cupy, no driver, no GPU).
Compiling needs no device: only running asks for one.
"""

from __future__ import annotations

import hashlib
import os
import threading
from functools import partial
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from tfc.backends.cuda.kernel import Kernel
from tfc.errors import TfcError

# $TFC_CUDA_DEVICE: "emulated" runs kernels on the CPU emulator; empty, "0", "1"...: GPU N.
DEVICE_ENV = "TFC_CUDA_DEVICE"
EMULATED = "emulated"


class Device(Protocol):
    """What an executable needs of a device (see the module docstring)."""

    name: str
    xp: Any
    emulated: bool
    array_type: type

    def load(self, kernels: Sequence[Kernel], ptx: str) -> Any: ...

    def launch(self, handle: Any, kernel: Kernel, grid: int, block: int, shared_bytes: int,
               args: Sequence[Any]) -> None: ...

    def launcher(self, handle: Any, kernel: Kernel, grid: int, block: int,
                 shared_bytes: int, args: Sequence[Any]) -> Callable[[], None]: ...

    def to_device(self, a: np.ndarray) -> Any: ...

    def to_host(self, a: Any) -> np.ndarray: ...

    def upload(self, dst: Any, src: np.ndarray) -> None: ...

    def to_host_later(self, arrays: Sequence[Any]) -> list[np.ndarray]: ...

    def copy_on_device(self, dst: Any, src: Any) -> None: ...

    def empty(self, shape: Sequence[int], dtype: Any) -> Any: ...

    def synchronize(self) -> None: ...


class EmulatedArray(np.ndarray):
    """A numpy array standing for one the caller made on the emulated device (as a cupy
    array on a GPU): ``a.view(EmulatedArray)``. Steps take it as a device feed."""


class EmulatedDevice:
    """Kernels run under the CPU emulator (``emulator.EmulatedModule``), arrays are numpy
    arrays: the whole executable, library ops included, runs as on a GPU but for cupy."""

    name = "emulated CUDA device (CPU)"
    xp = np
    emulated = True
    array_type: type = EmulatedArray

    def __init__(self) -> None:
        self._modules: dict[str, Any] = {}
        self._lock = threading.Lock()

    def load(self, kernels: Sequence[Kernel], ptx: str) -> Any:
        from tfc.backends.cuda.emulator import EmulatedModule
        key = hashlib.sha256("\0".join(k.source for k in kernels).encode()).hexdigest()
        with self._lock:
            mod = self._modules.get(key)
            if mod is None:
                mod = self._modules[key] = EmulatedModule(list(kernels))
        return mod

    def launch(self, handle: Any, kernel: Kernel, grid: int, block: int, shared_bytes: int,
               args: Sequence[Any]) -> None:
        handle.launch(kernel, grid, block, shared_bytes, args)

    def launcher(self, handle: Any, kernel: Kernel, grid: int, block: int,
                 shared_bytes: int, args: Sequence[Any]) -> Callable[[], None]:
        return lambda: self.launch(handle, kernel, grid, block, shared_bytes, args)

    def to_device(self, a: np.ndarray) -> np.ndarray:
        return np.array(a, order="C", copy=True)

    def to_host(self, a: Any) -> np.ndarray:
        return np.array(a, order="C", copy=True)

    def upload(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Copy host array ``src`` into device array ``dst`` (same shape and dtype)."""
        np.copyto(dst, src)

    def copy_on_device(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Copy device array ``src`` (the caller's) into ``dst`` (same shape and dtype)."""
        np.copyto(dst, src)

    def to_host_later(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        """Host copies of ``arrays``, valid after the next ``synchronize()`` (here at
        once); the copies see the arrays as of now, whatever runs after."""
        return [np.array(a, order="C", copy=True) for a in arrays]

    def empty(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        return np.empty(tuple(shape), dtype=dtype)

    def synchronize(self) -> None:
        pass


class GpuDevice:
    """A GPU through cupy: PTX loaded with ``cupy.cuda.function.Module``, launches and
    library calls (cuBLAS through ``cupy.matmul``) on one non-blocking stream."""

    emulated = False

    def __init__(self, cupy: Any, index: int = 0) -> None:
        self.xp = cupy
        self.array_type = cupy.ndarray
        self.index = index
        self.device = cupy.cuda.Device(index)
        with self.device:
            props = cupy.cuda.runtime.getDeviceProperties(index)
            self.stream = cupy.cuda.Stream(non_blocking=True)
        raw = props.get("name", b"GPU")
        gpu = raw.decode() if isinstance(raw, bytes) else str(raw)
        self.compute_capability = f"{props['major']}{props['minor']}"
        self.sm_count = int(props.get("multiProcessorCount", 0))
        self.name = f"gpu:{index} ({gpu}, sm_{self.compute_capability})"
        self._modules: dict[str, Any] = {}

    def load(self, kernels: Sequence[Kernel], ptx: str) -> Any:
        key = hashlib.sha256(ptx.encode()).hexdigest()
        mod = self._modules.get(key)
        if mod is None:
            with self.device:  # cuModuleLoadData: PTX text, NUL-terminated
                loaded = self.xp.cuda.function.Module()
                loaded.load(ptx.encode() + b"\0")
                mod = {k.name: loaded.get_function(k.name) for k in kernels}
                mod[""] = loaded  # keeps the module loaded while its functions are used
            self._modules[key] = mod
        return mod

    def launch(self, handle: Any, kernel: Kernel, grid: int, block: int, shared_bytes: int,
               args: Sequence[Any]) -> None:
        # scalars must come as numpy.int64 (every scalar parameter is a ``long long``)
        handle[kernel.name]((grid,), (block,), args, shared_mem=shared_bytes,
                            stream=self.stream)

    def launcher(self, handle: Any, kernel: Kernel, grid: int, block: int,
                 shared_bytes: int, args: Sequence[Any]) -> Callable[[], None]:
        return partial(handle[kernel.name], (grid,), (block,), tuple(args),
                       shared_mem=shared_bytes, stream=self.stream)

    def to_device(self, a: np.ndarray) -> Any:
        with self.device, self.stream:
            return self.xp.asarray(np.require(a, requirements="C"))

    def to_host(self, a: Any) -> np.ndarray:
        with self.device:
            return self.xp.asnumpy(a, stream=self.stream)

    def to_host_later(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        """Host copies queued on the stream into pinned memory (cupy's pinned pool, so
        no allocation per step once warm): one ``synchronize()`` then waits for all,
        instead of one blocking copy each."""
        import cupyx
        out = []
        with self.device:
            for a in arrays:
                host = cupyx.empty_pinned(a.shape, a.dtype)
                a.get(stream=self.stream, out=host, blocking=False)
                out.append(host)
        return out

    def copy_on_device(self, dst: Any, src: Any) -> None:
        """Copy the caller's device array ``src`` into ``dst`` on the step's stream, after
        the work queued on the caller's current stream (which made ``src``); the caller's
        later work (overwriting ``src``) waits for the copy."""
        with self.device:
            caller = self.xp.cuda.get_current_stream()
            self.stream.wait_event(caller.record())
            with self.stream:
                self.xp.copyto(dst, src)
            caller.wait_event(self.stream.record())

    def upload(self, dst: Any, src: np.ndarray) -> None:
        with self.device:
            dst.set(np.require(src, dst.dtype, "C").reshape(dst.shape),
                    stream=self.stream)

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        with self.device:
            return self.xp.empty(tuple(shape), dtype=dtype)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def __enter__(self) -> "GpuDevice":
        """Make this device and its stream current (library ops and cupy's own kernels
        then run on the step's stream)."""
        self.device.__enter__()
        self.stream.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stream.__exit__(*exc)
        self.device.__exit__(*exc)


_devices: dict[str, Any] = {}
_devices_lock = threading.Lock()


def cuda_device() -> EmulatedDevice | GpuDevice:
    """The device executables run on: the emulator when ``$TFC_CUDA_DEVICE=emulated``,
    else GPU ``$TFC_CUDA_DEVICE`` (default 0) through cupy. A ``TfcError`` starting
    ``no CUDA device:`` says why there is none (no cupy, no driver, no GPU)."""
    which = os.environ.get(DEVICE_ENV, "").strip() or "0"
    with _devices_lock:
        dev = _devices.get(which)
        if dev is None:
            dev = _devices[which] = EmulatedDevice() if which == EMULATED else _gpu(which)
        return dev


def _gpu(which: str) -> GpuDevice:
    if not which.isdigit():
        raise TfcError(f"{DEVICE_ENV}={which!r} is neither a GPU index nor '{EMULATED}'")
    try:
        import cupy
    except ImportError as e:
        raise TfcError(f"no CUDA device: cupy is not installed ({e}); "
                       f"install tfc with the cuda extra: pip install -e '.[cuda]'") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # cupy's CUDARuntimeError: no driver, driver too old
        raise TfcError(f"no CUDA device: the CUDA driver cannot be used "
                       f"({type(e).__name__}: {e})") from None
    index = int(which)
    if count == 0:
        raise TfcError("no CUDA device: the CUDA driver sees no GPU")
    if index >= count:
        raise TfcError(f"no CUDA device: {DEVICE_ENV}={which} but the driver sees "
                       f"{count} GPU{'s' if count > 1 else ''}")
    return GpuDevice(cupy, index)


def device_problem() -> str | None:
    """Why ``cuda_device()`` would fail (its message), or None when a device is there."""
    try:
        cuda_device()
    except TfcError as e:
        return str(e)
    return None
