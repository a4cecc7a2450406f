"""Convolutions and pooling on the device: generated kernels (``codegen_conv``) and, for
the convolutions, one GEMM (cuBLAS on a GPU), as the reference computes them
(``tfc/ops/nn.py``, ``tfc/ops/nn_grad.py``).

- ``conv2d``: the ``im2col`` kernel writes the reference's im2col matrix, then one GEMM
  ``cols @ w`` writes the result in place (NHWC is the GEMM's row-major output); for a
  small filter (``direct_forward``) one ``conv_direct`` kernel instead.
- ``conv2d_backprop_filter``: ``im2col``, then ``cols.T @ dy`` into the filter gradient;
  or (``direct_filter``, not chosen by default: slower) ``filter_partials`` (per-block
  partial sums) then ``filter_sum`` (folded in block order).
- ``conv2d_backprop_input``: ``dy @ w.T`` into a columns buffer, then the ``col2im``
  kernel sums each pixel's taps in the reference's order.
- pooling and its gradients: one kernel each.

``STRATEGY`` chooses between the two ways (``tools/gpu_check_conv.py`` times both): a
GEMM call costs tens of microseconds of host time in cupy, more than a small filter's
whole work on a GPU.

f16 computes in f32 and rounds once (``compute_dtype``): the kernels widen and round
themselves; around a GEMM the f16 operands are widened into f32 buffers and the f32
product is rounded into the result. Under the emulator (numpy) the GEMMs are numpy's
own products of the very matrices the reference multiplies, so through them the numbers
are the reference's; on a GPU they differ by cuBLAS's rounding, and the direct kernels
by their own order of summation. No sum anywhere depends on the order threads run in
(no atomics; cuBLAS is deterministic too): every run gives the same bits.

Each op is *prepared* once per binding (``PREPARED``: ``prepare(device, inputs, outputs,
attrs) -> action``): its geometry checked (the reference's errors), its kernels' launches
and GEMM calls bound to the binding's arrays and any scratch buffers allocated, so a step
calls a few prepared launches per op and allocates nothing. The same functions serve as
``library.LIBRARY`` entries (``fn(xp, inputs, attrs) -> outputs``, allocating the
outputs), for callers outside an executable. The window geometry (output size, SAME
padding) is the registry's own (``geometry``).
"""

from __future__ import annotations

import threading
from dataclasses import astuple, dataclass
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.backends.cuda import codegen_conv
from tfc.backends.cuda.kernel import Kernel
from tfc.errors import ExecutionError
from tfc.ir.types import DType
from tfc.ops.linalg import compute_dtype
from tfc.ops.nn import spatial_attr
from tfc.ops.nn_grad import expect_shape, geometry

Action = Callable[[], None]

# How convolutions run: "gemm" (im2col + GEMM; col2im for the input gradient), "direct"
# (generated kernels alone: ``conv_direct`` for conv2d, ``filter_partials`` +
# ``filter_sum`` for the filter gradient) or "auto": conv2d direct where the filter is
# small (``direct_forward``: one launch, no cupy GEMM call), the rest through GEMMs.
STRATEGY = "auto"
DIRECT_MAX_TAPS = 32  # conv2d: kh * kw * c
FILTER_BLOCKS = 512  # the filter gradient's partial sums: at most this many blocks
FILTER_MIN_CHUNK = 64  # ... each of at least this many output pixels
# Whether window kernels are compiled for each op's geometry (literals: the compiler folds
# the index arithmetic) rather than taking it as arguments: None means on a GPU (NVRTC,
# PTX cached on disk), not under the emulator (a g++ compile per shape would make the
# tests slow; ``tests/backends/cuda/test_conv.py`` runs some specialized ones there).
# On the H200 the 64-bit divisions by arguments cost 3-9x per kernel (max_pool_grad at
# batch 256: 55 us specialized, 217 us generic), the CNN step 0.48 ms against 0.90 ms.
SPECIALIZE: bool | None = None
# prepare(device, inputs, outputs or None, attrs) -> (outputs, the step's action)
Preparer = Callable[[Any, Sequence[Any], "list[Any] | None", Mapping[str, Any]],
                    "tuple[list[Any], Action]"]


