"""A CNN training step on the cuda backend (emulator) with its batch on the device: the
reference's numbers, and class labels checked on the device without stopping the step
midway: the check's answer is read once, with the fetches, before any variable write.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest

from tfc.backends.cuda import device as cuda_device
from tfc.errors import ExecutionError
from tfc.runtime.program import Program

from tests.backends.cuda.emulated import emulated_off_the_gpu

RTOL = 1e-5
IMAGE, FILTERS, CLASSES = 6, 4, 5


@pytest.fixture
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator even on a GPU machine: device feeds are ``EmulatedArray``s, whose host
    reads ``NoHostReads`` can watch."""
    monkeypatch.setenv(cuda_device.DEVICE_ENV, cuda_device.EMULATED)


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator, but the GPU under ``TFC_BACKEND=cuda`` on a machine with one."""
    emulated_off_the_gpu(monkeypatch)


def cnn_module() -> Any:
    """conv 3x3 SAME + bias + relu, 2x2 max pool, dense, softmax cross-entropy, SGD (the
    benchmark's CNN, small). ``train`` takes labels ``y``; ``train_argmax`` takes scores
    ``z`` whose argmax are the labels (computed on the device, possibly out of range)."""
    import tfc
    rng = np.random.default_rng(0)
    half = IMAGE // 2
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, IMAGE, IMAGE, 1], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        z = tfc.placeholder(tfc.float32, [None, CLASSES + 2], name="z")
        k = tfc.Variable(rng.normal(0, 0.3, (3, 3, 1, FILTERS)).astype(np.float32), name="K")
        kb = tfc.Variable(np.zeros(FILTERS, np.float32), name="kb")
        w = tfc.Variable(rng.normal(0, 0.3, (half * half * FILTERS, CLASSES))
                         .astype(np.float32), name="W")
        b = tfc.Variable(np.zeros(CLASSES, np.float32), name="b")
        h = tfc.nn.relu(tfc.nn.conv2d(x, k, padding="SAME") + kb)
        h = tfc.reshape(tfc.nn.max_pool2d(h, 2), [-1, half * half * FILTERS])
        logits = tfc.matmul(h, w) + b
        for name, labels, feeds in (("train", y, {"x": x, "y": y}),
                                    ("train_argmax", tfc.argmax(z, axis=1,
                                                                output_type=tfc.int32),
                                     {"x": x, "z": z})):
            loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
            train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
            tfc.entry(name, feeds=feeds, fetches={"loss": loss}, targets=[train])
    return g.as_module()


@pytest.fixture
def programs(emulated: None) -> Iterator[tuple[Program, Program]]:
    module = cnn_module()
    ref = Program(module, backend="reference")
    yield Program(module, dict(ref.variables), backend="cuda"), ref


def batch(step: int, n: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    return {"x": rng.normal(size=(n, IMAGE, IMAGE, 1)).astype(np.float32),
            "y": rng.integers(0, CLASSES, n).astype(np.int32),
            # scores whose argmax is a class (the last two columns never win)
            "z": (rng.normal(size=(n, CLASSES + 2)) - 10 * (np.arange(CLASSES + 2) >= CLASSES)
                  ).astype(np.float32)}


def on_device(a: np.ndarray) -> np.ndarray:
    return a.copy().view(cuda_device.EmulatedArray)


class NoHostReads:
    """Fails any host read of a device array (``bool``/``any`` of an ``EmulatedArray``:
    what a label check that synchronizes does) and counts synchronizations."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def refuse(*a: Any, **k: Any) -> Any:
            raise AssertionError("a device array was read on the host during the step")
        monkeypatch.setattr(cuda_device.EmulatedArray, "__bool__", refuse, raising=False)
        monkeypatch.setattr(cuda_device.EmulatedArray, "any", refuse)
        dev = cuda_device.cuda_device()
        self.syncs = 0
        real = dev.synchronize

        def counted() -> None:
            self.syncs += 1
            real()
        monkeypatch.setattr(dev, "synchronize", counted)


def assert_same_variables(mine: Program, ref: Program) -> None:
    for name, want in ref.variables.items():
        np.testing.assert_allclose(mine.variables[name], want, rtol=RTOL, atol=RTOL,
                                   err_msg=name)


def test_cnn_steps_with_the_batch_on_the_device_match_the_reference(
        programs: tuple[Program, Program], monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels fed as a device array are checked on the device: the step reads no device
    array on the host and synchronizes once (the loss and the check's answer together)."""
    mine, ref = programs
    step = mine.callable("train", ["x", "y"], "loss")
    want = ref.callable("train", ["x", "y"], "loss")
    f = batch(0)
    np.testing.assert_allclose(step(f["x"], f["y"]), want(f["x"], f["y"]), rtol=RTOL)
    watch = NoHostReads(monkeypatch)
    for k in range(1, 4):
        f = batch(k)
        np.testing.assert_allclose(step(on_device(f["x"]), on_device(f["y"])),
                                   want(f["x"], f["y"]), rtol=RTOL)
    assert watch.syncs == 3
    monkeypatch.undo()
    assert_same_variables(mine, ref)


def test_bad_labels_on_the_device_are_the_references_error_and_change_nothing(
        programs: tuple[Program, Program], monkeypatch: pytest.MonkeyPatch) -> None:
    mine, ref = programs
    step = mine.callable("train", ["x", "y"], "loss")
    want = ref.callable("train", ["x", "y"], "loss")
    f = batch(0)
    step(on_device(f["x"]), on_device(f["y"]))
    want(f["x"], f["y"])
    bad_y = np.array([0, CLASSES, -1], np.int32)
    with pytest.raises(ExecutionError) as theirs:
        want(f["x"], bad_y)
    NoHostReads(monkeypatch)
    with pytest.raises(ExecutionError) as got:
        step(on_device(f["x"]), on_device(bad_y))
    monkeypatch.undo()
    assert str(got.value) == str(theirs.value)
    assert "label 5 at index [1] is out of range [0, 5)" in str(got.value)
    assert mine.step == ref.step == 1
    f = batch(1)  # the failed step wrote nothing: the next one is still the reference's
    np.testing.assert_allclose(step(on_device(f["x"]), on_device(f["y"])),
                               want(f["x"], f["y"]), rtol=RTOL)
    np.testing.assert_allclose(step(f["x"], f["y"]), want(f["x"], f["y"]), rtol=RTOL)
    assert_same_variables(mine, ref)


def test_labels_computed_on_the_device_are_checked_there(
        programs: tuple[Program, Program], monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels that are an argmax (computed in the step, of 7 scores for 5 classes) are
    checked on the device too: the reference's error for the first bad row, else its
    numbers."""
    mine, ref = programs
    f = batch(2)
    z = np.zeros((3, CLASSES + 2), np.float32)
    z[:, 0] = 1
    for prog in (mine, ref):
        prog.run("train_argmax", x=f["x"], z=z)
    z[1, CLASSES + 1] = 5.0  # row 1's label is 6
    z[2, CLASSES] = 5.0
    with pytest.raises(ExecutionError) as theirs:
        ref.run("train_argmax", x=f["x"], z=z)
    NoHostReads(monkeypatch)
    with pytest.raises(ExecutionError) as got:
        mine.run("train_argmax", x=on_device(f["x"]), z=on_device(z))
    monkeypatch.undo()
    assert str(got.value) == str(theirs.value)
    assert "label 6 at index [1]" in str(got.value)
    for k in range(3, 5):
        f = batch(k)
        np.testing.assert_allclose(mine.run("train_argmax", x=f["x"], z=f["z"])["loss"],
                                   ref.run("train_argmax", x=f["x"], z=f["z"])["loss"],
                                   rtol=RTOL)
    assert_same_variables(mine, ref)


def bias_gradient_module(shape: tuple, dtype: Any = np.float32, mean: bool = False) -> Any:
    """A conv layer's backward tail as it fuses: the relu gradient (full shape, fetched)
    and its sum over every axis but the channels (the bias gradient; or a mean), and the
    sum of squares too (two reductions in one kernel)."""
    import tfc
    dt = {np.float32: tfc.float32, np.float16: tfc.float16}[dtype]
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(dt, list(shape), name="x")
        dy = tfc.placeholder(dt, list(shape), name="dy")
        grad = tfc.where(x > 0, dy, tfc.zeros_like(dy))
        reduce = tfc.reduce_mean if mean else tfc.reduce_sum
        tfc.entry("f", feeds={"x": x, "dy": dy},
                  fetches={"grad": grad, "bias": reduce(grad, axis=[0, 1, 2]),
                           "squares": tfc.reduce_sum(grad * grad, axis=[0, 1, 2])})
    return g.as_module()


@pytest.mark.parametrize("shape,dtype,mean,chunks", [
    ((None, 16, 8, 40), np.float32, False, 4),  # symbolic columns, 2 row blocks (40 rows)
    ((None, 16, 9, 32), np.float16, True, 5),  # 2 images: chunks of 58, the last short
    ((16, 8, 8, 40), np.float32, False, None),  # static columns: 8 chunks of 128
])
def test_a_bias_gradient_over_a_batch_is_split_across_blocks(
        shape: tuple, dtype: Any, mean: bool, chunks: int | None,
        monkeypatch: pytest.MonkeyPatch, device: None) -> None:
    """The bias gradient of a conv layer reduces few rows (channels) over every pixel of
    the batch: its columns are split across blocks (``codegen.column_split_chunks``),
    each block storing its columns of the relu gradient too; the reference's numbers,
    the same bits step after step (the chunk counters reset) and at another batch size.
    (Few chunks for symbolic columns: the emulator runs a fiber per CUDA thread.)"""
    from tfc.backends.cuda import codegen
    if chunks is not None:
        monkeypatch.setattr(codegen, "COLUMN_SPLIT_CHUNKS", chunks)
    module = bias_gradient_module(shape, dtype, mean)
    exe = _compiled(module)
    ref = Program(module, backend="reference")
    split = [k for k in exe.kernels.values() if "block_row" in k.source]
    assert len(split) == 1 and split[0].launch.scratch_bytes > 0, list(exe.kernels.values())
    rng = np.random.default_rng(0)
    # sums of ~1000 terms of size ~1 in another order than numpy's pairwise ones
    rtol, atol = (2e-3, 2e-3) if dtype == np.float16 else (1e-5, 1e-3)
    for step, batch in enumerate([7, 7, 2] if shape[0] is None else [shape[0]] * 2):
        full = (batch, *shape[1:])
        x = rng.normal(size=full).astype(dtype)
        dy = rng.normal(size=full).astype(dtype)
        got = dict(zip(("grad", "bias", "squares"), exe([x, dy], {}, step).fetches))
        want = ref.run("f", x=x, dy=dy)
        np.testing.assert_array_equal(got["grad"], want["grad"])
        if dtype == np.float16:  # numpy sums f16 in f16; the kernel in f32, rounded once
            g = want["grad"].astype(np.float64)
            red = np.mean if mean else np.sum
            want = {"bias": red(g, axis=(0, 1, 2)), "squares": np.sum(g * g, axis=(0, 1, 2))}
        for name in ("bias", "squares"):
            np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol,
                                       err_msg=name)
        again = exe([x, dy], {}, step).fetches
        for k, name in ((1, "bias"), (2, "squares")):
            np.testing.assert_array_equal(again[k], got[name], err_msg=name)


def _compiled(module: Any) -> Any:
    """The entry compiled now (with this test's code generator settings: no cache)."""
    from tfc.backends.cuda import CUDABackend
    from tfc.pipeline import lower_entry
    return CUDABackend().compile(lower_entry(module, "f", "cuda"), "f")
