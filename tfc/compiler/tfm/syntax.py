"""The syntax of ``.tfm`` files: the lark parser and located errors with a caret.

Every error this package raises points at ``file:line:column`` and shows the offending
line with a caret under the spot, formatted as the textual IR parser formats its own
(``tfc.ir.parser``), so the two read alike; lark's exceptions never escape.
"""

from __future__ import annotations

import functools
import importlib.resources

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedInput

from tfc.errors import Location, ParseError, TfcError
from tfc.ir.parser import syntax_error
from tfc.ir.parser import source_excerpt as excerpt

__all__ = ["Node", "excerpt", "located", "parse_tree"]

# A node of the syntax tree: a rule (``Tree``) or a token; errors point at either.
Node = Tree | Token

# How terminals read in "expected ..." messages.
_TERMINAL_NAMES = {
    "NAME": "name", "INT": "integer", "FLOAT": "number", "STRING": "string",
    "COMPARE": "comparison", "ADD_OP": "'+' or '-'", "NEG": "'-'", "MUL_OP": "'*', '/' or '@'",
    "POW": "'**'", "LBRACKET": "'['", "_OVER": "'over'", "$END": "end of input",
}


@functools.cache
def _lark() -> Lark:
    """The parser, built once per process (a small grammar: a few ms)."""
    grammar = importlib.resources.files("tfc.compiler.tfm").joinpath("tfm.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=True)


def parse_tree(text: str, filename: str) -> Tree:
    """The syntax tree of a ``.tfm`` text. Raises ``ParseError`` (never a lark exception)."""
    try:
        return _lark().parse(text)
    except UnexpectedInput as e:
        err = syntax_error(e, text, filename, _lark(), _TERMINAL_NAMES)
        err.tfm_located = True  # type: ignore[attr-defined]
        raise err from None
    except LarkError as e:  # defensive: other lark failures still read as parse errors
        raise located(ParseError, f"cannot parse: {e}", text, filename, 1, 1) from None


def located(cls: type[TfcError], message: str, text: str, filename: str, line: int,
            column: int) -> TfcError:
    """A ``cls`` error at ``filename:line:column`` showing that line with a caret."""
    line = max(int(line or 1), 1)
    column = max(int(column or 1), 1)
    err = cls(message + excerpt(text, line, column), Location(filename, line, column))
    err.tfm_located = True  # type: ignore[attr-defined]
    return err

