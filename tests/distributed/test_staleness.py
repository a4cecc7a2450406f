"""Staleness damping of asynchronous PS training (``staleness_scale``): a gradient staler
than W - 1 updates is applied scaled by (W - 1) / staleness; up to W - 1, as computed."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.distributed.async_ps import ParameterServer, staleness_scale
from tfc.ir.printer import print_module
from tfc.passes.async_split import split_async
from tfc.passes.replicate import ClusterSpec

from tests.distributed.test_async_ps import linear


def test_the_scale_is_one_up_to_the_bound_and_bound_over_staleness_beyond():
    assert [staleness_scale(s, 3) for s in (0, 1, 3)] == [1.0, 1.0, 1.0]
    assert staleness_scale(6, 3) == 0.5 and staleness_scale(30, 3) == 0.1
    assert staleness_scale(40, None) == 1.0  # damping off
    assert staleness_scale(0, 0) == 1.0  # one worker: never stale


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_a_ps_applies_a_stale_gradient_scaled(backend):
    split = split_async(linear(), ClusterSpec(1, 2, "ps-async"))
    part = split.apply["/job:ps/task:0/cpu:0"]
    w0, v0 = np.arange(4.0), np.ones(4)
    ps = ParameterServer("ps:0", print_module(part.module), {"w": w0, "v": v0}, backend, 1,
                         damp_after=1)
    grad = {a.name: np.full(4, 2.0) for a in part.module.graphs[split.entry].args}
    assert sorted(grad) == ["grad1", "grad2"]  # w's and v's gradients
    # read at version 0 by three workers in turn: staleness 0, 1 (full), 2 (halved)
    assert [ps.apply(split.entry, grad, 0) for _ in range(3)] == [0, 1, 2]
    got = ps.values()
    np.testing.assert_array_equal(got["w"], w0 - 2.0 * (1 + 1 + 0.5))
    np.testing.assert_array_equal(got["v"], v0 - 2.0 * (1 + 1 + 0.5))
