"""Session.run: feeds, fetches, partial execution and variable semantics."""

import numpy as np
import pytest

import tfc
from tfc.errors import FeedError


def test_fetch_structures_and_operations():
    x = tfc.placeholder(tfc.float32, [None, 2], name="x")
    v = tfc.Variable(0, name="count")
    y = x * 2.0
    with tfc.Session() as sess:
        feed = {x: np.ones((3, 2), np.float32)}
        a, (b, c), d = sess.run([y, (tfc.reduce_sum(y), v.assign_add(1)), {"v": v}], feed)
        np.testing.assert_array_equal(a, 2 * np.ones((3, 2)))
        assert b == 12.0 and c is None and d == {"v": 0}
        assert sess.run(v) == 1


def test_feed_by_placeholder_name_and_feeding_an_intermediate_tensor():
    x = tfc.placeholder(tfc.float32, [2], name="x")
    h = tfc.exp(x)
    y = h + 1.0
    with tfc.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {"x": [0.0, 1.0]}), [2.0, np.e + 1], rtol=1e-6)
        # Feeding h cuts exp away: x need not be fed (partial execution).
        np.testing.assert_array_equal(sess.run(y, {h: np.array([5.0, 6.0], np.float32)}),
                                      [6.0, 7.0])


def test_pruning_runs_only_what_the_fetches_need():
    x = tfc.placeholder(tfc.float32, [2], name="x")
    v = tfc.Variable(np.zeros(2, np.float32), name="v")
    unrelated = v.assign(x)  # needs x, but nobody fetches it
    y = v + 1.0
    with tfc.Session() as sess:
        np.testing.assert_array_equal(sess.run(y), [1.0, 1.0])  # no feed for x needed
        sess.run(unrelated, {x: [3.0, 4.0]})
        np.testing.assert_array_equal(sess.run(y), [4.0, 5.0])


def test_reads_see_the_start_of_step_and_assigns_land_at_its_end():
    v = tfc.Variable(np.float32(1.0), name="v")
    inc = v.assign_add(10.0)
    with tfc.Session() as sess:
        before, _ = sess.run([v, inc])
        assert before == 1.0  # not 11: the read sees the value at the start of the step
        assert sess.run(v) == 11.0


def test_two_assigns_of_one_variable_in_a_step_are_an_error():
    v = tfc.Variable(np.float32(1.0), name="v")
    a, b = v.assign(2.0), v.assign_add(1.0)  # the second assign
    with tfc.Session() as sess, pytest.raises(tfc.TfcError, match="assigned twice") as err:
        sess.run([a, b])
    assert err.value.loc is not None and err.value.loc.file == __file__


def test_variables_initialize_once_and_persist_and_reinitialize_on_request():
    v = tfc.Variable(np.float32(5.0), name="v")
    inc = v.assign_add(1.0)
    with tfc.Session() as sess:
        sess.run(inc)
        sess.run(inc)
        w = tfc.Variable(np.float32(7.0), name="w")  # created after the first run
        assert sess.run([v, w]) == [7.0, 7.0]
        sess.run(tfc.global_variables_initializer())
        assert sess.run(v) == 5.0


def test_variables_persist_per_session():
    v = tfc.Variable(np.float32(0.0), name="v")
    inc = v.assign_add(1.0)
    s1, s2 = tfc.Session(), tfc.Session()
    s1.run(inc)
    s1.run(inc)
    s2.run(inc)
    assert s1.run(v) == 2.0 and s2.run(v) == 1.0


def test_random_ops_are_fresh_each_step_and_reproducible_across_sessions():
    r = tfc.random.uniform([4], seed=3)
    s1, s2 = tfc.Session(), tfc.Session()
    a1, a2 = s1.run(r), s1.run(r)
    assert not np.array_equal(a1, a2)
    np.testing.assert_array_equal(s2.run(r), a1)


def test_feed_errors():
    x = tfc.placeholder(tfc.float32, [None, 3], name="x")
    y = x + 1.0
    sess = tfc.Session()
    with pytest.raises(FeedError, match="placeholder 'x' of type f32\\[B,3\\].*not fed"):
        sess.run(y)
    with pytest.raises(FeedError, match="no placeholder named 'z'"):
        sess.run(y, {"z": np.zeros((1, 3), np.float32)})
    with pytest.raises(FeedError, match="shape"):
        sess.run(y, {x: np.zeros((1, 4), np.float32)})
    with pytest.raises(FeedError, match="dtype f64, expected f32"):
        sess.run(y, {x: np.zeros((1, 3))})


def test_eval_and_run_use_the_default_session():
    v = tfc.Variable(np.float32(2.0))
    y = v * 3.0
    assert y.eval() == 6.0
    v.assign(4.0).run()
    assert v.eval() == 4.0


def test_closed_session_refuses_to_run():
    sess = tfc.Session()
    sess.close()
    with pytest.raises(tfc.TfcError, match="closed"):
        sess.run(tfc.constant(1.0))


def test_compiled_requests_are_cached():
    x = tfc.placeholder(tfc.float32, [None], name="x")
    y = x * 2.0
    sess = tfc.Session()
    for n in (1, 2, 3):
        sess.run(y, {x: np.ones(n, np.float32)})
    assert len(sess._cache) == 1


