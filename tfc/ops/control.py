"""Structured control flow: ``cond``, ``while`` and ``scan``, ops that own regions.

Each region is a ``Graph`` isolated from above (MLIR, jaxpr): it sees only its own
arguments, so a value from outside is passed in as an operand. The ops' result types
come from their regions, which the registry's ``infer(inputs, attrs)`` cannot see, so
``infer`` checks the operands and returns None (declared types, like ``var.read``) and
``verify_op`` checks the regions against the operands and the declared results; the
``*_result_types`` helpers compute the types a builder should declare.

- ``cond %pred, %a... (then, else)``: ``pred`` is ``bool[]``; both regions take the
  operands and return the results (same types).
- ``while %v... {max_iterations} (cond, body)``: ``cond(v...) -> bool[]``,
  ``body(v...) -> v...`` with exactly the loop vars' types (TensorFlow's shape
  invariants); more than ``max_iterations`` iterations is an ``ExecutionError``.
- ``scan %carry..., %xs..., %consts... {num_carry, num_xs, reverse, length} (body)``:
  ``body(carry..., x slices..., consts...) -> (new carry..., ys...)``; the results are
  the final carry and the ys stacked along a new leading axis (``jax.lax.scan``).

Region graphs may not touch variables (``var.*``): read outside and pass the value in;
compute assigned values with control flow and assign outside. Gradients: ``cond`` is a
``cond`` of its regions' gradients; ``scan`` is a reverse ``scan`` of the body's
vector-Jacobian product, which recomputes the body on the carries saved by a second
forward ``scan``; ``while`` has none (as in JAX: use ``scan`` with a fixed length).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TfcError, TypeMismatch
from tfc.ir.core import Graph, Op, Value
from tfc.ir.registry import (PURE, AttrSpec, OpDef, lookup, make_op, region_count_problem,
                              register)
from tfc.ir.types import DType, TensorType, dims_compatible

BOOL_SCALAR = TensorType(DType.bool, ())


def _types(types: Sequence[TensorType]) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def _region_ctx(ctx: Any) -> Any:
    """A fresh execution context for a region, sharing the step and the variables."""
    from tfc.ir.interpret import ExecContext
    return ExecContext(getattr(ctx, "variables", {}), getattr(ctx, "step", 0))


def run_region(region: Graph, args: Sequence[np.ndarray], ctx: Any) -> list[np.ndarray]:
    """Run a region graph on ``args`` with the reference interpreter."""
    from tfc.ir.interpret import run_graph
    return run_graph(region, list(args), _region_ctx(ctx))


def check_region(op: Op, index: int, what: str, args: Sequence[TensorType],
                 results: Sequence[TensorType] | None) -> None:
    """Region ``index`` of ``op`` takes ``args`` and returns ``results`` (exactly), and
    touches no variable."""
    if len(op.regions) <= index:
        raise TypeMismatch(f"{op.kind}: has {len(op.regions)} regions, needs a {what} region")
    region = op.regions[index]
    got = [a.type for a in region.args]
    if got != list(args):
        raise TypeMismatch(f"{op.kind}: the {what} region takes {_types(got)}, but the "
                           f"operands are {_types(args)}")
    if results is not None:
        out = [v.type for v in region.results]
        if out != list(results):
            raise TypeMismatch(f"{op.kind}: the {what} region returns {_types(out)}, "
                               f"expected {_types(results)}")
    for inner in region.walk():
        if inner.kind.startswith("var."):
            at = f" (at {inner.loc})" if inner.loc else ""
            raise TypeMismatch(
                f"{op.kind}: the {what} region uses variable @{inner.attrs.get('var')} "
                f"through '{inner.kind}'{at}; regions may not touch variables: read it "
                f"outside and pass the value in, or assign outside the control flow")


def check_region_count(op: Op) -> None:
    """The op's regions are those its definition names (``region_names``)."""
    problem = region_count_problem(op)
    if problem is not None:
        raise TypeMismatch(problem)