@dataclass(frozen=True)
class Window:
    """One window op's geometry, in the order the kernels take it
    (``codegen_conv.GEOMETRY``): image ``[n, h, w, c]``, output ``[ho, wo]``, window,
    strides, dilations, and the padding before (top, left)."""

    n: int
    h: int
    w: int
    c: int
    ho: int
    wo: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    top: int
    left: int

    def args(self) -> tuple[np.int64, ...]:
        return tuple(np.int64(v) for v in astuple(self))

    @property
    def rows(self) -> int:
        """Output pixels: the im2col matrix's rows."""
        return self.n * self.ho * self.wo

    @property
    def taps(self) -> int:
        """The im2col matrix's columns ``kh * kw * c``."""
        return self.kh * self.kw * self.c


# ---- the kernels, loaded once per device and dtype ----------------------------------------

_loaded: dict[tuple[int, str], tuple[Any, dict[str, Kernel]]] = {}
_loaded_lock = threading.Lock()


def loaded(dev: Any, kernels: Sequence[Kernel]) -> tuple[Any, dict[str, Kernel]]:
    """``kernels`` as one module on ``dev`` (NVRTC for a GPU's own architecture, g++ for
    the emulator; the PTX is cached on disk): the handle ``dev.launcher`` takes, and the
    kernels by name. Loaded once per device and kernel set."""
    from tfc.backends.cuda.kernel import module_source
    key = (id(dev), kernels[0].name)
    with _loaded_lock:
        got = _loaded.get(key)
        if got is None:
            ptx = ""
            if not dev.emulated:
                from tfc.backends.cuda.nvrtc import compile_ptx
                ptx = compile_ptx(module_source(kernels),
                                  arch=f"compute_{dev.compute_capability}")
            got = _loaded[key] = (dev.load(list(kernels), ptx), {k.name: k for k in kernels})
        return got


def launcher(dev: Any, kernels: Sequence[Kernel], name: str, total: int,
             args: Sequence[Any]) -> Action:
    """The prepared launch of kernel ``name`` over ``total`` elements (grid-stride)."""
    handle, by_name = loaded(dev, kernels)
    kernel = by_name[name]
    grid = kernel.launch.grid({"total": total})
    return dev.launcher(handle, kernel, grid, kernel.launch.block, 0, tuple(args))


def specializes(dev: Any) -> bool:
    """Whether window kernels are specialized to each op's geometry (``SPECIALIZE``)."""
    return not dev.emulated if SPECIALIZE is None else SPECIALIZE


def _window_launch(dev: Any, dt: np.dtype, kind: str, geo: Window, total: int,
                   arrays: Sequence[Any], extra: Mapping[str, int] | None = None) -> Action:
    """The launch of window kernel ``kind`` over ``total`` elements: the module of
    ``dt``'s kernels with the geometry as arguments, or (``specializes``) the kernel
    made for this geometry, which takes the arrays alone."""
    dtype = DType.from_numpy(dt)
    extra = dict(extra or {})
    if specializes(dev):
        values = tuple(zip(codegen_conv.GEOMETRY, astuple(geo))) + tuple(sorted(extra.items()))
        kernel = codegen_conv.specialized(kind, dtype, values)
        return launcher(dev, [kernel], kernel.name, total, tuple(arrays))
    return launcher(dev, codegen_conv.window_kernels(dtype),
                    codegen_conv.kernel_name(kind, dtype), total,
                    (*arrays, *geo.args(), *(np.int64(v) for v in extra.values())))


# ---- geometry --------------------------------------------------------------------------

def _conv(op: str, attrs: Mapping[str, Any], image: Sequence[int], filt: Sequence[int]
          ) -> tuple[Window, int]:
    """The convolution's window and its output channels, checked as the reference does."""
    s = spatial_attr(op, "strides", attrs["strides"])
    d = spatial_attr(op, "dilations", attrs["dilations"])
    n, h, wd, c = image
    kh, kw, ci, co = filt
    if c != ci:
        raise ExecutionError(f"{op}: input has {c} channels, filter expects {ci}")
    (ho, wo), before, _ = geometry(op, (h, wd), (kh, kw), s, d, attrs["padding"])
    return Window(n, h, wd, c, ho, wo, kh, kw, *s, *d, *before), co


