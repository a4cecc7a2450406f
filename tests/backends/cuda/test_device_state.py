"""Variables that stay on the device and feeds that are already there (the cuda
backend's hot path through ``Program``), on the CPU emulator.

A ``Program`` step on the cuda backend defers its variable updates: nothing is copied
back to the host (counted here on the device's copy methods), and every reader of the
variables (``Program.variables``, checkpoints, artifacts, other entries, other backends,
``set_variable``/``restore_checkpoint`` then more steps, a step that fails) still sees
exactly what a reference ``Program`` sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from tfc.backends.cuda import device as cuda_device
from tfc.errors import ExecutionError, FeedError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, VariableDecl
from tfc.ir.types import DType, TensorType
from tfc.runtime.program import Program
from tfc.testing import split_mlp_module

from tests.backends.cuda.emulated import Copies

emulator = pytest.importorskip("tfc.backends.cuda.emulator")
if not emulator.available():
    pytest.skip("the CUDA emulator needs g++ (C++20)", allow_module_level=True)

RTOL = 1e-5


@pytest.fixture(autouse=True)
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Always the emulator: copies are counted on its device object, and device feeds
    are its ``EmulatedArray``."""
    monkeypatch.setenv(cuda_device.DEVICE_ENV, cuda_device.EMULATED)


