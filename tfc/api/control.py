"""``tfc.cond``, ``tfc.while_loop`` and ``tfc.scan``: Python functions traced into regions.

Each function runs once on symbolic tensors in a ``RegionGraph``, a graph whose ops go
into a region (``tfc.ops.control``). Regions are isolated from above, so a tensor of an
enclosing graph used inside (a weight, a placeholder, a variable's value) is captured:
it becomes a new region argument, bound to an extra operand of the control-flow op
(``cond``: an operand of both branches; ``while``: a loop var passed through unchanged;
``scan``: a const). Captures chain through nested control flow (a ``cond`` inside a
``scan`` body captures into the body, which captures from the outer graph).

Loop vars, elems and results may be a tensor or nested lists / tuples / dicts of them;
results come back in the same structure. Variables cannot be created, assigned or
read by a new ``var.read`` inside: their values are captured like any tensor, and
assigns belong outside the control flow (compute the new value with it).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, cast

from tfc.api.graph import Graph, Tensor, get_default_graph, user_location
from tfc.api.tensor import binary_op, apply, convert_to_tensor
from tfc.errors import Location, TfcError, TypeMismatch
from tfc.ir import core as ir
from tfc.ir.registry import lookup, make_op
from tfc.ir.types import DType, TensorType
from tfc.ops.control import RegionOp, scan_body_arg_types, scan_result_types

# ---- structures (a small pytree) ---------------------------------------------------------


def _flatten(x: Any) -> tuple[list[Any], Any]:
    """Leaves of nested lists / tuples / dicts, and a tree to rebuild them with."""
    if isinstance(x, (list, tuple)):
        parts = [_flatten(v) for v in x]
        return [leaf for p, _ in parts for leaf in p], (type(x), [t for _, t in parts])
    if isinstance(x, dict):
        keys = list(x)
        parts = [_flatten(x[k]) for k in keys]
        return [leaf for p, _ in parts for leaf in p], (dict, keys, [t for _, t in parts])
    return [x], None


def _count(tree: Any) -> int:
    if tree is None:
        return 1
    return sum(_count(t) for t in tree[-1])


def _unflatten(tree: Any, leaves: Sequence[Any]) -> Any:
    if tree is None:
        return leaves[0]
    out, i = [], 0
    for t in tree[-1]:
        n = _count(t)
        out.append(_unflatten(t, leaves[i:i + n]))
        i += n
    if tree[0] is dict:
        return dict(zip(tree[1], out))
    kind = tree[0]
    return kind(*out) if hasattr(kind, "_fields") else kind(out)


def _same_tree(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if a[0] is dict or b[0] is dict:
        return a[0] is b[0] and a[1] == b[1] and len(a[-1]) == len(b[-1]) and all(
            _same_tree(x, y) for x, y in zip(a[-1], b[-1]))
    return len(a[-1]) == len(b[-1]) and all(_same_tree(x, y) for x, y in zip(a[-1], b[-1]))


# ---- region graphs ---------------------------------------------------------------------


class RegionGraph(Graph):
    """A graph traced into a region of a control-flow op, capturing outer tensors.

    Scopes, devices, op names and seeds are shared with the graph being built, so a
    region's ops are named and seeded as if built in line."""

    def __init__(self, parent: Graph, name: str) -> None:
        super().__init__()
        self.parent = parent
        self.ir = ir.Graph(name)
        for attr in ("variables", "entries", "functions", "seed", "_scopes", "_devices",
                     "_used_names", "_name_suffixes", "_seeds", "_symbols",
                     "variable_scopes", "used_variable_scopes", "collections"):
            setattr(self, attr, getattr(parent, attr))
        self.captured: list[ir.Value] = []            # values of the parent, in order
        self.capture_args: dict[ir.Value, ir.Value] = {}  # parent value -> region arg

    def encloses(self, other: Graph) -> bool:
        return other is self or self.parent.encloses(other)

    def capture(self, t: Tensor) -> ir.Value:
        """``t``'s value inside this region (a new region argument for an outer one)."""
        if t.graph is self:
            return t.value
        if not self.encloses(t.graph):
            raise TfcError(f"{t} is from another graph", user_location())
        outer = value_in(self.parent, t)
        arg = self.capture_args.get(outer)
        if arg is None:
            arg = self.ir.add_arg(outer.type, outer.name)
            self.capture_args[outer] = arg
            self.captured.append(outer)
        return arg

    def create_op(self, kind: str, inputs: Sequence[Tensor], attrs: dict[str, Any], *,
                  name: str | None = None, result_types: Sequence[TensorType] | None = None,
                  loc: Location | None = None, device: str | None = None) -> ir.Op:
        loc = loc or user_location()
        if kind.startswith("var."):
            raise TfcError(f"{kind}: variables cannot be created, read anew or assigned "
                           "inside a tfc.cond / while_loop / scan function; use their "
                           "values (captured automatically) and assign outside", loc)
        op = make_op(kind, [self.capture(t) for t in inputs], attrs,
                     device=device or self.current_device, loc=loc,
                     names=[self.unique_name(name)] if name else (), result_types=result_types)
        return self.ir.append(op)

    def placeholder(self, dtype: Any, shape: Any, name: str | None = None) -> Tensor:
        raise TfcError("placeholders cannot be created inside a tfc.cond / while_loop / "
                       "scan function", user_location())


