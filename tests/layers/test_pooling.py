"""Global and 1-D pooling layers against numpy; their input gradients against finite
differences."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch
from tests.layers.layercheck import (assert_input_gradient_matches_finite_differences,
                                     forward)

L = tfc.keras.layers
RNG = np.random.default_rng(0)
IMG = RNG.normal(size=(2, 3, 4, 5))
SEQ = RNG.normal(size=(2, 7, 3))


def test_global_pooling_matches_numpy() -> None:
    got = forward(lambda x, t: [L.GlobalAveragePooling2D()(x), L.GlobalMaxPooling2D()(x),
                                L.GlobalAveragePooling2D(keepdims=True)(x)], IMG)
    np.testing.assert_allclose(got[0], IMG.mean(axis=(1, 2)), rtol=1e-14)
    np.testing.assert_array_equal(got[1], IMG.max(axis=(1, 2)))
    np.testing.assert_allclose(got[2], IMG.mean(axis=(1, 2), keepdims=True), rtol=1e-14)
    got = forward(lambda x, t: [L.GlobalAveragePooling1D()(x), L.GlobalMaxPooling1D(
        keepdims=True)(x)], SEQ)
    np.testing.assert_allclose(got[0], SEQ.mean(axis=1), rtol=1e-14)
    np.testing.assert_array_equal(got[1], SEQ.max(axis=1, keepdims=True))
    assert_input_gradient_matches_finite_differences(
        lambda x, t: L.GlobalAveragePooling2D()(x) * L.GlobalMaxPooling2D()(x), IMG)


def pool1d_np(x: np.ndarray, size: int, stride: int, same: bool, op) -> np.ndarray:
    """TensorFlow's 1-D window: SAME pads (size - 1) split low-first-smaller, the window
    reduced over the positions inside the input."""
    t = x.shape[1]
    if same:
        out = -(-t // stride)
        pad = max((out - 1) * stride + size - t, 0)
        lo = pad // 2
    else:
        out, lo = (t - size) // stride + 1, 0
    return np.stack([op(x[:, max(i * stride - lo, 0):min(i * stride - lo + size, t)], axis=1)
                     for i in range(out)], axis=1)


@pytest.mark.parametrize("size, stride, pad", [(2, None, "valid"), (3, 2, "same"),
                                               (4, 1, "same"), (3, 1, "valid")])
def test_pooling_1d_matches_numpy(size: int, stride: int | None, pad: str) -> None:
    got = forward(lambda x, t: [L.MaxPooling1D(size, stride, pad)(x),
                                L.AveragePooling1D(size, stride, padding=pad)(x)], SEQ)
    s = stride or size
    np.testing.assert_array_equal(got[0], pool1d_np(SEQ, size, s, pad == "same", np.max))
    np.testing.assert_allclose(got[1], pool1d_np(SEQ, size, s, pad == "same", np.mean),
                               rtol=1e-14)


def test_pooling_1d_gradient_and_errors() -> None:
    assert_input_gradient_matches_finite_differences(
        lambda x, t: L.AveragePooling1D(3, 2, "same")(x)[:, :3] + L.MaxPooling1D(2)(x), SEQ)
    with tfc.Graph().as_default():
        with pytest.raises(TypeMismatch, match=r"takes \[batch, steps, features\] inputs"):
            L.MaxPooling1D()(tfc.placeholder(tfc.float32, [None, 4, 4, 2]))
        with pytest.raises(TypeMismatch, match="channels_last"):
            L.GlobalAveragePooling2D(data_format="channels_first")
        with pytest.raises(TypeMismatch, match="pool_size must be a positive int"):
            L.AveragePooling1D(0)
