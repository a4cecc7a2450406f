"""conv25's convolutions (``tfc.api.nn_conv``: strided slices, pads, broadcast products,
``conv2d_backprop_input``) and their gradients on the CUDA backend (the emulator here,
the GPU under ``TFC_BACKEND=cuda``) against the reference backend; and the executable's
fetch of a view of an arena value, which these graphs exposed.

f64: the products and sums run in the reference's order except cuBLAS's GEMMs on a GPU,
so the tolerance is rtol 1e-12 (exact on the emulator in practice).
"""

from __future__ import annotations

import numpy as np
import pytest

import tfc

from tests.backends.cuda.emulated import emulated_off_the_gpu


@pytest.fixture(autouse=True)
def on_the_device(monkeypatch: pytest.MonkeyPatch):
    emulated_off_the_gpu(monkeypatch)
    with tfc.Graph().as_default() as g:
        yield g


def both(fetch, feeds):
    out = {}
    for backend in ("cuda", "reference"):
        with tfc.Session(backend=backend) as sess:
            out[backend] = sess.run(fetch, feeds)
    return out["cuda"], out["reference"]


def test_a_fetched_view_is_not_overwritten_by_later_ops():
    """``reshape`` aliases the ``add``'s arena slot; the backward ops after it reuse that
    slot once the reshape's last reader has run. The fetched reshape used to be read at
    the end of the step from the reused slot: [0, 0, 8, 12] instead of [4, 6, 8, 10]."""
    x = tfc.placeholder(tfc.float64, [3, 2])
    z = tfc.reshape(x[:2] + x[1:], [-1])
    (dx,) = tfc.gradients(tfc.reduce_sum(z * z), [x])
    got, want = both([z, dx], {x: np.arange(1.0, 7.0).reshape(3, 2)})
    np.testing.assert_array_equal(want[0], [4, 6, 8, 10])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.slow  # ~3 s on the emulator: g++ builds some twenty kernels
def test_transpose_then_depthwise_and_gradients_match_the_reference():
    rng = np.random.default_rng(5)
    w, dw = rng.normal(size=(3, 3, 2, 3)), rng.normal(size=(3, 3, 2, 2))
    sep_dw, sep_pw = rng.normal(size=(2, 2, 4, 1)), rng.normal(size=(1, 1, 4, 3))
    x = tfc.placeholder(tfc.float64, [None, 3, 4, 3])
    up = tfc.nn.conv2d_transpose(x, w, [None, 6, 8, 2], 2, "SAME")  # [B, 6, 8, 2]
    y = tfc.nn.separable_conv2d(tfc.nn.depthwise_conv2d(up, dw, 2, "SAME"), sep_dw, sep_pw,
                                1, "VALID")  # [B, 3, 4, 4] -> [B, 2, 3, 3]
    line = tfc.nn.conv1d(tfc.reshape(y, [-1, 6, 3]), rng.normal(size=(2, 3, 2)), 1, "SAME")
    loss = tfc.reduce_sum(y * y) + tfc.reduce_sum(line)
    got, want = both([up, y, line, *tfc.gradients(loss, [x])],
                     {x: rng.normal(size=(2, 3, 4, 3))})
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=1e-12, atol=1e-12)
