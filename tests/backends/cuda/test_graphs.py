"""CUDA graphs (``CUDAExecutable.cuda_graphs``): a binding's actions captured once and
replayed as one launch give exactly the steps run without them; bindings with work that
a graph cannot hold (a random op reads the step number, a library op allocates) run
without one; fed labels are still checked every step.

Off a GPU the capture is the emulator's (a recorded replay of the same actions: this
checks the bookkeeping); under ``TFC_BACKEND=cuda`` on a GPU it is cupy's stream capture.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tfc.backends.cuda import device as cuda_device
from tfc.errors import ExecutionError
from tfc.runtime.program import Program
from tfc.testing import split_mlp_module

from tests.backends.cuda.emulated import emulated_off_the_gpu, split_mlp_feeds as feeds


@pytest.fixture(autouse=True)
def on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    emulated_off_the_gpu(monkeypatch)


def program(graphs: bool, dropout: bool = False) -> Program:
    p = Program(split_mlp_module([None], dropout=dropout), backend="cuda")
    for entry in ("train", "predict"):
        p._executable(entry).cuda_graphs = graphs  # type: ignore[attr-defined]
    return p


def captures(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of actions of each capture made from now on."""
    dev = cuda_device.cuda_device()
    made: list[int] = []
    real = dev.capture

    def counted(actions: Any) -> Any:
        made.append(len(actions))
        return real(actions)
    monkeypatch.setattr(dev, "capture", counted)
    return made


def test_replayed_steps_equal_steps_without_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    made = captures(monkeypatch)
    with_graphs, without = program(True), program(False)
    for k in range(5):
        got = with_graphs.run("train", **feeds(k))["loss"]
        want = without.run("train", **feeds(k))["loss"]
        np.testing.assert_array_equal(got, want)
    assert len(made) == 2 and made[0] > 1  # the actions, then the writes: once
    exe: Any = with_graphs._executable("train")
    assert exe.graph_problem is None and exe._last.replays
    for name, value in without.variables.items():
        np.testing.assert_array_equal(with_graphs.variables[name], value, err_msg=name)
    x = feeds(9, batch=3)["x"]  # another entry, another binding
    for _ in range(3):
        np.testing.assert_array_equal(with_graphs.run("predict", x=x)["logits"],
                                      without.run("predict", x=x)["logits"])


def test_fed_labels_are_checked_before_each_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    with_graphs, without = program(True), program(False)
    for k in range(3):
        with_graphs.run("train", **feeds(k))
        without.run("train", **feeds(k))
    bad = feeds(3)
    bad["y"][2] = 7
    with pytest.raises(ExecutionError, match="label"):
        with_graphs.run("train", **bad)
    assert with_graphs.step == 3
    for k in range(3, 5):
        np.testing.assert_array_equal(with_graphs.run("train", **feeds(k))["loss"],
                                      without.run("train", **feeds(k))["loss"])


def test_a_step_reading_the_step_number_runs_without_a_graph(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropout's random kernel takes the step as an argument: a graph would replay one
    step's mask, so such a binding is never captured, and its steps stay exact."""
    made = captures(monkeypatch)
    with_graphs, without = program(True, dropout=True), program(False, dropout=True)
    for k in range(4):
        np.testing.assert_array_equal(with_graphs.run("train", **feeds(k))["loss"],
                                      without.run("train", **feeds(k))["loss"])
    exe: Any = with_graphs._executable("train")
    assert made == [] and exe._last.device_actions is None


def on_device(a: np.ndarray) -> Any:
    """``a`` as an array of the device (the emulator's ``EmulatedArray``, a cupy array)."""
    dev = cuda_device.cuda_device()
    if dev.emulated:
        return a.copy().view(cuda_device.EmulatedArray)
    return dev.to_device(a)


def test_labels_fed_on_the_device_are_checked_by_the_kernel_in_the_graph(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Feeds on the device: a graph of its own, whose label check kernel's answer is
    read every step; a bad label is the reference's error and changes nothing. Host and
    device feeds alternate between their two graphs, with the same numbers."""
    made = captures(monkeypatch)
    with_graphs, without = program(True), program(False)
    for k in range(4):
        f = feeds(k)
        dx, dy = on_device(f["x"]), on_device(f["y"])
        np.testing.assert_array_equal(with_graphs.run("train", x=dx, y=dy)["loss"],
                                      without.run("train", **f)["loss"])
    exe: Any = with_graphs._executable("train")
    assert exe.graph_launches == 3 and list(exe._last.replays) == [(True, True)]
    bad = feeds(4)
    bad["y"][1] = -1
    with pytest.raises(ExecutionError, match="label"):
        with_graphs.run("train", x=on_device(bad["x"]), y=on_device(bad["y"]))
    assert exe.graph_launches == 4 and with_graphs.step == 4
    for k in range(4, 8):  # host feeds, then device feeds again
        f = feeds(k)
        given = f if k < 6 else {"x": on_device(f["x"]), "y": on_device(f["y"])}
        np.testing.assert_array_equal(with_graphs.run("train", **given)["loss"],
                                      without.run("train", **f)["loss"])
    assert len(made) == 3 and exe.graph_launches == 7  # (host feeds: one eager step)
    for name, value in without.variables.items():
        np.testing.assert_array_equal(with_graphs.variables[name], value, err_msg=name)


def test_no_other_thread_queues_work_while_a_step_is_captured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every executable of a device queues on the device's one stream, and a capture
    records whatever any thread queues on it meanwhile: the device's lock keeps other
    threads' steps (a prefetch thread's map fn) out until the capture has ended."""
    import threading
    dev = cuda_device.cuda_device()
    real, others_got_in = dev.capture, []

    def capture(actions: Any) -> Any:
        tried = threading.Thread(target=lambda: others_got_in.append(
            dev.lock.acquire(blocking=False)))
        tried.start()
        tried.join()
        return real(actions)
    monkeypatch.setattr(dev, "capture", capture)
    p = program(True)
    for k in range(3):
        p.run("train", **feeds(k))
    assert others_got_in == [False, False]  # the actions' capture and the writes'


def test_two_threads_stepping_on_one_device_give_their_sequential_results() -> None:
    """The bug itself, on a GPU (``TFC_BACKEND=cuda``): without ``Device.lock`` a step
    captured while the other thread queued its upload recorded that upload into its graph
    (cudaErrorInvalidValue on the H200). Off a GPU the emulator's capture records only the
    actions it is given, so there it checks the bookkeeping; the test above checks the
    lock itself everywhere."""
    import threading
    sequential = [program(True), program(True)]
    want = [[p.run("train", **feeds(10 * i + k))["loss"] for k in range(6)]
            for i, p in enumerate(sequential)]
    concurrent = [program(True), program(True)]
    got: list[list[Any]] = [[], []]

    def steps(i: int) -> None:
        for k in range(6):
            got[i].append(concurrent[i].run("train", **feeds(10 * i + k))["loss"])
    threads = [threading.Thread(target=steps, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i in range(2):
        np.testing.assert_array_equal(np.array(got[i]), np.array(want[i]))
