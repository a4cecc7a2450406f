"""``ModelCheckpoint``: save the model each epoch, keep the last k, and keep the best.

Files are tfc checkpoints (``tfc.runtime.checkpoint``): ``ckpt-<step>.tfckpt`` in the
directory (the session's global step, which keeps growing across ``fit`` calls, as in
``tfc run --checkpoint-dir``), written atomically and recorded in the directory's ``checkpoint.json`` index,
which keeps the newest ``max_to_keep``; so ``tfc.train.latest_checkpoint(dir)`` names the
latest and a process killed while saving leaves the previous checkpoint loadable. When a
``monitor``ed metric improves, the same values are also written (atomically) to
``best.tfckpt``, outside the rotation, so the best epoch survives however many follow.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tfc.atomic import atomic_write
from tfc.callbacks.base import Callback, Logs, improved, monitor_mode, monitored
from tfc.errors import TfcError
from tfc.runtime.checkpoint import (DEFAULT_MAX_TO_KEEP, SUFFIX, save_checkpoint,
                                    write_checkpoint)

BEST = "best" + SUFFIX
BEST_INFO = "best.json"


class ModelCheckpoint(Callback):
    """Saves the model's variables (weights, optimizer slots, learning rate) and step.

    ``directory``: where the checkpoints go (created if needed). ``monitor``: the metric
    that picks the best (``"val_loss"``; None: no best file); ``mode``: ``"min"``,
    ``"max"`` or ``"auto"`` (by the name). ``save_best_only``: save an epoch only when it
    improves on the best. ``max_to_keep``: how many epoch checkpoints to keep (None: all).
    ``save_freq``: save every this many epochs."""

    def __init__(self, directory: str | os.PathLike[str], monitor: str | None = "val_loss",
                 mode: str = "auto", save_best_only: bool = False,
                 max_to_keep: int | None = DEFAULT_MAX_TO_KEEP, save_freq: int = 1,
                 verbose: int = 0) -> None:
        super().__init__()
        if save_best_only and monitor is None:
            raise TfcError("ModelCheckpoint: save_best_only needs a monitor")
        if save_freq < 1:
            raise TfcError(f"ModelCheckpoint: save_freq must be at least 1, not {save_freq}")
        if max_to_keep is not None and max_to_keep < 0:
            raise TfcError(f"ModelCheckpoint: max_to_keep must be None or at least 0, not "
                           f"{max_to_keep}")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise TfcError(f"ModelCheckpoint: {directory} is a file, not a directory")
        self.monitor = monitor
        self.mode = monitor_mode(monitor, mode) if monitor is not None else "min"
        self.save_best_only = save_best_only
        self.max_to_keep = max_to_keep
        self.save_freq = save_freq
        self.verbose = verbose
        self.best: float | None = None
        self.best_epoch: int | None = None

    @property
    def best_path(self) -> Path:
        return self.directory / BEST

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        if (epoch + 1) % self.save_freq:
            return
        current = (monitored(logs, self.monitor, "ModelCheckpoint")
                   if self.monitor is not None else None)
        better = current is not None and improved(current, self.best, self.mode)
        if self.save_best_only and not better:
            return
        sess = self.model.session
        values, step = sess.variable_values(), sess.step
        path = save_checkpoint(self.directory, values, step, max_to_keep=self.max_to_keep)
        if better:
            assert current is not None
            self.best, self.best_epoch = current, epoch
            write_checkpoint(self.best_path, values, step)
            info = {"monitor": self.monitor, "value": current, "epoch": epoch + 1,
                    "step": step}
            atomic_write(self.directory / BEST_INFO,
                         lambda f: f.write((json.dumps(info) + "\n").encode()))
        if self.verbose:
            print(f"epoch {epoch + 1}: saved {path}" + (f" (best {self.monitor} "
                                                         f"{current:.4f})" if better else ""))

    def __repr__(self) -> str:
        return f"ModelCheckpoint({str(self.directory)!r}, monitor={self.monitor!r})"


def read_best(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What ``best.json`` says of the best checkpoint in ``directory`` (None if none)."""
    path = Path(directory) / BEST_INFO
    if not path.is_file():
        return None
    return dict(json.loads(path.read_text()))
