"""Program.callable: the hot-loop form of Program.run, on the default backend."""

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError, FeedError, TfcError
from tfc.runtime import Program


def make_program() -> Program:
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 3], name="x")
        s = tfc.placeholder(tfc.float32, [], name="s")
        w = tfc.Variable(np.arange(6, dtype=np.float32).reshape(3, 2) / 10, name="w")
        y = tfc.tanh(x @ w) * s
        loss = tfc.reduce_sum(y * y)
        step = w.assign_sub(0.05 * tfc.gradients(loss, w)[0])
        tfc.entry("train", feeds={"x": x, "s": s}, fetches={"y": y, "loss": loss},
                  targets=[step])
        tfc.entry("predict", feeds={"x": x, "s": s}, fetches={"y": y})
        idx = tfc.placeholder(tfc.int32, [2], name="i")
        tfc.entry("pick", feeds={"i": idx}, fetches={"p": tfc.gather(w, idx)})
        return Program(g.as_module())


def feeds(batch: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).normal(size=(batch, 3)).astype(np.float32)
    return x, np.float32(1.5) * np.ones((), np.float32)


def test_callable_steps_like_run():
    by_run, by_call = make_program(), make_program()
    f = by_call.callable("train", ["s", "x"], ["loss", "y"])
    for k in range(3):
        x, s = feeds(4 + k, seed=k)  # a new batch size each step
        want = by_run.run("train", x=x, s=s)
        loss, y = f(s, x)
        np.testing.assert_allclose(y, want["y"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(loss, want["loss"], rtol=1e-6)
    assert by_call.step == by_run.step == 3
    np.testing.assert_allclose(by_call.variables["w"], by_run.variables["w"], rtol=1e-6)
    assert not by_call.variables["w"].flags.writeable


def test_fetch_forms_and_default_feed_order():
    p = make_program()
    x, s = feeds()
    whole = p.callable("predict")(x, s)
    assert set(whole) == {"y"}
    one = p.callable("predict", fetches="y")(x, s)
    np.testing.assert_array_equal(one, whole["y"])
    one[:] = 0  # fetches belong to the caller
    np.testing.assert_array_equal(p.callable("predict", ["x", "s"], ["y"])(x, s)[0],
                                  whole["y"])


def test_feeds_are_converted_and_checked_as_run_does():
    p = make_program()
    f = p.callable("predict", fetches="y")
    x, s = feeds()
    np.testing.assert_allclose(f(x.tolist(), 1.5), f(x, s), rtol=1e-6)  # lists convert
    np.testing.assert_allclose(f(np.asfortranarray(x), s), f(x, s), rtol=1e-6)
    with pytest.raises(FeedError) as by_call:
        f(x.astype(np.float64), s)
    with pytest.raises(FeedError) as by_run:
        p.run("predict", x=x.astype(np.float64), s=s)
    assert str(by_call.value) == str(by_run.value)
    with pytest.raises(FeedError, match="feed 'x' has shape \\[2,4\\], expected f32\\[B,3\\]"):
        f(np.zeros((2, 4), np.float32), s)
    with pytest.raises(FeedError, match="feed 'x'"):
        f(np.zeros((2,), np.float32), s)
    with pytest.raises(FeedError, match="takes 2 feeds \\(x, s\\), got 1"):
        f(x)
    assert p.step == 4  # the failed calls did not count


def test_callable_signature_errors():
    p = make_program()
    with pytest.raises(FeedError, match="unknown feed 'xx' \\(did you mean 'x'\\?\\)"):
        p.callable("predict", ["xx", "s"])
    with pytest.raises(FeedError, match="missing 's'"):
        p.callable("predict", ["x"])
    with pytest.raises(FeedError, match="listed twice"):
        p.callable("predict", ["x", "x", "s"])
    with pytest.raises(TfcError, match="unknown fetch 'z'"):
        p.callable("predict", fetches="z")
    with pytest.raises(TfcError, match="unknown entry"):
        p.callable("nope")


def test_a_failing_step_changes_nothing():
    p = make_program()
    f = p.callable("pick", fetches="p")
    np.testing.assert_array_equal(f(np.array([2, 0], np.int32)),
                                  p.variables["w"][[2, 0]])
    before = p.variables["w"].copy()
    with pytest.raises(ExecutionError):
        f(np.array([0, 7], np.int32))
    assert p.step == 1
    np.testing.assert_array_equal(p.variables["w"], before)


def test_run_still_reports_unknown_and_missing_feeds():
    p = make_program()
    x, s = feeds()
    with pytest.raises(FeedError, match="unknown feed 'q'"):
        p.run("predict", x=x, s=s, q=1)
    with pytest.raises(FeedError, match="missing feed 's'"):
        p.run("predict", x=x)
    with pytest.raises(FeedError, match="given twice"):
        p.run("predict", {"x": x}, x=x, s=s)
    assert p.run("predict", {"x": x}, s=s)["y"].shape == (4, 2)
