"""``TensorBoard``: write ``fit``'s loss, metrics, learning rate, step time, weight
histograms and training graph as TensorBoard event files.

As Keras lays them out: ``<log_dir>/train`` gets the training side (``epoch_loss``,
``epoch_accuracy`` ..., ``epoch_learning_rate``, ``epoch_step_time_ms``, the mean time of
one training step in the epoch, and with ``update_freq="batch"`` or N the running
``batch_*`` values every N batches), ``<log_dir>/validation`` the ``val_*`` metrics under
the same ``epoch_*`` tags (so TensorBoard draws train and validation on one chart), and
every ``histogram_freq`` epochs one histogram per weight. The x axis of the epoch tags is
the epoch, of the batch tags the global batch."""

from __future__ import annotations

import os
import time
from pathlib import Path


from tfc.callbacks.base import Callback, Logs
from tfc.errors import TfcError
from tfc.summary.writer import FileWriter


class TensorBoard(Callback):
    """``log_dir``: the run's directory; ``histogram_freq``: weight histograms every this
    many epochs (0: none); ``write_graph``: the training step's graph, once;
    ``update_freq``: ``"epoch"``, ``"batch"`` (every batch) or N (every N batches)."""

    def __init__(self, log_dir: str | os.PathLike[str] = "logs", histogram_freq: int = 0,
                 write_graph: bool = True, update_freq: str | int = "epoch") -> None:
        super().__init__()
        if histogram_freq < 0:
            raise TfcError(f"TensorBoard: histogram_freq must be at least 0, not "
                           f"{histogram_freq}")
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and (not isinstance(update_freq, int) or update_freq < 1):
            raise TfcError(f"TensorBoard: update_freq must be 'epoch', 'batch' or a positive "
                           f"number of batches, not {update_freq!r}")
        self.log_dir = Path(log_dir)
        self.histogram_freq = histogram_freq
        self.write_graph = write_graph
        self.update_freq = update_freq
        self._train: FileWriter | None = None
        self._val: FileWriter | None = None
        self._global_batch = 0
        self._batch_start = 0.0
        self._step_seconds = 0.0
        self._steps = 0

    @property
    def _writer(self) -> FileWriter:
        if self._train is None:
            self._train = FileWriter(self.log_dir / "train")
        return self._train

    @property
    def _val_writer(self) -> FileWriter:
        if self._val is None:
            self._val = FileWriter(self.log_dir / "validation")
        return self._val

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self._global_batch = 0
        if self.write_graph:
            self._writer.add_graph(self.model.training_graph())

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        self._step_seconds, self._steps = 0.0, 0

    def on_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        self._batch_start = time.perf_counter()

    def on_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        seconds = time.perf_counter() - self._batch_start
        self._step_seconds += seconds
        self._steps += 1
        self._global_batch += 1
        if self.update_freq != "epoch" and self._global_batch % int(self.update_freq) == 0:
            step = self._global_batch
            for k, v in (logs or {}).items():
                if k not in ("batch", "size"):
                    self._writer.add_scalar(f"batch_{k}", v, step)
            self._writer.add_scalar("batch_step_time_ms", seconds * 1e3, step)

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        logs = dict(logs or {})
        for k, v in logs.items():
            if k.startswith("val_"):
                self._val_writer.add_scalar(f"epoch_{k[4:]}", v, epoch)
            elif k != "learning_rate":
                self._writer.add_scalar(f"epoch_{k}", v, epoch)
        rate = logs.get("learning_rate")
        if rate is None and getattr(self.model, "_lr_variable", None) is not None:
            rate = self.model.learning_rate
        if rate is not None:
            self._writer.add_scalar("epoch_learning_rate", rate, epoch)
        if self._steps:
            self._writer.add_scalar("epoch_step_time_ms", self._step_seconds / self._steps
                                    * 1e3, epoch)
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            for var, value in zip(self.model.variables, self.model.get_weights()):
                self._writer.add_histogram(var.name, value, epoch)
        self._writer.flush()
        if self._val is not None:
            self._val.flush()

    def on_train_end(self, logs: Logs | None = None) -> None:
        for w in (self._train, self._val):
            if w is not None:
                w.close()
        self._train = self._val = None

    def __repr__(self) -> str:
        return f"TensorBoard({str(self.log_dir)!r})"
