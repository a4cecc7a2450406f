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


@pytest.mark.parametrize("kind", ["cumsum", "cumprod"])
def test_scans_are_the_references_bits(kind: str) -> None:
    """Under numpy the library's scan is the reference's, bit for bit: the sign of zero
    too (a sum starts from +0: ``cumsum([-0.0])`` is +0), f16 through f32, every attr."""
    from tfc.backends.cuda.library import LIBRARY
    from tfc.ir.registry import lookup
    rng = np.random.default_rng(5)
    opdef = lookup(kind)
    arrays = [np.array([[-0.0, -0.0, 2.0], [1.0, -0.0, -1.0]], np.float32),
              rng.normal(size=(3, 4, 5)).astype(np.float16),
              rng.integers(-3, 4, size=(4, 5)).astype(np.int32)]
    for x in arrays:
        for axis in range(x.ndim):
            for exclusive in (False, True):
                for reverse in (False, True):
                    attrs = opdef.check_attrs({"axis": axis, "exclusive": exclusive,
                                               "reverse": reverse})
                    got = LIBRARY[kind](np, [x], attrs)[0]
                    want = opdef.reference(None, [x], attrs)[0]
                    assert got.dtype == want.dtype
                    assert got.tobytes() == want.tobytes(), (x.dtype, attrs)
