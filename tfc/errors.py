"""Errors users see. Each carries the source location of the op that caused it, when known,
so that the message points at the user's own file and line rather than into tfc."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """Where an op came from: the user's file and line (and column, for parsed text)."""

    file: str
    line: int
    column: int | None = None

    def __str__(self) -> str:
        if self.column is None:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"


class TfcError(Exception):
    """Base of every error tfc raises on purpose; the CLI prints these without a traceback."""

    def __init__(self, message: str, loc: Location | None = None) -> None:
        self.message = message
        self.loc = loc
        super().__init__(f"{loc}: {message}" if loc else message)

    def at(self, loc: Location | None) -> "TfcError":
        """This error, located at ``loc`` unless it already has a location."""
        if self.loc is None and loc is not None:
            self.loc = loc
            self.args = (f"{loc}: {self.message}",)
        return self


class TypeMismatch(TfcError, ValueError):
    """Shapes or dtypes that do not fit an op (raised while the graph is built)."""


class UnknownOp(TfcError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class VerifyError(TfcError):
    """The IR breaks an invariant (SSA, types, order, regions)."""


class ParseError(TfcError):
    """Textual IR or a model file that does not parse."""


class FeedError(TfcError, ValueError):
    """A feed with the wrong name, dtype or shape."""


class ArtifactError(TfcError):
    """A missing, corrupt or incompatible .tfc artifact."""


class ExecutionError(TfcError):
    """An op failed while running (numerics the types could not rule out)."""


class OutOfRangeError(TfcError):
    """The input is exhausted: a dequeue from a closed, empty queue (``tf.errors.
    OutOfRangeError``). ``fit`` and ``tfc.data`` treat it as the end of an epoch."""


class CancelledError(TfcError):
    """An enqueue into a queue that is closed (or whose pending enqueues were cancelled)."""


class DeadlineExceededError(TfcError):
    """A blocking wait (a queue's dequeue or enqueue) ran past its timeout."""
