"""Inputs and params of a ``.tfm`` file: placeholders, and variables with initializers.

An ``input`` is a ``Graph.placeholder``; a ``param`` is a ``Variable`` whose initial value
is built from its declared type (docs/language.md, "Initializers"): a number fills it, a
list is its value, and initializer calls (``glorot_uniform``, ``zeros``,
``random.normal`` ...) take their shape and dtype from it. While an initializer is built,
``init_type`` holds the param's type: expressions read it to fill those attrs, and name
lookups to keep inputs and other params (which do not exist yet) out of reach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lark import Token, Tree

from tfc.api import random as tfc_random
from tfc.api.graph import Graph, Tensor, Variable, source_location
from tfc.api.tensor import apply, convert_to_tensor
from tfc.compiler.tfm.locations import SourceLocator
from tfc.compiler.tfm.scope import Scope
from tfc.compiler.tfm.syntax import Node
from tfc.errors import TypeMismatch
from tfc.ir.parser import tree_children
from tfc.ir.registry import all_ops
from tfc.ir.types import TensorType

# Initializers that are not registry ops (registry ops with ``shape`` and ``dtype`` attrs,
# such as ``zeros`` or ``random.normal``, are initializers too).
INITIALIZERS = ("glorot_uniform",)


class ParamDeclarations(SourceLocator):
    """The builder's part that declares inputs and params (``ModelBuilder`` mixes it in;
    it uses ``type``, ``options`` and ``static`` from constants.py, ``bind`` from scope.py
    and ``expr`` from expressions.py)."""

    graph: Graph
    globals: Scope
    params: dict[str, Variable]
    inputs: set[str]
    init_type: TensorType | None

    if TYPE_CHECKING:  # the other parts of ModelBuilder, as the docstring says
        def type(self, tree: Tree) -> TensorType: ...
        def options(self, tree: Tree | None, kinds: dict[str, str]) -> dict[str, Any]: ...
        def static(self, node: Node, kind: str, scope: Scope | None = None) -> Any: ...
        def bind(self, scope: Scope, tok: Token, value: Any) -> None: ...
        def expr(self, node: Node, scope: Scope) -> Any: ...

    def input_decl(self, tree: Tree) -> None:
        """``input NAME: TYPE``: a placeholder."""
        name_tok, type_tree = tree_children(tree)
        t = self.type(type_tree)
        with source_location(self.loc(name_tok)):
            x = self.graph.placeholder(t.dtype, list(t.shape), str(name_tok))
        if x.name != str(name_tok):
            raise self.error(f"the name '{name_tok}' is already used in the graph", name_tok)
        self.bind(self.globals, name_tok, x)
        self.inputs.add(str(name_tok))

    def param_decl(self, tree: Tree) -> None:
        """``param NAME: TYPE = INIT {options}``: a variable of a static type."""
        name_tok, type_tree, init, options = tree_children(tree)
        t = self.type(type_tree)
        if not t.is_static:
            raise self.error(f"a param needs a static shape, not {t}", type_tree, TypeMismatch)
        settings = self.options(options, {"trainable": "bool", "device": "str"})
        device = settings.get("device")

        def initial_value() -> Tensor:
            return self.initializer(init, t)

        with source_location(self.loc(name_tok)), self.graph.device(device):
            var = Variable(initial_value, trainable=settings.get("trainable", True),
                           name=str(name_tok), dtype=t.dtype)
        if var.name != str(name_tok):
            raise self.error(f"the name '{name_tok}' is already used in the graph", name_tok)
        self.params[var.name] = var
        self.bind(self.globals, name_tok, var.value())

    def initializer(self, tree: Node, t: TensorType) -> Tensor:
        """The initial value of a param of type ``t``: a number fills it, a list is its
        value, otherwise an expression of initializer calls giving exactly ``t``."""
        outer, self.init_type = self.init_type, t
        try:
            v = self.expr(tree, Scope(self.globals))
            loc = self.loc(tree)
            with source_location(loc):
                if isinstance(v, (bool, int, float)):
                    v = apply("fill", shape=t.shape, value=float(v), dtype=t.dtype)
                elif not isinstance(v, Tensor):
                    v = self.guarded(tree, convert_to_tensor, v, t.dtype)
        finally:
            self.init_type = outer
        if v.type != t:
            raise self.error(f"the initializer gives {v.type}, but the param is declared "
                             f"{t}", tree, TypeMismatch)
        return v

    @staticmethod
    def is_initializer(name: str) -> bool:
        """Whether ``name`` makes a param's value from its type alone (``zeros``,
        ``random.normal``, ``glorot_uniform`` ...)."""
        if name in INITIALIZERS:
            return True
        opdef = all_ops().get(name)
        return opdef is not None and opdef.num_inputs == 0 and "shape" in opdef.attrs

    def call_initializer(self, tok: Token, name: str, pos: list[Node],
                         kw: list[tuple[Token, Node]]) -> Tensor:
        """A call of one of ``INITIALIZERS`` (only in a param's initializer)."""
        t = self.init_type
        if t is None:
            raise self.error(f"'{name}' is an initializer: use it in `param NAME: TYPE = "
                             f"{name}(...)`", tok)
        if pos:
            raise self.error(f"{name} takes only seed=INT", pos[0])
        seed: int | None = None
        for key_tok, value in kw:
            if str(key_tok) != "seed":
                raise self.error(f"{name}: unknown setting '{key_tok}' (known: seed)", key_tok)
            seed = self.static(value, "int")
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise self.error(f"{name}: seed takes an integer, got {seed!r}", value)
        if t.rank == 0:
            raise self.error(f"{name} needs a param of rank 1 or more, not {t}", tok,
                             TypeMismatch)
        shape = [int(d) for d in t.shape]
        with source_location(self.loc(tok)):
            return self.guarded(tok, tfc_random.glorot_uniform, shape, t.dtype, seed)
