"""Expressions of a ``.tfm`` file: operators, literals and calls, built as graph ops.

Operators build the ops Python's overloads build (``binary_op``), so ``x * 2`` gives the
constant ``x``'s dtype exactly as in a ``model.py``; two number literals fold as Python
folds them. A call is, in this order, a user function (inlined, functions.py), an
initializer (params.py) or any registry op by its own name, its keyword arguments checked
against the op's attr specs (names and kinds) before the op is built, so a misspelled
attr is reported at the attr with the nearest known name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from lark import Token, Tree

from tfc.api.graph import Graph, Operation, Tensor, Variable, source_location
from tfc.api.tensor import apply, binary_op, constant, truediv
from tfc.compiler.tfm.blocks import OPTIMIZERS
from tfc.compiler.tfm.constants import LITERALS, is_number
from tfc.compiler.tfm.functions import UserFunction
from tfc.compiler.tfm.locations import SourceLocator
from tfc.compiler.tfm.params import INITIALIZERS
from tfc.compiler.tfm.scope import Scope
from tfc.compiler.tfm.syntax import Node
from tfc.errors import TfcError, TypeMismatch, UnknownOp
from tfc.ir.parser import tree_children
from tfc.ir.registry import RANDOM, REQUIRED, OpDef, all_ops, lookup, nearest_hint
from tfc.ir.types import TensorType

# The registry op of each operator: the ones ``Tensor``'s Python overloads build. ``/`` is
# ``truediv`` (integers divided as float64, as ``Tensor.__truediv__`` and TF do), not a
# bare ``div``, which floors integers.
_BINARY = {"+": "add", "-": "sub", "*": "mul", "@": "matmul", "**": "pow",
           "==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
           ">": "greater", ">=": "greater_equal"}


class ExpressionEvaluation(SourceLocator):
    """The builder's part that evaluates expressions (``ModelBuilder`` mixes it in; it
    uses ``lookup`` from scope.py, ``literal`` and ``static`` from constants.py,
    ``call_fn`` from functions.py and ``call_initializer`` from params.py)."""

    graph: Graph
    fns: dict[str, UserFunction]
    init_type: TensorType | None

    if TYPE_CHECKING:  # the other parts of ModelBuilder, as the docstring says
        def lookup(self, tok: Token, scope: Scope) -> Any: ...
        def literal(self, node: Tree) -> Any: ...
        def static(self, node: Node, kind: str, scope: Scope | None = None) -> Any: ...
        def call_fn(self, fn: UserFunction, tok: Token, pos: list[Node],
                    kw: list[tuple[Token, Node]], scope: Scope) -> Any: ...
        def call_initializer(self, tok: Token, name: str, pos: list[Node],
                             kw: list[tuple[Token, Node]]) -> Tensor: ...

    def expr(self, node: Node, scope: Scope) -> Any:
        """The value of an expression: a Tensor, a tuple of them, or a static literal."""
        if isinstance(node, Token):  # defensive: the grammar wraps every token in a rule
            raise self.error(f"unexpected {node!r}", node)
        kind = node.data
        if kind == "name":
            return self.lookup(tree_children(node)[0], scope)
        if kind in LITERALS:
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
            if is_number(v):
                return -v
            self.tensor_operand(v, node.children[1])
            return self.op(tree_children(node)[0], "neg", [v], {})
        if kind == "binary":
            a, op_tok, b = node.children
            x, y = self.expr(a, scope), self.expr(b, scope)
            self.tensor_operand(x, a)
            self.tensor_operand(y, b)
            if is_number(x) and is_number(y) and str(op_tok) != "@":
                return self.guarded(op_tok, _fold, str(op_tok), x, y)
            with source_location(self.loc(op_tok)):
                if str(op_tok) == "/":
                    return self.guarded(op_tok, truediv, x, y)
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

    def call_parts(self, tree: Tree) -> tuple[Token, str, list[Node], list[tuple[Token, Node]]]:
        """A call's name token, dotted name, positional and keyword arguments (each
        keyword once, none before a positional one)."""
        qual, *args = tree_children(tree)
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
                key_tok, value = tree_children(a)
                kw.append((key_tok, value))
            elif kw:
                raise self.error("a positional argument after keyword arguments", a)
            else:
                pos.append(a)
        return name_tok, name, pos, kw

    def call(self, tree: Tree, scope: Scope) -> Any:
        """A call's value: a user function, an initializer or a registry op."""
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
                listed = ", ".join(opdef.attrs) or "none"
                raise self.error(f"{name}: unknown attr '{key}'"
                                 f"{nearest_hint(key, list(opdef.attrs))} (known: {listed})",
                                 key_tok, TypeMismatch)
            spec = opdef.attrs[key]
            v = self.static(value, spec.kind, scope)
            attrs[key] = self.guarded(value, spec.check, name, key, v)
        self.default_attrs(opdef, bool(inputs), attrs)
        return self.op(name_tok, name, inputs, attrs, op_name)

    def check_callable(self, opdef: OpDef, tok: Token) -> None:
        """Reject the ops a ``.tfm`` cannot call: region ops and the ``var.*`` ops."""
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
        """The result(s) of registry op ``kind``, built at ``tok``'s location."""
        with source_location(self.loc(tok)):
            out = self.guarded(tok, _apply_with_literals, kind, inputs, name, attrs)
        if isinstance(out, Operation):
            raise self.error(f"'{kind}' has no result to use", tok, TypeMismatch)
        return out


def _apply_with_literals(kind: str, inputs: Sequence[Any], name: str | None,
                         attrs: dict[str, Any]) -> Any:
    """``apply`` where literal arguments are first constants of their own dtype (integers
    i32, floats f32: ``tf.constant``'s rule), as indices, shapes and paddings need
    (``gather(x, [1, 2])``); an op that refuses them gets them in its tensor operands'
    dtype instead (``maximum(x, 0)``, ``matmul(x, [[1, 2]])``), as TensorFlow converts a
    literal input that shares its type with tensor inputs."""
    literal = [not isinstance(x, (Tensor, Variable)) for x in inputs]
    if any(literal) and not all(literal):
        try:
            own = [constant(x) if lit else x for x, lit in zip(inputs, literal)]
            return apply(kind, *own, name=name, **attrs)
        except TfcError:
            pass  # the op wants the operands' dtype: the constants just made are unused
    return apply(kind, *inputs, name=name, **attrs)


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
