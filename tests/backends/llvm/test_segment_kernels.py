"""The llvm kernel of ``segment_reduce`` (``kernels_segment``) against the reference, bit
for bit: every kind and family in f16/f32/f64/i32/i64 with a symbolic number of rows,
dropped negative ids, empty segments and NaN; rows wide enough to be split across threads;
and the run-time errors (an id out of range, a decreasing sorted id) with the reference's
message at the user's line."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import tfc
from tfc.errors import ExecutionError

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def both(outs, feeds) -> tuple[list, list]:
    got = []
    for backend in ("llvm", "reference"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback to the reference warns
            with tfc.Session(backend=backend) as s:
                got.append([np.asarray(v) for v in s.run(outs, feeds)])
    return got[0], got[1]


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), (a, b)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64])
def test_every_kind_matches_the_reference(dtype) -> None:
    if np.dtype(dtype).kind == "f":
        data = RNG.normal(size=(9, 2, 3)).astype(dtype)
        data[4, 0, 1] = np.nan
    else:
        data = RNG.integers(-5, 6, size=(9, 2, 3)).astype(dtype)
    ids = np.array([4, 0, -1, 4, 2, 0, -3, 4, 2], np.int32)
    sids = np.array([0, 0, 1, 1, 1, 3, 5, 5, 5], np.int64)
    x = tfc.placeholder(tfc.as_dtype(np.dtype(dtype).name), [None, 2, 3])
    i = tfc.placeholder(tfc.int32, [None])
    si = tfc.placeholder(tfc.int64, [None])
    m = tfc.math
    outs = [f(x, i, 6) for f in (m.unsorted_segment_sum, m.unsorted_segment_max,
                                 m.unsorted_segment_min, m.unsorted_segment_prod)]
    outs += [f(x, si, num_segments=7) for f in (m.segment_sum, m.segment_max,
                                                m.segment_min, m.segment_prod)]
    got, want = both(outs, {x: data, i: ids, si: sids})
    for g, w in zip(got, want):
        same_bits(g, w)
    assert np.isnan(got[1][2, 0, 1]) or np.dtype(dtype).kind != "f"  # NaN propagates


def test_wide_rows_split_across_threads() -> None:
    data = RNG.normal(size=(100, 5000)).astype(np.float32)  # 3 blocks of columns, split
    ids = RNG.integers(-1, 40, size=100).astype(np.int32)
    x = tfc.placeholder(tfc.float32, [None, 5000])
    i = tfc.placeholder(tfc.int32, [None])
    got, want = both([tfc.math.unsorted_segment_max(x, i, 40),
                      tfc.math.unsorted_segment_sum(x, i, 40)], {x: data, i: ids})
    for g, w in zip(got, want):
        same_bits(g, w)


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_bad_ids_are_errors_at_the_users_line(backend: str) -> None:
    x = tfc.placeholder(tfc.float32, [None])
    i = tfc.placeholder(tfc.int32, [None])

    def here() -> int:
        import inspect
        return inspect.currentframe().f_back.f_lineno  # type: ignore[union-attr]

    u, line = tfc.math.unsorted_segment_max(x, i, 3), here()
    s, sline = tfc.math.segment_sum(x, i, num_segments=3), here()
    with tfc.Session(backend=backend) as sess:
        data = np.ones(4, np.float32)
        with pytest.raises(ExecutionError, match=rf"test_segment_kernels.py:{line}: " +
                           re.escape("segment_max: segment_ids[2] = 3 is out of range [0, 3)")):
            sess.run(u, {x: data, i: np.array([0, -1, 3, 9], np.int32)})
        with pytest.raises(ExecutionError, match=rf"test_segment_kernels.py:{sline}: " +
                           re.escape("segment_sum: segment ids are not increasing "
                                     "(segment_ids[3] = 0")):
            sess.run(s, {x: data, i: np.array([0, 1, 1, 0], np.int32)})
        with pytest.raises(ExecutionError, match=re.escape("segment_ids[0] = -1 is out")):
            sess.run(s, {x: data, i: np.array([-1, 1, 1, 2], np.int32)})
        np.testing.assert_array_equal(  # and the session still runs good ids
            sess.run(u, {x: np.arange(4, dtype=np.float32), i: np.array([2, 2, -1, 0], np.int32)}),
            [3, np.finfo(np.float32).min, 1])


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_a_batch_of_data_unlike_constant_ids_is_an_error(backend: str) -> None:
    """Static ids against a symbolic batch of data: a size that differs at run time fails
    (never rows read past the data or left out)."""
    x = tfc.placeholder(tfc.float32, [None, 3])
    y = tfc.math.unsorted_segment_max(x, np.array([0, 1, 1, 2, 0], np.int32), 3)
    with tfc.Session(backend=backend) as s:
        for n in (3, 7):
            with pytest.raises(ExecutionError, match=r"segment_ids i32\[5\]|differ from "
                                                     r"segment_ids"):
                s.run(y, {x: np.ones((n, 3), np.float32)})
        assert s.run(y, {x: np.ones((5, 3), np.float32)}).sum() == 9
