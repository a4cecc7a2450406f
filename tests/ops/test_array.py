"""Array ops against numpy, their shape rules over symbolic dims, and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.registry import RANDOM, Cost, lookup
from tfc.ir.types import DType, TensorType
from tfc.ops.array import OPEN_HI, OPEN_LO, index_attrs, shuffle_permutation, splitmix64
from tfc.testing import infer_op as infer
from tfc.testing import run_op, run_op1

F32 = DType.f32



def T(*shape, dtype: DType = F32) -> TensorType:
    return TensorType(dtype, shape)


def arr(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def same(out: np.ndarray, want: np.ndarray) -> None:
    assert out.dtype == want.dtype and out.shape == want.shape
    np.testing.assert_array_equal(out, want)


# ---- reshape -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,target", [
    ((2, 3, 4), (6, 4)), ((2, 3, 4), (-1,)), ((2, 3, 4), (4, -1, 2)), ((6,), (1, 6, 1)),
    ((), (1, 1)), ((1,), ()), ((0, 3), (3, 0)), ((0, 3), (-1, 3)), ((5,), (5, -1)),
])
def test_reshape_matches_numpy(shape, target):
    x = arr(*shape)
    same(run_op1("reshape", x, shape=target), x.reshape(target))


def test_reshape_result_does_not_alias_input():
    x = arr(2, 3)
    out = run_op1("reshape", x, shape=[6])
    out[0] = 99
    assert x[0, 0] == 0


@pytest.mark.parametrize("shape,target,want", [
    (("B", 28, 28), (-1, 784), ("B", 784)),
    (("B", 784), (-1, 28, 28), ("B", 28, 28)),
    (("B", 28, 28), (-1, 28), ("?", 28)),        # B*28: not a symbol times 1
    (("B", "T"), (-1,), ("?",)),
    (("B", 3), (3, -1), (3, "B")),
    (("?", 4), (-1, 4), ("?", 4)),
    (("B", 0), (-1, 5), (0, 5)),
    (("B", 4), (8,), (8,)),                       # possible when B == 2
])
def test_reshape_symbolic(shape, target, want):
    assert infer("reshape", T(*shape), shape=target) == [T(*want)]


@pytest.mark.parametrize("shape,target,needle", [
    ((2, 3), (4, 2), "f32[2,3] to [4,2]"),
    ((2, 3), (-1, 4), "f32[2,3] to [-1,4]"),
    ((2, 3), (-1, -1), "at most one -1"),
    ((0, 3), (0, -1), "ambiguous"),
    (("B", 3), (4,), "f32[B,3] to [4]"),
    (("B", 3), ("B", 3), "must be sizes"),
])
def test_reshape_errors(shape, target, needle):
    with pytest.raises(TypeMismatch, match=needle.replace("[", r"\[").replace("]", r"\]")):
        infer("reshape", T(*shape), shape=target)


# ---- transpose, broadcast_to, tile, expand_dims, squeeze ---------------------------------

@pytest.mark.parametrize("shape,perm", [
    ((2, 3, 4), None), ((2, 3, 4), (1, 0, 2)), ((2, 3, 4), (-1, 0, 1)), ((), None),
    ((0, 5), (1, 0)), ((7,), (0,)),
])
def test_transpose_matches_numpy(shape, perm):
    x = arr(*shape)
    out = run_op1("transpose", x, perm=perm)
    same(out, np.transpose(x, perm))
    assert out.flags.c_contiguous


def test_transpose_symbolic_and_errors():
    assert infer("transpose", T("B", 3, "T")) == [T("T", 3, "B")]
    assert infer("transpose", T("B", 3), perm=[1, 0]) == [T(3, "B")]
    with pytest.raises(TypeMismatch, match=r"perm \[0, 0\] .* f32\[2,3\]"):
        infer("transpose", T(2, 3), perm=[0, 0])
    with pytest.raises(TypeMismatch, match="not a permutation"):
        infer("transpose", T(2, 3), perm=[0, 1, 2])


@pytest.mark.parametrize("shape,target", [
    ((3,), (2, 3)), ((1, 3), (4, 3)), ((), (2, 2)), ((2, 1), (2, 0)), ((2, 3), (2, 3)),
])
def test_broadcast_to_matches_numpy(shape, target):
    x = arr(*shape)
    out = run_op1("broadcast_to", x, shape=target)
    same(out, np.broadcast_to(x, target))
    assert out.flags.writeable


def test_broadcast_to_symbolic_and_errors():
    assert infer("broadcast_to", T("B", 1), shape=[4, 3]) == [T(4, 3)]
    with pytest.raises(TypeMismatch, match=r"f32\[2,3\] to \[4,3\]"):
        infer("broadcast_to", T(2, 3), shape=[4, 3])
    with pytest.raises(TypeMismatch, match=r"f32\[2,3\] to \[3\]"):
        infer("broadcast_to", T(2, 3), shape=[3])
    with pytest.raises(TypeMismatch, match="must be sizes"):
        infer("broadcast_to", T(1, 3), shape=["B", 3])
    with pytest.raises(ExecutionError):   # B turned out 2, which does not broadcast to 4
        from tfc.ir.interpret import ExecContext, run_graph
        g = Graph("t")
        a = g.add_arg(T("B", 1))
        g.set_results([Builder(g)("broadcast_to", a, shape=[4, 3])])
        run_graph(g, [np.zeros((2, 1), np.float32)], ExecContext({}))


@pytest.mark.parametrize("shape,mult", [((2, 3), (2, 1)), ((3,), (0,)), ((), ()),
                                        ((2, 1, 2), (1, 3, 2))])
def test_tile_matches_numpy(shape, mult):
    x = arr(*shape)
    same(run_op1("tile", x, multiples=mult), np.tile(x, mult) if mult else x)


def test_tile_symbolic_and_errors():
    assert infer("tile", T("B", 3, "C"), multiples=[1, 2, 0]) == [T("B", 6, 0)]
    assert infer("tile", T("B"), multiples=[3]) == [T("?")]
    with pytest.raises(TypeMismatch, match=r"multiples \[2\] .* f32\[2,3\]"):
        infer("tile", T(2, 3), multiples=[2])


@pytest.mark.parametrize("shape,axis", [((2, 3), 0), ((2, 3), 2), ((2, 3), -1), ((2, 3), -3),
                                        ((), 0), ((), -1)])
def test_expand_dims_matches_numpy(shape, axis):
    x = arr(*shape)
    same(run_op1("expand_dims", x, axis=axis), np.expand_dims(x, axis))


def test_expand_dims_symbolic_and_errors():
    assert infer("expand_dims", T("B", 3), axis=-1) == [T("B", 3, 1)]
    with pytest.raises(TypeMismatch, match="axis 3 is out of range"):
        infer("expand_dims", T(2, 3), axis=3)


@pytest.mark.parametrize("shape,axes", [((1, 3, 1), None), ((1, 3, 1), (0,)), ((1, 3, 1), (-1,)),
                                        ((1, 1), None), ((3,), None), ((1,), (0,))])
def test_squeeze_matches_numpy(shape, axes):
    x = arr(*shape)
    same(run_op1("squeeze", x, axes=axes), np.squeeze(x, axis=axes))


def test_squeeze_symbolic_and_errors():
    assert infer("squeeze", T("B", 1, "C"), axes=[1]) == [T("B", "C")]
    assert infer("squeeze", T("B", 1), axes=[0, 1]) == [T()]   # B checked at run time
    with pytest.raises(TypeMismatch, match=r"f32\[B,1\] has symbolic dims"):
        infer("squeeze", T("B", 1))
    with pytest.raises(TypeMismatch, match=r"axis 1 of f32\[1,3\] has size 3"):
        infer("squeeze", T(1, 3), axes=[1])
    with pytest.raises(TypeMismatch, match="a scalar has no axis 0"):
        infer("squeeze", T(), axes=[0])
    with pytest.raises(TypeMismatch, match="a scalar has no axis 0"):
        infer("slice", T(), begin=[], end=[], squeeze_axes=[0])


# ---- concat, stack, split --------------------------------------------------------------------

@pytest.mark.parametrize("shapes,axis", [
    ([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 0)], 1), ([(2, 3), (2, 5)], -1),
    ([(0, 3), (0, 3)], 0), ([(5,)], 0),
])
def test_concat_matches_numpy(shapes, axis):
    xs = [arr(*s) + i for i, s in enumerate(shapes)]
    same(run_op1("concat", *xs, axis=axis), np.concatenate(xs, axis=axis))


def test_concat_symbolic():
    assert infer("concat", T("B", 3), T("B", 4), axis=1) == [T("B", 7)]
    assert infer("concat", T("B", 3), T(2, 3), axis=0) == [T("?", 3)]
    assert infer("concat", T("B", 3), T(0, 3), axis=0) == [T("B", 3)]
    assert infer("concat", T("B", 3), T(5, 4), axis=1) == [T(5, 7)]   # B must be 5
    assert infer("concat", T("B", 3), T("?", 4), axis=1) == [T("B", 7)]
    assert infer("concat", T("B", 3), T("C", 4), axis=1) == [T("?", 7)]


def test_concat_errors():
    with pytest.raises(TypeMismatch, match=r"f32\[2,3\] and f32\[4,4\]: dim 1 differs"):
        infer("concat", T(2, 3), T(4, 4), axis=0)
    with pytest.raises(TypeMismatch, match=r"f32\[2,3\] and f32\[2\] have different ranks"):
        infer("concat", T(2, 3), T(2), axis=0)
    with pytest.raises(TypeMismatch, match="different dtypes"):
        infer("concat", T(2, 3), T(2, 3, dtype=DType.i32))
    with pytest.raises(TypeMismatch, match="scalars"):
        infer("concat", T(), T())
    with pytest.raises(TypeMismatch, match="at least one"):
        infer("concat")
    with pytest.raises(TypeMismatch, match="axis 2 is out of range"):
        infer("concat", T(2, 3), T(2, 3), axis=2)


@pytest.mark.parametrize("shape,n,axis", [((2, 3), 3, 0), ((2, 3), 2, 2), ((2, 3), 1, -1),
                                          ((), 4, 0), ((0, 2), 2, 1)])
def test_stack_matches_numpy(shape, n, axis):
    xs = [arr(*shape) * (i + 1) for i in range(n)]
    same(run_op1("stack", *xs, axis=axis), np.stack(xs, axis=axis))


def test_stack_symbolic_and_errors():
    assert infer("stack", T("B", 3), T("B", 3), axis=-1) == [T("B", 3, 2)]
    assert infer("stack", T("B", 3), T(4, 3)) == [T(2, 4, 3)]
    with pytest.raises(TypeMismatch, match=r"f32\[2,3\] and f32\[2,4\]"):
        infer("stack", T(2, 3), T(2, 4))
    with pytest.raises(TypeMismatch, match="out of range"):
        infer("stack", T(2, 3), T(2, 3), axis=4)


@pytest.mark.parametrize("shape,axis,attrs", [
    ((6, 2), 0, {"num": 3}), ((2, 6), -1, {"num": 2}), ((5, 2), 0, {"sizes": [1, 4]}),
    ((5, 2), 0, {"sizes": [2, -1, 0]}), ((0, 2), 0, {"num": 2}), ((4,), 0, {"num": 1}),
])
def test_split_matches_numpy(shape, axis, attrs):
    x = arr(*shape)
    outs = run_op("split", x, axis=axis, **attrs)
    if "num" in attrs:
        want = np.split(x, attrs["num"], axis=axis)
    else:
        sizes = list(attrs["sizes"])
        if -1 in sizes:
            sizes[sizes.index(-1)] = x.shape[axis] - sum(s for s in sizes if s != -1)
        want = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    assert len(outs) == len(want)
    for o, w in zip(outs, want):
        same(o, w)


def test_split_symbolic_and_errors():
    assert infer("split", T("B", 6), axis=1, num=2) == [T("B", 3)] * 2
    assert infer("split", T("B", 6), num=2) == [T("?", 6)] * 2
    assert infer("split", T("B", 6), num=1) == [T("B", 6)]
    assert infer("split", T("B", 6), sizes=[2, -1]) == [T(2, 6), T("?", 6)]
    assert infer("split", T("B", 6), sizes=[0, -1]) == [T(0, 6), T("B", 6)]
    with pytest.raises(TypeMismatch, match=r"axis 0 of f32\[5,2\] cannot split into 2"):
        infer("split", T(5, 2), num=2)
    with pytest.raises(TypeMismatch, match=r"sizes \[1, 2\] do not add up to axis 0 of f32\[5,2\]"):
        infer("split", T(5, 2), sizes=[1, 2])
    with pytest.raises(TypeMismatch, match="exactly one"):
        infer("split", T(5, 2), num=5, sizes=[5])
    with pytest.raises(TypeMismatch, match="exactly one"):
        infer("split", T(5, 2))
    with pytest.raises(TypeMismatch, match="scalar"):
        infer("split", T(), num=1)


def test_split_checks_symbolic_dims_at_run_time():
    from tfc.ir.interpret import ExecContext, run_graph
    g = Graph("t")
    a = g.add_arg(T("B"))
    g.set_results(Builder(g).op("split", a, num=2).results)
    with pytest.raises(ExecutionError, match="cannot split into 2"):
        run_graph(g, [np.zeros(5, np.float32)], ExecContext({}))


# ---- slice -------------------------------------------------------------------------------------

KEYS = [
    (slice(1, 3),), (slice(None, None, 2),), (slice(1, 3), slice(None, None, 2)),
    (slice(None, None, -1),), (slice(-2, None),), (slice(-100, 100),), (slice(3, 1),),
    (0,), (-1,), (1, 2), (Ellipsis, 0), (Ellipsis,), (slice(None), -1), (slice(5, None, -2),),
    (1, slice(None, None, -1), -2), (slice(-1, -100, -1),), (np.int64(1),), (),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_slice_matches_numpy_indexing(key):
    x = arr(4, 5, 3)
    attrs = index_attrs(key, x.ndim)
    out = run_op1("slice", x, **attrs)
    same(out, np.array(x[key]))
    assert infer("slice", T(4, 5, 3), **attrs) == [T(*x[key].shape)]


def test_slice_on_scalars_and_empty_dims():
    same(run_op1("slice", np.float32(3), **index_attrs((), 0)), np.array(3, np.float32))
    x = arr(0, 3)
    same(run_op1("slice", x, **index_attrs((slice(None), 1), 2)), x[:, 1])
    same(run_op1("slice", x, **index_attrs((slice(1, None),), 2)), x[1:])


def test_slice_raw_attrs():
    x = arr(6, 4)
    same(run_op1("slice", x, begin=[1], end=[OPEN_HI], strides=[2]), x[1::2])
    same(run_op1("slice", x, begin=[OPEN_HI, 0], end=[OPEN_LO, 2], strides=[-1, 1]),
         x[::-1, 0:2])


def test_slice_symbolic():
    t = T("B", 5, 3)
    assert infer("slice", t, **index_attrs((slice(None), 0), 3)) == [T("B", 3)]
    assert infer("slice", t, **index_attrs((slice(None, None, -1),), 3)) == [t]
    assert infer("slice", t, **index_attrs((slice(1, None),), 3)) == [T("?", 5, 3)]
    assert infer("slice", t, **index_attrs((slice(0, 4),), 3)) == [T("?", 5, 3)]
    assert infer("slice", t, **index_attrs((0,), 3)) == [T(5, 3)]   # checked at run time


def test_slice_errors():
    with pytest.raises(TypeMismatch, match=r"axis 0 of f32\[3,4\] has 0 elements"):
        infer("slice", T(3, 4), **index_attrs((3,), 2))
    with pytest.raises(TypeMismatch, match=r"f32\[3,4\]"):
        infer("slice", T(3, 4), begin=[0, 0, 0], end=[1, 1, 1])
    with pytest.raises(TypeMismatch, match="non-zero"):
        infer("slice", T(3, 4), begin=[0], end=[1], strides=[0])
    with pytest.raises(TypeMismatch, match="too many indices"):
        index_attrs((0, 0, 0), 2)
    with pytest.raises(TypeMismatch, match="zero"):
        index_attrs(slice(None, None, 0), 2)
    with pytest.raises(TypeMismatch, match="unsupported index"):
        index_attrs(None, 2)
    from tfc.ir.interpret import ExecContext, run_graph
    g = Graph("t")
    a = g.add_arg(T("B", 2))
    g.set_results([Builder(g)("slice", a, **index_attrs(4, 2))])
    with pytest.raises(ExecutionError, match=r"out of range for axis 0 of shape \[3, 2\]"):
        run_graph(g, [np.zeros((3, 2), np.float32)], ExecContext({}))


# ---- pad ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["constant", "reflect", "symmetric"])
@pytest.mark.parametrize("shape,pads", [((3, 4), [[1, 2], [0, 3]]), ((4,), [2, 1]),
                                        ((), []), ((3, 2), [[0, 0], [1, 1]])])
def test_pad_matches_numpy(mode, shape, pads):
    x = arr(*shape)
    kw = {"constant_values": 7.0} if mode == "constant" else {}
    out = run_op1("pad", x, paddings=pads, mode=mode, value=7.0)
    want = np.pad(x, np.reshape(np.array(pads, dtype=int), (-1, 2)), mode=mode, **kw) if pads else x
    same(out, want)


def test_pad_int_value_and_empty_dim():
    x = arr(2, dtype=np.int32)
    same(run_op1("pad", x, paddings=[1, 1], value=-3.0), np.array([-3, 0, 1, -3], np.int32))
    same(run_op1("pad", arr(0, 2), paddings=[1, 0, 0, 0]), np.zeros((1, 2), np.float32))


def test_pad_symbolic_and_errors():
    assert infer("pad", T("B", 3), paddings=[0, 0, 1, 1]) == [T("B", 5)]
    assert infer("pad", T("B", 3), paddings=[[1, 0], [0, 0]]) == [T("?", 3)]
    assert lookup("pad").check_attrs({"paddings": [[1, 2], [3, 4]]})["paddings"] == (1, 2, 3, 4)
    with pytest.raises(TypeMismatch, match=r"paddings \[1, 1\] must be 2 pairs .* f32\[3,4\]"):
        infer("pad", T(3, 4), paddings=[1, 1])
    with pytest.raises(TypeMismatch, match=r"reflect padding \(3, 0\) of axis 0 of f32\[3\]"):
        infer("pad", T(3), paddings=[3, 0], mode="reflect")
    infer("pad", T(3), paddings=[3, 0], mode="symmetric")
    with pytest.raises(TypeMismatch, match="mode 'wrap'"):
        infer("pad", T(3), paddings=[1, 0], mode="wrap")
    with pytest.raises(TypeMismatch, match=">= 0"):
        infer("pad", T(3), paddings=[-1, 0])


# ---- gather, one_hot -----------------------------------------------------------------------

@pytest.mark.parametrize("pshape,ishape,axis", [((5, 3), (4,), 0), ((5, 3), (2, 2), 1),
                                                ((5, 3), (), 0), ((5,), (0,), 0),
                                                ((2, 5, 3), (6,), -2)])
@pytest.mark.parametrize("idt", [np.int32, np.int64])
def test_gather_matches_numpy(pshape, ishape, axis, idt):
    p = arr(*pshape)
    n = pshape[axis]
    idx = (np.arange(int(np.prod(ishape))) * 7 % n).astype(idt).reshape(ishape)
    same(run_op1("gather", p, idx, axis=axis), np.take(p, idx, axis=axis))


def test_gather_symbolic_and_errors():
    assert infer("gather", T(1000, 64), T("B", "T", dtype=DType.i32)) == [T("B", "T", 64)]
    assert infer("gather", T("V", 8), T(3, dtype=DType.i64), axis=1) == [T("V", 3)]
    with pytest.raises(TypeMismatch, match="indices has dtype f32"):
        infer("gather", T(5, 3), T(2))
    with pytest.raises(TypeMismatch, match="rank >= 1"):
        infer("gather", T(), T(2, dtype=DType.i32))
    p = arr(5, 3)
    for bad in (5, -1):
        with pytest.raises(ExecutionError, match=rf"index {bad} is out of range \[0, 5\) for "
                                                 r"axis 0 of params with shape \[5, 3\]"):
            run_op1("gather", p, np.array([0, bad], np.int32))


def test_gather_cost_counts_rows_read():
    c = lookup("gather").cost([T(10000, 64), T(8, dtype=DType.i32)], [T(8, 64)], {})
    assert c == Cost(0, 8 * 4 + 2 * 8 * 64 * 4)


@pytest.mark.parametrize("ishape,axis", [((4,), -1), ((2, 3), -1), ((2, 3), 0), ((), -1),
                                         ((0,), -1), ((2, 3), 1)])
def test_one_hot_matches_numpy(ishape, axis):
    idx = (np.arange(int(np.prod(ishape))) % 5 - 1).reshape(ishape).astype(np.int64)  # -1, 4 off
    out = run_op1("one_hot", idx, depth=4, on_value=2.0, off_value=-1.0, axis=axis)
    want = np.where(idx[..., None] == np.arange(4), 2.0, -1.0).astype(np.float32)
    same(out, np.moveaxis(want, -1, axis % (idx.ndim + 1)))


def test_one_hot_dtypes_symbolic_and_errors():
    out = run_op1("one_hot", np.array([1, 0], np.int32), depth=2, dtype=DType.i64)
    same(out, np.array([[0, 1], [1, 0]], np.int64))
    assert infer("one_hot", T("B", dtype=DType.i32), depth=10) == [T("B", 10)]
    assert infer("one_hot", T("B", dtype=DType.i32), depth=10, dtype=DType.f64,
                 axis=0) == [T(10, "B", dtype=DType.f64)]
    with pytest.raises(TypeMismatch, match="indices has dtype f32"):
        infer("one_hot", T(3), depth=2)
    with pytest.raises(TypeMismatch, match="depth -1"):
        infer("one_hot", T(3, dtype=DType.i32), depth=-1)


# ---- shape, rank ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4, 1)])
@pytest.mark.parametrize("out_type", [DType.i32, DType.i64])
def test_shape_and_rank(shape, out_type):
    x = arr(*shape)
    same(run_op1("shape", x, out_type=out_type), np.array(shape, dtype=out_type.np))
    same(run_op1("rank", x), np.array(len(shape), np.int32))


def test_shape_types():
    assert infer("shape", T("B", 3)) == [T(2, dtype=DType.i32)]
    assert infer("shape", T(), out_type=DType.i64) == [T(0, dtype=DType.i64)]
    assert infer("rank", T("B", 3)) == [T(dtype=DType.i32)]
    with pytest.raises(TypeMismatch, match="out_type"):
        infer("shape", T(2), out_type=DType.f32)
    assert lookup("shape").cost([T(1000, 1000)], [T(2, dtype=DType.i32)], {}) == Cost(0, 8)


# ---- generators ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", list(DType))
@pytest.mark.parametrize("shape", [(2, 3), (), (0,)])
def test_fill_zeros_ones(dtype, shape):
    same(run_op1("zeros", shape=shape, dtype=dtype), np.zeros(shape, dtype.np))
    same(run_op1("ones", shape=shape, dtype=dtype), np.ones(shape, dtype.np))
    v = 2.0 if dtype != DType.bool else 1.0
    same(run_op1("fill", shape=shape, value=v, dtype=dtype), np.full(shape, v, dtype.np))


def test_fill_defaults_and_errors():
    same(run_op1("fill", shape=[2], value=-2.7, dtype=DType.i32), np.array([-2, -2], np.int32))
    assert infer("zeros", shape=[3]) == [T(3)]
    with pytest.raises(TypeMismatch, match="must be sizes"):
        infer("fill", shape=["B", 3], value=1.0)
    with pytest.raises(TypeMismatch, match="unknown attr 'value'"):
        infer("ones", shape=[3], value=1.0)


@pytest.mark.parametrize("start,limit,delta", [(0, 5, 1), (2, 11, 3), (5, 0, -2), (3, 3, 1),
                                               (5, 0, 1), (-4, 4, 3)])
@pytest.mark.parametrize("dtype", [DType.i32, DType.i64, DType.f32, DType.f64])
def test_range_matches_numpy(start, limit, delta, dtype):
    out = run_op1("range", start=start, limit=limit, delta=delta, dtype=dtype)
    same(out, np.arange(start, limit, delta).astype(dtype.np))


def test_range_floats_and_errors():
    same(run_op1("range", start=0.0, limit=1.0, delta=0.1, dtype=DType.f64),
         np.arange(10, dtype=np.float64) * 0.1)
    assert infer("range", limit=7) == [T(7, dtype=DType.i32)]
    with pytest.raises(TypeMismatch, match="non-zero"):
        infer("range", limit=3, delta=0)
    with pytest.raises(TypeMismatch, match="must be integers"):
        infer("range", limit=3.5)
    with pytest.raises(TypeMismatch, match="dtype has dtype bool"):
        infer("range", limit=3, dtype=DType.bool)


# ---- shuffle -------------------------------------------------------------------------------

def test_splitmix64_known_values():
    # The first outputs of SplitMix64 seeded with 0 (state += golden gamma, then mix).
    z = np.array([0, 0x9E3779B97F4A7C15], dtype=np.uint64)
    assert [int(v) for v in splitmix64(z)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]


def test_shuffle_is_a_seeded_permutation():
    x = arr(10, 2)
    a = run_op1("shuffle", x, seed=7, step=3)
    same(a, x[shuffle_permutation(7, 3, 10)])
    same(run_op1("shuffle", x, seed=7, step=3), a)
    assert sorted(a[:, 0].tolist()) == x[:, 0].tolist()
    assert not np.array_equal(run_op1("shuffle", x, seed=7, step=4), a)
    assert not np.array_equal(run_op1("shuffle", x, seed=8, step=3), a)
    assert not np.array_equal(a, x)


def test_shuffle_algorithm_is_bit_exact():
    """Recompute the documented algorithm with Python integers."""
    m = (1 << 64) - 1

    def mix(z: int) -> int:
        z = (z + 0x9E3779B97F4A7C15) & m
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)

    for seed, step in [(0, 0), (-5, 2), (123456789, 10**6)]:
        base = mix(mix(seed & m) ^ (step & m))
        keys = [mix(base ^ i) for i in range(20)]
        assert shuffle_permutation(seed, step, 20).tolist() == sorted(range(20),
                                                                      key=lambda i: keys[i])


def test_shuffle_traits_types_and_edges():
    assert lookup("shuffle").has(RANDOM)
    assert infer("shuffle", T("B", 3)) == [T("B", 3)]
    same(run_op1("shuffle", arr(0, 3)), arr(0, 3))
    same(run_op1("shuffle", arr(1)), arr(1))
    with pytest.raises(TypeMismatch, match="rank >= 1"):
        infer("shuffle", T())


# ---- costs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,attrs", [("reshape", {"shape": [6]}), ("transpose", {}),
                                        ("tile", {"multiples": [2, 1]})])
def test_movement_costs_no_flops(kind, attrs):
    opdef = lookup(kind)
    full = opdef.check_attrs(attrs)
    (out,) = opdef.infer([T(2, 3)], full)
    c = opdef.cost([T(2, 3)], [out], full)
    assert c == Cost(0, 24 + out.nbytes())


def test_symbolic_graph_runs_for_several_batch_sizes():
    """Types inferred over B hold for every B the reference runs with."""
    from tfc.ir.interpret import ExecContext, run_graph
    g = Graph("t")
    x = g.add_arg(T("B", 28, 28), "x")
    y = g.add_arg(T("B", dtype=DType.i32), "y")
    b = Builder(g)
    flat = b("reshape", x, shape=[-1, 784])
    row = b("slice", flat, **index_attrs((slice(None), slice(0, 10)), 2))
    hot = b("one_hot", y, depth=10)
    both = b("concat", row, hot, axis=1)
    first, _ = b.op("split", both, axis=1, num=2).results
    g.set_results([b("transpose", first), b("shuffle", flat, seed=3)])
    assert [v.type for v in g.results] == [T(10, "B"), T("B", 784)]
    for n in (1, 5, 0):
        xs = arr(n, 28, 28)
        ys = (np.arange(n) % 10).astype(np.int32)
        t, s = run_graph(g, [xs, ys], ExecContext({}, step=2))
        same(t, xs.reshape(n, 784)[:, :10].T.copy())
        same(s, xs.reshape(n, 784)[shuffle_permutation(3, 2, n)])


def test_a_slice_moves_the_bytes_it_keeps_not_its_whole_input():
    """One gate of an LSTM's [B, 4H] product: reads and writes [B, H] (the default
    movement cost counted all of the input)."""
    c = lookup("slice").cost([TensorType(DType.f32, (64, 64))],
                             [TensorType(DType.f32, (64, 16))],
                             {"begin": [0, 16], "end": [64, 32]})
    assert c.flops == 0 and c.bytes == 2 * 64 * 16 * 4
