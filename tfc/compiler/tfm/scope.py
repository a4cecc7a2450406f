"""Names in a ``.tfm`` file: scopes, binding once per scope, and lookups with hints.

Top-level names (inputs, params, bindings) live in the global scope; a block or an
inlined function body gets a child scope, so its bindings stay local and may shadow the
top level (docs/language.md, "Scopes"). A failed lookup suggests the nearest visible name
and says so when the name is a function or an op that was meant to be called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from lark import Token, Tree

from tfc.api.graph import Tensor
from tfc.compiler.tfm.locations import SourceLocator
from tfc.ir.registry import all_ops, nearest_hint
from tfc.ir.types import TensorType

if TYPE_CHECKING:
    from tfc.compiler.tfm.functions import UserFunction

# Words of the grammar, never names (lark's contextual lexer would sometimes let them pass).
KEYWORDS = frozenset({"input", "param", "fn", "entry", "train", "minimize", "over", "with",
                      "return", "true", "false", "none"})


class Scope:
    """Names bound in one block; lookups fall back to the enclosing scope."""

    def __init__(self, parent: "Scope | None" = None) -> None:
        self.parent = parent
        self.values: dict[str, Any] = {}
        self.where: dict[str, Token] = {}

    def define(self, tok: Token, value: Any) -> None:
        """Bind the name ``tok`` to ``value``, remembering where (for "already defined")."""
        self.values[str(tok)] = value
        self.where[str(tok)] = tok

    def find(self, name: str) -> tuple[Any, "Scope"] | None:
        """The value of ``name`` and the scope that binds it, or None."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name], scope
            scope = scope.parent
        return None

    def visible(self) -> Iterator[str]:
        """Every name a lookup here could find (the candidates of a "did you mean")."""
        scope: Scope | None = self
        while scope is not None:
            yield from scope.values
            scope = scope.parent


class NameBinding(SourceLocator):
    """The builder's part that binds and looks up names (``ModelBuilder`` mixes it in;
    ``lookup`` uses ``is_initializer`` from params.py and ``call`` from expressions.py)."""

    globals: Scope
    fns: dict[str, UserFunction]
    init_type: TensorType | None

    if TYPE_CHECKING:  # the other parts of ModelBuilder, as the docstring says
        @staticmethod
        def is_initializer(name: str) -> bool: ...
        def call(self, tree: Tree, scope: Scope) -> Any: ...

    def check_name(self, tok: Token) -> None:
        """Reject a reserved word used as a name."""
        if str(tok) in KEYWORDS:
            raise self.error(f"'{tok}' is a reserved word", tok)

    def bind(self, scope: Scope, tok: Token, value: Any) -> None:
        """Bind ``tok`` in ``scope``: once per scope, and never over a function's name."""
        name = str(tok)
        self.check_name(tok)
        if name in scope.values:
            first = scope.where[name]
            raise self.error(f"'{name}' is already defined (at line {first.line})", tok)
        if scope is self.globals and name in self.fns:
            raise self.error(f"'{name}' is already defined as a function (at line "
                             f"{self.fns[name].token.line})", tok)
        scope.define(tok, value)

    @staticmethod
    def names(tree: Tree | None) -> list[Token]:
        """The names of a ``params`` list (a function's, an entry's feeds, ``over``)."""
        return [] if tree is None else [t for t in tree.children if isinstance(t, Token)]

    def lookup(self, tok: Token, scope: Scope) -> Any:
        """The value a name stands for in ``scope``; in a param's initializer, a bare
        initializer name is a call (``= zeros``) and tensors of the top level are out of
        reach (they do not exist yet when initial values are computed)."""
        name = str(tok)
        found = scope.find(name)
        if found is None:
            if self.init_type is not None and self.is_initializer(name):
                # `param b: f32[10] = zeros`: an initializer named alone is called
                return self.call(Tree("call", [Tree("qualname", [tok]), None]), scope)
            if name in self.fns or name in all_ops():
                what = "a function" if name in self.fns else "an op"
                raise self.error(f"'{name}' is {what}; call it: {name}(...)", tok)
            candidates = [*scope.visible()]
            raise self.error(f"undefined name '{name}'{nearest_hint(name, candidates)}", tok)
        value, owner = found
        if self.init_type is not None and owner is self.globals and isinstance(value, Tensor):
            raise self.error(f"a param's initializer cannot use '{name}' (initial values are "
                             "computed before any input or param exists)", tok)
        return value
