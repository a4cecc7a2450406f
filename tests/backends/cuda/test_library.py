"""``tfc.backends.cuda.library``: the same code on numpy (emulator) and cupy (a GPU)."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

from tfc.backends.cuda.library import scatter_rows
from tfc.errors import ExecutionError


def test_scatter_rows_takes_the_array_modules_add_at_with_no_warning():
    """Repeated rows accumulate through ``xp.add.at`` whatever ``xp`` is (numpy here, cupy
    on a GPU, a stand-in module below): no ``cupyx.scatter_add``, which cupy 14 deprecates
    with a warning that the tests turning warnings into errors would fail on."""
    stand_in = types.SimpleNamespace(add=np.add)  # an array module that is not numpy
    for xp in (np, stand_in):
        out = np.zeros((3, 2), np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            scatter_rows(xp, out, np.array([2, 0, 2]), np.ones((3, 2), np.float32),
                         "scatter_add", sign=-1)
        np.testing.assert_array_equal(out, [[-1, -1], [0, 0], [-2, -2]])
        with pytest.raises(ExecutionError, match="scatter_add"):
            scatter_rows(xp, out, np.array([3]), np.ones((1, 2), np.float32), "scatter_add")
