"""``LearningRateScheduler``: set the learning rate at the start of each epoch.

The model reads its learning rate from a variable (``Sequential.learning_rate``), so a
new rate is a new variable value: the compiled step is reused, nothing recompiles."""

from __future__ import annotations

import inspect
from typing import Callable

from tfc.callbacks.base import Callback, Logs
from tfc.errors import TfcError


class LearningRateScheduler(Callback):
    """``schedule(epoch)`` or ``schedule(epoch, lr)`` -> the epoch's learning rate
    (``tf.keras.callbacks.LearningRateScheduler``); each epoch's rate is also added to
    its logs as ``learning_rate``."""

    def __init__(self, schedule: Callable[..., float], verbose: int = 0) -> None:
        super().__init__()
        if not callable(schedule):
            raise TfcError(f"LearningRateScheduler: schedule must be callable, got "
                           f"{schedule!r}")
        self.schedule = schedule
        self.verbose = verbose
        try:
            self._takes_lr = len(inspect.signature(schedule).parameters) >= 2
        except (TypeError, ValueError):
            self._takes_lr = True

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        current = self.model.learning_rate
        rate = self.schedule(epoch, current) if self._takes_lr else self.schedule(epoch)
        try:
            rate = float(rate)
        except (TypeError, ValueError):
            raise TfcError(f"LearningRateScheduler: the schedule returned {rate!r} for "
                           f"epoch {epoch}, not a number") from None
        self.model.learning_rate = rate
        if self.verbose:
            print(f"epoch {epoch + 1}: learning rate {rate:.6g}")

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        if logs is not None:
            logs["learning_rate"] = self.model.learning_rate
