"""FileWriter: event files that TensorBoard's own reader reads back, value for value."""

import struct
import zlib

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError
from tfc.summary.protos import encode_png, to_uint8


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def decode_png(data: bytes) -> np.ndarray:
    """A PNG of encode_png's kind (8-bit, no interlace) back to pixels: an independent
    reader of the chunks, CRCs and filter bytes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + n
    w, h, depth, color, *_ = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    c = {0: 1, 2: 3, 6: 4}[color]
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(h, 1 + w * c)
    assert depth == 8 and not rows[:, 0].any()  # filter 0 on every row
    return rows[:, 1:].reshape(h, w, c)


def test_png_round_trip():
    rng = np.random.default_rng(0)
    for c in (1, 3, 4):
        img = rng.integers(0, 256, size=(5, 7, c), dtype=np.uint8)
        np.testing.assert_array_equal(decode_png(encode_png(img)), img)
    np.testing.assert_array_equal(to_uint8(np.array([-1.0, 0.0, 0.5, 1.0, 2.0])),
                                  [0, 0, 128, 255, 255])


def test_summaries_read_back_with_tensorboards_reader(tmp_path, tb_events):
    x = tfc.placeholder(tfc.float32, [None, 4], "x")
    loss = tfc.reduce_mean(x * x)
    tfc.summary.scalar("loss", loss)
    tfc.summary.histogram("x", x)
    tfc.summary.image("img", tfc.reshape(x, [-1, 2, 2, 1]), max_outputs=2)
    tfc.summary.text("note", "step notes")
    merged = tfc.summary.merge_all()
    sess = tfc.Session()
    rng = np.random.default_rng(1)
    batches = [rng.uniform(0, 1, size=(3, 4)).astype(np.float32) for _ in range(3)]
    with tfc.summary.FileWriter(tmp_path) as writer:
        for step, xb in enumerate(batches):
            writer.add_summary(sess.run(merged, {x: xb}), step)
        writer.add_scalar("extra", 7, 10)
    acc = tb_events.accumulator(tmp_path)
    tags = acc.Tags()
    assert set(tags["tensors"]) == {"loss", "x", "note", "extra"}
    assert sorted(tags["images"]) == ["img/image/0", "img/image/1"]
    got = tb_events.scalars(tmp_path, "loss")
    assert [s for s, _ in got] == [0, 1, 2]
    np.testing.assert_allclose([v for _, v in got], [np.mean(b * b) for b in batches],
                               rtol=1e-6)
    assert tb_events.scalars(tmp_path, "extra") == [(10, 7.0)]
    for (step, hist), xb in zip(tb_events.tensors(tmp_path, "x"), batches):
        assert hist.shape[1] == 3  # [left, right, count] per bucket
        assert hist[:, 2].sum() == xb.size
        assert hist[0, 0] == pytest.approx(xb.min()) and hist[-1, 1] == pytest.approx(xb.max())
    images = acc.Images("img/image/1")
    assert [e.step for e in images] == [0, 1, 2]
    np.testing.assert_array_equal(decode_png(images[2].encoded_image_string),
                                  to_uint8(batches[2][1].reshape(2, 2, 1)))
    (step, note), *_ = tb_events.tensors(tmp_path, "note")
    assert note.item() == b"step notes"


def test_serialized_summary_protos_are_accepted(tmp_path, tb_events):
    from tensorboard.compat.proto.summary_pb2 import Summary
    proto = Summary(value=[Summary.Value(tag="legacy", simple_value=2.5)])
    with tfc.summary.FileWriter(tmp_path) as writer:
        writer.add_summary(proto.SerializeToString(), 3)
        with pytest.raises(TfcError, match="expected the value of a tfc.summary"):
            writer.add_summary(1.0, 3)
    assert [(e.step, e.value) for e in tb_events.accumulator(tmp_path).Scalars("legacy")] \
        == [(3, 2.5)]


def test_bad_logdirs_and_values(tmp_path):
    pytest.importorskip("tensorboard")
    (tmp_path / "file").write_text("")
    with pytest.raises(TfcError, match="is a file, not a directory"):
        tfc.summary.FileWriter(tmp_path / "file")
    writer = tfc.summary.FileWriter(tmp_path / "run")
    with pytest.raises(TfcError, match="expected one number"):
        writer.add_scalar("s", np.ones(3))
    with pytest.raises(TfcError, match="NaN"):
        writer.add_histogram("h", [1.0, np.nan])
    writer.close()
    with pytest.raises(TfcError, match="closed"):
        writer.add_scalar("s", 1.0)


def test_writing_does_not_import_tensorflow(tmp_path):
    """tensorboard's EventFileWriter would import TensorFlow where it is installed
    (seconds); tfc's writer never does."""
    import subprocess
    import sys
    pytest.importorskip("tensorboard")
    code = ("import sys, tfc; w = tfc.summary.FileWriter(sys.argv[1]); "
            "w.add_scalar('a', 1.0, 0); w.add_histogram('h', [1.0, 2.0], 0); w.close(); "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
