"""Session.make_callable: compiled once, feeds given positionally, run semantics."""

import numpy as np
import pytest

import tfc
from tfc.errors import FeedError, TfcError


def test_make_callable_runs_like_session_run():
    x = tfc.placeholder(tfc.float32, [None, 2], name="x")
    k = tfc.placeholder(tfc.float32, [], name="k")
    v = tfc.Variable(np.zeros(2, np.float32), name="v")
    inc = v.assign_add(tfc.reduce_sum(x, axis=0) * k)
    with tfc.Session() as sess:
        step = sess.make_callable([inc, {"v": v}], feed_list=["k", x])
        out, state = step(2.0, np.ones((3, 2), np.float32))
        assert out is None  # an operation, as in Session.run
        np.testing.assert_array_equal(state["v"], [0.0, 0.0])  # read at the step's start
        np.testing.assert_array_equal(step(1.0, np.ones((1, 2), np.float32))[1]["v"],
                                      [6.0, 6.0])
        np.testing.assert_array_equal(sess.run(v), [7.0, 7.0])
        just_y = sess.make_callable(x * 2.0, [x])
        np.testing.assert_array_equal(just_y([[1.0, 2.0]]), [[2.0, 4.0]])
        with pytest.raises(FeedError, match="takes 2 feeds, got 1"):
            step(1.0)
        with pytest.raises(FeedError, match="dtype"):
            just_y(np.ones((1, 2), np.float64))
        with pytest.raises(FeedError, match="no placeholder named 'q'"):
            sess.make_callable(v, ["q"])
    with pytest.raises(TfcError, match="closed"):
        just_y([[1.0, 2.0]])


def test_make_callable_steps_natively_on_llvm_as_in_python():
    """On the llvm backend a warm make_callable step is one native call (pystep); it must
    do what the Python step does: the same values, variables and step count, and a closed
    session still refuses."""
    def program(backend: str):
        g = tfc.Graph()
        with g.as_default():
            x = tfc.placeholder(tfc.float32, [4], name="x")
            w = tfc.Variable(np.arange(4, dtype=np.float32), name="w")
            loss = tfc.reduce_sum(tfc.square(x * w))
            train = w.assign_sub(0.01 * tfc.gradients(loss, w)[0])
            sess = tfc.Session(g, backend=backend)
            return sess, sess.make_callable(loss, [x]), sess.make_callable([train, loss], [x])

    native, loss_n, both_n = program("llvm")
    python, loss_p, both_p = program("reference")
    assert type(loss_n).__name__ == "builtin_function_or_method"
    for i in range(6):
        x = np.full(4, 0.5 + i, np.float32)
        np.testing.assert_allclose(loss_n(x), loss_p(x), rtol=1e-6)
        op, value = both_n(x)
        assert op is None
        np.testing.assert_allclose(value, both_p(x)[1], rtol=1e-6)
        np.testing.assert_allclose(native.variables["w"], python.variables["w"], rtol=1e-6)
    assert native.step == python.step == 12
    native.close()
    with pytest.raises(TfcError, match="closed"):
        loss_n(np.ones(4, np.float32))
    with pytest.raises(TfcError, match="closed"):
        both_n(np.ones(4, np.float32))