def value_in(g: Graph, t: Tensor) -> ir.Value:
    """The IR value of ``t`` usable by ops of ``g`` (captured if ``g`` is a region)."""
    if isinstance(g, RegionGraph):
        return g.capture(t)
    if t.graph is not g:
        raise TfcError(f"{t} is from another graph", user_location())
    return t.value


def _ancestors(g: Graph) -> list[Graph]:
    out = [g]
    while isinstance(out[-1], RegionGraph):
        out.append(out[-1].parent)
    return out


def _trace(parent: Graph, name: str, fn: Callable[..., Any], arg_types: Sequence[TensorType],
           call: Callable[[Callable[..., Any], list[Tensor]], Any], what: str,
           loc: Location | None) -> tuple[RegionGraph, list[ir.Value], Any]:
    """Run ``fn`` (through ``call``, which unpacks the argument tensors) in a new region
    of ``parent``; the region, its result values and the result structure."""
    rg = RegionGraph(parent, name)
    args = [Tensor(rg, rg.ir.add_arg(t)) for t in arg_types]
    watched = [(g, len(g.ir.ops)) for g in _ancestors(parent)]
    with rg.as_default():
        result = call(fn, args)
        leaves, tree = _flatten(result)
        values = []
        for leaf in leaves:
            if leaf is None:
                raise TypeMismatch(f"{what}: the function returned None where a tensor is "
                                   "expected", loc)
            values.append(rg.capture(convert_to_tensor(leaf)))
    for g, n in watched:
        if len(g.ir.ops) != n:
            stray = g.ir.ops[n]
            del g.ir.ops[n:]  # leave the enclosing graph as it was
            raise TfcError(f"{what}: the function built ops outside its own region (an "
                           f"assign, say: '{stray.kind}'); assigns inside control flow are "
                           "not supported: compute the value and assign outside",
                           stray.loc or loc)
    return rg, values, tree


def _finish(regions: Sequence[RegionGraph], n_explicit: Sequence[int]
            ) -> tuple[list[ir.Graph], list[ir.Value]]:
    """Give every region one argument per value captured by any of them (after its
    explicit arguments, in one order); the new region graphs and the captured values."""
    union: list[ir.Value] = []
    for r in regions:
        union.extend(v for v in r.captured if v not in union)
    out = []
    for r, n in zip(regions, n_explicit):
        args = list(r.ir.args[:n])
        for v in union:
            a = r.capture_args.get(v)
            args.append(a if a is not None else ir.Value(v.type, None, 0, v.name))
        out.append(ir.Graph(r.ir.name, args, r.ir.ops, r.ir.results, r.ir.result_names))
    return out, union


def _emit(g: Graph, kind: str, inputs: Sequence[ir.Value], attrs: dict[str, Any],
          regions: Sequence[ir.Graph], result_types: Sequence[TensorType],
          loc: Location | None) -> ir.Op:
    """Append a control-flow op to ``g`` (whose values ``inputs`` are), verified."""
    op = make_op(kind, inputs, attrs, device=g.current_device, loc=loc, regions=regions,
                 result_types=result_types)
    try:
        cast(RegionOp, lookup(kind)).verify_op(op, None)  # kind: cond, while or scan
    except TfcError as e:
        raise e.at(loc)
    return g.ir.append(op)


def _types(values: Sequence[ir.Value]) -> str:
    return "(" + ", ".join(str(v.type) for v in values) + ")"


