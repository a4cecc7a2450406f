"""What ``Sequential.fit`` shows while it trains: a rich progress bar per epoch.

``verbose=1``: one bar per epoch, advancing per batch, with the running loss and
metrics beside it and the epoch's validation results added when it ends (each epoch's
bar stays on screen, as Keras prints a line per epoch). ``verbose=2``, or ``verbose=1``
when the output is not a terminal (a log file, a CI job): one plain line per epoch.
``verbose=0``: nothing.

``rich`` is imported only when something is drawn: its import costs tens of ms, and
``import tfc`` (hence every fresh ``tfc run``) imports this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


def format_metrics(values: Mapping[str, float]) -> str:
    return " - ".join(f"{k}: {v:.4f}" for k, v in values.items())


class FitProgress:
    """Shows training progress; a context manager around the whole ``fit``.

    The console is made on first use, so ``verbose=0`` never imports rich."""

    def __init__(self, epochs: int, steps: int, verbose: int,
                 console: Console | None = None) -> None:
        self.epochs, self.steps, self.verbose = epochs, steps, verbose
        self._console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._epoch = 0

    @property
    def console(self) -> Console:
        """The console drawn on (``rich.console.Console()`` unless one was given)."""
        if self._console is None:
            from rich.console import Console
            self._console = Console()
        return self._console

    @console.setter
    def console(self, console: Console) -> None:
        self._console = console

    def __enter__(self) -> "FitProgress":
        if self.verbose == 1 and self.console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)
            self._progress = Progress(
                TextColumn("[bold]Epoch {task.fields[epoch]}"), BarColumn(bar_width=30),
                MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[metrics]}"),
                console=self.console)
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def start_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        if self._progress is not None:
            self._task = self._progress.add_task(
                "", total=self.steps, epoch=f"{epoch + 1}/{self.epochs}", metrics="")

    def batch_done(self, running: Mapping[str, float]) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, metrics=format_metrics(running))

    def end_epoch(self, logs: Mapping[str, float]) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.steps,
                                  metrics=format_metrics(logs))
        elif self.verbose:
            self.console.print(f"Epoch {self._epoch + 1}/{self.epochs} - "
                               f"{format_metrics(logs)}", soft_wrap=True, highlight=False)
