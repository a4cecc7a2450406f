"""A long chain of element-wise ops fused into one kernel lowers without recursing per
op (``Emitter.value`` and ``flat_ok`` walk it with a stack): a 300-op chain used to raise
RecursionError; its values are the reference backend's."""

from __future__ import annotations

import numpy as np
import pytest

import tfc


def chain(ops: int, backend: str) -> np.ndarray:
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [4, 8], name="x")
        h, made = x, 0
        while made < ops:  # tanh(h * 0.9 + 0.01), then h * 1.001 - 0.002, ...
            h = tfc.tanh(h * 0.9 + 0.01) if made % 5 == 0 else h * 1.001 - 0.002
            made += 3 if made % 5 == 0 else 2
        y = h + x  # x is used at both ends: a shared input of the chain
        xv = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
        return tfc.Session(backend=backend).run(y, {x: xv})


@pytest.mark.parametrize("ops", [300, 1500])
def test_a_long_elementwise_chain_lowers_to_the_reference_values(ops):
    np.testing.assert_allclose(chain(ops, "llvm"), chain(ops, "reference"),
                               rtol=1e-5, atol=1e-6)
