"""Where the ``.tfm`` builder is in its file, and errors located there.

Every part of the builder raises through ``error`` or runs graph-API calls through
``guarded``, so whatever goes wrong — a misspelled name, an op's shape inference, a numpy
complaint about a literal — reaches the user as a ``TfcError`` at ``file:line:column`` with
the line and a caret, never as a traceback. ``SourceLocator`` is the base class of the
builder's parts (``tfc.compiler.tfm.builder.ModelBuilder``) for that reason.
"""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from tfc.compiler.tfm.syntax import Node, located
from tfc.errors import Location, ParseError, TfcError


class SourceLocator:
    """The text being built and the statement being built, for locating errors."""

    def __init__(self, text: str, filename: str) -> None:
        self.text, self.filename = text, filename
        self.current: Node | None = None  # the statement being built, for stray errors

    def where(self, node: Node | None) -> tuple[int, int]:
        """Line and column of ``node`` (a token, or the first token of a tree)."""
        if isinstance(node, Token) and node.line is not None:
            return node.line, node.column or 1
        if isinstance(node, Tree) and not node.meta.empty:
            return node.meta.line, node.meta.column
        if node is not None and node is not self.current:
            return self.where(self.current)
        return 1, 1

    def loc(self, node: Node | None) -> Location:
        """``node``'s location, for ``source_location`` (ops point into the ``.tfm``)."""
        line, column = self.where(node)
        return Location(self.filename, line, column)

    def error(self, message: str, node: Node | None, cls: type[TfcError] = ParseError
              ) -> TfcError:
        """A ``cls`` error at ``node``, showing its line with a caret (raise it)."""
        line, column = self.where(node)
        return located(cls, message, self.text, self.filename, line, column)

    def relocate(self, err: TfcError, node: Node | None) -> TfcError:
        """``err`` with this file's excerpt: at its own location when it has one here
        (an op this file built), else at ``node``."""
        if getattr(err, "tfm_located", False):
            return err
        loc = err.loc
        if loc is not None and loc.file == self.filename and loc.column is not None:
            line, column = loc.line, loc.column
        else:
            line, column = self.where(node)
        try:
            return located(type(err), err.message, self.text, self.filename, line, column)
        except Exception:  # a subclass with another constructor: keep the message
            return located(TfcError, err.message, self.text, self.filename, line, column)

    def guarded(self, node: Node, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` with every error located at ``node``: tfc's own errors keep their
        class; anything else (a numpy complaint about a bad literal) becomes a TfcError,
        as errors in a Python model file do."""
        try:
            return fn(*args)
        except TfcError as e:
            raise self.relocate(e, node) from None
        except RecursionError:
            raise self.error("expressions nested too deeply", node) from None
        except Exception as e:
            raise self.error(f"{type(e).__name__}: {e}", node, TfcError) from None
