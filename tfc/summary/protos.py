"""TensorBoard's protos of tfc's summaries and graphs, made with the ``tensorboard`` package.

The record format, the ``Event`` and ``Summary`` protos and the plugins' value layouts are
TensorBoard's own (``tensorboard.compat.proto``, the plugins' ``*_pb`` functions): tfc
writes nothing of the format by hand, so any TensorBoard that reads PyTorch's or
TensorFlow's event files reads these. ``tensorboard`` is an optional dependency (the
``tensorboard`` extra); it is imported on first use, with a one-line error if missing.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

from tfc.errors import TfcError

HISTOGRAM_BUCKETS = 30  # TensorBoard's default


def require_tensorboard() -> None:
    """Fail with one clear sentence when the ``tensorboard`` package is missing."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise TfcError("writing TensorBoard event files needs the tensorboard package "
                       "(pip install 'tfc[tensorboard]')") from None


def scalar_summary(tag: str, value: Any) -> Any:
    from tensorboard.plugins.scalar.summary_v2 import scalar_pb
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "biuf":
        raise TfcError(f"scalar summary '{tag}': expected one number, got an array of "
                       f"shape {list(arr.shape)} and dtype {arr.dtype}")
    return scalar_pb(tag, float(arr.reshape(())))


def histogram_summary(tag: str, values: Any, buckets: int = HISTOGRAM_BUCKETS) -> Any:
    from tensorboard.plugins.histogram.summary_v2 import histogram_pb
    arr = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(arr)):
        raise TfcError(f"histogram summary '{tag}': the values hold NaN or infinity")
    return histogram_pb(tag, arr, buckets=buckets)


def text_summary(tag: str, text: str) -> Any:
    from tensorboard.plugins.text.summary_v2 import text_pb
    return text_pb(tag, text)


def image_summary(tag: str, images: Any, max_outputs: int = 3) -> Any:
    """A ``[N, H, W, C]`` batch as TensorBoard's (legacy) image values, PNG-encoded:
    ``tag/image/0`` ... as TensorFlow 1 names them (one image: ``tag/image``)."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    arr = np.asarray(images)
    if arr.ndim != 4 or arr.shape[3] not in (1, 3, 4):
        raise TfcError(f"image summary '{tag}': expected [N, H, W, C] with C in 1, 3 or 4, "
                       f"got shape {list(arr.shape)}")
    pixels = to_uint8(arr[:max_outputs])
    summary = Summary()
    for i, img in enumerate(pixels):
        name = f"{tag}/image" if len(pixels) == 1 else f"{tag}/image/{i}"
        h, w, c = img.shape
        summary.value.add(tag=name, image=Summary.Image(
            height=h, width=w, colorspace=c, encoded_image_string=encode_png(img)))
    return summary


def to_uint8(arr: np.ndarray) -> np.ndarray:
    """Pixels as bytes: floats are taken as [0, 1] (clipped), integers as [0, 255]."""
    if arr.dtype.kind == "f":
        return (np.clip(np.nan_to_num(arr), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    return np.clip(arr, 0, 255).astype(np.uint8)


def encode_png(img: np.ndarray) -> bytes:
    """An ``[H, W, C]`` uint8 image as a PNG file (8-bit grey, RGB or RGBA; zlib, no
    filter): the image container TensorBoard shows, without an imaging library."""
    h, w, c = img.shape
    color_type = {1: 0, 3: 2, 4: 6}[c]
    rows = np.ascontiguousarray(img, dtype=np.uint8).reshape(h, w * c)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rows], axis=1).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def summary_proto(tag: str, kind: str, value: Any, max_outputs: int = 3) -> Any:
    """The ``Summary`` proto of one tagged value of ``kind``."""
    from tfc.summary.summaries import text_of
    if kind == "scalar":
        return scalar_summary(tag, value)
    if kind == "histogram":
        return histogram_summary(tag, value)
    if kind == "image":
        return image_summary(tag, value, max_outputs)
    if kind == "text":
        return text_summary(tag, text_of(value))
    raise TfcError(f"summary '{tag}': unknown kind '{kind}'")
