"""``tfc.summary.FileWriter``: TensorBoard event files of a training run.

    writer = tfc.summary.FileWriter("runs/x")
    writer.add_graph(program, "train_step")            # the Graphs dashboard
    for step in range(n):
        values, _ = sess.run([merged, train_op], feeds)
        writer.add_summary(values, step)               # Scalars, Histograms, Images, Text
    writer.close()

Each ``Event`` proto is framed (length, CRCs) by the ``tensorboard`` package's own
``RecordWriter``, into ``events.out.tfevents.<time>.<host>.<pid>.<n>``, first the
``brain.Event:2`` version event: what its ``EventFileWriter`` (PyTorch's
``SummaryWriter``) writes. That class itself is not used: it opens its file through
``tf.io.gfile``, which imports all of TensorFlow (seconds) wherever TensorFlow is
installed; here the file is a plain one, written in this thread (an event is a few hundred
bytes) and flushed every ``flush_secs`` and on ``flush``/``close``.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tfc.errors import TfcError
from tfc.summary.protos import (histogram_summary, image_summary, require_tensorboard,
                                scalar_summary, summary_proto, text_summary)
from tfc.summary.summaries import SummaryValues


class FileWriter:
    """Writes summaries and graphs to a new event file in ``logdir`` (created if needed).

    ``flush_secs``: how often writes are flushed to the file (at the next write after); ``close()`` (or leaving a
    ``with`` block) flushes everything. ``graph`` (with ``entry``) is written at once, as
    ``add_graph`` would."""

    _count = 0  # event files made by this process (their names' last part)

    def __init__(self, logdir: str | os.PathLike[str], graph: Any = None, *,
                 entry: str | None = None, flush_secs: float = 120,
                 filename_suffix: str = "") -> None:
        require_tensorboard()
        from tensorboard.compat.proto.event_pb2 import Event, SourceMetadata
        from tensorboard.summary.writer.record_writer import RecordWriter
        path = Path(logdir)
        if path.exists() and not path.is_dir():
            raise TfcError(f"logdir {logdir} is a file, not a directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TfcError(f"cannot make logdir {logdir}: {e.strerror or e}") from None
        self.logdir = str(path)
        FileWriter._count += 1
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid()}.{FileWriter._count}{filename_suffix}")
        self.path = path / name
        try:
            self._writer = RecordWriter(open(self.path, "wb"))
        except OSError as e:
            raise TfcError(f"cannot write in logdir {logdir}: {e.strerror or e}") from None
        self._flush_secs = flush_secs
        self._flushed_at = time.monotonic()
        self._closed = False
        self.add_event(Event(wall_time=time.time(), file_version="brain.Event:2",
                             source_metadata=SourceMetadata(writer="tfc.summary.FileWriter")))
        self.flush()
        if graph is not None:
            self.add_graph(graph, entry)

    def get_logdir(self) -> str:
        return self.logdir

    # ---- events ----------------------------------------------------------------------

    def add_event(self, event: Any) -> None:
        if self._closed:
            raise TfcError(f"the FileWriter of {self.logdir} is closed")
        self._writer.write(event.SerializeToString())
        if time.monotonic() - self._flushed_at >= self._flush_secs:
            self.flush()

    def _add_proto(self, summary: Any, step: int | None, wall_time: float | None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        event = Event(wall_time=time.time() if wall_time is None else wall_time,
                      summary=summary)
        if step is not None:
            event.step = int(step)
        self.add_event(event)

    def add_summary(self, summary: SummaryValues | bytes | Any, global_step: int | None = None,
                    walltime: float | None = None) -> None:
        """Write what fetching a ``tfc.summary`` returned (``SummaryValues``), or a
        ``Summary`` proto or its serialized bytes (TensorFlow 1's form), at
        ``global_step``."""
        from tensorboard.compat.proto.summary_pb2 import Summary
        if isinstance(summary, SummaryValues):
            for v in summary.values:
                self._add_proto(summary_proto(v.tag, v.kind, v.value, v.max_outputs),
                                global_step, walltime)
            return
        if isinstance(summary, (bytes, bytearray)):
            summary = Summary.FromString(bytes(summary))
        if not isinstance(summary, Summary):
            raise TfcError(f"add_summary: expected the value of a tfc.summary fetch or a "
                           f"Summary proto, not {type(summary).__name__}")
        self._add_proto(summary, global_step, walltime)

    def add_scalar(self, tag: str, value: Any, step: int | None = None,
                   walltime: float | None = None) -> None:
        self._add_proto(scalar_summary(tag, value), step, walltime)

    def add_scalars(self, values: Mapping[str, Any], step: int | None = None,
                    walltime: float | None = None) -> None:
        """Each numeric scalar of ``values`` (others are skipped) as a scalar ``tag``."""
        for tag, value in values.items():
            arr = np.asarray(value)
            if arr.ndim == 0 and arr.dtype.kind in "biuf":
                self.add_scalar(tag, arr, step, walltime)

    def add_histogram(self, tag: str, values: Any, step: int | None = None,
                      walltime: float | None = None) -> None:
        self._add_proto(histogram_summary(tag, values), step, walltime)

    def add_image(self, tag: str, images: Any, step: int | None = None,
                  max_outputs: int = 3, walltime: float | None = None) -> None:
        """``images``: ``[N, H, W, C]`` (floats in [0, 1] or integers in [0, 255])."""
        self._add_proto(image_summary(tag, images, max_outputs), step, walltime)

    def add_text(self, tag: str, text: str, step: int | None = None,
                 walltime: float | None = None) -> None:
        self._add_proto(text_summary(tag, text), step, walltime)

    def add_graph(self, graph: Any, entry: str | None = None) -> None:
        """Write the GraphDef of ``graph``'s entry ``entry`` for the Graphs dashboard:
        ``graph`` is a ``Program`` (its placed module: nodes coloured by device), an IR
        ``Module``, a ``tfc.Graph`` with entries, or an IR ``Graph``
        (``tfc.summary.graph_def``)."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tfc.summary.graph_def import entry_graph_def
        gd = entry_graph_def(graph, entry)
        self.add_event(Event(wall_time=time.time(), graph_def=gd.SerializeToString()))

    # ---- lifetime --------------------------------------------------------------------

    def flush(self) -> None:
        if not self._closed:
            self._writer.flush()
            self._flushed_at = time.monotonic()

    def close(self) -> None:
        if not self._closed:
            self._writer.close()
            self._closed = True

    def __enter__(self) -> "FileWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
