"""Forward and input-gradient checks of weightless layers, shared by the layer tests: the
layer's output for a numpy input, and the gradient of ``sum(y * c)`` with respect to the
input against central differences (f64)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import tfc


def forward(make: Callable[[Any], Any], xs: Any, training: bool = False) -> Any:
    """``make(x)`` (a layer call) run on ``xs`` (one array or a list), batch dim symbolic."""
    arrays = xs if isinstance(xs, list) else [xs]
    with tfc.Graph().as_default():
        phs = [tfc.placeholder(tfc.as_dtype(a.dtype), [None, *a.shape[1:]]) for a in arrays]
        y = make(phs if isinstance(xs, list) else phs[0], training)
        with tfc.Session() as s:
            return s.run(y, dict(zip(phs, arrays)))


def assert_input_gradient_matches_finite_differences(
        make: Callable[[Any], Any], xs: np.ndarray, points: int = 6,
        eps: float = 1e-6) -> None:
    """f64: d sum(make(x) * c) / dx at ``points`` random elements equals the central
    difference (rel 1e-6, abs 1e-9)."""
    rng = np.random.default_rng(0)
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float64, [None, *xs.shape[1:]])
        y = make(x, True)
        c = tfc.constant(rng.uniform(0.5, 1.5, size=(xs.shape[0], *y.type.shape[1:])))
        loss = tfc.reduce_sum(y * c)
        grad = tfc.gradients(loss, x)[0]
        with tfc.Session() as s:
            g = s.run(grad, {x: xs})
            for _ in range(points):
                idx = tuple(int(rng.integers(0, d)) for d in xs.shape)
                vals = []
                for sign in (1, -1):
                    moved = xs.copy()
                    moved[idx] += sign * eps
                    vals.append(float(s.run(loss, {x: moved})))
                numeric = (vals[0] - vals[1]) / (2 * eps)
                assert abs(g[idx] - numeric) <= 1e-6 * abs(numeric) + 1e-9, (idx, g[idx],
                                                                              numeric)
