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
