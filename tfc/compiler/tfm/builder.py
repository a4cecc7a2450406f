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
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
from lark import Token, Tree

from tfc.api import random as tfc_random
from tfc.api.graph import Graph, Operation, Tensor, Variable, source_location
from tfc.api.tensor import binary_op, apply, convert_to_tensor
from tfc.errors import FeedError, Location, ParseError, TfcError, TypeMismatch, UnknownOp
from tfc.ir.core import Module
from tfc.ir.registry import RANDOM, REQUIRED, OpDef, nearest_hint, all_ops, lookup
from tfc.ir.types import DType, TensorType
from tfc.compiler.tfm.syntax import located
from tfc import train as tfc_train

Node = Tree | Token

_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "div", "@": "matmul", "**": "pow",
           "==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
           ">": "greater", ">=": "greater_equal"}

# ``minimize LOSS with NAME(settings)``: the optimizers of ``tfc.train`` by short name.
OPTIMIZERS: dict[str, type] = {
    "sgd": tfc_train.GradientDescentOptimizer,
    "gradient_descent": tfc_train.GradientDescentOptimizer,
    "momentum": tfc_train.MomentumOptimizer,
    "adagrad": tfc_train.AdagradOptimizer,
    "rmsprop": tfc_train.RMSPropOptimizer,
    "adam": tfc_train.AdamOptimizer,
}
_HIDDEN_SETTINGS = {"self", "use_locking", "name"}

# Initializers that are not registry ops (registry ops with ``shape`` and ``dtype`` attrs,
# such as ``zeros`` or ``random.normal``, are initializers too).
INITIALIZERS = ("glorot_uniform",)

_MAX_DIM = 1 << 40

# Words of the grammar, never names (lark's contextual lexer would sometimes let them pass).
KEYWORDS = frozenset({"input", "param", "fn", "entry", "train", "minimize", "over", "with",
                      "return", "true", "false", "none"})


@dataclass
class _Fn:
    """A user function: expanded inline at each call (the language has no call op)."""

    name: str
    params: list[Token]
    body: Tree
    token: Token


class _Scope:
    """Names bound in one block; lookups fall back to the enclosing scope."""

    def __init__(self, parent: "_Scope | None" = None) -> None:
        self.parent = parent
        self.values: dict[str, Any] = {}
        self.where: dict[str, Token] = {}

    def find(self, name: str) -> tuple[Any, "_Scope"] | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name], scope
            scope = scope.parent
        return None

    def visible(self) -> Iterator[str]:
        scope: _Scope | None = self
        while scope is not None:
            yield from scope.values
            scope = scope.parent


