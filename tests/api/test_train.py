"""tfc.train: optimizers against numpy re-implementations of TF1's update kernels,
slots, sparse updates, schedules, clipping and the global step."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError, TfcError, TypeMismatch

RTOL = 1e-6
N, D = 12, 3


def problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, D))
    y = x @ rng.normal(size=D) + 0.5 + 0.1 * rng.normal(size=N)
    return x, y


def regression(w0=None, b0=0.0):
    """Linear regression from element-wise ops: 0.5 * mean((sum(x * w, 1) + b - y)**2)."""
    x = tfc.placeholder(tfc.float64, [None, D], name="x")
    y = tfc.placeholder(tfc.float64, [None], name="y")
    w = tfc.Variable(np.zeros(D) if w0 is None else np.asarray(w0, np.float64), name="W")
    b = tfc.Variable(np.float64(b0), name="b")
    r = tfc.reduce_sum(x * w, axis=1) + b - y
    return x, y, w, b, 0.5 * tfc.reduce_mean(r * r)


def np_grads(x, y, w, b):
    r = x @ w + b - y
    return x.T @ r / len(y), r.mean()


def F32(v):
    """A Python float hyperparameter as TF1's optimizers take it: a float32 tensor."""
    return float(np.float32(v))


# numpy versions of TF1's training kernels (tensorflow/core/kernels/training_ops.cc)
def np_sgd(p, g, s, lr=F32(0.1)):
    return p - lr * g


def np_momentum(p, g, s, lr=F32(0.1), mu=F32(0.9), nesterov=False):
    s["accum"] = s.get("accum", np.zeros_like(p)) * mu + g
    return p - (g * lr + s["accum"] * mu * lr if nesterov else s["accum"] * lr)


def np_adagrad(p, g, s, lr=F32(0.1), init=0.1):
    s["acc"] = s.get("acc", np.full_like(p, init)) + g * g
    return p - g * lr / np.sqrt(s["acc"])


def np_rmsprop(p, g, s, lr=F32(0.01), rho=F32(0.9), mu=0.0, eps=F32(1e-10),
               centered=False):
    s["ms"] = s.get("ms", np.ones_like(p))
    s["ms"] = s["ms"] + (g * g - s["ms"]) * (1 - rho)
    denom = s["ms"]
    if centered:
        s["mg"] = s.get("mg", np.zeros_like(p))
        s["mg"] = s["mg"] + (g - s["mg"]) * (1 - rho)
        denom = s["ms"] - s["mg"] ** 2
    s["mom"] = s.get("mom", np.zeros_like(p)) * mu + g * lr / np.sqrt(denom + eps)
    return p - s["mom"]


def np_adam(p, g, s, lr=F32(0.1), b1=F32(0.9), b2=F32(0.999), eps=F32(1e-8)):
    t = s["t"] = s.get("t", 0) + 1
    lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    s["m"] = s.get("m", np.zeros_like(p)) + (g - s.get("m", 0.0)) * (1 - b1)
    s["v"] = s.get("v", np.zeros_like(p)) + (g * g - s.get("v", 0.0)) * (1 - b2)
    return p - lr_t * s["m"] / (np.sqrt(s["v"]) + eps)


CASES = {
    "sgd": (lambda: tfc.train.GradientDescentOptimizer(0.1), np_sgd),
    "momentum": (lambda: tfc.train.MomentumOptimizer(0.1, 0.9), np_momentum),
    "nesterov": (lambda: tfc.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                 lambda p, g, s: np_momentum(p, g, s, nesterov=True)),
    "adagrad": (lambda: tfc.train.AdagradOptimizer(0.1), np_adagrad),
    "rmsprop": (lambda: tfc.train.RMSPropOptimizer(0.01, momentum=0.5),
                lambda p, g, s: np_rmsprop(p, g, s, mu=F32(0.5))),
    "rmsprop_centered": (lambda: tfc.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
                         lambda p, g, s: np_rmsprop(p, g, s, mu=F32(0.5), centered=True)),
    "adam": (lambda: tfc.train.AdamOptimizer(0.1), np_adam),
}


