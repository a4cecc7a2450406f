"""Bindings, blocks, ``entry`` and ``train`` declarations, and their optimizers.

An ``entry`` becomes ``Graph.entry`` with its feeds and named fetches; a ``train`` is an
entry whose block holds one ``minimize LOSS with OPTIMIZER(settings)``, built by the
optimizer classes of ``tfc.train`` (``optimizer.minimize``), so the slot variables and
update ops are the ones a Python model gets. Optimizer settings are checked against the
class's own constructor signature, so the language follows ``tfc.train`` without a table
of settings to keep in step.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from lark import Token, Tree

from tfc import train as tfc_train
from tfc.api.graph import Graph, Operation, Tensor, Variable, source_location
from tfc.compiler.tfm.locations import SourceLocator
from tfc.compiler.tfm.scope import Scope
from tfc.compiler.tfm.syntax import Node
from tfc.errors import FeedError, TypeMismatch, UnknownOp
from tfc.ir.parser import tree_children
from tfc.ir.registry import nearest_hint

# ``minimize LOSS with NAME(settings)``: the optimizers of ``tfc.train`` by short name.
OPTIMIZERS: dict[str, type[tfc_train.Optimizer]] = {
    "sgd": tfc_train.GradientDescentOptimizer,
    "gradient_descent": tfc_train.GradientDescentOptimizer,
    "momentum": tfc_train.MomentumOptimizer,
    "adagrad": tfc_train.AdagradOptimizer,
    "rmsprop": tfc_train.RMSPropOptimizer,
    "adam": tfc_train.AdamOptimizer,
}
# Constructor parameters that are not settings a ``.tfm`` may give.
_HIDDEN_SETTINGS = {"self", "use_locking", "name"}

# One fetch of a block: its name (None when unnamed), its value, and where it is written.
Fetch = tuple[str | None, Any, Node]


class EntryBlocks(SourceLocator):
    """The builder's part that builds bindings, blocks, entries and training steps
    (``ModelBuilder`` mixes it in; it uses ``bind`` and ``names`` from scope.py, ``static``
    from constants.py, and ``expr``, ``tensor_operand`` and ``call_parts`` from
    expressions.py)."""

    graph: Graph
    globals: Scope
    params: dict[str, Variable]
    inputs: set[str]

    if TYPE_CHECKING:  # the other parts of ModelBuilder, as the docstring says
        def bind(self, scope: Scope, tok: Token, value: Any) -> None: ...
        @staticmethod
        def names(tree: Tree | None) -> list[Token]: ...
        def static(self, node: Node, kind: str, scope: Scope | None = None) -> Any: ...
        def expr(self, node: Node, scope: Scope) -> Any: ...
        def tensor_operand(self, v: Any, node: Node) -> None: ...
        def call_parts(self, tree: Tree
                       ) -> tuple[Token, str, list[Node], list[tuple[Token, Node]]]: ...

    def binding(self, tree: Tree, scope: Scope | None = None) -> None:
        """``a = EXPR`` or ``a, b = EXPR`` (unpacking a call's results) in ``scope``."""
        *targets, value = tree_children(tree)
        scope = scope or self.globals
        v = self.expr(value, scope)
        if len(targets) == 1:
            self.bind(scope, targets[0], v)
            return
        if not isinstance(v, tuple) or len(v) != len(targets):
            n = len(v) if isinstance(v, tuple) else 1
            raise self.error(f"{len(targets)} names for {n} value{'s' * (n != 1)}", targets[0])
        for tok, x in zip(targets, v):
            self.bind(scope, tok, x)

    def entry_def(self, tree: Tree) -> None:
        """``entry NAME(feeds) { ... return fetches }``."""
        self.entry(tree, train=False)

    def train_def(self, tree: Tree) -> None:
        """``train NAME(feeds) { ... minimize ...; return fetches }``."""
        self.entry(tree, train=True)

    def entry(self, tree: Tree, train: bool) -> None:
        """An entry point of the graph: its feeds (top-level tensors), the block's
        fetches (unnamed ones are ``out0``, ``out1`` ...) and, for ``train``, its step."""
        name_tok, params, block = tree.children
        feeds: dict[str, Tensor] = {}
        for p in self.names(params):
            found = self.globals.find(str(p))
            if found is None:
                hint = nearest_hint(str(p), sorted(self.inputs) or list(self.globals.values))
                raise self.error(f"entry '{name_tok}' feeds '{p}', which is not defined"
                                 f"{hint}", p, FeedError)
            if not isinstance(found[0], Tensor):
                raise self.error(f"'{p}' is a constant, not a tensor to feed", p, FeedError)
            if str(p) in feeds:
                raise self.error(f"'{p}' is fed twice", p, FeedError)
            feeds[str(p)] = found[0]
        fetches, train_op, ret = self.block(block, Scope(self.globals),
                                            "train" if train else "entry")
        if train and train_op is None:
            raise self.error(f"train '{name_tok}' has no `minimize LOSS with OPTIMIZER(...)`",
                             name_tok)
        if not train and ret is None:
            raise self.error(f"entry '{name_tok}' returns nothing (end it with "
                             "`return NAME, ...`)", name_tok)
        named: dict[str, Any] = {}
        for i, (fetch_name, value, node) in enumerate(fetches):
            key = fetch_name or f"out{i}"
            if key in named:
                raise self.error(f"entry '{name_tok}' returns '{key}' twice", node)
            named[key] = value
        with source_location(self.loc(name_tok)):
            self.graph.entry(str(name_tok), feeds, named, [train_op] if train_op else [],
                             self.loc(name_tok))

    def block(self, tree: Tree, scope: Scope, what: str
              ) -> tuple[list[Fetch], Operation | None, Tree | None]:
        """Run a block's statements: its fetches, its training op and its return.
        ``what`` (``entry``, ``train`` or ``function``) says where ``minimize`` is allowed."""
        fetches: list[Fetch] = []
        train_op: Operation | None = None
        ret: Tree | None = None
        for stmt in tree.children:
            if not isinstance(stmt, Tree):
                continue
            if ret is not None:
                raise self.error("statement after `return`", stmt)
            if stmt.data == "binding":
                self.binding(stmt, scope)
            elif stmt.data == "minimize":
                if what != "train":
                    raise self.error(f"`minimize` belongs in a `train` declaration, not "
                                     f"in {'an' if what == 'entry' else 'a'} {what}", stmt)
                if train_op is not None:
                    raise self.error("a train declaration minimizes one loss", stmt)
                train_op = self.minimize(stmt, scope)
            else:  # return_stmt
                ret = stmt
                for f in stmt.children:
                    if f is None:
                        continue
                    if f.data == "named_fetch":
                        fetches.append((str(f.children[0]), self.expr(f.children[1], scope),
                                        f.children[0]))
                    else:
                        e = f.children[0]
                        name = str(e.children[0]) if isinstance(e, Tree) and e.data == "name" \
                            else None
                        fetches.append((name, self.expr(e, scope), e))
                    self.tensor_operand(fetches[-1][1], f)
        return fetches, train_op, ret

    def minimize(self, tree: Tree, scope: Scope) -> Operation:
        """``minimize LOSS [over params] with OPTIMIZER(...)``: the optimizer's step."""
        loss_node, over, opt_call = tree.children
        loss = self.expr(loss_node, scope)
        if not isinstance(loss, Tensor):
            raise self.error(f"the loss must be a tensor, not {loss!r}", loss_node, TypeMismatch)
        var_list: list[Variable] | None = None
        if over is not None:
            var_list = []
            for tok in self.names(over):
                if str(tok) not in self.params:
                    raise self.error(f"'{tok}' is not a param"
                                     f"{nearest_hint(str(tok), list(self.params))}", tok)
                var_list.append(self.params[str(tok)])
        optimizer = self.optimizer(opt_call, scope)
        with source_location(self.loc(tree)):
            return self.guarded(tree, lambda: optimizer.minimize(loss, var_list=var_list))

    def optimizer(self, tree: Tree, scope: Scope) -> Any:
        """The ``tfc.train`` optimizer a ``NAME(settings)`` call makes, its settings
        checked against the constructor's parameters (names, kinds, required ones)."""
        name_tok, name, pos, kw = self.call_parts(tree)
        if name not in OPTIMIZERS:
            raise self.error(f"unknown optimizer '{name}'{nearest_hint(name, list(OPTIMIZERS))} "
                             f"(known: {', '.join(OPTIMIZERS)})", name_tok, UnknownOp)
        cls = OPTIMIZERS[name]
        sig = inspect.signature(cls.__init__)
        settings = [p for p in sig.parameters.values() if p.name not in _HIDDEN_SETTINGS]
        given: dict[str, Any] = {}
        if len(pos) > len(settings):
            raise self.error(f"{name} takes at most {len(settings)} positional settings "
                             f"({', '.join(p.name for p in settings)})", pos[len(settings)])
        pairs = [(p.name, node, node) for p, node in zip(settings, pos)]
        pairs += [(str(k), k, v) for k, v in kw]
        for key, key_node, value in pairs:
            spec = next((p for p in settings if p.name == key), None)
            if spec is None:
                known = [p.name for p in settings]
                raise self.error(f"{name}: unknown setting '{key}'{nearest_hint(key, known)} "
                                 f"(known: {', '.join(known)})", key_node)
            if key in given:
                raise self.error(f"{name}: setting '{key}' is given twice", key_node)
            v = self.static(value, "any", scope)
            want_bool = isinstance(spec.default, bool)
            if want_bool != isinstance(v, bool) or not isinstance(v, (bool, int, float)):
                kind = "true or false" if want_bool else "a number"
                raise self.error(f"{name}: {key} takes {kind}, got {v!r}", value)
            given[key] = v
        for p in settings:
            if p.default is inspect.Parameter.empty and p.name not in given:
                raise self.error(f"{name}: missing setting '{p.name}'", name_tok)
        return self.guarded(tree, lambda: cls(**given))
