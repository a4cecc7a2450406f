"""Building an IR module from a ``.tfm`` syntax tree, through the TF1 graph API.

The walk calls what a TF1-style ``model.py`` calls — ``Graph.placeholder``, ``Variable``,
``apply`` for registry ops, the operator overloads' ``binary_op``, ``tfc.train``'s
optimizers, ``Graph.entry`` and ``Graph.as_module`` — so a ``.tfm`` file and its Python
twin build the same IR, and every op the registry has is callable by its own name with
its own attrs. Each op is located at the ``.tfm`` file's line and column
(``source_location``), so errors found later, by passes or the runtime, point there too.

Values during the walk are graph tensors or static literals (numbers, strings, booleans,
``none``, nested lists): literals stay Python values until an op takes them, so ``x * 2``
gives the constant ``x``'s dtype exactly as in Python.

``ModelBuilder`` holds the walk's state; its methods come from one module per concern,
which call each other through ``self`` (expressions call functions, whose bodies are
blocks of expressions):

- ``locations.py`` — errors located at ``file:line:column`` with a caret;
- ``scope.py`` — scopes, binding names, lookups with "did you mean" hints;
- ``constants.py`` — types, literals, attr values and options;
- ``expressions.py`` — operators and calls (registry ops with checked attrs);
- ``params.py`` — inputs, params and their initializers;
- ``functions.py`` — ``fn`` declarations, inlined at each call;
- ``blocks.py`` — bindings, ``entry``/``train`` blocks and optimizers.
"""

from __future__ import annotations

from lark import Tree

from tfc.api.graph import Graph, Variable
from tfc.compiler.tfm.blocks import OPTIMIZERS, EntryBlocks
from tfc.compiler.tfm.constants import ConstantEvaluation
from tfc.compiler.tfm.expressions import ExpressionEvaluation
from tfc.compiler.tfm.functions import FunctionInlining, UserFunction
from tfc.compiler.tfm.params import INITIALIZERS, ParamDeclarations
from tfc.compiler.tfm.scope import KEYWORDS, NameBinding, Scope
from tfc.errors import TfcError
from tfc.ir.core import Module
from tfc.ir.types import TensorType

__all__ = ["INITIALIZERS", "KEYWORDS", "OPTIMIZERS", "ModelBuilder"]


class ModelBuilder(EntryBlocks, FunctionInlining, ParamDeclarations, ExpressionEvaluation,
                   ConstantEvaluation, NameBinding):
    """Walks one ``.tfm`` syntax tree, building its graph; ``build`` gives the IR."""

    def __init__(self, text: str, filename: str) -> None:
        super().__init__(text, filename)
        self.graph = Graph()
        self.globals = Scope()
        self.fns: dict[str, UserFunction] = {}
        self.params: dict[str, Variable] = {}
        self.inputs: set[str] = set()
        self.active: list[str] = []  # user functions being expanded (no recursion)
        self.init_type: TensorType | None = None  # set while a param initializer is built

    def build(self, tree: Tree) -> Module:
        """The module of a whole file: functions first (a call may precede the
        definition), then every other declaration in order, named after its grammar
        rule (``input_decl``, ``param_decl``, ``binding``, ``entry_def``, ``train_def``)."""
        items = [c for c in tree.children if isinstance(c, Tree)]
        for item in items:
            if item.data == "fn_def":
                self.fn_def(item)
        with self.graph.as_default():
            for item in items:
                self.current = item
                if item.data != "fn_def":
                    self.guarded(item, getattr(self, item.data), item)
            self.current = None
            module = self.guarded(tree, self.graph.as_module)
        if not module.entries:
            raise self.error("the model declares no entry points (add `entry NAME(...) "
                             "{ ... }` or `train NAME(...) { ... }`)", None, TfcError)
        return module
