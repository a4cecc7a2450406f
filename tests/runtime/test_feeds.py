"""Feed checking: names, dtypes (the lossless-cast rule), shapes and symbolic dims."""

import numpy as np
import pytest

from tfc.errors import FeedError
from tfc.ir.core import Graph
from tfc.ir.types import DType, TensorType
from tfc.runtime.feeds import check_feeds, synthetic_feeds


def graph() -> Graph:
    g = Graph("predict")
    g.add_arg(TensorType(DType.f32, ("B", 64)), "x")
    g.add_arg(TensorType(DType.i32, ("B",)), "labels")
    g.add_arg(TensorType(DType.f64, ()), "lr")
    return g


def good(**over):
    feeds = {"x": np.zeros((4, 64), np.float32), "labels": np.zeros(4, np.int32),
             "lr": np.float64(0.5)}
    feeds.update(over)
    return feeds


def test_arg_order_and_contiguity():
    x = np.arange(4 * 128, dtype=np.float32).reshape(4, 128)[:, ::2]
    assert not x.flags.c_contiguous
    out = check_feeds(graph(), {"lr": 0.1, "labels": [1, 2, 3, 4], "x": x})
    assert [a.dtype for a in out] == [np.float32, np.int32, np.float64]
    assert all(a.flags.c_contiguous for a in out)
    np.testing.assert_array_equal(out[0], x)
    assert out[1].tolist() == [1, 2, 3, 4]
    assert out[2].shape == () and out[2] == 0.1


def test_unknown_feed_suggests_and_lists_expected():
    with pytest.raises(FeedError) as e:
        check_feeds(graph(), good(lables=[1]), where="entry 'predict'")
    msg = str(e.value)
    assert msg.startswith("entry 'predict': unknown feed 'lables'")
    assert "did you mean 'labels'?" in msg
    assert "x: f32[B,64], labels: i32[B], lr: f64[]" in msg


def test_missing_feed():
    feeds = good()
    del feeds["labels"]
    with pytest.raises(FeedError, match=r"missing feed 'labels'; expected feeds: x: f32\[B,64\]"):
        check_feeds(graph(), feeds)


def test_rank_and_shape_errors_name_the_type():
    with pytest.raises(FeedError, match=r"feed 'x' has shape \[4,64,1\] \(rank 3\), "
                                        r"expected f32\[B,64\] \(rank 2\)"):
        check_feeds(graph(), good(x=np.zeros((4, 64, 1), np.float32)))
    with pytest.raises(FeedError, match=r"feed 'x' has shape \[4,63\], expected f32\[B,64\] "
                                        r"\(dim 1 is 63, not 64\)"):
        check_feeds(graph(), good(x=np.zeros((4, 63), np.float32)))


def test_symbolic_dim_binds_across_feeds():
    with pytest.raises(FeedError) as e:
        check_feeds(graph(), good(x=np.zeros((32, 64), np.float32),
                                  labels=np.zeros(16, np.int32)))
    msg = str(e.value)
    assert "dim B is 32 in feed 'x'" in msg and "but 16 in feed 'labels'" in msg
    g = Graph("sq")
    g.add_arg(TensorType(DType.f32, ("N", "N")), "m")
    with pytest.raises(FeedError, match="dim N is both 2 and 3"):
        check_feeds(g, {"m": np.zeros((2, 3), np.float32)})
    g2 = Graph("any")
    g2.add_arg(TensorType(DType.f32, ("?", "?")), "m")
    assert check_feeds(g2, {"m": np.zeros((2, 3), np.float32)})[0].shape == (2, 3)


def test_numpy_dtype_rule():
    # safe casts are fine: i32 -> f64, f16 -> f32, bool -> i32
    out = check_feeds(graph(), good(lr=np.int32(3), x=np.ones((2, 64), np.float16),
                                    labels=np.array([True, False])))
    assert out[2].dtype == np.float64 and out[2] == 3.0
    assert out[0].dtype == np.float32 and out[1].dtype == np.int32
    with pytest.raises(FeedError) as e:
        check_feeds(graph(), good(x=np.zeros((4, 64))))
    msg = str(e.value)
    assert "feed 'x' has dtype f64, expected f32[B,64]" in msg
    assert "x.astype(np.float32)" in msg
    with pytest.raises(FeedError, match=r"labels.astype\(np.int32\)"):
        check_feeds(graph(), good(labels=np.zeros(4, np.int64)))
    with pytest.raises(FeedError, match="dtype"):
        check_feeds(graph(), good(labels=np.zeros(4, np.float32)))


def test_python_values_convert_losslessly():
    out = check_feeds(graph(), good(labels=[1.0, 2.0, 3.0, 4.0], lr=1))
    assert out[1].dtype == np.int32 and out[1].tolist() == [1, 2, 3, 4]
    with pytest.raises(FeedError, match=r"feed 'labels' cannot be converted to i32\[B\]: "
                                        r"the value 1.5 does not fit i32"):
        check_feeds(graph(), good(labels=[1, 1.5, 2, 3]))
    with pytest.raises(FeedError, match="does not fit i32"):
        check_feeds(graph(), good(labels=[2**40, 1, 2, 3]))
    with pytest.raises(FeedError, match="does not fit f32"):
        check_feeds(graph(), good(x=[[1e300] * 64]))
    with pytest.raises(FeedError, match="not numeric data"):
        check_feeds(graph(), good(lr="fast"))
    with pytest.raises(FeedError, match="cannot be converted"):
        check_feeds(graph(), good(x=[[1.0, 2.0], [3.0]]))
    # floats round to the placeholder's precision, as a literal would
    (x, *_) = check_feeds(graph(), good(x=[[0.1] * 64] * 4))
    assert x.dtype == np.float32 and x[0, 0] == np.float32(0.1)


def test_bool_placeholder():
    g = Graph("b")
    g.add_arg(TensorType(DType.bool, (2,)), "mask")
    assert check_feeds(g, {"mask": [1, 0]})[0].dtype == np.bool_
    with pytest.raises(FeedError, match="does not fit bool"):
        check_feeds(g, {"mask": [2, 0]})
    with pytest.raises(FeedError, match=r"np.bool_"):
        check_feeds(g, {"mask": np.array([1, 0], np.int32)})


def test_synthetic_feeds_are_seeded_and_skip_the_given_ones():
    from tfc.runtime.program import EntrySignature
    g = graph()
    feeds = synthetic_feeds(g, 5)
    assert list(feeds) == ["x", "labels", "lr"]
    assert feeds["x"].shape == (5, 64) and feeds["x"].dtype == np.float32
    assert feeds["labels"].shape == (5,) and not feeds["labels"].any()
    assert feeds["lr"].shape == () and feeds["lr"].dtype == np.float64
    again = synthetic_feeds(EntrySignature.of(g), 5)  # an artifact's signature: the same
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)
    assert not np.array_equal(synthetic_feeds(g, 5, seed=1)["x"], feeds["x"])
    assert list(synthetic_feeds(g, 5, given={"x": None})) == ["labels", "lr"]
    check_feeds(g, feeds)  # what the entry takes
