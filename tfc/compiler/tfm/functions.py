"""User functions of a ``.tfm`` file (``fn``): declared first, inlined at each call.

The language has no call op: a call evaluates the function's body in a fresh scope over
the top level, binding its parameters to the caller's values, so the graph is the one a
Python helper function would build. Functions are collected before anything is built,
so a call may precede the definition; recursion is an error, and an error inside a body
says where the function was called from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lark import Token, Tree

from tfc.api.graph import Operation
from tfc.compiler.tfm.blocks import OPTIMIZERS, Fetch
from tfc.compiler.tfm.locations import SourceLocator
from tfc.compiler.tfm.params import INITIALIZERS
from tfc.compiler.tfm.scope import Scope
from tfc.compiler.tfm.syntax import Node
from tfc.errors import TfcError
from tfc.ir.parser import tree_children
from tfc.ir.registry import all_ops, nearest_hint


@dataclass
class UserFunction:
    """A user function: expanded inline at each call (the language has no call op)."""

    name: str
    params: list[Token]
    body: Tree
    token: Token


class FunctionInlining(SourceLocator):
    """The builder's part that declares and inlines functions (``ModelBuilder`` mixes it
    in; it uses ``check_name`` and ``names`` from scope.py, ``expr`` from expressions.py
    and ``block`` from blocks.py)."""

    globals: Scope
    fns: dict[str, UserFunction]
    active: list[str]

    if TYPE_CHECKING:  # the other parts of ModelBuilder, as the docstring says
        def check_name(self, tok: Token) -> None: ...
        @staticmethod
        def names(tree: Tree | None) -> list[Token]: ...
        def expr(self, node: Node, scope: Scope) -> Any: ...
        def block(self, tree: Tree, scope: Scope, what: str
                  ) -> tuple[list[Fetch], Operation | None, Tree | None]: ...

    def fn_def(self, tree: Tree) -> None:
        """``fn NAME(params) = EXPR`` or ``{ ... return EXPR }``: remember it for calls."""
        name_tok, params, body = tree_children(tree)
        name = str(name_tok)
        if name in self.fns:
            first = self.fns[name].token
            raise self.error(f"function '{name}' is already defined (at line {first.line})",
                             name_tok)
        if name in all_ops() or name in INITIALIZERS or name in OPTIMIZERS:
            raise self.error(f"function '{name}' would hide the built-in '{name}'; "
                             "choose another name", name_tok)
        self.check_name(name_tok)
        names = self.names(params)
        seen: set[str] = set()
        for p in names:
            self.check_name(p)
            if str(p) in seen:
                raise self.error(f"parameter '{p}' appears twice", p)
            seen.add(str(p))
        self.fns[name] = UserFunction(name, names, body, name_tok)

    def call_fn(self, fn: UserFunction, tok: Token, pos: list[Node],
                kw: list[tuple[Token, Node]], scope: Scope) -> Any:
        """The value of ``fn`` called at ``tok`` with these arguments, evaluated in
        ``scope`` (the caller's); the body sees only its parameters and the top level."""
        if fn.name in self.active:
            raise self.error(f"function '{fn.name}' calls itself (through "
                             f"{' -> '.join(self.active)}); recursion is not supported", tok)
        names = [str(p) for p in fn.params]
        if len(pos) > len(names):
            raise self.error(f"{fn.name} takes {len(names)} argument"
                             f"{'s' * (len(names) != 1)}, got {len(pos)}", pos[len(names)])
        args: dict[str, Any] = {n: self.expr(a, scope) for n, a in zip(names, pos)}
        for key_tok, value in kw:
            key = str(key_tok)
            if key not in names:
                raise self.error(f"{fn.name} has no parameter '{key}'{nearest_hint(key, names)}",
                                 key_tok)
            if key in args:
                raise self.error(f"{fn.name}: '{key}' is given twice", key_tok)
            args[key] = self.expr(value, scope)
        missing = [n for n in names if n not in args]
        if missing:
            raise self.error(f"{fn.name}: missing argument '{missing[0]}'", tok)
        local = Scope(self.globals)
        for p in fn.params:
            local.define(p, args[str(p)])
        self.active.append(fn.name)
        try:
            if fn.body.data != "block":
                return self.expr(fn.body, local)
            fetches, _, ret = self.block(fn.body, local, "function")
            if ret is None or len(fetches) != 1 or ret.children[0].data == "named_fetch":
                raise self.error(f"function '{fn.name}' must end with `return EXPR` (one "
                                 "unnamed value)", ret or fn.token)
            return fetches[0][1]
        except TfcError as e:
            if getattr(e, "tfm_located", False) and e.loc is not None:
                line, column = self.where(tok)
                e.message += f"\n  (in function '{fn.name}' called at line {line}:{column})"
                e.args = (f"{e.loc}: {e.message}",)
            raise
        finally:
            self.active.pop()