def _pool(op: str, attrs: Mapping[str, Any], image: Sequence[int]) -> Window:
    k = spatial_attr(op, "ksize", attrs["ksize"])
    s = k if attrs["strides"] is None else spatial_attr(op, "strides", attrs["strides"])
    (ho, wo), before, _ = geometry(op, image[1:3], k, s, (1, 1), attrs["padding"])
    n, h, w, c = image
    return Window(n, h, w, c, ho, wo, *k, *s, 1, 1, *before)


# ---- operands and results ----------------------------------------------------------------

def _outputs(dev: Any, outs: list[Any] | None, shape: Sequence[int], dtype: Any) -> Any:
    """The op's result array: the binding's (``outs``) or a new one."""
    return dev.empty(tuple(shape), dtype) if outs is None else outs[0]


def _operand(dev: Any, a: Any, before: list[Action]) -> Any:
    """``a`` as a C-contiguous array a kernel can take: itself, or a buffer the step
    copies it into first (``before``)."""
    if a.flags.c_contiguous:
        return a
    buf = dev.empty(a.shape, a.dtype)
    before.append(partial(dev.xp.copyto, buf, a))
    return buf


def _widened(dev: Any, a: Any, acc: np.dtype, before: list[Action]) -> Any:
    """``a`` in the compute dtype: itself, or an f32 buffer the step widens f16 into."""
    if a.dtype == acc:
        return a
    buf = dev.empty(a.shape, acc)
    before.append(partial(dev.xp.copyto, buf, a))
    return buf


def _sequence(actions: Sequence[Action]) -> Action:
    if len(actions) == 1:
        return actions[0]
    steps = tuple(actions)

    def run() -> None:
        for act in steps:
            act()
    run.steps = steps  # type: ignore[attr-defined]  # (what tools/gpu_check_conv.py times)
    return run


def _zeros(out: Any) -> Action:
    return partial(out.fill, 0)


def _gemm(dev: Any, a: Any, b: Any, out: Any, acc: np.dtype, steps: list[Action]) -> None:
    """``out = a @ b`` (2-D; ``a``/``b`` may be transposed views, which cuBLAS takes as
    flags), computed in ``acc``: straight into ``out`` when it is of that dtype, else
    into an ``acc`` buffer rounded once into ``out``."""
    xp = dev.xp
    if out.dtype == acc:
        steps.append(partial(xp.matmul, a, b, out=out))
        return
    wide = dev.empty(out.shape, acc)
    steps.append(partial(xp.matmul, a, b, out=wide))
    steps.append(partial(xp.copyto, out, wide, casting="unsafe"))


# ---- the ops -------------------------------------------------------------------------------

def direct_forward(geo: Window) -> bool:
    """Whether conv2d runs as ``conv_direct`` (``STRATEGY``)."""
    return STRATEGY == "direct" or (STRATEGY == "auto" and geo.taps <= DIRECT_MAX_TAPS)


def direct_filter(geo: Window, co: int) -> bool:
    """Whether the filter gradient runs as ``filter_partials`` + ``filter_sum``: only when
    ``STRATEGY`` says "direct". On an H200 cuBLAS was faster at every size measured
    (batch 256, 28x28, 3x3x1x32: 69 us against 137 us; 3x3x32x64 at batch 64: 126 us
    against 1810 us), so "auto" takes the GEMM."""
    return STRATEGY == "direct"


