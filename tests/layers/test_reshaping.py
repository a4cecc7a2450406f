"""Padding, cropping, upsampling, Permute and RepeatVector against numpy, with input
gradients against finite differences and the errors for bad arguments."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TypeMismatch
from tests.layers.layercheck import (assert_input_gradient_matches_finite_differences,
                                     forward)

L = tfc.keras.layers
RNG = np.random.default_rng(1)
IMG = RNG.normal(size=(2, 3, 4, 2))
SEQ = RNG.normal(size=(2, 5, 3))


def test_image_layers_match_numpy() -> None:
    got = forward(lambda x, t: [L.ZeroPadding2D(((1, 0), (2, 1)))(x), L.ZeroPadding2D()(x),
                                L.UpSampling2D((2, 3))(x), L.Cropping2D(((1, 0), (1, 2)))(x),
                                L.Cropping2D(1)(L.ZeroPadding2D(1)(x))], IMG)
    np.testing.assert_array_equal(got[0], np.pad(IMG, [(0, 0), (1, 0), (2, 1), (0, 0)]))
    np.testing.assert_array_equal(got[1], np.pad(IMG, [(0, 0), (1, 1), (1, 1), (0, 0)]))
    np.testing.assert_array_equal(got[2], IMG.repeat(2, axis=1).repeat(3, axis=2))
    np.testing.assert_array_equal(got[3], IMG[:, 1:, 1:2])
    np.testing.assert_array_equal(got[4], IMG)
    assert_input_gradient_matches_finite_differences(
        lambda x, t: L.UpSampling2D()(L.Cropping2D(((0, 1), (1, 0)))(L.ZeroPadding2D(1)(x))),
        IMG)


def test_sequence_layers_match_numpy() -> None:
    got = forward(lambda x, t: [L.ZeroPadding1D((2, 1))(x), L.Cropping1D((1, 2))(x),
                                L.UpSampling1D(3)(x), L.Permute((2, 1))(x),
                                L.RepeatVector(4)(x[:, 0])], SEQ)
    np.testing.assert_array_equal(got[0], np.pad(SEQ, [(0, 0), (2, 1), (0, 0)]))
    np.testing.assert_array_equal(got[1], SEQ[:, 1:3])
    np.testing.assert_array_equal(got[2], SEQ.repeat(3, axis=1))
    np.testing.assert_array_equal(got[3], SEQ.transpose(0, 2, 1))
    np.testing.assert_array_equal(got[4], np.repeat(SEQ[:, None, 0], 4, axis=1))
    assert_input_gradient_matches_finite_differences(
        lambda x, t: L.Permute((2, 1))(L.UpSampling1D(2)(x) * L.RepeatVector(10)(x[:, 1])),
        SEQ)


def test_bad_arguments_are_errors() -> None:
    with pytest.raises(TypeMismatch, match="2 pairs of ints"):
        L.ZeroPadding2D(((1, 2, 3), (0, 0)))
    with pytest.raises(TypeMismatch, match="non-negative int"):
        L.Cropping2D(-1)
    with pytest.raises(TypeMismatch, match="interpolation='nearest'"):
        L.UpSampling2D(interpolation="bilinear")
    with pytest.raises(TypeMismatch, match="permutation of 1 .. 2"):
        L.Permute((0, 1))
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [None, 3, 4, 2])
        with pytest.raises(TypeMismatch, match="leaves nothing"):
            L.Cropping2D(((2, 1), (0, 0)))(x)
        with pytest.raises(TypeMismatch, match=r"rank 4\), got f32\[B,4\]"):
            L.UpSampling2D()(tfc.placeholder(tfc.float32, [None, 4]))
        with pytest.raises(TypeMismatch, match="need inputs of rank 3"):
            L.Permute((2, 1))(x)
