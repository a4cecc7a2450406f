"""The multi-device executor keeps a GPU partition's variables on its device between
steps (``PartitionedExecutable``'s deferred steps, ``tfc.runtime.held``): a CPU/GPU
model's training step copies back the values its CPU stages need, never the GPU's
variables, and every reader (``Program.variables``, a checkpoint, ``set_variable``, a
step that fails after the GPU stage ran) sees what a one-device reference run sees.

Off a GPU the GPU stages run on the CPU emulator; under ``TFC_BACKEND=cuda`` on a
machine with a GPU they run on it (``emulated_off_the_gpu``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tfc.backends.cuda import device as cuda_device
from tfc.errors import ExecutionError
from tfc.runtime.program import Program
from tfc.testing import split_mlp_module

from tests.backends.cuda.emulated import Copies, emulated_off_the_gpu, split_mlp_feeds as feeds

RTOL = 1e-5
GPU_VARIABLES = {"w1": (8, 8), "b1": (8,)}  # layer 1 of (6, 8, 8, 3): the GPU's


@pytest.fixture(autouse=True)
def on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    emulated_off_the_gpu(monkeypatch)


def programs() -> tuple[Program, Program]:
    m = split_mlp_module(["/cpu:0", "/gpu:0"])
    m.devices = ["/cpu:0", "/gpu:0"]
    mine = Program(m, backend="llvm")
    assert callable(getattr(mine._executable("train"), "read_back", None))
    return mine, Program(split_mlp_module([None]), backend="reference")


def train(mine: Program, ref: Program, steps: range) -> None:
    for k in steps:
        np.testing.assert_allclose(mine.run("train", **feeds(k))["loss"],
                                   ref.run("train", **feeds(k))["loss"], rtol=RTOL)


def assert_same_variables(mine: Program, ref: Program) -> None:
    assert sorted(mine.variables) == sorted(ref.variables)
    for name, want in ref.variables.items():
        np.testing.assert_allclose(mine.variables[name], want, rtol=RTOL, atol=RTOL,
                                   err_msg=name)
    assert mine.step == ref.step


def record_gpu_transfers(mine: Program) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The shapes of what the GPU's stages hand over and take (the partition's
    transfers: activations, gradients, a variable's value a CPU stage reads), recorded
    as the stages run."""
    sent: list[tuple[int, ...]] = []
    taken: list[tuple[int, ...]] = []
    gpu = next(p for p in mine._executable("train").plans if p.device == "/gpu:0")
    for st in gpu.stages:
        if st.call is not None:
            def call(*args: Any, real: Any = st.call) -> Any:
                taken.extend(np.shape(a) for a in args[0])
                outs, upds = real(*args)
                sent.extend(o.shape for o in outs)
                return outs, upds
            st.call = call
    return sent, taken


def test_the_gpu_partitions_variables_stay_on_the_device() -> None:
    """Each step's device->host copies are the GPU stages' outputs (the transfers the
    partition planned: activations, gradients, @w1's value for the CPU's backward
    matmul), nothing more: no variable is copied back; the uploads are the stages'
    inputs, no variable."""
    mine, ref = programs()
    train(mine, ref, range(2))
    sent, taken = record_gpu_transfers(mine)
    with Copies(cuda_device.cuda_device()) as copies:
        train(mine, ref, range(2, 5))
        assert sent and sorted(copies.to_host) == sorted(sent)
        copies.clear()
        assert_same_variables(mine, ref)  # the GPU's variables read back, once each
        assert sorted(copies.to_host) == sorted(GPU_VARIABLES.values())
        copies.clear()
        sent.clear()
        taken.clear()
        train(mine, ref, range(5, 7))  # the arrays read back are current: no upload
        assert sorted(copies.to_host) == sorted(sent)
        if cuda_device.cuda_device().emulated:  # (a GPU stages host inputs, uncounted)
            assert taken and sorted(copies.uploads) == sorted(taken)
    assert_same_variables(mine, ref)


def test_checkpoints_and_outside_writes_mid_training(tmp_path: Path) -> None:
    mine, ref = programs()
    train(mine, ref, range(3))
    saved = mine.save_checkpoint(tmp_path / "ckpt")
    train(mine, ref, range(3, 5))
    w = np.full((8, 8), 0.01, np.float32)
    mine.set_variable("w1", w)
    ref.set_variable("w1", w)
    train(mine, ref, range(5, 7))
    assert_same_variables(mine, ref)
    mine.restore_checkpoint(saved)
    ref.restore_checkpoint(saved)
    train(mine, ref, range(3, 6))
    assert_same_variables(mine, ref)


def test_a_step_failing_after_the_gpu_stage_changes_no_variable() -> None:
    """The GPU stages' writes wait for every device: a step that fails after the GPU's
    update stage ran (injected right after it) leaves its variables as they were."""
    mine, ref = programs()
    train(mine, ref, range(2))
    exe = mine._executable("train")
    gpu = next(p for p in exe.plans if p.device == "/gpu:0")
    last = [st for st in gpu.stages if st.call is not None][-1]
    assert set(last.executable.update_names) == set(GPU_VARIABLES)  # type: ignore
    real = last.call

    def failing(*args: Any) -> Any:
        real(*args)  # type: ignore[misc]
        raise ExecutionError("injected failure")
    last.call = failing
    with pytest.raises(ExecutionError, match="injected"):
        mine.run("train", **feeds(2))
    last.call = real
    assert mine.step == ref.step
    train(mine, ref, range(2, 4))
    assert_same_variables(mine, ref)