# ---- cond ------------------------------------------------------------------------------


def cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any],
         name: str | None = None) -> Any:
    """``true_fn()`` if ``pred`` else ``false_fn()`` (``tf.cond``); both are traced, and
    must return the same structure of tensors with the same types."""
    loc = user_location()
    g = get_default_graph()
    p = convert_to_tensor(pred)
    if p.type != TensorType(DType.bool, ()):
        raise TypeMismatch(f"cond: pred has type {p.type}, expected bool[]", loc)
    p_value = value_in(g, p)

    def call(fn: Callable[[], Any], args: list[Tensor]) -> Any:
        return fn()

    then, t_vals, t_tree = _trace(g, "then", true_fn, [], call, "cond (true_fn)", loc)
    else_, e_vals, e_tree = _trace(g, "else", false_fn, [], call, "cond (false_fn)", loc)
    if not _same_tree(t_tree, e_tree) or len(t_vals) != len(e_vals):
        raise TypeMismatch("cond: true_fn and false_fn return different structures", loc)
    if [v.type for v in t_vals] != [v.type for v in e_vals]:
        raise TypeMismatch(f"cond: true_fn returns {_types(t_vals)} but false_fn returns "
                           f"{_types(e_vals)}", loc)
    then.ir.set_results(t_vals)
    else_.ir.set_results(e_vals)
    regions, captured = _finish([then, else_], [0, 0])
    op = _emit(g, "cond", [p_value, *captured], {}, regions, [v.type for v in t_vals], loc)
    if name:
        for r in op.results:
            r.name = g.unique_name(name)
    return _unflatten(t_tree, [Tensor(g, r) for r in op.results]) if t_vals else None


# ---- while_loop ------------------------------------------------------------------------


def while_loop(cond: Callable[..., Any], body: Callable[..., Any], loop_vars: Any,
               maximum_iterations: Any = None, name: str | None = None) -> Any:
    """``while cond(*loop_vars): loop_vars = body(*loop_vars)`` (``tf.while_loop``);
    returns the final loop vars in ``loop_vars``' structure.

    ``body`` must return the loop vars with exactly their types (TensorFlow's shape
    invariants). With ``maximum_iterations`` the loop stops after that many iterations,
    as in TensorFlow (an i32 counter runs alongside). Gradients do not flow through it:
    use ``tfc.scan`` for a differentiable loop of fixed length."""
    loc = user_location()
    g = get_default_graph()
    single = not isinstance(loop_vars, (list, tuple))
    structure = [loop_vars] if single else loop_vars
    leaves, tree = _flatten(structure)
    with g.as_default():
        tensors = [convert_to_tensor(v) for v in leaves]
    counted = maximum_iterations is not None
    if counted:
        with g.as_default():
            tensors.insert(0, convert_to_tensor(0, DType.i32))
    values = [value_in(g, t) for t in tensors]
    types = [v.type for v in values]
    skip = 1 if counted else 0

    def call_cond(fn: Callable[..., Any], args: list[Tensor]) -> Any:
        user = fn(*_unflatten(tree, args[skip:]))
        ut = convert_to_tensor(user)
        if ut.type != TensorType(DType.bool, ()):
            raise TypeMismatch(f"while_loop: cond returns {ut.type}, expected bool[]", loc)
        if counted:
            return binary_op("logical_and", binary_op("less", args[0], maximum_iterations), ut)
        return ut

    def call_body(fn: Callable[..., Any], args: list[Tensor]) -> Any:
        out = fn(*_unflatten(tree, args[skip:]))
        if single or (len(structure) == 1 and not isinstance(out, (list, tuple))):
            out = [out]  # also a bare tensor for a one-var list, as TensorFlow allows
        out = list(out) if isinstance(out, tuple) else out
        out_leaves, out_tree = _flatten(out)
        if len(out_leaves) != len(leaves) or not _same_tree(tree, out_tree):
            raise TypeMismatch(f"while_loop: body returns {len(out_leaves)} values in another "
                               f"structure than the {len(leaves)} loop vars", loc)
        conv = [convert_to_tensor(o, t.dtype if not isinstance(o, Tensor) else None)
                for o, t in zip(out_leaves, types[skip:])]
        for i, (c, t) in enumerate(zip(conv, types[skip:])):
            if c.type != t:
                raise TypeMismatch(f"while_loop: body returns loop var {i} as {c.type}, but "
                                   f"it is {t} (loop vars keep their types)", loc)
        if counted:
            conv.insert(0, args[0] + 1)
        return conv

    c_rg, c_vals, _ = _trace(g, "cond", cond, types, call_cond, "while_loop (cond)", loc)
    b_rg, b_vals, _ = _trace(g, "body", body, types, call_body, "while_loop (body)", loc)
    c_rg.ir.set_results(c_vals)
    b_rg.ir.set_results(b_vals)
    (c_ir, b_ir), captured = _finish([c_rg, b_rg], [len(types), len(types)])
    b_ir.set_results([*b_ir.results, *b_ir.args[len(types):]])
    all_types = types + [v.type for v in captured]
    limit = maximum_iterations if isinstance(maximum_iterations, int) else None
    op = _emit(g, "while", [*values, *captured], {"max_iterations": limit}, [c_ir, b_ir],
               all_types, loc)
    outs = [Tensor(g, r) for r in op.results[skip:len(types)]]
    if name:
        for t in outs:
            t.value.name = g.unique_name(name)
    result = _unflatten(tree, outs)
    return result[0] if single else result


