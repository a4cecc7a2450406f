"""``tfc.keras.optimizers`` and compile's optimizer names compute Keras 3's updates.

The expected weights are Keras 3's update rules (keras/src/optimizers/*.py, written out in
numpy below), step by step, in float64 so that the check is tight (rel 1e-12). Keras holds
the learning rate as a float32 variable and the other hyperparameters exactly (``f32``).
``tools/conformance_keras.py`` compares the same against Keras itself.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import tfc
import tfc.keras
from tfc.layers.engine import get_optimizer

G = [np.array([0.3, -2.0, 1e-6]), np.array([-0.5, 1.0, 2e-6]), np.array([0.1, 0.4, -1e-6])]
W0 = np.array([1.0, -1.0, 0.5])


def f32(x: float) -> float:
    """A learning rate as Keras 3's float32 variable holds it."""
    return float(np.float32(x))


def run_steps(opt: Any, grads: list[np.ndarray] = G) -> np.ndarray:
    """``w`` after one step per gradient ``g`` of ``loss = sum(w * g)`` (f64)."""
    with tfc.Graph().as_default():
        w = tfc.Variable(W0.copy(), name="w")
        g = tfc.placeholder(tfc.float64, [3], "g")
        train = opt.minimize(tfc.reduce_sum(w * g), var_list=[w])
        with tfc.Session() as s:
            for gv in grads:
                s.run(train, {g: gv})
            return s.run(w)


def keras_rmsprop(lr: float = 0.001, rho: float = 0.9, eps: float = 1e-7) -> np.ndarray:
    lr = f32(lr)
    w, v = W0.copy(), np.zeros(3)
    for g in G:
        v = rho * v + (1 - rho) * g * g
        w = w - lr * g / np.sqrt(v + eps)
    return w


def keras_adam(lr: float = 0.001, b1: float = 0.9, b2: float = 0.999,
               eps: float = 1e-7) -> np.ndarray:
    lr = f32(lr)
    w, m, v = W0.copy(), np.zeros(3), np.zeros(3)
    for t, g in enumerate(G, 1):
        alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        m, v = m + (g - m) * (1 - b1), v + (g * g - v) * (1 - b2)
        w = w - m * alpha / (np.sqrt(v) + eps)
    return w


def keras_adagrad(lr: float = 0.001, init: float = 0.1, eps: float = 1e-7) -> np.ndarray:
    lr = f32(lr)
    w, acc = W0.copy(), np.full(3, init)
    for g in G:
        acc = acc + g * g
        w = w - lr * g / np.sqrt(acc + eps)
    return w


def keras_sgd(lr: float = 0.01, momentum: float = 0.0, nesterov: bool = False) -> np.ndarray:
    lr = f32(lr)
    w, m = W0.copy(), np.zeros(3)
    for g in G:
        if momentum == 0.0:
            w = w - lr * g
            continue
        m = m * momentum - g * lr
        w = w + (m * momentum - g * lr if nesterov else m)
    return w


CASES: list[tuple[str, Callable[[], Any], Callable[[], np.ndarray]]] = [
    # compile's names: Keras's defaults (TF1's RMSProp starts its mean square at 1, Adam's
    # epsilon is 1e-8 and Adagrad's rate 0.01: each of these fails with them)
    ("'rmsprop'", lambda: get_optimizer("rmsprop"), keras_rmsprop),
    ("'adam'", lambda: get_optimizer("Adam"), keras_adam),
    ("'adagrad'", lambda: get_optimizer("adagrad"), keras_adagrad),
    ("'sgd'", lambda: get_optimizer("sgd"), keras_sgd),
    ("RMSprop(0.01, rho=0.8)", lambda: tfc.keras.optimizers.RMSprop(0.01, rho=0.8),
     lambda: keras_rmsprop(0.01, 0.8)),
    ("Adam(0.01, 0.8, 0.99, 1e-6)", lambda: tfc.keras.optimizers.Adam(0.01, 0.8, 0.99, 1e-6),
     lambda: keras_adam(0.01, 0.8, 0.99, 1e-6)),
    # a tiny accumulator: the epsilon under the square root matters
    ("Adagrad(0.1, 1e-9)", lambda: tfc.keras.optimizers.Adagrad(0.1, 1e-9),
     lambda: keras_adagrad(0.1, 1e-9)),
    ("SGD momentum", lambda: tfc.keras.optimizers.SGD(0.05, momentum=0.9),
     lambda: keras_sgd(0.05, 0.9)),
    ("SGD nesterov", lambda: tfc.keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
     lambda: keras_sgd(0.05, 0.9, True)),
]


@pytest.mark.parametrize("name,make,expected", CASES, ids=[c[0] for c in CASES])
def test_keras_update_rules(name: str, make: Callable[[], Any],
                            expected: Callable[[], np.ndarray]) -> None:
    np.testing.assert_allclose(run_steps(make()), expected(), rtol=1e-12, atol=0)


def test_rmsprop_decays_every_row_on_a_sparse_gradient() -> None:
    """An Embedding's gradient names rows; Keras's RMSprop still decays every row's mean
    square, so a row's next step depends on the steps that did not touch it (TF1's sparse
    RMSProp leaves those rows' mean square as it was: its third step differs)."""
    lr, rho, eps = 0.01, 0.9, 1e-7
    table0 = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    steps = [0, 1, 0]  # the row each step gathers; loss = sum(row * c)
    c = np.array([0.5, -1.5])
    with tfc.Graph().as_default():
        table = tfc.Variable(table0.copy(), name="table")
        ids = tfc.placeholder(tfc.int32, [1], "ids")
        loss = tfc.reduce_sum(tfc.gather(table, ids) * c)
        train = tfc.keras.optimizers.RMSprop(lr, rho).minimize(loss, var_list=[table])
        with tfc.Session() as s:
            for i in steps:
                s.run(train, {ids: [i]})
            got = s.run(table)
    w, v = table0.copy(), np.zeros_like(table0)
    for i in steps:
        g = np.zeros_like(table0)
        g[i] = c
        v = rho * v + (1 - rho) * g * g
        w = w - f32(lr) * g / np.sqrt(v + eps)
    np.testing.assert_allclose(got, w, rtol=1e-12, atol=0)


def test_names_and_errors() -> None:
    assert tfc.keras.optimizers.get("nadam") is None
    with pytest.raises(tfc.errors.TfcError, match="unknown optimizer 'nadam'.*sgd, adam"):
        get_optimizer("nadam")
    with pytest.raises(tfc.errors.TfcError, match="momentum must be in"):
        tfc.keras.optimizers.SGD(momentum=-0.1)
    # "momentum" is tfc's own name for TF1's MomentumOptimizer (0.01, 0.9)
    assert type(get_optimizer("momentum")).__name__ == "MomentumOptimizer"