@pytest.mark.parametrize("name", list(CASES))
def test_optimizer_matches_tf_update_formula_for_five_steps(name):
    make, np_step = CASES[name]
    xs, ys = problem()
    x, y, w, b, loss = regression(w0=[0.5, -0.2, 0.1], b0=0.3)
    train = make().minimize(loss)
    wn, bn, sw, sb = np.array([0.5, -0.2, 0.1]), 0.3, {}, {}
    with tfc.Session() as sess:
        for _ in range(5):
            gw, gb = np_grads(xs, ys, wn, bn)
            got_loss = sess.run([loss, train], {x: xs, y: ys})[0]
            np.testing.assert_allclose(got_loss, 0.5 * np.mean((xs @ wn + bn - ys) ** 2),
                                       rtol=RTOL)
            wn, bn = np_step(wn, gw, sw), np_step(np.float64(bn), gb, sb)
            np.testing.assert_allclose(sess.run(w), wn, rtol=RTOL, atol=1e-12)
            np.testing.assert_allclose(sess.run(b), bn, rtol=RTOL, atol=1e-12)
    assert not np.allclose(wn, [0.5, -0.2, 0.1])  # it moved


def test_learning_rate_as_a_tensor_and_hyperparameters_cast_to_the_variable_dtype():
    xs, ys = problem()
    x, y, w, b, loss = regression()
    lr = tfc.placeholder(tfc.float32, [], name="lr")  # f32 fed, f64 variables
    train = tfc.train.MomentumOptimizer(lr, tfc.constant(0.5)).minimize(loss)
    wn, bn, sw, sb = np.zeros(D), 0.0, {}, {}
    with tfc.Session() as sess:
        for rate in (0.1, 0.2, 0.05):
            gw, gb = np_grads(xs, ys, wn, bn)
            sess.run(train, {x: xs, y: ys, lr: rate})
            r = float(np.float32(rate))
            wn = np_momentum(wn, gw, sw, lr=r, mu=0.5)
            bn = np_momentum(np.float64(bn), gb, sb, lr=r, mu=0.5)
        np.testing.assert_allclose(sess.run(w), wn, rtol=RTOL)


def test_slots_are_named_like_tensorflow_and_not_trainable():
    *_, loss = regression()
    opt = tfc.train.AdamOptimizer()
    opt.minimize(loss)
    g = tfc.get_default_graph()
    names = set(g.variables)
    assert {"W/Adam", "W/Adam_1", "b/Adam", "b/Adam_1", "beta1_power",
            "beta2_power"} <= names
    for n in ("W/Adam", "W/Adam_1", "beta1_power", "beta2_power"):
        assert not g.variables[n].trainable
    assert [v.name for v in tfc.train.trainable_variables()] == ["W", "b"]
    assert opt.get_slot(g.variables["W"], "m").name == "W/Adam"
    assert opt.get_slot(g.variables["W"], "v").name == "W/Adam_1"
    assert opt.get_slot_names() == ["m", "v"]
    assert g.variables["W/Adam"].type == g.variables["W"].type
    assert {v.name for v in opt.variables()} == names - {"W", "b"}


def test_more_slot_names_and_devices():
    with tfc.device("/gpu:0"):
        v = tfc.Variable(np.ones(2), name="v")
    with tfc.name_scope("outer"):  # slots follow the variable's name, not the scope
        loss = tfc.reduce_sum(v * v)
        tfc.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        tfc.train.RMSPropOptimizer(0.1, centered=True).minimize(loss)
    g = tfc.get_default_graph()
    # RMSProp's slots in TF's order: rms, mg, momentum
    assert {"v/Momentum", "v/RMSProp", "v/RMSProp_1", "v/RMSProp_2"} <= set(g.variables)
    assert all(g.variables[n].device == "/gpu:0" for n in g.variables if n.startswith("v/"))
    with tfc.Session() as sess:
        np.testing.assert_array_equal(sess.run(g.variables["v/RMSProp"]), [1.0, 1.0])