def clone_into(src: Graph, dst: Graph, args: Sequence[Value]) -> list[Value]:
    """Copy ``src``'s ops into ``dst`` with its arguments replaced by ``args``; the
    copies of ``src``'s results. (Nested regions are shared, not copied: passes only
    rewrite them in ways that keep their meaning.)"""
    mapping: dict[Value, Value] = dict(zip(src.args, args))
    for op in src.ops:
        new = dst.append(op.clone([mapping[v] for v in op.inputs]))
        mapping.update(zip(op.results, new.results))
    return [mapping[v] for v in src.results]


def _append(b: Any, kind: str, inputs: Sequence[Value], attrs: Mapping[str, Any],
            regions: Sequence[Graph], result_types: Sequence[TensorType]) -> Op:
    """An op with regions, built by a gradient builder (located at the forward op)."""
    op = make_op(kind, inputs, attrs, loc=b.loc, device=b.device, regions=regions,
                 result_types=result_types)
    lookup(kind).verify_op(op, None)
    return b.graph.append(op)


def _vjp_region(name: str, src: Graph, ins: Sequence[TensorType], outs: Sequence[int],
                wrt: Sequence[int], cot_types: Sequence[TensorType]
                ) -> tuple[Graph, list[Any]]:
    """A region ``(src args..., cotangents...) -> ...`` that recomputes ``src`` and
    differentiates results ``outs`` (weighted by the cotangents) w.r.t. args ``wrt``.
    Returns the region (results not yet set) and the gradients (Value or None)."""
    from tfc.ir.autodiff import GradBuilder, gradients
    g = Graph(name)
    args = [g.add_arg(t) for t in ins]
    cots = [g.add_arg(t) for t in cot_types]
    res = clone_into(src, g, args)
    grads = gradients(g, [res[i] for i in outs], [args[i] for i in wrt], cots) if outs \
        else [None] * len(wrt)
    dense = [None if d is None else GradBuilder(g, None).dense(d) for d in grads]
    return g, dense


def _zeros(g: Graph, like: Value, loc: Any = None) -> Value:
    return g.append(make_op("zeros_like", [like], {}, loc=loc)).result


class RegionOp(OpDef):
    """An op owning regions: its reference implementation needs the op itself
    (``reference_op``), which the interpreter prefers to ``reference``."""

    num_inputs = None
    traits = frozenset({PURE})
    region_names: tuple[str, ...] = ()

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        raise TfcError(f"{self.name}: runs through reference_op, which sees its regions")

    def reference_op(self, ctx: Any, op: Op, inputs: Sequence[np.ndarray]
                     ) -> list[np.ndarray]:
        raise NotImplementedError

    def verify_op(self, op: Op, module: Any) -> None:
        raise NotImplementedError


# ---- cond ------------------------------------------------------------------------------

def cond_result_types(then: Graph) -> list[TensorType]:
    """The result types of a ``cond`` whose then-region is ``then``."""
    return [v.type for v in then.results]


@register
class Cond(RegionOp):
    name = "cond"
    region_names = ("then", "else")
    summary = "runs the then or the else region on the operands, as pred says"

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> None:
        if not inputs:
            raise TypeMismatch("cond: needs a predicate")
        if inputs[0] != BOOL_SCALAR:
            raise TypeMismatch(f"cond: the predicate has type {inputs[0]}, expected bool[]")
        return None  # the regions' result types; checked by verify_op

    def verify_op(self, op: Op, module: Any) -> None:
        check_region_count(op)
        results = [r.type for r in op.results]
        operands = [v.type for v in op.inputs[1:]]
        check_region(op, 0, "then", operands, results)
        check_region(op, 1, "else", operands, results)

    def reference_op(self, ctx: Any, op: Op, inputs: Sequence[np.ndarray]
                     ) -> list[np.ndarray]:
        region = op.regions[0] if bool(inputs[0]) else op.regions[1]
        return run_region(region, inputs[1:], ctx)

    def gradient(self, b: Any, op: Op, grads: Sequence[Value | None]) -> list[Any]:
        operands = op.inputs[1:]
        ins = [v.type for v in operands]
        outs = [i for i, g in enumerate(grads) if g is not None]
        wrt = [i for i, v in enumerate(operands) if v.dtype.is_float]
        cots = [g for g in grads if g is not None]  # the gradients at ``outs``
        cot_types = [c.type for c in cots]
        regions, per_branch = [], []
        for k, name in enumerate(("then_grad", "else_grad")):
            g, dense = _vjp_region(name, op.regions[k], ins, outs, wrt, cot_types)
            regions.append(g)
            per_branch.append(dense)
        keep = [j for j in range(len(wrt))
                if per_branch[0][j] is not None or per_branch[1][j] is not None]
        for g, dense in zip(regions, per_branch):
            g.set_results([dense[j] if dense[j] is not None
                           else _zeros(g, g.args[wrt[j]], op.loc) for j in keep])
        if not keep:
            return [None] * len(op.inputs)
        gop = _append(b, "cond", [op.inputs[0], *operands, *cots], {}, regions,
                      [operands[wrt[j]].type for j in keep])
        out: list[Any] = [None] * len(op.inputs)
        for j, r in zip(keep, gop.results):
            out[1 + wrt[j]] = r
        return out


