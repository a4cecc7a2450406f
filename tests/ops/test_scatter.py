"""``first_occurrence`` (tfc/ops/scatter.py): per position, the first masked-in position of
the same index, on both backends, against a brute-force numpy oracle (the n x n
comparison ``unique_rows`` used to build)."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.ops.scatter import first_occurrences

BACKENDS = ["llvm", "reference"]


def brute_force(idx: np.ndarray, mask: np.ndarray) -> np.ndarray:
    same = (idx[:, None] == idx[None, :]) & (mask[None, :] != 0)
    return np.where(same.any(axis=1), same.argmax(axis=1), 0).astype(idx.dtype)


def cases() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    out = [(np.array([5], np.int32), np.array([1], np.float32)),
           (np.array([5], np.int32), np.array([0], np.float32)),  # nothing owned: 0
           (np.array([2, 7, 2, 2, 7, 9], np.int32), np.ones(6, np.float32)),
           (np.array([2, 7, 2, 2, 7, 9], np.int32), np.array([0, 0, 1, 1, 0, 1], np.float32)),
           (np.array([-3, 2**31 - 1, -3, -2**31, 2**31 - 1], np.int32),
            np.array([1, 1, 1, 1, 0], np.float32))]
    for n, span in ((100, 10), (1000, 5000), (4096, 300)):  # dense and sparse repeats
        out.append((rng.integers(0, span, n).astype(np.int32),
                    (rng.random(n) < 0.7).astype(np.float32)))
    big = rng.integers(-2**40, 2**40, 500)  # i64 indices that collide in their low bits
    big[::3] = big[0] + (np.arange(len(big[::3])) << 32)
    out.append((np.concatenate([big, big[::-1]]).astype(np.int64),
                np.ones(1000, np.float32)))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_occurrence_matches_the_brute_force(backend):
    for k, (idx, mask) in enumerate(cases()):
        want = brute_force(idx, mask)
        np.testing.assert_array_equal(first_occurrences(idx, mask), want)
        with tfc.Graph().as_default():
            i = tfc.placeholder(tfc.as_dtype(idx.dtype), [None])
            m = tfc.placeholder(tfc.float32, [None])
            out = tfc.apply("first_occurrence", i, m)
            with tfc.Session(backend=backend) as sess:
                got = sess.run(out, {i: idx, m: mask})
        assert got.dtype == idx.dtype
        np.testing.assert_array_equal(got, want, err_msg=f"case {k}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
def test_first_occurrence_masks_of_every_dtype(backend, dtype):
    idx = np.array([4, 1, 4, 1, 4], np.int32)
    mask = np.array([0, 0, 2, 1, 1], dtype)
    with tfc.Graph().as_default():
        i = tfc.placeholder(tfc.int32, [5])
        m = tfc.placeholder(tfc.as_dtype(mask.dtype), [5])
        with tfc.Session(backend=backend) as sess:
            got = sess.run(tfc.apply("first_occurrence", i, m), {i: idx, m: mask})
    np.testing.assert_array_equal(got, [2, 3, 2, 3, 2])


def test_first_occurrence_checks_its_inputs():
    with tfc.Graph().as_default():
        with pytest.raises(tfc.errors.TypeMismatch, match="must be a vector"):
            tfc.apply("first_occurrence", tfc.placeholder(tfc.int32, [2, 2]),
                      tfc.placeholder(tfc.float32, [2, 2]))
        with pytest.raises(tfc.errors.TypeMismatch, match="indices"):
            tfc.apply("first_occurrence", tfc.placeholder(tfc.float32, [3]),
                      tfc.placeholder(tfc.float32, [3]))
