"""``segment_reduce`` (``tfc.ops.segment``): the reference against a loop written out from
TF's definition (each kind, both families: dropped negative ids, TF's empty values, ids of
rank 2), the run-time errors (an id out of range, a decreasing sorted id; the first one,
row-major), type errors, and gradients against central finite differences (float64, rtol
1e-6, atol 1e-8; max/min away from ties, then ties sharing the gradient as TF does, prod
with 0, 1 and 2 zeros in a segment)."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import ExecutionError, TfcError
from tfc.ir.registry import lookup
from tfc.testing import check_gradients, infer_op1
from tfc.ir.types import DType, TensorType

RNG = np.random.default_rng(5)


def ref(data: np.ndarray, ids: np.ndarray, **attrs) -> np.ndarray:
    opdef = lookup("segment_reduce")
    return opdef.reference(None, [data, ids], opdef.check_attrs(attrs))[0]


def by_definition(data: np.ndarray, ids: np.ndarray, kind: str, n: int,
                  sorted_: bool) -> np.ndarray:
    """Per segment, its rows (in order) folded with the kind's binary op; TF's value for
    an empty segment."""
    rest = data.shape[ids.ndim:]
    rows = data.reshape((-1, *rest))
    flat = ids.reshape(-1)
    out = np.empty((n, *rest), data.dtype)
    fold = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[kind]
    big = np.finfo(data.dtype).max if data.dtype.kind == "f" else np.iinfo(data.dtype).max
    low = np.finfo(data.dtype).min if data.dtype.kind == "f" else np.iinfo(data.dtype).min
    empty = {"sum": 0, "max": 0 if sorted_ else low, "min": 0 if sorted_ else big,
             "prod": 1}[kind]
    for s in range(n):
        mine = [rows[i] for i in range(len(flat)) if flat[i] == s]
        if not mine:
            out[s] = empty
            continue
        acc = mine[0].copy()
        for r in mine[1:]:
            acc = fold(acc, r)
        out[s] = acc
    return out


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_unsorted_reference_is_the_definition(kind: str, dtype) -> None:
    data = (RNG.normal(size=(6, 3)) * 3).astype(dtype)
    ids = np.array([3, -1, 0, 3, -2, 0], np.int32)  # negatives dropped; 1, 2 and 4 empty
    got = ref(data, ids, reduction=kind, num_segments=5)
    want = by_definition(data, np.where(ids < 0, 99, ids), kind, 5, False)
    assert got.dtype == data.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
def test_sorted_reference_fills_gaps_as_tf(kind: str) -> None:
    """A gap in sorted ids is 0 (1 for prod), as TF's segment_*, not the identity."""
    data = RNG.normal(size=(5, 2)).astype(np.float32)
    ids = np.array([0, 0, 2, 2, 2], np.int64)
    got = ref(data, ids, reduction=kind, num_segments=4, sorted=True)
    np.testing.assert_array_equal(got, by_definition(data, ids, kind, 4, True))
    assert (got[[1, 3]] == (1 if kind == "prod" else 0)).all()


def test_ids_of_rank_two_and_the_empty_values_of_each_dtype() -> None:
    data = RNG.normal(size=(2, 3, 4)).astype(np.float16)
    ids = np.array([[1, 0, 1], [-1, 1, 0]], np.int32)
    got = ref(data, ids, reduction="max", num_segments=3)
    assert got.shape == (3, 4)
    np.testing.assert_array_equal(got, by_definition(data, np.where(ids < 0, 9, ids),
                                                     "max", 3, False))
    assert (got[2] == np.float16(-65504)).all()  # TF's lowest(), not -inf
    i = ref(np.ones((2, 2), np.int32), np.array([0, 0]), reduction="min", num_segments=2)
    assert (i[1] == np.iinfo(np.int32).max).all()


def test_nan_propagates() -> None:
    data = np.array([np.nan, 1.0, 1.0, np.nan, 2.0], np.float32)
    ids = np.array([0, 0, 1, 1, 2], np.int32)
    for kind in ("max", "min"):
        got = ref(data, ids, reduction=kind, num_segments=3)
        assert np.isnan(got[:2]).all() and got[2] == 2