def prepare_conv2d(dev: Any, ins: Sequence[Any], outs: list[Any] | None,
                   attrs: Mapping[str, Any]) -> tuple[list[Any], Action]:
    x, w = ins
    geo, co = _conv("conv2d", attrs, x.shape, w.shape)
    out = _outputs(dev, outs, (geo.n, geo.ho, geo.wo, co), x.dtype)
    if out.size == 0:
        return [out], _zeros(out)
    acc = compute_dtype(x.dtype)
    steps: list[Action] = []
    x = _operand(dev, x, steps)
    if direct_forward(geo):
        w = _operand(dev, w, steps)
        steps.append(_window_launch(dev, x.dtype, "conv_direct", geo, out.size,
                                    (x, w, out), {"co": co}))
        return [out], _sequence(steps)
    w = _widened(dev, _operand(dev, w, steps), acc, steps)
    cols = dev.empty((geo.rows, geo.taps), acc)
    steps.append(_window_launch(dev, x.dtype, "im2col", geo, cols.size, (x, cols)))
    _gemm(dev, cols, w.reshape(geo.taps, co), out.reshape(geo.rows, co), acc, steps)
    return [out], _sequence(steps)


def prepare_conv2d_backprop_filter(dev: Any, ins: Sequence[Any], outs: list[Any] | None,
                                   attrs: Mapping[str, Any]) -> tuple[list[Any], Action]:
    x, dy, like = ins
    op = "conv2d_backprop_filter"
    geo, co = _conv(op, attrs, x.shape, like.shape)
    expect_shape(op, "the gradient", dy, (geo.n, geo.ho, geo.wo, co))
    out = _outputs(dev, outs, like.shape, x.dtype)
    if dy.size == 0 or x.size == 0:
        return [out], _zeros(out)
    acc = compute_dtype(x.dtype)
    steps: list[Action] = []
    x = _operand(dev, x, steps)
    if direct_filter(geo, co):
        dy = _operand(dev, dy, steps)
        blocks = max(1, min(FILTER_BLOCKS, geo.rows // FILTER_MIN_CHUNK))
        chunk = -(-geo.rows // blocks)
        blocks = -(-geo.rows // chunk)
        partials = dev.empty((blocks, geo.taps * co), acc)
        steps.append(_window_launch(dev, x.dtype, "filter_partials", geo,
                                    blocks * codegen_conv.BLOCK, (x, dy, partials),
                                    {"co": co, "chunk": chunk}))
        steps.append(_window_launch(dev, x.dtype, "filter_sum", geo, out.size,
                                    (partials, out), {"co": co, "blocks": blocks}))
        return [out], _sequence(steps)
    dy = _widened(dev, _operand(dev, dy, steps), acc, steps)
    cols = dev.empty((geo.rows, geo.taps), acc)
    steps.append(_window_launch(dev, x.dtype, "im2col", geo, cols.size, (x, cols)))
    _gemm(dev, cols.T, dy.reshape(geo.rows, co), out.reshape(geo.taps, co), acc, steps)
    return [out], _sequence(steps)


def prepare_conv2d_backprop_input(dev: Any, ins: Sequence[Any], outs: list[Any] | None,
                                  attrs: Mapping[str, Any]) -> tuple[list[Any], Action]:
    w, dy, like = ins
    op = "conv2d_backprop_input"
    geo, co = _conv(op, attrs, like.shape, w.shape)
    expect_shape(op, "the gradient", dy, (geo.n, geo.ho, geo.wo, co))
    out = _outputs(dev, outs, like.shape, w.dtype)
    if dy.size == 0 or out.size == 0:
        return [out], _zeros(out)
    acc = compute_dtype(w.dtype)
    steps: list[Action] = []
    w = _widened(dev, _operand(dev, w, steps), acc, steps)
    dy = _widened(dev, _operand(dev, dy, steps), acc, steps)
    cols = dev.empty((geo.rows, geo.taps), acc)
    _gemm(dev, dy.reshape(geo.rows, co), w.reshape(geo.taps, co).T, cols, acc, steps)
    steps.append(_window_launch(dev, out.dtype, "col2im", geo, out.size, (cols, out)))
    return [out], _sequence(steps)


def _prepare_pool(op: str, dev: Any, ins: Sequence[Any], outs: list[Any] | None,
                  attrs: Mapping[str, Any]) -> tuple[list[Any], Action]:
    """``max_pool`` or ``avg_pool``: one window kernel from the image to the pooled output."""
    x = ins[0]
    geo = _pool(op, attrs, x.shape)
    out = _outputs(dev, outs, (geo.n, geo.ho, geo.wo, geo.c), x.dtype)
    if out.size == 0:
        return [out], _zeros(out)
    steps: list[Action] = []
    x = _operand(dev, x, steps)
    steps.append(_window_launch(dev, x.dtype, op, geo, out.size, (x, out)))
    return [out], _sequence(steps)


def _prepare_max_pool_grad(op: str, dev: Any, ins: Sequence[Any], outs: list[Any] | None,
                           attrs: Mapping[str, Any]) -> tuple[list[Any], Action]:
    x, y, g = ins
    geo = _pool(op, attrs, x.shape)
    pooled = (geo.n, geo.ho, geo.wo, geo.c)
    expect_shape(op, "the pooled output", y, pooled)
    expect_shape(op, "the gradient", g, pooled if op == "max_pool_grad" else x.shape)
    out = _outputs(dev, outs, x.shape if op == "max_pool_grad" else pooled, g.dtype)
    if x.size == 0 or y.size == 0:
        return [out], _zeros(out)
    steps: list[Action] = []
    x, g = _operand(dev, x, steps), _operand(dev, g, steps)
    steps.append(_window_launch(dev, x.dtype, op, geo, out.size, (x, g, out)))
    return [out], _sequence(steps)


def prepare_avg_pool_grad(dev: Any, ins: Sequence[Any], outs: list[Any] | None,
                          attrs: Mapping[str, Any]) -> tuple[list[Any], Action]:
    dy, like = ins
    op = "avg_pool_grad"
    geo = _pool(op, attrs, like.shape)
    expect_shape(op, "the gradient", dy, (geo.n, geo.ho, geo.wo, geo.c))
    out = _outputs(dev, outs, like.shape, dy.dtype)
    if dy.size == 0 or out.size == 0:
        return [out], _zeros(out)
    steps: list[Action] = []
    dy = _operand(dev, dy, steps)
    steps.append(_window_launch(dev, dy.dtype, op, geo, out.size, (dy, out)))
    return [out], _sequence(steps)


PREPARED: dict[str, Preparer] = {
    "conv2d": prepare_conv2d,
    "conv2d_backprop_filter": prepare_conv2d_backprop_filter,
    "conv2d_backprop_input": prepare_conv2d_backprop_input,
    "max_pool": partial(_prepare_pool, "max_pool"),
    "max_pool_grad": partial(_prepare_max_pool_grad, "max_pool_grad"),
    "max_pool_grad_grad": partial(_prepare_max_pool_grad, "max_pool_grad_grad"),
    "avg_pool": partial(_prepare_pool, "avg_pool"),
    "avg_pool_grad": prepare_avg_pool_grad,
}
"""Each op's preparer: what an executable binds once per binding (module docstring)."""


# ---- the array-module form (``library.LIBRARY``) --------------------------------------------

_emulated: Any = None


def device_for(xp: Any) -> Any:
    """The device whose arrays ``xp`` makes: the emulator's for numpy, else the GPU."""
    global _emulated
    if xp is np:
        if _emulated is None:
            from tfc.backends.cuda.device import EmulatedDevice
            _emulated = EmulatedDevice()
        return _emulated
    from tfc.backends.cuda.device import cuda_device
    return cuda_device()


def _once(prepare: Preparer) -> Callable[[Any, Sequence[Any], Mapping[str, Any]], list]:
    """``prepare`` as a ``LIBRARY`` function: prepared and run at once. On a GPU it runs
    on the device's stream after the work queued on the caller's current stream (which
    made the inputs), and the caller's later work waits for it."""
    def run(xp: Any, ins: Sequence[Any], attrs: Mapping[str, Any]) -> list:
        dev = device_for(xp)
        if dev.emulated:
            outs, act = prepare(dev, list(ins), None, attrs)
            act()
            return outs
        with dev.device:
            caller = xp.cuda.get_current_stream()
            dev.stream.wait_event(caller.record())
            with dev:
                outs, act = prepare(dev, list(ins), None, attrs)
                act()
            caller.wait_event(dev.stream.record())
        return outs
    return run


CONV_LIBRARY = {kind: _once(prepare) for kind, prepare in PREPARED.items()}