class ModelBuilder:
    """Walks one ``.tfm`` syntax tree, building its graph; ``module()`` gives the IR."""

    def __init__(self, text: str, filename: str) -> None:
        self.text, self.filename = text, filename
        self.graph = Graph()
        self.globals = _Scope()
        self.fns: dict[str, _Fn] = {}
        self.params: dict[str, Variable] = {}
        self.inputs: set[str] = set()
        self.active: list[str] = []  # user functions being expanded (no recursion)
        self.init_type: TensorType | None = None  # set while a param initializer is built
        self.current: Node | None = None  # the statement being built, for stray errors

    # ---- errors -------------------------------------------------------------------------

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
        line, column = self.where(node)
        return Location(self.filename, line, column)

    def error(self, message: str, node: Node | None, cls: type[TfcError] = ParseError
              ) -> TfcError:
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

    # ---- the module ---------------------------------------------------------------------

    def build(self, tree: Tree) -> Module:
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

    # ---- declarations -------------------------------------------------------------------

    def check_name(self, tok: Token) -> None:
        if str(tok) in KEYWORDS:
            raise self.error(f"'{tok}' is a reserved word", tok)

    def bind(self, scope: _Scope, tok: Token, value: Any) -> None:
        name = str(tok)
        self.check_name(tok)
        if name in scope.values:
            first = scope.where[name]
            raise self.error(f"'{name}' is already defined (at line {first.line})", tok)
        if scope is self.globals and name in self.fns:
            raise self.error(f"'{name}' is already defined as a function (at line "
                             f"{self.fns[name].token.line})", tok)
        scope.values[name] = value
        scope.where[name] = tok

    def fn_def(self, tree: Tree) -> None:
        name_tok, params, body = tree.children
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
        self.fns[name] = _Fn(name, names, body, name_tok)

    @staticmethod
    def names(tree: Tree | None) -> list[Token]:
        return [] if tree is None else [t for t in tree.children if isinstance(t, Token)]

    def input_decl(self, tree: Tree) -> None:
        name_tok, type_tree = tree.children
        t = self.type(type_tree)
        with source_location(self.loc(name_tok)):
            x = self.graph.placeholder(t.dtype, list(t.shape), str(name_tok))
        if x.name != str(name_tok):
            raise self.error(f"the name '{name_tok}' is already used in the graph", name_tok)
        self.bind(self.globals, name_tok, x)
        self.inputs.add(str(name_tok))

    def param_decl(self, tree: Tree) -> None:
        name_tok, type_tree, init, options = tree.children
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

    def options(self, tree: Tree | None, kinds: dict[str, str]) -> dict[str, Any]:
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

    def initializer(self, tree: Node, t: TensorType) -> Tensor:
        """The initial value of a param of type ``t``: a number fills it, a list is its
        value, otherwise an expression of initializer calls giving exactly ``t``."""
        outer, self.init_type = self.init_type, t
        try:
            v = self.expr(tree, _Scope(self.globals))
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

    def type(self, tree: Tree) -> TensorType:
        dtype_tok, *dims = tree.children
        names = [d.value for d in DType]
        if str(dtype_tok) not in names:
            raise self.error(f"unknown dtype '{dtype_tok}'{nearest_hint(str(dtype_tok), names)} "
                             f"(known: {', '.join(names)})", dtype_tok, TypeMismatch)
        shape: list[int | str] = []
        for d in dims:
            if d is None:
                continue
            if d.data == "int_dim":
                n = int(d.children[0])
                if n >= _MAX_DIM:
                    raise self.error(f"dim {n} is too large", d.children[0], TypeMismatch)
                shape.append(n)
            elif d.data == "sym_dim":
                shape.append(str(d.children[0]))
            else:
                shape.append("?")
        return TensorType(DType(str(dtype_tok)), tuple(shape))

    # ---- bindings, entries, training ----------------------------------------------------

    def binding(self, tree: Tree, scope: _Scope | None = None) -> None:
        *targets, value = tree.children
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
        self.entry(tree, train=False)

    def train_def(self, tree: Tree) -> None:
        self.entry(tree, train=True)

    def entry(self, tree: Tree, train: bool) -> None:
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
        fetches, train_op, ret = self.block(block, _Scope(self.globals),
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

    def block(self, tree: Tree, scope: _Scope, what: str
              ) -> tuple[list[tuple[str | None, Any, Node]], Operation | None, Tree | None]:
        """Run a block's statements: its fetches, its training op and its return."""
        fetches: list[tuple[str | None, Any, Node]] = []
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

    def minimize(self, tree: Tree, scope: _Scope) -> Operation:
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

    def optimizer(self, tree: Tree, scope: _Scope) -> Any:
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

    # ---- expressions --------------------------------------------------------------------

    def expr(self, node: Node, scope: _Scope) -> Any:
        """The value of an expression: a Tensor, a tuple of them, or a static literal."""
        if isinstance(node, Token):  # defensive: the grammar wraps every token in a rule
            raise self.error(f"unexpected {node!r}", node)
        kind = node.data
        if kind == "name":
            return self.lookup(node.children[0], scope)
        if kind in ("int", "float", "string", "true", "false", "none"):
            return self.literal(node)
        if kind == "list":
            items = [self.expr(c, scope) for c in node.children[1:] if c is not None]
            for c, v in zip([c for c in node.children[1:] if c is not None], items):
                if isinstance(v, (Tensor, tuple)):
                    raise self.error("a list holds constants; use stack(a, b, ...) to join "
                                     "tensors", c, TypeMismatch)
            return items
        if kind == "neg":
            v = self.expr(node.children[1], scope)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v
            self.tensor_operand(v, node.children[1])
            return self.op(node.children[0], "neg", [v], {})
        if kind == "binary":
            a, op_tok, b = node.children
            x, y = self.expr(a, scope), self.expr(b, scope)
            self.tensor_operand(x, a)
            self.tensor_operand(y, b)
            if _is_number(x) and _is_number(y) and str(op_tok) != "@":
                return self.guarded(op_tok, _fold, str(op_tok), x, y)
            with source_location(self.loc(op_tok)):
                return self.guarded(op_tok, binary_op, _BINARY[str(op_tok)], x, y)
        if kind == "call":
            return self.call(node, scope)
        raise self.error(f"unexpected {kind}", node)  # defensive

    def tensor_operand(self, v: Any, node: Node) -> None:
        """Reject what can never become a tensor operand, before an op sees it."""
        if isinstance(v, tuple):
            raise self.error(f"a call with {len(v)} results used as one value (bind them: "
                             "`a, b = ...`)", node, TypeMismatch)
        if v is None or isinstance(v, str):
            raise self.error(f"{v!r} is not a tensor (strings and none are attr values: "
                             "name=value)", node, TypeMismatch)

    def literal(self, node: Tree) -> Any:
        kind = node.data
        if kind in ("true", "false", "none"):
            return {"true": True, "false": False, "none": None}[kind]
        tok = node.children[0]
        if kind == "int":
            return int(tok)
        if kind == "float":
            return float(tok)
        try:
            s = json.loads(str(tok))
        except ValueError:
            raise self.error("bad escape in string", tok) from None
        return s

    def lookup(self, tok: Token, scope: _Scope) -> Any:
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

    @staticmethod
    def is_initializer(name: str) -> bool:
        """Whether ``name`` makes a param's value from its type alone (``zeros``,
        ``random.normal``, ``glorot_uniform`` ...)."""
        if name in INITIALIZERS:
            return True
        opdef = all_ops().get(name)
        return opdef is not None and opdef.num_inputs == 0 and "shape" in opdef.attrs

    def call_parts(self, tree: Tree) -> tuple[Token, str, list[Node], list[tuple[Token, Node]]]:
        qual, *args = tree.children
        name_tok = qual.children[0]
        name = ".".join(str(t) for t in qual.children)
        pos: list[Node] = []
        kw: list[tuple[Token, Node]] = []
        for a in args:
            if a is None:
                continue
            if isinstance(a, Tree) and a.data == "kwarg":
                if any(str(k) == str(a.children[0]) for k, _ in kw):
                    raise self.error(f"'{a.children[0]}' is given twice", a.children[0])
                kw.append((a.children[0], a.children[1]))
            elif kw:
                raise self.error("a positional argument after keyword arguments", a)
            else:
                pos.append(a)
        return name_tok, name, pos, kw

    def call(self, tree: Tree, scope: _Scope) -> Any:
        name_tok, name, pos, kw = self.call_parts(tree)
        if name in self.fns:
            return self.call_fn(self.fns[name], name_tok, pos, kw, scope)
        if name in INITIALIZERS:
            return self.call_initializer(name_tok, name, pos, kw)
        if name in OPTIMIZERS:
            raise self.error(f"optimizer '{name}' is used only in `minimize LOSS with "
                             f"{name}(...)`", name_tok)
        ops = all_ops()
        if name not in ops:
            known = [*ops, *self.fns, *INITIALIZERS]
            raise self.error(f"unknown op '{name}'{nearest_hint(name, known)}", name_tok, UnknownOp)
        opdef = lookup(name)
        self.check_callable(opdef, name_tok)
        inputs = [self.expr(a, scope) for a in pos]
        for a, v in zip(pos, inputs):
            self.tensor_operand(v, a)
        attrs: dict[str, Any] = {}
        op_name: str | None = None
        for key_tok, value in kw:
            key = str(key_tok)
            if key == "name" and "name" not in opdef.attrs:
                op_name = self.static(value, "str", scope)
                if not isinstance(op_name, str) or not op_name:
                    raise self.error("name= takes a non-empty string", value, TypeMismatch)
                continue
            if key not in opdef.attrs:
                known = ", ".join(opdef.attrs) or "none"
                raise self.error(f"{name}: unknown attr '{key}'"
                                 f"{nearest_hint(key, list(opdef.attrs))} (known: {known})",
                                 key_tok, TypeMismatch)
            spec = opdef.attrs[key]
            v = self.static(value, spec.kind, scope)
            attrs[key] = self.guarded(value, spec.check, name, key, v)
        self.default_attrs(opdef, bool(inputs), attrs)
        return self.op(name_tok, name, inputs, attrs, op_name)

    def check_callable(self, opdef: OpDef, tok: Token) -> None:
        from tfc.ops.control import RegionOp
        if isinstance(opdef, RegionOp):
            raise self.error(f"'{opdef.name}' takes sub-graphs, which .tfm files cannot "
                             "write", tok, UnknownOp)
        if any(spec.kind == "var" for spec in opdef.attrs.values()):
            raise self.error(f"'{opdef.name}' is not callable: a param is read by its name "
                             "and updated by `minimize`", tok, UnknownOp)

    def default_attrs(self, opdef: OpDef, has_inputs: bool, attrs: dict[str, Any]) -> None:
        """Fill what a ``.tfm`` may leave out: a random op's seed (drawn from the graph's
        counter, as ``tfc.random`` does) and, in a param's initializer, the shape and dtype
        of a tensor-making op (``zeros``, ``random.normal`` ...) from the param's type."""
        seed = opdef.attrs.get("seed")
        if opdef.has(RANDOM) and seed is not None and seed.default is REQUIRED \
                and "seed" not in attrs:
            attrs["seed"] = self.graph.next_seed(None)
        t = self.init_type
        if t is not None and not has_inputs:
            if "shape" in opdef.attrs and "shape" not in attrs:
                attrs["shape"] = t.shape
            if "dtype" in opdef.attrs and "dtype" not in attrs:
                attrs["dtype"] = t.dtype

    def op(self, tok: Token, kind: str, inputs: Sequence[Any], attrs: dict[str, Any],
           name: str | None = None) -> Any:
        with source_location(self.loc(tok)):
            out = self.guarded(tok, lambda: apply(kind, *inputs, name=name, **attrs))
        if isinstance(out, Operation):
            raise self.error(f"'{kind}' has no result to use", tok, TypeMismatch)
        return out

    def call_fn(self, fn: _Fn, tok: Token, pos: list[Node], kw: list[tuple[Token, Node]],
                scope: _Scope) -> Any:
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
        local = _Scope(self.globals)
        for p in fn.params:
            local.values[str(p)] = args[str(p)]
            local.where[str(p)] = p
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

    def call_initializer(self, tok: Token, name: str, pos: list[Node],
                         kw: list[tuple[Token, Node]]) -> Tensor:
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
        shape = [int(d) for d in t.shape]  # type: ignore[arg-type]
        with source_location(self.loc(tok)):
            return self.guarded(tok, tfc_random.glorot_uniform, shape, t.dtype, seed)

    # ---- attr values --------------------------------------------------------------------

    def static(self, node: Node, kind: str, scope: _Scope | None = None) -> Any:
        """A constant (attr value, setting): literals, lists of them, dtype names, names
        bound to constants, and symbols in shapes (``shape=[B, 64]``)."""
        if isinstance(node, Tree) and node.data in ("int", "float", "string", "true",
                                                      "false", "none"):
            return self.literal(node)
        if isinstance(node, Tree) and node.data == "neg":
            v = self.static(node.children[1], kind, scope)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
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
            if name in {d.value for d in DType} and kind in ("dtype", "any"):
                return DType(name)
            if found is not None and not isinstance(found[0], (Tensor, tuple)):
                return found[0]
            if kind == "dim":
                return name
            if kind == "dtype":
                names = [d.value for d in DType]
                raise self.error(f"unknown dtype '{name}'{nearest_hint(name, names)}", tok,
                                 TypeMismatch)
            raise self.error(f"'{name}' is not a constant; attrs take literal values",
                             tok, TypeMismatch)
        raise self.error("attrs take literal values (numbers, strings, true/false, lists, "
                         "dtypes)", node, TypeMismatch)

    def tensor_attr(self, items: list[Any], node: Node) -> np.ndarray:
        arr = self.guarded(node, np.asarray, items)
        if arr.dtype.kind == "f":
            return arr.astype(np.float32)
        if arr.dtype.kind == "i" and arr.size and np.all(np.abs(arr) < 2**31):
            return arr.astype(np.int32)
        if arr.dtype.kind in "bi" or arr.size == 0:
            return arr if arr.size else arr.astype(np.float32)
        raise self.error(f"a tensor attr takes numbers, not {arr.dtype}", node, TypeMismatch)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _fold(op: str, a: int | float, b: int | float) -> Any:
    """``op`` on two number literals, as Python computes it (``x * 2 ** 2`` is ``x * 4``
    in a ``.py`` model too); huge integer powers go through floats, which overflow
    cleanly instead of computing for ever."""
    if op == "**":
        if isinstance(a, int) and isinstance(b, int) and abs(b) > 1024:
            return float(a) ** float(b)
        return a ** b
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
            "==": lambda: a == b, "!=": lambda: a != b, "<": lambda: a < b,
            "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b}[op]()