def feeds(step: int, batch: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    return {"x": rng.normal(size=(batch, 6)).astype(np.float32),
            "y": rng.integers(0, 3, batch).astype(np.int32)}


def assert_same_variables(mine: Program, ref: Program) -> None:
    assert sorted(mine.variables) == sorted(ref.variables)
    for name, want in ref.variables.items():
        np.testing.assert_allclose(mine.variables[name], want, rtol=RTOL, atol=RTOL,
                                   err_msg=name)


@pytest.fixture
def programs() -> Iterator[tuple[Program, Program]]:
    module = split_mlp_module([None])
    yield Program(module, backend="cuda"), Program(module, backend="reference")


def test_training_steps_copy_no_variable_back(programs: tuple[Program, Program]) -> None:
    """Steps through ``callable`` and ``run`` copy back only the fetched loss and upload
    only the feeds; the variables read afterwards are the reference's."""
    mine, ref = programs
    step, want = mine.callable("train", fetches="loss"), ref.callable("train", fetches="loss")
    f = feeds(0)
    step(f["x"], f["y"])  # the first step uploads the variables, once
    want(f["x"], f["y"])
    with Copies(cuda_device.cuda_device()) as copies:
        for k in range(1, 4):
            f = feeds(k)
            np.testing.assert_allclose(step(f["x"], f["y"]), want(f["x"], f["y"]), rtol=RTOL)
        assert copies.to_host == [()] * 3  # the loss of each later step, nothing else
        assert copies.uploads == [(4, 6), (4,)] * 3
        copies.clear()
        mine.run("train", **feeds(4))
        ref.run("train", **feeds(4))
        assert copies.to_host == [()] and copies.uploads == [(4, 6), (4,)]
        copies.clear()
        assert_same_variables(mine, ref)  # one read back per updated variable
        assert sorted(copies.to_host) == sorted(v.shape for v in mine.variables.values())
        copies.clear()
        mine.run("train", **feeds(5))  # read back: the arrays it returned upload nothing
        assert copies.uploads == [(4, 6), (4,)]
    ref.run("train", **feeds(5))
    assert_same_variables(mine, ref)
    assert mine.step == ref.step == 6


def test_every_reader_sees_the_device_values(programs: tuple[Program, Program],
                                            tmp_path: Path) -> None:
    """Another entry, a checkpoint, an artifact, another backend's program, and writes
    from outside (``set_variable``, ``restore_checkpoint``) followed by more steps."""
    from tfc.runtime.artifact import load_artifact
    mine, ref = programs
    held = mine.variables  # a view taken before the steps shows their values
    for k in range(2):
        mine.run("train", **feeds(k))
        ref.run("train", **feeds(k))
    for name, want in ref.variables.items():
        np.testing.assert_allclose(held[name], want, rtol=RTOL, atol=RTOL, err_msg=name)
    x = feeds(9, batch=3)["x"]
    np.testing.assert_allclose(mine.run("predict", x=x)["logits"],
                               ref.run("predict", x=x)["logits"], rtol=RTOL, atol=RTOL)
    saved = mine.save_checkpoint(tmp_path / "ckpt")
    at_ckpt = {n: v.copy() for n, v in ref.variables.items()}
    for k in range(2, 4):
        mine.run("train", **feeds(k))
        ref.run("train", **feeds(k))
    mine.save(tmp_path / "m.tfc")
    loaded = load_artifact(tmp_path / "m.tfc", backend="reference")
    assert_same_variables(loaded, ref)
    other = Program(mine.module, backend="reference")
    other.restore_checkpoint(saved)
    for name, want in at_ckpt.items():
        np.testing.assert_allclose(other.variables[name], want, rtol=RTOL, atol=RTOL)
    # an outside write, then steps: the device copy follows
    w = np.full_like(ref.variables["w0"], 0.01)
    mine.set_variable("w0", w)
    ref.set_variable("w0", w)
    for k in range(4, 6):
        mine.run("train", **feeds(k))
        ref.run("train", **feeds(k))
    assert_same_variables(mine, ref)
    # back to the checkpoint, then the steps an uninterrupted run would take
    mine.restore_checkpoint(saved)
    ref.restore_checkpoint(saved)
    assert mine.step == ref.step == 3  # (two train steps and a predict step)
    assert_same_variables(mine, ref)
    for k in range(2, 4):
        mine.run("train", **feeds(k))
        ref.run("train", **feeds(k))
    np.testing.assert_allclose(mine.run("predict", x=x)["logits"],
                               ref.run("predict", x=x)["logits"], rtol=RTOL, atol=RTOL)
    assert_same_variables(mine, ref)


def test_a_failed_step_changes_no_variable(programs: tuple[Program, Program]) -> None:
    mine, ref = programs
    for k in range(2):
        mine.run("train", **feeds(k))
        ref.run("train", **feeds(k))
    bad = dict(feeds(7), y=np.array([0, 5, 1, 0], np.int32))
    with pytest.raises(ExecutionError, match="out of range"):
        mine.run("train", **bad)
    assert mine.step == 2
    mine.run("train", **feeds(2))
    ref.run("train", **feeds(2))
    assert_same_variables(mine, ref)


def _scatter_module() -> Module:
    """``a += x`` then ``b[i] += u``: the scatter's indices are checked when it writes."""
    g = Graph("f")
    t = TensorType(DType.f32, (3, 2))
    x, i, u = (g.add_arg(TensorType(dt, s), n) for n, dt, s in
               (("x", DType.f32, (3, 2)), ("i", DType.i32, (2,)), ("u", DType.f32, (2, 2))))
    b = Builder(g)
    b.op("var.assign_add", x, var="a")
    b.op("var.scatter_add", i, u, var="b")
    out = b.op("var.read", var="a", result_types=[t]).result
    g.set_results([b("add", out, out)])
    return Module({"f": g}, {n: VariableDecl(n, t) for n in "ab"})


def test_a_write_that_fails_leaves_every_variable_as_it_was() -> None:
    """The scatter's bad index fails the step after ``a``'s write was computed: no write
    lands on the device copies (the checks come first), so the next steps match."""
    module = _scatter_module()
    values = {n: np.arange(6, dtype=np.float32).reshape(3, 2) for n in "ab"}
    mine, ref = Program(module, values, backend="cuda"), Program(module, values,
                                                                 backend="reference")
    one = np.ones((3, 2), np.float32)
    good = {"x": one, "i": np.array([2, 2], np.int32), "u": np.ones((2, 2), np.float32)}
    for prog in (mine, ref):
        prog.run("f", **good)
    with pytest.raises(ExecutionError, match="out of range"):
        mine.run("f", **dict(good, i=np.array([0, 3], np.int32)))
    for _ in range(2):
        np.testing.assert_array_equal(list(mine.run("f", **good).values())[0],
                                      list(ref.run("f", **good).values())[0])
    assert_same_variables(mine, ref)


def test_device_feeds_pass_without_a_host_copy(programs: tuple[Program, Program]) -> None:
    """Feeds that are the device's arrays (``EmulatedArray`` here, cupy arrays on a GPU)
    are copied on the device, not uploaded; same results; same checks."""
    mine, ref = programs
    step, want = mine.callable("train", fetches="loss"), ref.callable("train", fetches="loss")
    f = feeds(0)
    step(f["x"], f["y"])
    want(f["x"], f["y"])
    on_dev = [a.copy().view(cuda_device.EmulatedArray) for a in (f["x"], f["y"])]
    with Copies(cuda_device.cuda_device()) as copies:
        for _ in range(2):
            np.testing.assert_allclose(step(*on_dev), want(f["x"], f["y"]), rtol=RTOL)
        assert copies.uploads == [] and copies.on_device == [(4, 6), (4,)] * 2
    assert_same_variables(mine, ref)
    x64 = f["x"].astype(np.float64).view(cuda_device.EmulatedArray)
    with pytest.raises(FeedError, match=r"feed 'x' is a device array of dtype float64, "
                                        r"expected float32"):
        step(x64, on_dev[1])
    short = f["x"][:, :5].copy().view(cuda_device.EmulatedArray)
    with pytest.raises(FeedError, match=r"entry 'train': feed 'x' has shape \[4,5\], "
                                        r"expected f32\[B,6\] \(dim 1 is 5"):
        step(short, on_dev[1])
    assert mine.step == 3


def test_a_training_step_runs_prepared_library_calls(programs: tuple[Program, Program],
                                                     monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    """What a GPU step's Python does per op is one prepared call: each matmul a cuBLAS
    call made when binding (``Device.gemm``), each optimizer write a prepared write
    (``Device.writer``: a copy or cuBLAS ``axpy``), each host feed copied through a
    staging buffer of its own (``Device.uploader``). Counted when binding; the steps
    then match the reference's."""
    mine, ref = programs
    dev = cuda_device.cuda_device()
    made: dict[str, int] = {"gemm": 0, "writer": 0, "uploader": 0}
    for name in made:
        real = getattr(dev, name)

        def counted(*a: Any, real: Any = real, name: str = name) -> Any:
            made[name] += 1
            return real(*a)
        monkeypatch.setattr(dev, name, counted)
    step, want = mine.callable("train", fetches="loss"), ref.callable("train", fetches="loss")
    for k in range(3):
        f = feeds(k)
        np.testing.assert_allclose(step(f["x"], f["y"]), want(f["x"], f["y"]), rtol=RTOL)
    # 3 layers: 3 forward products, 2 + 3 backward (no gradient for the input x)
    assert made == {"gemm": 8, "writer": 6, "uploader": 2}
    assert_same_variables(mine, ref)


def test_a_strided_host_feed_reaches_the_device_in_one_copy() -> None:
    """A feed that is not C-contiguous (a column of a wider array, a transpose) goes to
    the executable as it is (``takes_strided_feeds``) and is staged by one strided copy:
    the runtime makes no contiguous copy first. The numbers are the reference's."""
    mine = Program(split_mlp_module([None]), backend="cuda")
    ref = Program(split_mlp_module([None]), backend="reference")
    exe: Any = mine._executable("train")
    seen: list[bool] = []
    real = exe.fast_step

    def recording(feeds: Any, *args: Any, **kw: Any) -> Any:
        seen.extend(f.flags.c_contiguous for f in feeds)
        return real(feeds, *args, **kw)
    exe.fast_step = recording
    step = mine.callable("train", fetches="loss")
    for k in range(3):
        f = feeds(k)
        wide = np.zeros((6, 4, 2), np.float32)  # x as a strided view: wide[..., 0].T
        wide[..., 0] = f["x"].T
        x = wide[..., 0].T
        assert not x.flags.c_contiguous
        with Copies(cuda_device.cuda_device()) as copies:
            got = step(x, f["y"])
        assert copies.uploads == [(4, 6), (4,)]
        np.testing.assert_allclose(got, ref.run("train", **f)["loss"], rtol=RTOL)
    assert seen == [False, True] * 3
    assert_same_variables(mine, ref)
