"""The ``Callback`` base class of ``Sequential.fit``'s hooks, and the list that calls them.

``fit`` calls, with a ``logs`` dict: ``on_train_begin/end``, ``on_epoch_begin/end`` (the
end's logs hold the epoch's mean loss and metrics and the ``val_*`` ones), and
``on_batch_begin/end`` (the end's logs hold the batch index, its size and the running
means). Callbacks are called in the order given and share one ``logs`` dict per call, so a
callback may add entries that later ones (and the history) see.
"""

from __future__ import annotations

from typing import Any, Sequence

Logs = dict[str, Any]


class Callback:
    """Base class of fit's callbacks (``tf.keras.callbacks.Callback``): override the
    hooks you need; ``self.model`` is the model being trained and ``self.params`` holds
    ``epochs``, ``steps`` (batches per epoch) and ``verbose``."""

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}

    def set_model(self, model: Any) -> None:
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = dict(params)

    def on_train_begin(self, logs: Logs | None = None) -> None:
        pass

    def on_train_end(self, logs: Logs | None = None) -> None:
        pass

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        pass

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        pass

    def on_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        pass

    def on_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        pass


class CallbackList:
    """Calls each callback's hook in order (what ``fit`` drives)."""

    def __init__(self, callbacks: Sequence[Callback]) -> None:
        from tfc.errors import TfcError
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            if not isinstance(cb, Callback):
                raise TfcError(f"fit: callbacks must be tfc.callbacks.Callback objects, got "
                               f"{cb!r}")

    def set_model(self, model: Any) -> None:
        for cb in self.callbacks:
            cb.set_model(model)

    def set_params(self, params: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.set_params(params)

    def on_train_begin(self, logs: Logs) -> None:
        for cb in self.callbacks:
            cb.on_train_begin(logs)

    def on_train_end(self, logs: Logs) -> None:
        for cb in self.callbacks:
            cb.on_train_end(logs)

    def on_epoch_begin(self, epoch: int, logs: Logs) -> None:
        for cb in self.callbacks:
            cb.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch: int, logs: Logs) -> None:
        for cb in self.callbacks:
            cb.on_epoch_end(epoch, logs)

    def on_batch_begin(self, batch: int, logs: Logs) -> None:
        for cb in self.callbacks:
            cb.on_batch_begin(batch, logs)

    def on_batch_end(self, batch: int, logs: Logs) -> None:
        for cb in self.callbacks:
            cb.on_batch_end(batch, logs)


def monitor_mode(monitor: str, mode: str) -> str:
    """``"min"`` or ``"max"``: ``mode``, or for ``"auto"`` what the metric's name says
    (accuracies and AUCs grow, everything else is a loss)."""
    from tfc.errors import TfcError
    if mode not in ("auto", "min", "max"):
        raise TfcError(f"mode must be 'auto', 'min' or 'max', not {mode!r}")
    if mode != "auto":
        return mode
    name = monitor.removeprefix("val_")
    return "max" if name.startswith(("acc", "accuracy", "auc")) or "accuracy" in name else "min"


def improved(current: float, best: float | None, mode: str, min_delta: float = 0.0) -> bool:
    """Whether ``current`` beats ``best`` by more than ``min_delta`` in ``mode``'s
    direction (anything beats no best)."""
    if best is None:
        return True
    return current < best - min_delta if mode == "min" else current > best + min_delta


def monitored(logs: Logs | None, monitor: str, who: str) -> float | None:
    """The value of ``monitor`` in ``logs``, or None (with a warning, once per call) when
    the epoch's logs do not have it (no ``validation_data`` for a ``val_*`` metric)."""
    import warnings
    value = (logs or {}).get(monitor)
    if value is None:
        warnings.warn(f"{who}: '{monitor}' is not in the epoch's logs (it has "
                      f"{', '.join(sorted(logs or {})) or 'nothing'}); skipped",
                      stacklevel=3)
        return None
    return float(value)