def test_a_python_hyperparameter_is_one_constant_per_dtype_and_device():
    # as TF1's ``_prepare``: one learning-rate tensor for every variable of a dtype on a
    # device, not one per variable (a 256-layer model's apply_gradients made 512)
    vs = [tfc.Variable(np.ones(2, np.float32), name=f"v{i}") for i in range(4)]
    with tfc.device("/cpu:1"):
        u = tfc.Variable(np.ones(2, np.float32), name="u")
    d = tfc.Variable(np.ones(2), name="d")  # float64
    loss = tfc.add_n([tfc.reduce_sum(v * v) for v in vs]) + tfc.reduce_sum(u * u) \
        + tfc.cast(tfc.reduce_sum(d * d), tfc.float32)
    train = tfc.train.GradientDescentOptimizer(0.125).minimize(loss)
    g = tfc.get_default_graph().ir
    rates = [op for op in g.ops if op.kind == "constant" and op.attrs["value"].shape == ()
             and op.attrs["value"] == 0.125]
    assert sorted((op.results[0].type.dtype.value, op.device or "") for op in rates) == \
        [("f32", ""), ("f32", "/cpu:1"), ("f64", "")]
    with tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        sess.run(train)
        np.testing.assert_array_equal(sess.run(vs[0]), [0.75, 0.75])  # 1 - 0.125 * 2
        np.testing.assert_array_equal(sess.run(d), [0.75, 0.75])


def test_minimize_with_var_list_leaves_other_variables_alone():
    xs, ys = problem()
    x, y, w, b, loss = regression()
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=[b])
    with tfc.Session() as sess:
        sess.run(train, {x: xs, y: ys})
        np.testing.assert_array_equal(sess.run(w), np.zeros(D))
        np.testing.assert_allclose(sess.run(b), -0.1 * np_grads(xs, ys, np.zeros(D), 0.0)[1],
                                   rtol=RTOL)


def test_compute_then_apply_gradients_and_global_step():
    xs, ys = problem()
    x, y, w, b, loss = regression()
    step = tfc.train.get_or_create_global_step()
    assert step is tfc.train.get_or_create_global_step() is tfc.train.get_global_step()
    assert step.name == "global_step" and step.dtype == tfc.int64 and not step.trainable
    opt = tfc.train.GradientDescentOptimizer(0.1)
    gvs = opt.compute_gradients(loss)
    assert [v.name for _, v in gvs] == ["W", "b"]
    train = opt.apply_gradients([(g * 2.0, v) for g, v in gvs], global_step=step)
    with tfc.Session() as sess:
        for i in range(3):
            assert sess.run(step) == i
            sess.run(train, {x: xs, y: ys})
        assert sess.run(step) == 3


def test_global_step_is_top_level_inside_a_scope():
    with tfc.name_scope("model"):
        step = tfc.train.get_or_create_global_step()
    assert step.name == "global_step"


def test_non_slot_variables_are_top_level_inside_a_scope():
    v = tfc.Variable(np.ones(2), name="v")
    with tfc.name_scope("outer"):
        tfc.train.AdamOptimizer(0.1).minimize(tfc.reduce_sum(v * v))
    names = set(tfc.get_default_graph().variables)
    assert {"beta1_power", "beta2_power"} <= names
    assert not any(n.startswith(("/", "outer/beta")) for n in names)


def test_errors_no_gradient_and_non_variables():
    v = tfc.Variable(np.ones(2), name="v")
    u = tfc.Variable(np.ones(2), name="u")
    opt = tfc.train.GradientDescentOptimizer(0.1)
    with pytest.raises(TfcError, match="no gradients provided for any variable"):
        opt.minimize(tfc.reduce_sum(v * v), var_list=[u])
    with pytest.raises(TfcError, match="not a tfc.Variable"):
        opt.compute_gradients(tfc.reduce_sum(v * v), var_list=[v.value()])
    with pytest.raises(TfcError, match="needs tfc.Variables"):
        opt.apply_gradients([(v.value(), v.value())])
    with pytest.raises(ValueError, match="initial_accumulator_value"):
        tfc.train.AdagradOptimizer(0.1, initial_accumulator_value=0.0)