# ---- scan ------------------------------------------------------------------------------


def scan(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any = None,
         reverse: bool = False, name: str | None = None) -> Any:
    """``tf.scan``: ``a = fn(a, x)`` for each ``x`` along the leading axis of ``elems``,
    returning every ``a`` stacked (in the elems' order, also with ``reverse``). Without
    ``initializer`` the first element (the last, with ``reverse``) starts the
    accumulation and is the output's first (last) row. Differentiable: ``tfc.gradients``
    flows through it (a reverse scan of the function's derivative)."""
    loc = user_location()
    g = get_default_graph()
    x_leaves, x_tree = _flatten(elems)
    with g.as_default():
        xs = [convert_to_tensor(x) for x in x_leaves]
        for x in xs:
            if x.type.rank == 0:
                raise TypeMismatch(f"scan: cannot scan over the scalar {x.type}", loc)
        first = None
        if initializer is None:
            edge = -1 if reverse else 0
            first = [x[edge] for x in xs]
            xs = [x[:-1] if reverse else x[1:] for x in xs]
            initializer = _unflatten(x_tree, first)
        c_leaves, c_tree = _flatten(initializer)
        carry = [convert_to_tensor(c) for c in c_leaves]
    c_vals = [value_in(g, t) for t in carry]
    x_vals = [value_in(g, t) for t in xs]
    nc, nx = len(c_vals), len(x_vals)
    attrs = {"num_carry": nc, "num_xs": nx, "reverse": bool(reverse), "length": None}
    arg_types = scan_body_arg_types([v.type for v in [*c_vals, *x_vals]], attrs)

    def call(f: Callable[..., Any], args: list[Tensor]) -> Any:
        out = f(_unflatten(c_tree, args[:nc]), _unflatten(x_tree, args[nc:]))
        o_leaves, o_tree = _flatten(out)
        if not _same_tree(o_tree, c_tree) or len(o_leaves) != nc:
            raise TypeMismatch("scan: fn returns another structure than the initializer",
                               loc)
        conv = [convert_to_tensor(o, v.type.dtype if not isinstance(o, Tensor) else None)
                for o, v in zip(o_leaves, c_vals)]
        for i, (o, v) in enumerate(zip(conv, c_vals)):
            if o.type != v.type:
                raise TypeMismatch(f"scan: fn returns accumulator {i} as {o.type}, but the "
                                   f"initializer is {v.type}", loc)
        return conv + conv  # the new carry, and the same as this step's output

    rg, vals, _ = _trace(g, "body", fn, arg_types, call, "scan (fn)", loc)
    rg.ir.set_results(vals)
    (body,), consts = _finish([rg], [nc + nx])
    inputs = [*c_vals, *x_vals, *consts]
    types = scan_result_types([v.type for v in inputs], attrs, body)
    op = _emit(g, "scan", inputs, attrs, [body], types, loc)
    ys = [Tensor(g, r) for r in op.results[nc:]]
    if first is not None:
        with g.as_default():
            rows = [apply("expand_dims", f, axis=0) for f in first]
            ys = [apply("concat", y, r, axis=0) if reverse else apply("concat", r, y, axis=0)
                  for y, r in zip(ys, rows)]
    if name:
        for t in ys:
            t.value.name = g.unique_name(name)
    return _unflatten(c_tree, ys)
