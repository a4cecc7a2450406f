"""What every backend may assume of a step's feeds (``tfc.backends.base.checked_feeds``)."""

import numpy as np
import pytest

from tfc.backends.base import checked_feeds
from tfc.errors import FeedError
from tfc.ir.core import Graph
from tfc.ir.types import DType, TensorType


def _graph() -> Graph:
    g = Graph("g")
    g.add_arg(TensorType(DType.f32, (4, 3)), "x")
    return g


def test_a_strided_feed_reaches_native_code_contiguous_with_the_same_values():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    (got,) = checked_feeds(_graph(), [x], [np.dtype(np.float32)])
    assert got.flags.c_contiguous and np.array_equal(got, x)


def test_a_feed_of_another_dtype_or_count_is_named():
    with pytest.raises(FeedError, match="feed 'x' has dtype float64"):
        checked_feeds(_graph(), [np.zeros((4, 3))], [np.dtype(np.float32)])
    with pytest.raises(FeedError, match="takes 1 feeds, got 0"):
        checked_feeds(_graph(), [], [np.dtype(np.float32)])
