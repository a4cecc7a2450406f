"""``strategy.run`` / ``strategy.reduce`` for custom training loops: a step traced once,
replicated as ``fit``'s, with each replica's values back as ``PerReplica``; the variables
move as one device's on the same global batch (f64 within 1e-10, f32 within 1e-5), on
both backends."""

import numpy as np
import pytest

import tfc
from tfc.api.session import default_session
from tfc.distribute import PerReplica
from tfc.distribute.fit import ReplicatedStep
from tfc.errors import FeedError, TfcError

TWO_CPUS = ["/cpu:0", "/cpu:1"]
TOLERANCE = {np.float64: 1e-10, np.float32: 1e-5}
RNG = np.random.default_rng(5)
X = RNG.normal(size=(24, 4))
Y = (X @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1)[:, None]


@pytest.fixture(params=["reference", "llvm"])
def backend(request, monkeypatch):
    monkeypatch.setenv("TFC_BACKEND", request.param)
    return request.param


def custom_loop(dtype, strategy, steps=4):
    """A linear model trained by a custom loop of ``strategy.run`` over batches of 8."""
    with tfc.Graph().as_default():
        w = tfc.Variable(np.linspace(-1, 1, 4).reshape(4, 1).astype(dtype), name="w")
        b = tfc.Variable(np.zeros(1, dtype), name="b")
        opt = tfc.train.AdamOptimizer(0.05)

        def train_step(x, y):
            per_example = tfc.reduce_sum(tfc.square(tfc.matmul(x, w) + b - y), axis=1)
            loss = tfc.reduce_mean(per_example)
            opt.minimize(loss)
            return {"loss": loss, "per_example": per_example}

        def evaluate(x, y):
            return tfc.reduce_mean(tfc.square(tfc.matmul(x, w) + b - y))

        losses, results = [], []
        for step in range(steps):
            idx = slice(8 * (step % 3), 8 * (step % 3) + 8)
            result = strategy.run(train_step, args=(X[idx].astype(dtype), Y[idx].astype(dtype)))
            results.append(result)
            losses.append(float(strategy.reduce("MEAN", result["loss"])))
        evaluated = strategy.run(evaluate, args=(X.astype(dtype), Y.astype(dtype)))
        weights = default_session().run([w, b])
    return losses, results, evaluated, weights


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_custom_loop_under_mirrored_matches_one_device(backend, dtype):
    tol = TOLERANCE[dtype]
    one = custom_loop(dtype, tfc.distribute.get_strategy())
    strategy = tfc.distribute.MirroredStrategy(TWO_CPUS)
    many = custom_loop(dtype, strategy)
    np.testing.assert_allclose(many[0], one[0], rtol=tol, atol=tol)  # the reduced losses
    for a, b in zip(one[3], many[3]):  # the weights after the loop
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol)
    for single, result in zip(one[1], many[1]):
        loss, per_example = result["loss"], result["per_example"]
        assert isinstance(loss, PerReplica) and len(loss.values) == 2
        # each replica's own loss: the mean over its half of the global batch
        for value, part in zip(loss.values, per_example.values):
            assert part.shape == (4,) and value == pytest.approx(part.mean(), rel=tol)
        np.testing.assert_allclose(np.concatenate(per_example.values),
                                   single["per_example"], rtol=tol, atol=tol)
        assert strategy.reduce("MEAN", per_example, axis=0) == pytest.approx(
            float(single["loss"]), rel=tol)
        assert strategy.reduce("SUM", per_example, axis=0) == pytest.approx(
            float(single["per_example"].sum()), rel=tol)
    # an evaluation step (no writes): each replica's half, through the session
    halves = [np.mean((X[i:i + 12] @ many[3][0] + many[3][1] - Y[i:i + 12]) ** 2)
              for i in (0, 12)]
    np.testing.assert_allclose(many[2].values, halves, rtol=1e-4 if dtype == np.float32
                               else 1e-10)
    assert float(strategy.reduce("MEAN", many[2])) == pytest.approx(float(one[2]), rel=tol)
    steps = [traced.step for traced in strategy._runs.values() if traced.step is not None]
    assert len(steps) == 1 and isinstance(steps[0], ReplicatedStep)  # it did run replicated
    assert list(steps[0].program.module.devices) == TWO_CPUS and steps[0].replicas == 2


def test_a_custom_loop_under_a_cluster_strategy_matches_one_device():
    one = custom_loop(np.float64, tfc.distribute.get_strategy(), steps=3)
    many = custom_loop(np.float64, tfc.distribute.ParameterServerStrategy(
        "ps=1,workers=2", address="inprocess"), steps=3)
    np.testing.assert_allclose(many[0], one[0], rtol=1e-10)
    for a, b in zip(one[3], many[3]):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


def test_reduce():
    strategy = tfc.distribute.MirroredStrategy(["/cpu:0", "/cpu:1", "/cpu:2"])
    value = PerReplica((np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 9.0])))
    np.testing.assert_allclose(strategy.reduce("SUM", value), [9.0, 15.0])
    np.testing.assert_allclose(strategy.reduce(tfc.distribute.ReduceOp.MEAN, value), [3, 5])
    assert strategy.reduce("sum", value, axis=0) == 24.0
    assert strategy.reduce("MEAN", value, axis=0) == 4.0
    uneven = PerReplica((np.ones(2), np.ones(3), np.ones(1)))
    assert strategy.reduce("MEAN", uneven, axis=0) == 1.0
    assert strategy.reduce("SUM", np.array(2.0)) == 6.0  # the same on every replica
    with pytest.raises(TfcError, match="unknown reduce op 'MAX'"):
        strategy.reduce("MAX", value)
    with pytest.raises(TfcError, match="give axis to reduce along"):
        strategy.reduce("SUM", uneven)
    with pytest.raises(TfcError, match="axis 1 is out of range"):
        strategy.reduce("SUM", value, axis=1)


def test_run_errors_are_one_line_at_the_users_line():
    strategy = tfc.distribute.MirroredStrategy(TWO_CPUS)
    with tfc.Graph().as_default():
        v = tfc.Variable(np.zeros(3), name="v")
        with pytest.raises(FeedError, match="a global batch of 5 does not split over 2") as e:
            strategy.run(lambda x: x * 2.0, args=(np.ones((5, 3)),))
        assert "test_run.py" in str(e.value)
        with pytest.raises(FeedError, match="must share their leading dim"):
            strategy.run(lambda x, y: x + y, args=(np.ones((4, 3)), np.ones((6, 3))))
        with pytest.raises(TfcError, match="writes variables other than by an optimizer"):
            strategy.run(lambda x: v.assign(tfc.reduce_sum(x, axis=0)), args=(np.ones((4, 3)),))
        with pytest.raises(TfcError, match=r"fn returned f64\[3\]; each value must be a scalar"):
            strategy.run(lambda x: tfc.reduce_sum(x, axis=0), args=(np.ones((4, 3)),))
        with pytest.raises(TfcError, match="must return a tensor"):
            strategy.run(lambda x: 3, args=(np.ones((4, 3)),))