def test_repeated_requests_resolve_once_and_behave_as_new_ones():
    """run keeps each request (fetch structure + feed keys) as a make_callable step: a
    loop that builds a fresh fetch list every step reuses it, other keys or structures
    get their own, and the results are those of a first run."""
    x = tfc.placeholder(tfc.float32, [None], name="x")
    v = tfc.Variable(np.zeros(2, np.float32), name="v")
    bump = v.assign_add(tfc.ones([2]))
    y = x * 2.0
    with tfc.Session() as sess:
        for i in range(4):
            got = sess.run([bump, {"y": y, "v": v}], {x: np.full(3, i, np.float32)})
            assert got[0] is None
            np.testing.assert_array_equal(got[1]["y"], np.full(3, 2 * i))
            np.testing.assert_array_equal(got[1]["v"], np.full(2, i))  # read at step start
        assert len(sess._runs) == 1
        np.testing.assert_array_equal(sess.run(y, {"x": [1.0]}), [2.0])  # by name
        np.testing.assert_array_equal(sess.run((y,), {x: [1.0]})[0], [2.0])  # a tuple
        assert len(sess._runs) == 3
        with pytest.raises(tfc.TfcError, match="cannot fetch"):
            sess.run([y, np.ones(2)], {x: [1.0]})  # unhashable: reported as before
        with pytest.raises(FeedError, match="dtype"):
            sess.run(y, {x: np.ones(2, np.float64)})
        assert sess.step == 6


def _sgd_model(width: int = 256):
    rng = np.random.default_rng(7)
    g = tfc.Graph()
    with g.as_default():
        x = tfc.placeholder(tfc.float32, [64, width], name="x")
        w = tfc.Variable((rng.standard_normal((width, width)) * 0.05).astype(np.float32),
                         name="w")
        loss = tfc.reduce_mean(tfc.square(tfc.matmul(x, w)))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    return g, x, loss, train, rng.standard_normal((64, width)).astype(np.float32)


def test_a_session_updates_a_weight_in_place_unless_someone_holds_it():
    """A step too big to hold the GIL runs through the Python path, which makes a GEMM's
    weight update in the weight's own array (as the native path does for small steps)
    when only the session holds it: no new array, no copy of the weight, per step. An
    array the user holds is never changed, and the numbers are the same either way. (The
    llvm backend's: a cuda session keeps its variables on the device.)"""
    g, x, loss, train, xv = _sgd_model()
    with g.as_default():
        sess = tfc.Session(backend="llvm")
        sess.run(tfc.global_variables_initializer())
        sess.run(train, {x: xv})  # (a new array: the initializer's pool holds the first)
        ids = set()
        for _ in range(5):
            sess.run(train, {x: xv})
            ids.add(id(sess.variables.host["w"]))
        assert len(ids) == 1  # the same array, updated in place from the second step on
        held = sess.variables.host["w"]
        before = held.copy()
        sess.run(train, {x: xv})
        assert sess.variables.host["w"] is not held
        np.testing.assert_array_equal(held, before)  # the holder's array is as it was
        mine = sess.variables.host["w"].copy()
    g2, x2, loss2, train2, _ = _sgd_model()
    with g2.as_default():
        other = tfc.Session(backend="llvm")
        other.run(tfc.global_variables_initializer())
        kept = []
        for _ in range(7):  # holding every value: never in place
            other.run(train2, {x2: xv})
            kept.append(other.variables.host["w"])
        assert len({id(a) for a in kept}) == 7
        np.testing.assert_array_equal(other.variables.host["w"], mine)


def test_a_new_requests_cache_writes_wait_for_its_first_step(fresh_cache, monkeypatch):
    """``run`` of a new request holds the caches' writes (the lowered module, the native
    code) until its first step has run (``tfc.background``), then queues them once each:
    the entry as the step left it (with its binding), so the next process starts bound."""
    from tfc import background
    from tfc.backends.llvm.runtime.executable import LLVMExecutable
    events = []
    real_submit, real_binding = background.submit, LLVMExecutable._binding

    def submit(key, job):
        events.append(("write", key.parent.name))
        real_submit(key, job)

    def binding(self, key):
        events.append(("bind", None))
        return real_binding(self, key)
    monkeypatch.setattr(background, "submit", submit)
    monkeypatch.setattr(LLVMExecutable, "_binding", binding)
    x = tfc.placeholder(tfc.float32, [2, 3], name="x")
    w = tfc.Variable(np.ones((3, 2), np.float32), name="w")
    loss = tfc.reduce_sum(tfc.matmul(x, w) ** 2)
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tfc.Session(backend="llvm") as sess:
        sess.run(tfc.global_variables_initializer())
        events.clear()
        assert sess.run([loss, train], {x: np.ones((2, 3), np.float32)})[0] == 36.0
        assert events == [("bind", None), ("write", "lowered"), ("write", "entries")]
        (exe,) = [c.executable for c in sess._cache.values() if c.feed_names]
    background.flush()
    from tfc.backends.llvm.runtime import entry_cache
    _, meta = entry_cache.get(exe.cache_key)
    assert meta.bindings  # (written after the first step bound it)