# ---- while -----------------------------------------------------------------------------

@register
class While(RegionOp):
    name = "while"
    region_names = ("cond", "body")
    attrs = {"max_iterations": AttrSpec(
        "int", None, "more iterations than this is an error (none: no limit)")}
    summary = "repeats body on the loop vars while cond holds"

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> None:
        m = attrs["max_iterations"]
        if m is not None and m < 0:
            raise TypeMismatch(f"while: max_iterations={m} is negative")
        return None  # the loop vars' types; checked by verify_op

    def verify_op(self, op: Op, module: Any) -> None:
        check_region_count(op)
        vars_ = [v.type for v in op.inputs]
        results = [r.type for r in op.results]
        if results != vars_:
            raise TypeMismatch(f"while: results {_types(results)} differ from the loop vars "
                               f"{_types(vars_)}")
        check_region(op, 0, "cond", vars_, [BOOL_SCALAR])
        check_region(op, 1, "body", vars_, vars_)

    def reference_op(self, ctx: Any, op: Op, inputs: Sequence[np.ndarray]
                     ) -> list[np.ndarray]:
        cond, body = op.regions
        limit = op.attrs["max_iterations"]
        values = list(inputs)
        n = 0
        while bool(run_region(cond, values, ctx)[0]):
            if limit is not None and n >= limit:
                raise ExecutionError(f"while: the loop ran more than max_iterations={limit} "
                                     "iterations")
            new = run_region(body, values, ctx)
            for i, (a, b) in enumerate(zip(values, new)):
                if a.shape != b.shape:
                    raise ExecutionError(
                        f"while: loop var {i} changed shape from {list(a.shape)} to "
                        f"{list(b.shape)} in iteration {n} (loop vars keep their shapes)")
            values = new
            n += 1
        return values

    def gradient(self, b: Any, op: Op, grads: Sequence[Value | None]) -> list[Any]:
        raise TfcError("gradients through while_loop are not supported (forward-only, as in "
                       "JAX); use tfc.scan with a fixed length", op.loc)


# ---- scan ------------------------------------------------------------------------------

