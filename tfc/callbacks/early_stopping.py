"""``EarlyStopping``: end ``fit`` when a monitored metric stops improving."""

from __future__ import annotations

from typing import Any

from tfc.callbacks.base import Callback, Logs, improved, monitor_mode, monitored
from tfc.errors import TfcError


class EarlyStopping(Callback):
    """Stops training once ``monitor`` has not improved by more than ``min_delta`` for
    ``patience`` epochs in a row (``tf.keras.callbacks.EarlyStopping``).

    ``mode``: ``"min"``, ``"max"`` or ``"auto"`` (by the metric's name). ``baseline``: an
    epoch counts as an improvement only once it also beats this. ``restore_best_weights``:
    at the end of training the model gets back the weights of its best epoch (when an
    epoch after it was worse). ``stopped_epoch`` is the epoch training stopped after (0
    if it ran to the end), ``best_epoch`` the best one."""

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0.0, patience: int = 0,
                 mode: str = "auto", baseline: float | None = None,
                 restore_best_weights: bool = False, verbose: int = 0) -> None:
        super().__init__()
        if patience < 0:
            raise TfcError(f"EarlyStopping: patience must be at least 0, not {patience}")
        self.monitor = monitor
        self.mode = monitor_mode(monitor, mode)
        self.min_delta = abs(float(min_delta))
        self.patience = patience
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.verbose = verbose
        self._reset()

    def _reset(self) -> None:
        self.wait = 0
        self.best: float | None = None
        self.best_epoch = 0
        self.stopped_epoch = 0
        self.best_weights: list[Any] | None = None
        self._last_epoch = -1

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self._reset()

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        current = monitored(logs, self.monitor, "EarlyStopping")
        if current is None:
            return
        self._last_epoch = epoch
        self.wait += 1
        if improved(current, self.best, self.mode, self.min_delta):
            self.best, self.best_epoch = current, epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            # past the baseline (if any): the patience starts again
            if self.baseline is None or improved(current, self.baseline, self.mode):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.verbose:
                print(f"epoch {epoch + 1}: early stopping ({self.monitor} has not improved "
                      f"for {self.wait} epochs; best {self.best:.4f} at epoch "
                      f"{self.best_epoch + 1})")

    def on_train_end(self, logs: Logs | None = None) -> None:
        if (self.restore_best_weights and self.best_weights is not None
                and self.best_epoch != self._last_epoch):
            self.model.set_weights(self.best_weights)
