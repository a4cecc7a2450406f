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
- ``gemm(plan, a, b, out) -> Callable[[], None]``: the matrix product ``plan``
  (``gemm.GemmPlan``) of device arrays ``a`` and ``b`` into ``out``, prepared once: on a
  GPU one cuBLAS ``gemmEx`` (f16 operands with f32 accumulation into an f32 scratch,
  rounded once), under the emulator ``gemm.emulate_gemm`` (numpy's widen-and-round).
- ``uploader(dst) -> Callable[[host array], event or None]``: copies of host arrays into
  ``dst``, prepared once (on a GPU an asynchronous DMA from the caller's array, page-locked
  in place, or through a page-locked staging buffer; the event says when it has read it).
- ``array_type``: the type of arrays the caller made on the device, which a step takes
  as feeds without a host round trip (``copy_on_device(dst, src)``): ``cupy.ndarray``,
  or under the emulator ``EmulatedArray`` (a numpy array marked as the device's).

``cuda_device()`` is how an executable finds its device: ``$TFC_CUDA_DEVICE=emulated``
selects the emulator (tests and CI, no GPU needed); otherwise the GPU through cupy, or a
``TfcError("no CUDA device: ...")`` that says what was found (no cupy, no driver, no GPU).
Compiling needs no device: only running asks for one.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import weakref
from functools import partial
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from tfc.backends.cuda.gemm import GemmPlan, emulate_gemm
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
    # Held by whoever queues work on the device's stream (an executable's step, its
    # writes, its read-backs): every executable of a device shares the stream, and a CUDA
    # graph capture records whatever any thread queues on it meanwhile (the training step
    # captured while a prefetch thread's map fn uploads its batch). Re-entrant.
    lock: Any

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

    def gemm(self, plan: GemmPlan, a: Any, b: Any, out: Any) -> Callable[[], None]: ...

    def uploader(self, dst: Any) -> Callable[[np.ndarray], Any]: ...

    def writer(self, kind: str, target: Any, value: Any) -> Callable[[], None] | None: ...

    def capture(self, actions: Sequence[Callable[[], None]]) -> Callable[[], None]: ...


class Prepared:
    """A prepared library call (``GpuDevice.gemm``, ``GpuDevice.writer``): called, it
    runs through cupy's wrappers; a CUDA graph capture records ``captured``, the same
    cuBLAS call made through libcublas itself (``cublas_library``), because cupy 14's
    ``cublas.setStream``, which its every cuBLAS wrapper calls, raises "calling cuBLAS
    API during stream capture is currently unsupported" while the stream captures, though
    cuBLAS supports capture. ``keep`` holds what the calls point at (host scalars)."""

    __slots__ = ("run", "captured", "keep")

    def __init__(self, run: Callable[[], None], captured: Callable[[], None],
                 keep: Any = None) -> None:
        self.run, self.captured, self.keep = run, captured, keep

    def __call__(self) -> None:
        self.run()


class CublasLibrary:
    """libcublas as this process loaded it (cupy's copy, found in ``/proc/self/maps``),
    called through ctypes with each function's C signature: what ``Prepared.captured``
    calls. Every call's status is checked."""

    _P, _I, _L = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    SIGNATURES: dict[str, tuple[Any, ...]] = {
        "cublasSetStream_v2": (_P, _P),
        "cublasSetPointerMode_v2": (_P, _I),
        "cublasGemmEx": (_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I,
                         _I, _I),
        "cublasGemmStridedBatchedEx": (_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _L, _P, _I,
                                       _I, _L, _P, _P, _I, _I, _L, _I, _I, _I),
        "cublasSaxpy_v2": (_P, _I, _P, _P, _I, _P, _I),
        "cublasDaxpy_v2": (_P, _I, _P, _P, _I, _P, _I),
    }

    def __init__(self, path: str) -> None:
        self.path = path
        lib = ctypes.CDLL(path)
        self._fns: dict[str, Any] = {}
        for name, argtypes in self.SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
            self._fns[name] = fn

    def call(self, name: str, *args: Any) -> None:
        status = self._fns[name](*args)
        if status != 0:
            raise TfcError(f"{name} returned cuBLAS status {status} ({self.path})")

    def set_stream(self, handle: int, stream: int) -> None:
        self.call("cublasSetStream_v2", handle, stream)

    def set_pointer_mode(self, handle: int, mode: int) -> None:
        self.call("cublasSetPointerMode_v2", handle, mode)


_cublas: CublasLibrary | None = None


def cublas_library() -> CublasLibrary:
    """The ``CublasLibrary`` of the libcublas this process loaded (cupy loads it)."""
    global _cublas
    if _cublas is None:
        path = None
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[-1]).startswith(
                        "libcublas.so"):
                    path = fields[-1]
                    break
        if path is None:
            raise TfcError("libcublas is not loaded in this process (cupy loads it with "
                           "its first cuBLAS call)")
        _cublas = CublasLibrary(path)
    return _cublas


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
        self.lock = threading.RLock()

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

    def capture(self, actions: Sequence[Callable[[], None]]) -> Callable[[], None]:
        """``GpuDevice.capture``'s replay, here the actions called in order (nothing
        runs now: as a capture, which records without executing)."""
        recorded = tuple(actions)

        def replay() -> None:
            for act in recorded:
                act()
        return replay

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

    def gemm(self, plan: GemmPlan, a: Any, b: Any, out: Any) -> Callable[[], None]:
        return partial(emulate_gemm, plan, a, b, out, _gemm_compute(out.dtype))

    def uploader(self, dst: Any) -> Callable[[np.ndarray], Any]:
        """Copies into ``dst`` (``upload``); nothing to wait for (None)."""
        def upload(src: np.ndarray) -> None:
            self.upload(dst, src)  # (looked up per call: the tests count it)
        return upload

    def writer(self, kind: str, target: Any, value: Any) -> Callable[[], None] | None:
        """``GpuDevice.writer``'s writes, as numpy calls."""
        if target.shape != value.shape or target.dtype != value.dtype:
            return None
        if kind == "var.assign":
            return partial(np.copyto, target, value)
        ufunc = np.add if kind == "var.assign_add" else np.subtract
        return partial(ufunc, target, value, out=target)


class PinnedFeed:
    """Which host array of one feed is page-locked in place (``cudaHostRegister``), so
    that its copies to the device are DMAs from the array itself.

    An array is registered when it is fed a second time in a row (a loop that feeds the
    same array registers once; one that feeds fresh arrays never does), and is kept
    referenced while registered: freeing registered memory leaves its range registered
    for whatever is allocated there next. It is unregistered when another array replaces
    it (``page_locked``) or the feed's uploader is collected (``release``). An array the
    driver will not register (already registered, here or by another feed, or pinned
    memory) is not asked again: each refusal is a failed driver call. Small arrays
    (< 64 KB: a host copy costs less), other dtypes or sizes, and strided arrays are never
    registered."""

    MIN_BYTES = 1 << 16

    def __init__(self, register: Callable[[int, int, int], Any] | None,
                 unregister: Callable[[int], Any] | None, nbytes: int, dtype: Any) -> None:
        self._register, self._unregister = register, unregister
        self.nbytes, self.dtype = nbytes, np.dtype(dtype)
        self.held: np.ndarray | None = None  # the registered array
        self._seen: np.ndarray | None = None  # the array fed last (through staging)
        self._refused: weakref.ref[np.ndarray] | None = None  # the last one refused

    def page_locked(self, src: np.ndarray) -> bool:
        """Whether ``src`` is (now) the registered array; the caller has waited for the
        last copy from the array registered before (it may be unregistered here)."""
        if src is self.held:
            return True
        seen, self._seen = self._seen, src
        refused = self._refused() if self._refused is not None else None
        if src is not seen or src is refused or self._register is None or \
                self._unregister is None or self.nbytes < self.MIN_BYTES or \
                src.dtype != self.dtype or src.nbytes != self.nbytes or \
                not src.flags.c_contiguous:
            return False
        self.release()
        try:
            self._register(src.ctypes.data, self.nbytes, 0)
        except Exception:  # noqa: BLE001  (registered already, or pinned: staging)
            self._refused = weakref.ref(src)
            return False
        self.held, self._seen = src, None
        return True

    def release(self) -> None:
        """Unregister the registered array, if any (its copies have ended)."""
        held, self.held = self.held, None
        if held is not None and self._unregister is not None:
            try:
                self._unregister(held.ctypes.data)
            except Exception:  # noqa: BLE001  (nothing to undo: the driver dropped it)
                pass


def _unpin_after(done: Any, pins: PinnedFeed) -> None:
    """An uploader's end: wait for its last copy, then unregister its array."""
    if pins.held is None:
        return
    try:
        done.synchronize()
    except Exception:  # noqa: BLE001  (a failed device: unregistering is all that is left)
        pass
    pins.release()


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
        self.lock = threading.RLock()

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

    def gemm(self, plan: GemmPlan, a: Any, b: Any, out: Any,
             compute_type: int | None = None) -> Callable[[], None]:
        """One cuBLAS ``gemmEx`` (``gemmStridedBatchedEx`` for a batch) on the step's
        stream, its arguments computed here once: the library's own arithmetic for f32
        and f64 (``CUBLAS_COMPUTE_32F``/``64F``: no TF32), and for f16 operands tensor
        cores accumulating in f32 into an f32 scratch of this call's own, then one
        rounding to f16 (a cupy copy kernel), the reference's contract. ``compute_type``
        (a ``cublasComputeType_t``) replaces the default (tools compare them)."""
        from cupy.cuda import cublas
        xp = self.xp
        compute = _gemm_compute(out.dtype)
        data_type = {np.dtype(np.float16): 2, np.dtype(np.float32): 0,
                     np.dtype(np.float64): 1}  # cudaDataType: CUDA_R_16F, _32F, _64F
        in_type, c_type = data_type[np.dtype(a.dtype)], data_type[compute]
        compute_type = compute_type if compute_type is not None else getattr(
            cublas, "CUBLAS_COMPUTE_64F" if compute == np.float64 else "CUBLAS_COMPUTE_32F",
            70 if compute == np.float64 else 68)
        algo = getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1)
        pointer_host = getattr(cublas, "CUBLAS_POINTER_MODE_HOST", 0)
        scalars = (np.ones((), compute), np.zeros((), compute))  # host memory cuBLAS reads
        alpha, beta = scalars[0].ctypes.data, scalars[1].ctypes.data
        with self.device:
            c = out if out.dtype == compute else xp.empty(out.shape, compute)
        p = plan
        first, second, dst = b.data.ptr, a.data.ptr, c.data.ptr
        stream = self.stream
        get_handle = xp.cuda.device.get_cublas_handle

        def run(scalars: tuple = scalars) -> None:  # (the default keeps alpha, beta alive)
            handle = get_handle()  # (per thread and device: looked up at call time)
            cublas.setPointerMode(handle, pointer_host)
            cublas.setStream(handle, stream.ptr)
            if p.batch == 1:
                cublas.gemmEx(handle, p.transa, p.transb, p.m, p.n, p.k, alpha,
                              first, in_type, p.lda, second, in_type, p.ldb, beta,
                              dst, c_type, p.ldc, compute_type, algo)
            else:
                cublas.gemmStridedBatchedEx(
                    handle, p.transa, p.transb, p.m, p.n, p.k, alpha,
                    first, in_type, p.lda, p.stride_a, second, in_type, p.ldb, p.stride_b,
                    beta, dst, c_type, p.ldc, p.stride_c, p.batch, compute_type, algo)
            if c is not out:
                xp.copyto(out, c, casting="same_kind")  # the one rounding (to f16)

        def captured() -> None:  # the same call through libcublas itself (``Prepared``)
            lib = cublas_library()
            handle = get_handle()
            lib.set_stream(handle, stream.ptr)
            lib.set_pointer_mode(handle, pointer_host)
            if p.batch == 1:
                lib.call("cublasGemmEx", handle, p.transa, p.transb, p.m, p.n, p.k, alpha,
                         first, in_type, p.lda, second, in_type, p.ldb, beta,
                         dst, c_type, p.ldc, compute_type, algo)
            else:
                lib.call("cublasGemmStridedBatchedEx", handle, p.transa, p.transb, p.m, p.n,
                         p.k, alpha, first, in_type, p.lda, p.stride_a, second, in_type,
                         p.ldb, p.stride_b, beta, dst, c_type, p.ldc, p.stride_c, p.batch,
                         compute_type, algo)
            if c is not out:
                xp.copyto(out, c, casting="same_kind")
        return Prepared(run, captured, scalars)

    def uploader(self, dst: Any) -> Callable[[np.ndarray], Any]:
        """Copies of host arrays into ``dst``, each an asynchronous DMA on the step's
        stream (pageable memory copies at a fraction of the link's speed, and
        synchronously). A C-contiguous array of ``dst``'s dtype fed twice in a row is
        page-locked in place (``cudaHostRegister``) and the DMA reads it directly: no
        host copy, the host free to queue the step's kernels meanwhile (a loop feeding
        the same array registers once; one feeding fresh arrays never does; see
        ``PinnedFeed``: the registration ends with the uploader). Other arrays, and any
        the driver will not register (an overlapping registration, memory pinned
        already), go through a page-locked staging buffer of this feed's own. Returns the event the caller waits for before the host array may change
        (None after a staged copy); a call first waits for the previous call's copy (the
        staging buffer's reuse)."""
        import cupyx
        runtime = self.xp.cuda.runtime
        with self.device:
            staging = cupyx.empty_pinned(dst.shape, dst.dtype)
            done = self.xp.cuda.Event(block=False, disable_timing=True)
        pins = PinnedFeed(getattr(runtime, "hostRegister", None),
                          getattr(runtime, "hostUnregister", None), dst.nbytes, dst.dtype)
        memcpy_async, host_to_device = runtime.memcpyAsync, 1
        nbytes, staged, target, stream = dst.nbytes, staging.ctypes.data, dst.data.ptr, \
            self.stream
        state = {"pending": False}

        def upload(src: np.ndarray) -> Any:
            if state["pending"]:
                done.synchronize()
            direct = bool(nbytes) and pins.page_locked(src)
            if direct:
                memcpy_async(target, src.ctypes.data, nbytes, host_to_device, stream.ptr)
            else:
                np.copyto(staging, src.reshape(staging.shape), casting="unsafe")
                if nbytes:
                    memcpy_async(target, staged, nbytes, host_to_device, stream.ptr)
            done.record(stream)
            state["pending"] = True
            return done if direct else None  # (a staged copy has read the array already)
        # the registration ends with the uploader: an array freed while registered would
        # leave its pages pinned and its range registered for whatever is allocated there
        finalizer = weakref.finalize(upload, _unpin_after, done, pins)
        finalizer.atexit = False  # (the process's end releases everything)
        return upload

    def writer(self, kind: str, target: Any, value: Any) -> Callable[[], None] | None:
        """A variable write ``kind`` (``var.assign``, ``var.assign_add``,
        ``var.assign_sub``) of device array ``value`` into ``target`` in place, as one
        library call prepared now (a device-to-device copy; cuBLAS ``axpy`` with alpha
        +-1 for f32/f64, whose ``y + (+-1) x`` rounds as ``y +- x``), or None where the
        array module's ufunc must do it (other dtypes, shapes that differ)."""
        if target.shape != value.shape or target.dtype != value.dtype or \
                not (target.flags.c_contiguous and value.flags.c_contiguous):
            return None
        stream = self.stream
        if kind == "var.assign":
            memcpy_async, device_to_device = self.xp.cuda.runtime.memcpyAsync, 3
            nbytes, dst, src = target.nbytes, target.data.ptr, value.data.ptr
            return lambda: memcpy_async(dst, src, nbytes, device_to_device, stream.ptr) \
                if nbytes else None
        dt = np.dtype(target.dtype)
        if dt not in (np.float32, np.float64) or not 0 < target.size < 2**31:
            return None
        from cupy.cuda import cublas
        axpy = cublas.saxpy if dt == np.float32 else cublas.daxpy
        alpha = np.array(1.0 if kind == "var.assign_add" else -1.0, dt)
        pointer_host = getattr(cublas, "CUBLAS_POINTER_MODE_HOST", 0)
        n, x, y, a = int(target.size), value.data.ptr, target.data.ptr, alpha.ctypes.data
        get_handle = self.xp.cuda.device.get_cublas_handle

        def run(alpha: np.ndarray = alpha) -> None:  # (alpha kept alive)
            handle = get_handle()
            cublas.setPointerMode(handle, pointer_host)
            cublas.setStream(handle, stream.ptr)
            axpy(handle, n, a, x, 1, y, 1)

        def captured() -> None:  # the same call through libcublas itself (``Prepared``)
            lib = cublas_library()
            handle = get_handle()
            lib.set_stream(handle, stream.ptr)
            lib.set_pointer_mode(handle, pointer_host)
            lib.call("cublasSaxpy_v2" if dt == np.float32 else "cublasDaxpy_v2",
                     handle, n, a, x, 1, y, 1)
        return Prepared(run, captured, alpha)

    def capture(self, actions: Sequence[Callable[[], None]]) -> Callable[[], None]:
        """The actions' work on the step's stream recorded once as a CUDA graph
        (``Stream.begin_capture``/``end_capture``: nothing runs now); the returned call
        launches the whole graph with one driver call. A ``Prepared`` action records its
        ``captured`` form (cuBLAS through libcublas: cupy refuses its own cuBLAS
        wrappers while a stream captures). The actions must only queue
        work on the stream, with no allocation from cupy's pool, synchronization or
        host copy; what the driver or cupy refuse during the capture is raised, and so is
        an allocation from cupy's pool (cupy captures in relaxed mode, which would let
        one through: the graph would keep writing memory the pool later reuses)."""
        stream = self.stream

        def refuse(size: int) -> Any:
            raise TfcError(f"an allocation of {size} bytes from cupy's memory pool during "
                           f"a CUDA graph capture")
        with self.device, stream, self.xp.cuda.using_allocator(refuse):
            stream.begin_capture()
            failure: BaseException | None = None
            try:
                for act in actions:
                    getattr(act, "captured", act)()
            except BaseException as e:  # (the capture must end before anything else)
                failure = e
            try:
                graph = stream.end_capture()
            except BaseException:
                if failure is None:
                    raise
                graph = None
            if failure is not None:
                raise failure
        return partial(graph.launch, stream)

    def __enter__(self) -> "GpuDevice":
        """Make this device and its stream current (library ops and cupy's own kernels
        then run on the step's stream)."""
        self.device.__enter__()
        self.stream.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stream.__exit__(*exc)
        self.device.__exit__(*exc)