@pytest.mark.parametrize("sorted_", [False, True])
def test_an_id_out_of_range_is_an_error_naming_the_first(sorted_: bool) -> None:
    data = np.ones(5, np.float32)
    with pytest.raises(ExecutionError, match=r"segment_max: segment_ids\[2\] = 3 is out "
                                             r"of range \[0, 3\)"):
        ref(data, np.array([0, 1, 3, 7, 2], np.int32), reduction="max", num_segments=3,
            sorted=sorted_)


def test_sorted_ids_must_be_in_range_and_increase() -> None:
    data = np.ones(4, np.float32)
    with pytest.raises(ExecutionError, match=r"segment_sum: segment_ids\[1\] = -1 is out"):
        ref(data, np.array([0, -1, 1, 1]), reduction="sum", num_segments=2, sorted=True)
    with pytest.raises(ExecutionError, match=r"segment ids are not increasing \(segment_"
                                             r"ids\[2\] = 0 follows a larger id\)"):
        ref(data, np.array([0, 1, 0, 1]), reduction="sum", num_segments=2, sorted=True)


def test_type_errors() -> None:
    f, i = TensorType(DType.f32, (4, 3)), TensorType(DType.i32, (4,))
    assert infer_op1("segment_reduce", f, i, reduction="sum", num_segments=7).shape == (7, 3)
    assert infer_op1("segment_reduce", TensorType(DType.f32, ("B", 3)),
                     TensorType(DType.i32, ("B",)), reduction="max",
                     num_segments=2).shape == (2, 3)
    for args, attrs, msg in [
            ((f, i), {"reduction": "mean", "num_segments": 2}, "reduction must be one of"),
            ((f, i), {"reduction": "sum", "num_segments": -1}, "num_segments must be >= 0"),
            ((f, TensorType(DType.i32, (3,))), {"reduction": "sum", "num_segments": 2},
             "prefix"),
            ((f, TensorType(DType.f32, (4,))), {"reduction": "sum", "num_segments": 2},
             "segment_ids"),
            ((TensorType(DType.bool, (4,)), i), {"reduction": "sum", "num_segments": 2},
             "data")]:
        with pytest.raises(TfcError, match=msg):
            infer_op1("segment_reduce", *args, **attrs)


IDS = np.array([2, 0, -1, 1, 0, 2], np.int32)  # (no empty segment: -FLT_MAX overflows)
SORTED = np.array([0, 0, 2, 2, 2, 3], np.int32)


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("sorted_", [False, True])
def test_gradients_match_finite_differences(kind: str, sorted_: bool) -> None:
    data = RNG.uniform(0.5, 2.0, size=(6, 2)) * RNG.choice([-1, 1], size=(6, 2))
    check_gradients("segment_reduce", data, SORTED if sorted_ else IDS, reduction=kind,
                    num_segments=4 if sorted_ else 3, sorted=sorted_)


def test_max_ties_share_the_gradient_as_tf() -> None:
    """TF's rule: the segment's gradient divided evenly among the rows equal to its max
    (not a finite difference: the max has no derivative at a tie)."""
    from tfc.ir.autodiff import gradients
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph
    from tfc.ir.interpret import ExecContext, run_graph
    data = np.array([3.0, 3.0, 1.0, 3.0, 5.0], np.float64)
    ids = np.array([0, 0, 0, 1, -1], np.int32)
    g = Graph("g")
    x = g.add_arg(TensorType(DType.f64, (5,)), "x")
    i = g.add_arg(TensorType(DType.i32, (5,)), "i")
    b = Builder(g)
    y = b.op("segment_reduce", x, i, reduction="max", num_segments=2).results[0]
    w = b.op("constant", value=np.array([2.0, 7.0])).results[0]
    loss = b.op("sum", b.op("mul", y, w).results[0], axes=[0]).results[0]
    (dx,) = gradients(g, [loss], [x])
    g.set_results([dx])
    got = run_graph(g, [data, ids], ExecContext({}, 0))[0]
    np.testing.assert_array_equal(got, [1.0, 1.0, 0.0, 7.0, 0.0])


@pytest.mark.parametrize("zeros", [[1], [1, 4]])
def test_prod_gradient_at_zeros(zeros: list[int]) -> None:
    """One zero in a segment: its row gets the product of the others, the rest 0; two
    zeros: all 0. Finite differences hold there too (prod is multilinear)."""
    data = RNG.uniform(0.5, 2.0, size=(6,))
    data[zeros] = 0.0
    ids = np.array([0, 0, 1, 1, 0, 1], np.int32)
    check_gradients("segment_reduce", data, ids, reduction="prod", num_segments=2)
