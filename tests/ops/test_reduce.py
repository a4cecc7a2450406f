"""Reductions and arg-reductions (tfc.ops.reduce) against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.registry import Cost, lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import infer_op as infer, run_op1



def T(*shape, dtype: DType = DType.f32) -> TensorType:
    return TensorType(dtype, shape)


def sample(shape: tuple, dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-3, 4, size=shape).astype(dtype)
    return rng.uniform(0.5, 1.5, size=shape).astype(dtype)


REDUCE = {
    "sum": lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    "mean": lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims),
    "prod": lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    "max": np.max,
    "min": np.min,
}
AXES = [None, (0,), (1,), (-1,), (0, 2), (), (2, 0, 1)]


CASES = [(n, d) for n in REDUCE for d in (np.float32, np.float64, np.int32, np.int64)
         if not (n == "mean" and np.issubdtype(d, np.integer))]   # mean is float-only


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("name,dtype", CASES)
def test_reduce_matches_numpy(name, dtype, axes, keepdims):
    x = sample((3, 4, 2), dtype)
    out = run_op1(name, x, axes=axes, keepdims=keepdims)
    want = np.asarray(REDUCE[name](x, axis=axes, keepdims=keepdims), dtype=dtype)
    assert out.dtype == want.dtype and out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", ["sum", "prod", "mean"])
def test_reduce_empty_axes_give_identities(name):
    x = np.zeros((0, 3), np.float32)
    out = run_op1(name, x, axes=[0])
    if name == "mean":
        assert np.isnan(out).all()
    else:
        np.testing.assert_array_equal(out, np.full(3, 0.0 if name == "sum" else 1.0, np.float32))


def test_reduce_scalars():
    x = np.array(2.5, np.float32)
    for name in ("sum", "mean", "max", "min", "prod"):
        out = run_op1(name, x)
        assert out.shape == () and out == 2.5


def test_mean_of_f16_accumulates_in_f32():
    x = np.full(4096, 0.1, np.float16)
    out = run_op1("mean", x)
    assert out.dtype == np.float16
    assert out == np.float16(0.1)


def test_max_min_on_bool():
    x = np.array([[True, False], [False, False]])
    np.testing.assert_array_equal(run_op1("max", x, axes=[1]), [True, False])
    np.testing.assert_array_equal(run_op1("min", x, axes=[0]), [False, False])


@pytest.mark.parametrize("shape,axes,keepdims,want", [
    (("B", 3), [1], False, ("B",)),
    (("B", 3), [0], False, (3,)),
    (("B", 3), [0], True, (1, 3)),
    (("B", "T", 4), None, False, ()),
    (("B", "T", 4), None, True, (1, 1, 1)),
    (("B", "T", 4), [-1, 0], False, ("T",)),
])
def test_reduce_types_keep_symbols(shape, axes, keepdims, want):
    assert infer("sum", T(*shape), axes=axes, keepdims=keepdims) == [T(*want)]


def test_reduce_errors():
    with pytest.raises(TypeMismatch, match="sum: axis 2 is out of range for rank 2"):
        infer("sum", T(2, 3), axes=[2])
    with pytest.raises(TypeMismatch, match=r"repeated axis in \[0, -2\]"):
        infer("sum", T(2, 3), axes=[0, -2])
    with pytest.raises(TypeMismatch, match="mean: input has dtype i32"):
        infer("mean", T(3, dtype=DType.i32))
    with pytest.raises(TypeMismatch, match="sum: input has dtype bool"):
        infer("sum", T(3, dtype=DType.bool))
    with pytest.raises(TypeMismatch, match=r"max: cannot reduce an empty axis of f32\[0,3\]"):
        infer("max", T(0, 3), axes=[0])
    with pytest.raises(TypeMismatch, match="attr axes=3 is not of kind ints"):
        infer("sum", T(2, 3), axes=3)


def test_max_of_a_symbolic_dim_that_is_empty_fails_at_run_time():
    from tfc.ir.interpret import ExecContext, run_graph
    g = Graph("t")
    a = g.add_arg(T("B", 3))
    g.set_results([Builder(g)("max", a, axes=[0])])
    with pytest.raises(ExecutionError, match="max failed"):
        run_graph(g, [np.zeros((0, 3), np.float32)], ExecContext({}))


def test_reduce_cost_counts_input_elements():
    c = lookup("sum").cost([T(10, 4)], [T(4)], {"axes": (0,), "keepdims": False})
    assert c == Cost(40, 160 + 16)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("out_type", [DType.i32, DType.i64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("name,fn", [("argmax", np.argmax), ("argmin", np.argmin)])
def test_arg_reduce_matches_numpy(name, fn, dtype, out_type, axis):
    x = sample((4, 5), dtype, seed=7)
    x[1, :] = x[1, 0]   # ties go to the first
    out = run_op1(name, x, axis=axis, output_type=out_type)
    assert out.dtype == out_type.np
    np.testing.assert_array_equal(out, fn(x, axis=axis))


def test_arg_reduce_defaults_types_and_errors():
    out = run_op1("argmax", np.array([1, 3, 2], np.float32))
    assert out.dtype == np.int64 and out == 1
    assert infer("argmax", T("B", 10), axis=1) == [T("B", dtype=DType.i64)]
    assert infer("argmin", T("B", 10), output_type=DType.i32) == [T(10, dtype=DType.i32)]
    with pytest.raises(TypeMismatch, match="output_type must be i32 or i64"):
        infer("argmax", T(3), output_type=DType.f32)
    with pytest.raises(TypeMismatch, match=r"rank >= 1, got f32\[\]"):
        infer("argmax", T())
    with pytest.raises(TypeMismatch, match=r"axis 0 of f32\[0,3\] is empty"):
        infer("argmax", T(0, 3))
    with pytest.raises(TypeMismatch, match="argmin: input has dtype bool"):
        infer("argmin", T(3, dtype=DType.bool))


def test_an_arg_reduction_costs_a_comparison_per_input_element():
    """argmax over the 10 classes of a batch of 64 compares 640 elements (the default cost
    counted its 64 results)."""
    c = lookup("argmax").cost([T(64, 10)], [T(64, dtype=DType.i64)], {"axis": 1},
                              symbol_size=1)
    assert c.flops == 640
    assert lookup("argmin").cost([T("B", 10)], [T("B", dtype=DType.i64)], {"axis": 1},
                                 symbol_size=8).flops == 80
