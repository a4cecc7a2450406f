"""Labels and indices out of range on llvm: the reference backend's error, never NaN, garbage
or a crash; and a step that fails changes no variable (Session and Program alike).

The reference runs each op unfused and raises; llvm runs fused kernels (the fusion pass
expands ``sparse_softmax_cross_entropy`` into a one-hot pick, and its gradient is a one-hot
too), which must fail the same way (issue #14, item 3: llvm returned NaN and trained on).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError
from tfc.runtime import Program

BACKENDS = ["reference", "llvm"]
RNG = np.random.default_rng(14)
# the reference's words, on llvm too (its check kernel reports the first bad label)
LABEL_ERROR = r"\.py:\d+: sparse_softmax_cross_entropy: label 99 at index \[3\] is out of " \
    r"range \[0, 10\)$"


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def _xent_model(optimizer: str = "sgd"):
    """Softmax regression on 4 features, 10 classes: (x, y, loss, train op, variables)."""
    x = tfc.placeholder(tfc.float32, [None, 4], name="x")
    y = tfc.placeholder(tfc.int32, [None], name="y")
    w = tfc.Variable(RNG.normal(size=(4, 10)).astype(np.float32), name="W")
    b = tfc.Variable(np.zeros(10, np.float32), name="b")
    logits = tfc.matmul(x, w) + b
    loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                           logits=logits))
    opt = (tfc.train.AdamOptimizer(0.1) if optimizer == "adam"
           else tfc.train.GradientDescentOptimizer(0.5))
    return x, y, loss, opt.minimize(loss), logits


def _values(sess: tfc.Session) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in sess.variables.items()}


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("labels,first", [([1, 2, 3, 99], "99 at index [3]"),
                                          ([1, -1, 3, 40], "-1 at index [1]")], ids=["99", "-1"])
def test_a_bad_label_is_the_reference_error(backend, labels, first):
    x, y, loss, _, _ = _xent_model()
    per_row = tfc.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=tfc.matmul(x, tfc.ones([4, 10])))
    with tfc.Session(backend=backend) as sess:
        sess.run(tfc.global_variables_initializer())
        xs = RNG.normal(size=(4, 4)).astype(np.float32)
        good = sess.run([loss, per_row], {x: xs, y: np.array([1, 2, 3, 4], np.int32)})
        assert all(np.isfinite(v).all() for v in good)
        for fetch in (loss, per_row, [per_row, loss]):
            with pytest.raises(ExecutionError, match=re.escape(
                    f"sparse_softmax_cross_entropy: label {first} is out of range [0, 10)")):
                sess.run(fetch, {x: xs, y: np.array(labels, np.int32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_labels_of_any_rank_and_int64(backend):
    logits = tfc.placeholder(tfc.float32, [None, 3, 10])
    labels = tfc.placeholder(tfc.int64, [None, 3])
    loss = tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    with tfc.Session(backend=backend) as sess:
        z = RNG.normal(size=(2, 3, 10)).astype(np.float32)
        ok = np.array([[0, 9, 3], [4, 5, 6]], np.int64)
        want = -np.take_along_axis(z - np.log(np.exp(z).sum(-1, keepdims=True)),
                                   ok[..., None], -1)[..., 0]
        np.testing.assert_allclose(sess.run(loss, {logits: z, labels: ok}), want, rtol=1e-5)
        with pytest.raises(ExecutionError, match=r"label 10 at index \[1, 1\] is out of range"):
            sess.run(loss, {logits: z, labels: np.array([[0, 9, 3], [4, 10, 6]], np.int64)})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_failing_train_step_changes_no_variable(backend, optimizer):
    x, y, loss, train, logits = _xent_model(optimizer)
    (d_logits,) = tfc.gradients(loss, [logits])
    xs = RNG.normal(size=(4, 4)).astype(np.float32)
    good, bad = np.array([1, 2, 3, 4], np.int32), np.array([1, 2, 3, 99], np.int32)
    with tfc.Session(backend=backend) as sess:
        sess.run(tfc.global_variables_initializer())
        for _ in range(3):  # past the first calls (on llvm the later ones are native)
            sess.run([loss, train], {x: xs, y: good})
        before = _values(sess)
        # the loss with the update, the update alone (the gradient's one-hot must check),
        # the gradient alone: each fails, twice in a row, and nothing moves
        for fetch in ([loss, train], train, [train, loss], d_logits):
            for _ in range(2):
                with pytest.raises(ExecutionError, match=LABEL_ERROR):
                    sess.run(fetch, {x: xs, y: bad})
                _assert_same(_values(sess), before)
        sess.run(train, {x: xs, y: good})  # a good step still trains
        assert not np.array_equal(sess.variables["W"], before["W"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_probabilities_loss_checks_its_labels(backend):
    """Keras' sparse_categorical_crossentropy on probabilities (no logits behind them) is
    the sparse softmax cross-entropy of their log (Keras's formula): a bad label is that
    op's error, at the user's line, not a zero loss."""
    from tfc.layers.losses import sparse_categorical_crossentropy
    p = tfc.placeholder(tfc.float32, [None, 10])
    y = tfc.placeholder(tfc.int32, [None])
    loss = sparse_categorical_crossentropy(y, p)
    probs = np.full((2, 10), 0.1, np.float32)
    with tfc.Session(backend=backend) as sess:
        np.testing.assert_allclose(sess.run(loss, {p: probs, y: np.array([0, 9], np.int32)}),
                                   -np.log([0.1, 0.1]), rtol=1e-5)
        with pytest.raises(ExecutionError, match=r"test_index_errors.py:\d+: "
                                                 r"sparse_softmax_cross_entropy: label 10 at "
                                                 r"index \[1\] is out of range \[0, 10\)"):
            sess.run(loss, {p: probs, y: np.array([0, 10], np.int32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_out_of_range_is_a_row_of_off_values(backend):
    """Plain one_hot keeps TensorFlow's meaning: no error, a row of off_value."""
    i = tfc.placeholder(tfc.int32, [None])
    hot = tfc.one_hot(i, 4, on_value=2.0, off_value=-1.0)
    with tfc.Session(backend=backend) as sess:
        got = sess.run(hot, {i: np.array([0, 3, 4, -1, 99], np.int32)})
    want = np.full((5, 4), -1.0, np.float32)
    want[0, 0] = want[1, 3] = 2.0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_and_scatter_indices_out_of_range(backend):
    params = tfc.placeholder(tfc.float32, [5, 3])
    idx = tfc.placeholder(tfc.int32, [None])
    upd = tfc.placeholder(tfc.float32, [None, 3])
    gathered = tfc.gather(params * 2.0, idx)
    scattered = tfc.apply("scatter_add", params, idx, upd)
    p = RNG.normal(size=(5, 3)).astype(np.float32)
    with tfc.Session(backend=backend) as sess:
        np.testing.assert_array_equal(sess.run(gathered, {params: p, idx: [4, 0]}),
                                      2 * p[[4, 0]])
        for bad, first in (([0, 5], 5), ([-1, 7], -1)):  # the reference's words on both
            with pytest.raises(ExecutionError, match=re.escape(
                    f"gather: index {first} is out of range [0, 5) for axis 0 of params with "
                    f"shape [5, 3]")):
                sess.run(gathered, {params: p, idx: np.array(bad, np.int32)})
            with pytest.raises(ExecutionError, match=re.escape(
                    f"scatter_add: index {first} is out of range [0, 5)")):
                sess.run(scattered, {params: p, idx: np.array(bad, np.int32),
                                     upd: np.ones((2, 3), np.float32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_training_with_a_bad_id_changes_no_variable(backend):
    """An embedding lookup (gather) whose gradient is a sparse update (var.scatter_sub)."""
    ids = tfc.placeholder(tfc.int32, [None], name="ids")
    table = tfc.Variable(RNG.normal(size=(6, 3)).astype(np.float32), name="E")
    loss = tfc.reduce_sum(tfc.square(tfc.gather(table, ids)))
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tfc.Session(backend=backend) as sess:
        sess.run(tfc.global_variables_initializer())
        for _ in range(3):
            sess.run([loss, train], {ids: np.array([0, 5, 5], np.int32)})
        before = _values(sess)
        for _ in range(2):
            with pytest.raises(ExecutionError, match=re.escape(
                    "gather: index 6 is out of range [0, 6) for axis 0 of params with shape "
                    "[6, 3]")):
                sess.run([loss, train], {ids: np.array([1, 6], np.int32)})
            _assert_same(_values(sess), before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_program_run_fails_before_any_update(backend):
    """The Program path (what ``tfc run --save`` uses): a failing step leaves the
    variables and the step count as they were."""
    with tfc.Graph().as_default() as g:
        x, y, loss, train, _ = _xent_model("adam")
        tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    prog = Program(g.as_module(), backend=backend)
    xs = RNG.normal(size=(4, 4)).astype(np.float32)
    prog.run("train_step", x=xs, y=np.array([1, 2, 3, 4], np.int32))
    step, before = prog.step, {k: v.copy() for k, v in prog.variables.items()}
    f = prog.callable("train_step", ["x", "y"], "loss")
    for run in (lambda y: prog.run("train_step", x=xs, y=y), lambda y: f(xs, y)):
        for _ in range(2):
            with pytest.raises(ExecutionError, match=LABEL_ERROR):
                run(np.array([1, 2, 3, 99], np.int32))
            assert prog.step == step
            _assert_same({k: np.asarray(v) for k, v in prog.variables.items()}, before)


def test_no_in_place_update_before_a_step_that_can_fail():
    """A variable updated in its own array (``in_place_updates``) is changed for good, so
    that is only allowed where no later step of the entry can fail."""
    from tfc.backends.llvm.context import Kernel
    from tfc.backends.llvm.entry import Copy
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 3], name="x")
        w = tfc.Variable(RNG.normal(size=(3, 2)).astype(np.float32), name="W")
        loss = tfc.reduce_mean(tfc.square(x @ w))
        (gw,) = tfc.gradients(loss, [w])
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss},
                  targets=[w.assign_sub(0.1 * gw)])
    gc = Program(g.as_module(), backend="llvm")._executable("train")._lowered()
    assert gc.in_place_updates()  # the GEMM update is made in place here
    assert any(isinstance(s, Copy) for s in gc.steps)  # the other updates are copies
    fails = Kernel(gc.comp, "may_fail", [])
    fails.can_fail = True
    gc.steps.append(fails)
    assert gc.in_place_updates() == {}
    gc.steps[-1] = Kernel(gc.comp, "cannot_fail", [])
    assert gc.in_place_updates()


@pytest.mark.parametrize("backend", BACKENDS)
def test_labels_checked_inside_control_flow(backend):
    x = tfc.placeholder(tfc.float32, [4, 10])
    y = tfc.placeholder(tfc.int32, [4])

    def xent(scale):
        return tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x * scale)

    branch = tfc.cond(tfc.constant(True), lambda: xent(2.0), lambda: tfc.zeros([4]))
    _, total = tfc.while_loop(lambda i, acc: i < 3, lambda i, acc: (
        i + 1, acc + tfc.reduce_sum(xent(tfc.cast(i, tfc.float32)))),
        [tfc.constant(0), tfc.constant(0.0)])
    z = np.zeros((4, 10), np.float32)
    with tfc.Session(backend=backend) as sess:
        np.testing.assert_allclose(sess.run(total, {x: z, y: [1, 2, 3, 4]}), 12 * np.log(10),
                                   rtol=1e-5)
        for fetch in (branch, total):
            with pytest.raises(ExecutionError, match=re.escape(
                    "label 10 at index [3] is out of range [0, 10)")):
                sess.run(fetch, {x: z, y: np.array([1, 2, 3, 10], np.int32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_variable_scatter_out_of_range_changes_nothing(backend):
    idx = tfc.placeholder(tfc.int32, [None])
    table = tfc.Variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="T")
    sub = tfc.apply("var.scatter_sub", idx, tfc.ones([2, 3]), var=table.name)
    with tfc.Session(backend=backend) as sess:
        sess.run(tfc.global_variables_initializer())
        before = _values(sess)
        with pytest.raises(ExecutionError, match=re.escape(
                "var.scatter_sub: index 4 is out of range [0, 4)")):
            sess.run(sub, {idx: np.array([0, 4], np.int32)})
        _assert_same(_values(sess), before)
        sess.run(sub, {idx: np.array([0, 3], np.int32)})
        assert sess.variables["T"][0, 0] == -1 and sess.variables["T"][1, 0] == 3
