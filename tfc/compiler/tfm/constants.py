"""Compile-time values of a ``.tfm`` file: types, literals, attr values and options.

Attrs, optimizer settings and param options are constants, known when the file is built
(docs/language.md): literals, lists of them, dtype names and names bound to constants, and
symbols in shapes (``shape=[B, 64]``). Evaluating them apart from tensor expressions lets
each error say what was expected (``'x' is not a constant; attrs take literal values``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from lark import Tree

from tfc.api.graph import Tensor
from tfc.compiler.tfm.locations import SourceLocator
from tfc.compiler.tfm.scope import Scope
from tfc.compiler.tfm.syntax import Node
from tfc.errors import TypeMismatch
from tfc.ir.parser import tree_children
from tfc.ir.registry import nearest_hint
from tfc.ir.types import DType, TensorType

# The tree rules of literals (``tfm.lark``'s atoms).
LITERALS = ("int", "float", "string", "true", "false", "none")

# The dtype names a type or ``dtype=`` attr may use, in the order errors list them.
DTYPE_NAMES = tuple(d.value for d in DType)

# Larger dims are surely typos; refusing them keeps shape arithmetic in int64.
_MAX_DIM = 1 << 40


def is_number(v: Any) -> bool:
    """Whether ``v`` is a number literal (``true``/``false`` are not numbers here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class ConstantEvaluation(SourceLocator):
    """The builder's part that evaluates constants (``ModelBuilder`` mixes it in)."""

    globals: Scope

    def type(self, tree: Tree) -> TensorType:
        """The tensor type of a ``type`` tree (``f32[B, 64]``)."""
        dtype_tok, *dims = tree.children
        if str(dtype_tok) not in DTYPE_NAMES:
            raise self.error(f"unknown dtype '{dtype_tok}'"
                             f"{nearest_hint(str(dtype_tok), DTYPE_NAMES)} "
                             f"(known: {', '.join(DTYPE_NAMES)})", dtype_tok, TypeMismatch)
        shape: list[int | str] = []
        for d in dims:
            if d is None:
                continue
            if d.data == "int_dim":
                n = int(tree_children(d)[0])
                if n >= _MAX_DIM:
                    raise self.error(f"dim {n} is too large", d.children[0], TypeMismatch)
                shape.append(n)
            elif d.data == "sym_dim":
                shape.append(str(d.children[0]))
            else:
                shape.append("?")
        return TensorType(DType(str(dtype_tok)), tuple(shape))

    def options(self, tree: Tree | None, kinds: dict[str, str]) -> dict[str, Any]:
        """The ``{key=value, ...}`` options of a declaration; ``kinds`` maps each known
        key to ``"bool"`` or ``"str"``."""
        out: dict[str, Any] = {}
        for opt in [] if tree is None else [c for c in tree.children if isinstance(c, Tree)]:
            key, value = opt.children
            if str(key) not in kinds:
                raise self.error(f"unknown option '{key}'{nearest_hint(str(key), list(kinds))} "
                                 f"(known: {', '.join(kinds)})", key)
            if str(key) in out:
                raise self.error(f"option '{key}' is given twice", key)
            v = self.static(value, kinds[str(key)])
            ok = isinstance(v, bool) if kinds[str(key)] == "bool" else isinstance(v, str)
            if not ok:
                raise self.error(f"option {key} takes a {kinds[str(key)]}, got {v!r}", value)
            out[str(key)] = v
        return out

    def literal(self, node: Tree) -> Any:
        """The Python value of a literal tree (one of ``LITERALS``)."""
        kind = node.data
        if kind in ("true", "false", "none"):
            return {"true": True, "false": False, "none": None}[kind]
        tok = tree_children(node)[0]
        if kind == "int":
            return int(tok)
        if kind == "float":
            value = float(tok)
            if math.isinf(value):  # the grammar's floats are finite: 1.5e999 overflows
                raise self.error(f"literal {tok} is out of range (larger than any f64)", tok,
                                 TypeMismatch)
            return value
        try:
            s = json.loads(str(tok))
        except ValueError:
            raise self.error("bad escape in string", tok) from None
        return s

    def static(self, node: Node, kind: str, scope: Scope | None = None) -> Any:
        """A constant (attr value, setting): literals, lists of them, dtype names, names
        bound to constants, and symbols in shapes (``shape=[B, 64]``)."""
        if isinstance(node, Tree) and node.data in LITERALS:
            return self.literal(node)
        if isinstance(node, Tree) and node.data == "neg":
            v = self.static(node.children[1], kind, scope)
            if is_number(v):
                return -v
            raise self.error(f"cannot negate {v!r}", node, TypeMismatch)
        if isinstance(node, Tree) and node.data == "list":
            elem = "dim" if kind == "shape" else "any"
            items = [self.static(c, elem, scope) for c in node.children[1:] if c is not None]
            if kind == "tensor":
                return self.tensor_attr(items, node)
            return items
        if isinstance(node, Tree) and node.data == "name":
            tok = node.children[0]
            name = str(tok)
            found = (scope or self.globals).find(name)
            if name in DTYPE_NAMES and kind in ("dtype", "any"):
                return DType(name)
            if found is not None and not isinstance(found[0], (Tensor, tuple)):
                return found[0]
            if kind == "dim":
                return name
            if kind == "dtype":
                raise self.error(f"unknown dtype '{name}'{nearest_hint(name, DTYPE_NAMES)}",
                                 tok, TypeMismatch)
            raise self.error(f"'{name}' is not a constant; attrs take literal values",
                             tok, TypeMismatch)
        raise self.error("attrs take literal values (numbers, strings, true/false, lists, "
                         "dtypes)", node, TypeMismatch)

    def tensor_attr(self, items: list[Any], node: Node) -> np.ndarray:
        """A ``tensor`` attr from a list literal: floats as f32, integers as i32 when they
        fit (else i64), booleans as bool, an empty list as f32: the IR's usual dtypes
        rather than numpy's 64-bit defaults."""
        arr = self.guarded(node, np.asarray, items)
        if arr.dtype.kind == "f":
            return arr.astype(np.float32)
        if arr.dtype.kind == "i" and arr.size and np.all(np.abs(arr) < 2**31):
            return arr.astype(np.int32)
        if arr.dtype.kind in "bi" or arr.size == 0:
            return arr if arr.size else arr.astype(np.float32)
        raise self.error(f"a tensor attr takes numbers, not {arr.dtype}", node, TypeMismatch)
