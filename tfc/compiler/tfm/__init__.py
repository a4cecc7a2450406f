"""The ``.tfm`` model language: a model file that is data, not a program.

A ``.tfm`` file declares inputs, params (variables with initializers), functions,
entry points and training steps (docs/language.md). It is parsed with lark
(``tfm.lark``) and built through the same TF1 graph API a ``model.py`` uses, so it
reaches the same IR, and loading one runs no user code. Every error — syntax, an unknown
op or attr, a shape mismatch, an undefined name — is a ``TfcError`` located at
``file:line:column`` with the line and a caret, and suggests the nearest known name.
"""

from __future__ import annotations

import os

from tfc.compiler.tfm.builder import INITIALIZERS, OPTIMIZERS, ModelBuilder
from tfc.compiler.tfm.syntax import located, parse_tree
from tfc.errors import ParseError
from tfc.ir.core import Module

__all__ = ["INITIALIZERS", "OPTIMIZERS", "load_tfm", "parse_tfm"]


def parse_tfm(text: str, filename: str = "<string>") -> Module:
    """The IR module a ``.tfm`` text defines. Raises ``TfcError`` subclasses only, each
    located in ``filename`` (``ParseError`` for syntax, ``TypeMismatch`` for types,
    ``UnknownOp`` for unknown ops ...)."""
    tree = parse_tree(text, filename)
    try:
        return ModelBuilder(text, filename).build(tree)
    except RecursionError:
        raise located(ParseError, "nesting too deep", text, filename, 1, 1) from None


def load_tfm(path: str | os.PathLike[str]) -> Module:
    """The IR module of the ``.tfm`` file at ``path``."""
    from tfc.compiler.frontend import read_source
    return parse_tfm(read_source(path), str(path))