def test_two_train_ops_in_one_step_assign_twice():
    v = tfc.Variable(np.ones(2), name="v")
    loss = tfc.reduce_sum(v * v)
    a = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    b = tfc.train.GradientDescentOptimizer(0.2).minimize(loss)
    with tfc.Session() as sess:
        with pytest.raises(TfcError, match="assigned twice"):
            sess.run(tfc.group(a, b))


# ---- sparse updates ---------------------------------------------------------------------

def test_sparse_sgd_through_gather_updates_only_touched_rows():
    table0 = np.arange(12, dtype=np.float64).reshape(6, 2) / 10
    emb = tfc.Variable(table0, name="emb")
    ids = tfc.placeholder(tfc.int32, [None], name="ids")
    rows = tfc.gather(emb, ids)
    loss = tfc.reduce_sum(rows * rows)
    (grad, _), = tfc.train.GradientDescentOptimizer(0.5).compute_gradients(loss)
    assert isinstance(grad, tfc.IndexedSlices)
    train = tfc.train.GradientDescentOptimizer(0.5).minimize(loss)
    with tfc.Session() as sess:
        sess.run(train, {ids: np.array([1, 4, 1], np.int32)})
        want = table0.copy()
        np.add.at(want, [1, 4, 1], -0.5 * 2 * table0[[1, 4, 1]])  # repeated rows add up
        got = sess.run(emb)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    untouched = [0, 2, 3, 5]
    np.testing.assert_array_equal(got[untouched], table0[untouched])


def test_sparse_sgd_writes_a_scatter_not_a_dense_assign():
    emb = tfc.Variable(np.ones((5, 2)), name="emb")
    grad = tfc.IndexedSlices(tfc.constant([3, 0]), tfc.constant(np.ones((2, 2))), emb.value())
    train = tfc.train.GradientDescentOptimizer(1.0).apply_gradients([(grad, emb)])
    kinds = [op.kind for op in train.ir_ops()]
    assert kinds == ["var.scatter_sub"]
    with tfc.Session() as sess:
        sess.run(train)
        np.testing.assert_array_equal(sess.run(emb)[:, 0], [0, 1, 1, 0, 1])


def test_sparse_adagrad_changes_only_the_named_row():
    emb = tfc.Variable(np.ones((4, 2)), name="emb")
    grad = tfc.IndexedSlices(tfc.constant([2]), tfc.constant(np.full((1, 2), 3.0)), emb.value())
    train = tfc.train.AdagradOptimizer(0.1).apply_gradients([(grad, emb)])
    with tfc.Session() as sess:
        sess.run(train)
        got = sess.run(emb)
    want = np.ones((4, 2))
    want[2] -= 3.0 * 0.1 / np.sqrt(0.1 + 9.0)
    np.testing.assert_allclose(got, want, rtol=RTOL)


def test_scatter_ops_check_their_rows():
    from tfc.train.optimizers import scatter_update
    emb = tfc.Variable(np.ones((4, 2)), name="emb")
    with pytest.raises(TypeMismatch, match=r"expected f64\[2,2\]"):
        scatter_update(emb, "var.scatter_add", tfc.constant([0, 1]), tfc.constant(np.ones(2)))
    with pytest.raises(TypeMismatch, match="indices has dtype f64"):
        tfc.get_default_graph().create_op(
            "var.scatter_add", [tfc.constant(np.ones(2)), tfc.constant(np.ones((2, 2)))],
            {"var": "emb"})
    bad = scatter_update(emb, "var.scatter_add", tfc.constant([7]), [[1.0, 1.0]])
    with tfc.Session() as sess:
        with pytest.raises(ExecutionError, match="index.* is out of range"):
            sess.run(bad)
        both = tfc.group(emb.assign(np.zeros((4, 2))), scatter_update(
            emb, "var.scatter_add", tfc.constant([0]), [[1.0, 1.0]]))
        with pytest.raises(TfcError, match="assigned twice"):
            sess.run(both)