def _split(op_inputs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[list, list, list]:
    nc, nx = attrs["num_carry"], attrs["num_xs"]
    return list(op_inputs[:nc]), list(op_inputs[nc:nc + nx]), list(op_inputs[nc + nx:])


def scan_length(xs: Sequence[TensorType], length: int | None) -> Any:
    """The number of steps: the xs' common leading dim (a static one wins over a symbol),
    or ``length`` when there are no xs."""
    dims = [t.shape[0] for t in xs]
    if length is not None:
        dims.append(length)
    if not dims:
        raise TypeMismatch("scan: needs xs or a length")
    static = [d for d in dims if isinstance(d, int)]
    for d in dims:
        if not dims_compatible(d, dims[0]) or (static and d != static[0] and
                                               isinstance(d, int)):
            raise TypeMismatch(f"scan: xs have different lengths: "
                               f"{', '.join(str(x) for x in dims)}")
    return static[0] if static else dims[0]


def scan_body_arg_types(inputs: Sequence[TensorType], attrs: Mapping[str, Any]
                        ) -> list[TensorType]:
    """The body's argument types: the carry, one slice of each x, the consts."""
    carry, xs, consts = _split(inputs, attrs)
    return [*carry, *(t.with_shape(t.shape[1:]) for t in xs), *consts]


def scan_result_types(inputs: Sequence[TensorType], attrs: Mapping[str, Any],
                      body: Graph) -> list[TensorType]:
    """The results of a ``scan`` with body ``body``: the carry, then the stacked ys."""
    carry, xs, _ = _split(inputs, attrs)
    n = scan_length(xs, attrs.get("length"))
    ys = [v.type for v in body.results[len(carry):]]
    return [*carry, *(t.with_shape((n, *t.shape)) for t in ys)]


@register
class Scan(RegionOp):
    name = "scan"
    region_names = ("body",)
    attrs = {
        "num_carry": AttrSpec("int", doc="how many inputs are the initial carry"),
        "num_xs": AttrSpec("int", doc="how many inputs (after the carry) are scanned over"),
        "reverse": AttrSpec("bool", False, "scan from the last element to the first"),
        "length": AttrSpec("int", None, "the number of steps when there are no xs"),
    }
    summary = "a loop over the leading axis of xs, threading a carry (jax.lax.scan)"

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> None:
        nc, nx = attrs["num_carry"], attrs["num_xs"]
        if nc < 0 or nx < 0 or nc + nx > len(inputs):
            raise TypeMismatch(f"scan: num_carry={nc} and num_xs={nx} do not fit "
                               f"{len(inputs)} inputs")
        _, xs, _ = _split(inputs, attrs)
        for t in xs:
            if t.rank == 0:
                raise TypeMismatch(f"scan: cannot scan over the scalar {t}")
        if attrs["length"] is not None and attrs["length"] < 0:
            raise TypeMismatch(f"scan: length={attrs['length']} is negative")
        scan_length(xs, attrs["length"])
        return None  # the carry and the stacked ys of the body; checked by verify_op

    def verify_op(self, op: Op, module: Any) -> None:
        check_region_count(op)
        ins = [v.type for v in op.inputs]
        nc = op.attrs["num_carry"]
        body = op.regions[0]
        check_region(op, 0, "body", scan_body_arg_types(ins, op.attrs), None)
        out = [v.type for v in body.results]
        if out[:nc] != ins[:nc]:
            raise TypeMismatch(f"scan: the body returns the carry as {_types(out[:nc])}, "
                               f"but it is {_types(ins[:nc])}")
        want = scan_result_types(ins, op.attrs, body)
        got = [r.type for r in op.results]
        if got != want:
            raise TypeMismatch(f"scan: result types {_types(got)} differ from the body's "
                               f"{_types(want)}")

    def reference_op(self, ctx: Any, op: Op, inputs: Sequence[np.ndarray]
                     ) -> list[np.ndarray]:
        carry, xs, consts = _split(inputs, op.attrs)
        lengths = {x.shape[0] for x in xs}
        if op.attrs["length"] is not None:
            lengths.add(op.attrs["length"])
        if len(lengths) != 1:
            raise ExecutionError(f"scan: xs have different lengths {sorted(lengths)}")
        (n,) = lengths
        body = op.regions[0]
        steps = range(n - 1, -1, -1) if op.attrs["reverse"] else range(n)
        # ys[k][t]: the y of step t (None until the step has run)
        ys: list[list[Any]] = [[None] * n for _ in body.results[len(carry):]]
        for t in steps:
            out = run_region(body, [*carry, *(x[t] for x in xs), *consts], ctx)
            carry = out[:len(carry)]
            for k, y in enumerate(out[len(carry):]):
                ys[k][t] = y
        stacked = []
        for k, r in enumerate(op.results[len(carry):]):
            if n:
                stacked.append(np.stack(ys[k]))
            else:  # no steps: an empty stack (symbolic dims of y count as 0)
                shape = [d if isinstance(d, int) else 0 for d in r.type.shape]
                stacked.append(np.zeros(shape, r.type.dtype.np))
        return [*carry, *stacked]

    def gradient(self, b: Any, op: Op, grads: Sequence[Value | None]) -> list[Any]:
        attrs = op.attrs
        nc, nx = attrs["num_carry"], attrs["num_xs"]
        carry, xs, consts = _split(op.inputs, attrs)
        body = op.regions[0]
        ny = len(body.results) - nc
        ins = [v.type for v in op.inputs]
        arg_types = [a.type for a in body.args]

        # 1. the carry before each step, stacked: a forward scan whose ys are its carry in
        saver = Graph("save_carry")
        s_args = [saver.add_arg(t) for t in arg_types]
        s_out = clone_into(body, saver, s_args)
        saver.set_results([*s_out[:nc], *s_args[:nc]])
        fwd_attrs = dict(attrs)
        saved = _append(b, "scan", list(op.inputs), fwd_attrs, [saver],
                        scan_result_types(ins, attrs, saver)).results[nc:]

        # 2. a scan the other way over the body's vector-Jacobian product
        fc = [i for i in range(nc) if carry[i].dtype.is_float]       # float carries
        fk = [i for i in range(len(consts)) if consts[i].dtype.is_float]
        fx = [i for i in range(nx) if xs[i].dtype.is_float]
        gy = [k for k in range(ny) if grads[nc + k] is not None]     # ys with a gradient
        dc0 = [grads[i] if grads[i] is not None else b("zeros_like", op.results[i])
               for i in fc]
        dk0 = [b("zeros_like", consts[i]) for i in fk]
        dys = [grads[nc + k] for k in gy]

        back = Graph("vjp_body")
        a_dc = [back.add_arg(carry[i].type) for i in fc]
        a_dk = [back.add_arg(consts[i].type) for i in fk]
        a_c = [back.add_arg(carry[i].type) for i in range(nc)]
        a_x = [back.add_arg(arg_types[nc + i]) for i in range(nx)]
        a_dy = [back.add_arg(body.results[nc + k].type) for k in gy]
        a_k = [back.add_arg(c.type) for c in consts]
        fargs = [*a_c, *a_x, *a_k]
        res = clone_into(body, back, fargs)
        from tfc.ir.autodiff import GradBuilder, gradients
        ys_ = [res[i] for i in fc] + [res[nc + k] for k in gy]
        wrt = [a_c[i] for i in fc] + [a_x[i] for i in fx] + [a_k[i] for i in fk]
        d = gradients(back, ys_, wrt, [*a_dc, *a_dy]) if ys_ else [None] * len(wrt)
        gb = GradBuilder(back, op)
        dense = [gb.dense(g) if g is not None else _zeros(back, w, op.loc)
                 for g, w in zip(d, wrt)]
        d_c, d_x, d_k = (dense[:len(fc)], dense[len(fc):len(fc) + len(fx)],
                         dense[len(fc) + len(fx):])
        new_dk = [gb("add", acc, g) for acc, g in zip(a_dk, d_k)]
        back.set_results([*d_c, *new_dk, *d_x])

        b_inputs = [*dc0, *dk0, *saved, *xs, *dys, *consts]
        b_attrs = {"num_carry": len(fc) + len(fk), "num_xs": nc + nx + len(gy),
                   "reverse": not attrs["reverse"], "length": attrs["length"]}
        b_types = [v.type for v in b_inputs]
        bop = _append(b, "scan", b_inputs, b_attrs, [back],
                      scan_result_types(b_types, b_attrs, back))
        r = bop.results
        out: list[Any] = [None] * len(op.inputs)
        for j, i in enumerate(fc):
            out[i] = r[j]
        for j, i in enumerate(fk):
            out[nc + nx + i] = r[len(fc) + j]
        for j, i in enumerate(fx):
            out[nc + i] = r[len(fc) + len(fk) + j]
        return out
