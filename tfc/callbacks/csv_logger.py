"""``CSVLogger``: one CSV row per epoch of ``fit``'s logs."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import IO, Any

from tfc.callbacks.base import Callback, Logs
from tfc.errors import TfcError


class CSVLogger(Callback):
    """Writes ``epoch`` and each of the epoch's logs (sorted by name) as a CSV row to
    ``filename``, flushed per epoch; ``append`` continues an existing file (its header
    is kept) instead of replacing it."""

    def __init__(self, filename: str | os.PathLike[str], separator: str = ",",
                 append: bool = False) -> None:
        super().__init__()
        self.filename = Path(filename)
        if self.filename.is_dir():
            raise TfcError(f"CSVLogger: {filename} is a directory, not a file name")
        self.separator = separator
        self.append = append
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._keys: list[str] | None = None

    def on_train_begin(self, logs: Logs | None = None) -> None:
        had_rows = self.append and self.filename.is_file() and self.filename.stat().st_size > 0
        try:
            self._file = open(self.filename, "a" if self.append else "w", newline="")
        except OSError as e:
            raise TfcError(f"CSVLogger: cannot write {self.filename}: "
                           f"{e.strerror or e}") from None
        self._keys = None
        if had_rows:
            with open(self.filename, newline="") as f:
                header = next(csv.reader(f, delimiter=self.separator), None)
            self._keys = header[1:] if header and header[0] == "epoch" else None

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        if self._file is None:
            return
        logs = logs or {}
        if self._keys is None:
            self._keys = sorted(logs)
            self._writer = csv.writer(self._file, delimiter=self.separator)
            self._writer.writerow(["epoch", *self._keys])
        elif self._writer is None:
            self._writer = csv.writer(self._file, delimiter=self.separator)
        self._writer.writerow([epoch, *(logs.get(k, "") for k in self._keys)])
        self._file.flush()

    def on_train_end(self, logs: Logs | None = None) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._writer = None