def _gemm_compute(out_dtype: Any) -> np.dtype:
    """The dtype a product into ``out_dtype`` accumulates in: f32 for f16 (the
    reference's ``compute_dtype``), else its own."""
    dt = np.dtype(out_dtype)
    return np.dtype(np.float32) if dt == np.float16 else dt


_devices: dict[str, Any] = {}
_devices_lock = threading.Lock()


def cuda_device(index: int | None = None) -> EmulatedDevice | GpuDevice:
    """The device executables run on: the emulator when ``$TFC_CUDA_DEVICE=emulated``,
    else GPU ``index`` (the ``/gpu:N`` the graph is placed on) through cupy, or, for a
    graph placed on no GPU in particular (``index`` None), GPU ``$TFC_CUDA_DEVICE``
    (default 0). A ``TfcError`` starting ``no CUDA device:`` says why there is none (no
    cupy, no driver, no GPU, N beyond the GPUs the driver sees)."""
    which = os.environ.get(DEVICE_ENV, "").strip() or "0"
    if which != EMULATED and index is not None:
        which = str(index)
    with _devices_lock:
        dev = _devices.get(which)
        if dev is None:
            dev = _devices[which] = EmulatedDevice() if which == EMULATED else \
                _gpu(which, placed=index is not None)
        return dev


def _gpu(which: str, placed: bool = False) -> GpuDevice:
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
        named = f"the graph is placed on /gpu:{index}" if placed else f"{DEVICE_ENV}={which}"
        raise TfcError(f"no CUDA device: {named} but the driver sees {count} GPU"
                       f"{'s' if count > 1 else ''}")
    return GpuDevice(cupy, index)


def device_problem() -> str | None:
    """Why ``cuda_device()`` would fail (its message), or None when a device is there."""
    try:
        cuda_device()
    except TfcError as e:
        return str(e)
    return None
