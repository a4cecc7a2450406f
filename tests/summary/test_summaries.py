"""Summaries in the graph: fetched in the same step as the rest, tagged; entries carry them
as named fetches; bad input is a clear error."""

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError, TypeMismatch


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def linear():
    x = tfc.placeholder(tfc.float32, [None, 3], "x")
    W = tfc.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="W")
    y = tfc.matmul(x, W)
    loss = tfc.reduce_mean(y * y)
    return x, W, y, loss


def test_step_returns_the_tagged_values_beside_its_fetches():
    x, W, y, loss = linear()
    tfc.summary.scalar("loss", loss)
    tfc.summary.histogram("W", W)
    tfc.summary.image("x_img", tfc.reshape(x, [-1, 1, 3, 1]))
    tfc.summary.text("y_text", y)
    tfc.summary.text("note", "hello")
    merged = tfc.summary.merge_all()
    train = tfc.train.GradientDescentOptimizer(0.01).minimize(loss)
    sess = tfc.Session()
    xv = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    w0 = np.arange(6, dtype=np.float32).reshape(3, 2)
    values, loss_v, _ = sess.run([merged, loss, train], {x: xv})
    assert values.tags == ["loss", "W", "x_img", "y_text", "note"]
    expect = np.mean((xv @ w0) ** 2)
    np.testing.assert_allclose(values["loss"], expect, rtol=1e-6)
    assert values["loss"] == loss_v  # the same step's value
    np.testing.assert_array_equal(values["W"], w0)  # read at the start of the step
    assert values["x_img"].shape == (4, 1, 3, 1)
    np.testing.assert_allclose(values["y_text"], xv @ w0, rtol=1e-6)
    assert values["note"] == "hello"
    # the next step sees the update
    values2 = sess.run(merged, {x: xv})
    assert not np.array_equal(values2["W"], w0)


def test_merge_and_merge_all():
    x, W, y, loss = linear()
    assert tfc.summary.merge_all() is None
    a = tfc.summary.scalar("a", loss)
    b = tfc.summary.histogram("b", y)
    assert [s.tag for s in tfc.summary.merge([a, b, a]).specs] == ["a", "b"]
    with pytest.raises(TfcError, match="not a summary"):
        tfc.summary.merge([loss])
    with tfc.Graph().as_default():
        assert tfc.summary.merge_all() is None  # per graph


def test_bad_summaries_are_clear_errors():
    x, W, y, loss = linear()
    with pytest.raises(TypeMismatch, match="scalar summary 'y' needs a scalar"):
        tfc.summary.scalar("y", y)
    with pytest.raises(TypeMismatch, match=r"\[N, H, W, C\]"):
        tfc.summary.image("img", y)
    with pytest.raises(TfcError, match="non-empty name"):
        tfc.summary.scalar("", loss)
    with pytest.raises(TfcError, match="max_outputs"):
        tfc.summary.image("img", tfc.reshape(x, [-1, 1, 3, 1]), max_outputs=0)


def test_an_entry_carries_summaries_as_named_fetches():
    x, W, y, loss = linear()
    tfc.summary.scalar("loss", loss)
    tfc.summary.histogram("weights/W", W)
    train = tfc.train.GradientDescentOptimizer(0.01).minimize(loss)
    tfc.entry("train_step", fetches={"loss": loss, "summaries": tfc.summary.merge_all()},
              targets=[train])
    module = tfc.get_default_graph().as_module()
    graph = module.entries["train_step"]
    assert graph.result_names == ["loss", "summary/scalar/loss", "summary/histogram/weights/W"]
    from tfc.runtime.program import Program
    program = Program(module)
    out = program.run("train_step", x=np.ones((2, 3), np.float32))
    plain, values = tfc.summary.split_fetches(out)
    assert list(plain) == ["loss"]
    assert values.tags == ["loss", "weights/W"]
    assert [v.kind for v in values.values] == ["scalar", "histogram"]
    assert values["loss"] == plain["loss"]


def test_a_constant_text_cannot_be_an_entry_fetch():
    x, W, y, loss = linear()
    with pytest.raises(TfcError, match="add_text"):
        tfc.entry("e", fetches={"s": tfc.summary.text("t", "constant")})