def test_scatter_reads_the_start_of_step_value_and_never_writes_in_place():
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph
    from tfc.ir.interpret import ExecContext, run_graph
    g = Graph("step")
    bld = Builder(g)
    idx = bld("constant", value=np.array([[0, 2], [2, 2]], np.int64))
    upd = bld("constant", value=np.ones((2, 2, 3), np.float32))
    bld.op("var.scatter_add", idx, upd, var="W")
    start = np.zeros((4, 3), np.float32)
    start.flags.writeable = False
    ctx = ExecContext({"W": start})
    run_graph(g, [], ctx)
    np.testing.assert_array_equal(ctx.updates["W"][:, 0], [1, 0, 3, 0])
    assert not start.any()


# ---- schedules --------------------------------------------------------------------------

def _at(value, step_var, steps):
    with tfc.Session() as sess:
        out = []
        for s in steps:
            sess.variables[step_var.name] = np.int64(s)
            out.append(sess.run(value))
    return np.array(out)


def test_exponential_decay_smooth_and_staircase():
    step = tfc.train.get_or_create_global_step()
    smooth = tfc.train.exponential_decay(0.1, step, 10, 0.5)
    stair = tfc.train.exponential_decay(0.1, step, 10, 0.5, staircase=True)
    assert smooth.dtype == tfc.float32
    steps = [0, 5, 10, 15, 25]
    np.testing.assert_allclose(_at(smooth, step, steps), [0.1 * 0.5 ** (s / 10) for s in steps],
                               rtol=1e-6)
    np.testing.assert_allclose(_at(stair, step, steps), [0.1 * 0.5 ** (s // 10) for s in steps],
                               rtol=1e-6)
    f64 = tfc.train.exponential_decay(tfc.constant(np.float64(2.0)), step, 3, 0.9)
    np.testing.assert_allclose(_at(f64, step, [7]), [2.0 * 0.9 ** (7 / 3)], rtol=1e-14)


def test_piecewise_constant_follows_tf_boundaries():
    step = tfc.train.get_or_create_global_step()
    lr = tfc.train.piecewise_constant(step, [10, 20], [1.0, 0.5, 0.1])
    got = _at(lr, step, [0, 10, 11, 20, 21, 100])
    np.testing.assert_allclose(got, [1.0, 1.0, 0.5, 0.5, 0.1, 0.1], rtol=1e-7)
    with pytest.raises(ValueError, match="2 boundaries need 3 values"):
        tfc.train.piecewise_constant(step, [10, 20], [1.0, 0.5])
    with pytest.raises(TypeMismatch, match="does not fit i64"):
        tfc.train.piecewise_constant(step, [10.5], [1.0, 0.5])


def test_cosine_decay():
    step = tfc.train.get_or_create_global_step()
    lr = tfc.train.cosine_decay(0.2, step, 100, alpha=0.1)
    steps = [0, 25, 50, 100, 150]
    want = [0.2 * ((1 - 0.1) * 0.5 * (1 + math.cos(math.pi * min(s, 100) / 100)) + 0.1)
            for s in steps]
    np.testing.assert_allclose(_at(lr, step, steps), want, rtol=1e-6)


def test_schedule_drives_training_with_the_global_step():
    v = tfc.Variable(np.array([1.0]), name="v")
    step = tfc.train.get_or_create_global_step()
    lr = tfc.train.exponential_decay(tfc.constant(np.float64(0.1)), step, 1, 0.5)
    train = tfc.train.GradientDescentOptimizer(lr).minimize(tfc.reduce_sum(v), global_step=step)
    with tfc.Session() as sess:
        for _ in range(3):
            sess.run(train)
        np.testing.assert_allclose(sess.run(v), [1.0 - 0.1 - 0.05 - 0.025], rtol=1e-12)
        assert sess.run(step) == 3


# ---- clipping ---------------------------------------------------------------------------

@pytest.mark.parametrize("clip", [1.0, 100.0])
def test_clip_by_global_norm_matches_numpy(clip):
    rng = np.random.default_rng(1)
    a, c = rng.normal(size=(3, 2)), rng.normal(size=4)
    idx, vals = np.array([0, 2]), rng.normal(size=(2, 3))
    dense = tfc.Variable(np.zeros((5, 3)), name="dense")
    slices = tfc.IndexedSlices(tfc.constant(idx), tfc.constant(vals), dense.value())
    clipped, norm = tfc.clip_by_global_norm([tfc.constant(a), None, slices, tfc.constant(c)],
                                            clip)
    want_norm = np.sqrt((a ** 2).sum() + (vals ** 2).sum() + (c ** 2).sum())
    scale = clip * min(1 / want_norm, 1 / clip)
    assert clipped[1] is None and isinstance(clipped[2], tfc.IndexedSlices)
    with tfc.Session() as sess:
        got_a, got_v, got_c, got_norm = sess.run([clipped[0], clipped[2].values, clipped[3],
                                                  norm])
        np.testing.assert_array_equal(sess.run(clipped[2].indices), idx)
    np.testing.assert_allclose(got_norm, want_norm, rtol=1e-12)
    for got, want in ((got_a, a), (got_v, vals), (got_c, c)):
        np.testing.assert_allclose(got, want * scale, rtol=1e-12)
    if clip == 1.0:
        assert np.sqrt((got_a ** 2).sum() + (got_v ** 2).sum() + (got_c ** 2).sum()) \
            == pytest.approx(1.0)


def test_clip_by_global_norm_with_use_norm_and_in_training():
    g1 = tfc.constant(np.array([3.0, 4.0]))
    (out,), norm = tfc.clip_by_global_norm([g1], 1.0, use_norm=tfc.constant(np.float64(10.0)))
    with tfc.Session() as sess:
        np.testing.assert_allclose(sess.run(out), [0.3, 0.4], rtol=1e-12)
        assert sess.run(norm) == 10.0
    with pytest.raises(TypeError, match="list or tuple"):
        tfc.clip_by_global_norm(g1, 1.0)
    v = tfc.Variable(np.array([3.0, 4.0]), name="v")
    opt = tfc.train.GradientDescentOptimizer(1.0)
    grads, variables = zip(*opt.compute_gradients(0.5 * tfc.reduce_sum(v * v)))
    clipped, _ = tfc.clip_by_global_norm(list(grads), 2.5)
    train = opt.apply_gradients(zip(clipped, variables))
    with tfc.Session() as sess:
        sess.run(train)
        np.testing.assert_allclose(sess.run(v), [3.0 - 1.5, 4.0 - 2.0], rtol=1e-12)


def test_sparse_update_prints_parses_and_verifies_against_the_variable():
    from tfc.errors import VerifyError
    from tfc.ir.parser import parse_module
    from tfc.ir.printer import print_module
    from tfc.ir.verifier import verify_module
    emb = tfc.Variable(np.ones((5, 2)), name="emb")
    ids = tfc.placeholder(tfc.int32, [None], name="ids")
    loss = tfc.reduce_sum(tfc.gather(emb, ids) ** 2)
    tfc.entry("train", fetches={"loss": loss},
              targets=[tfc.train.GradientDescentOptimizer(0.1).minimize(loss)])
    text = print_module(tfc.get_default_graph().as_module())
    # the sparse gradient (indices, values) passes through the optimizer's marker
    assert 'optimizer.grad %ids, ' in text and '{var="emb"}' in text
    assert "var.scatter_sub @emb, %" in text
    module = parse_module(text, "train.tfir")
    assert print_module(module) == text
    verify_module(module)
    bad = parse_module("""
var @emb : f64[5,3]
graph @g(%i: i32[B], %u: f64[B,2]) -> () {
  var.scatter_add @emb, %i, %u
  return
}
""", "bad.tfir")
    with pytest.raises(VerifyError, match=r"updates f64\[B,2\] are not rows of @emb f64\[5,3\]"):
        verify_module(bad)
