"""The finite-difference check of a model's gradients, shared by the layer tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tfc


def assert_model_gradients_match_finite_differences(model: Any, loss: Any, feeds: dict,
                                                    points: int = 3, eps: float = 1e-6
                                                    ) -> None:
    """f64: the gradient of ``loss`` with respect to each of ``model``'s trainable
    variables, at ``points`` random elements each, equals the central difference (rel
    1e-5, abs 1e-8): ``(loss(v + eps) - loss(v - eps)) / 2 eps``, with the variable set in
    the model's session."""
    variables = model.trainable_variables
    sess = model.session
    analytic = sess.run(tfc.gradients(loss, variables), feeds)
    rng = np.random.default_rng(0)
    for var, grad in zip(variables, analytic):
        assert grad.dtype == np.float64, var.name
        base = sess.variable_values()[var.name].copy()
        for _ in range(points):
            idx = tuple(rng.integers(0, d) for d in base.shape)
            values = []
            for sign in (1, -1):
                moved = base.copy()
                moved[idx] += sign * eps
                sess.variables[var.name] = moved
                values.append(float(sess.run(loss, feeds)))
            sess.variables[var.name] = base
            numeric = (values[0] - values[1]) / (2 * eps)
            assert grad[idx] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (var.name, idx)
