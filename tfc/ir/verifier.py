"""The IR verifier: the invariants every pass may assume and must keep.

Checked for each graph (regions included, each with its own scope):

- SSA: every value is defined once, and every use is of a value defined earlier in the
  same graph or an argument of it. Regions are isolated from above: a region's ops use
  only the region's own arguments and the values its ops define.
- Every op kind is in the registry, its attrs are complete (defaults filled in, as
  ``make_op`` leaves them) and of the kinds its schema says, and re-running the
  registry's type inference gives exactly the op's result types.
- Every op owns exactly the regions its definition names (``region_names``: none for
  all but ``cond``, ``while``, ``scan`` and ``fusion``, whose ``verify_op`` checks their
  signatures).
- Ops that name a variable (a ``var`` attr) name one the module declares, and their
  definition's ``verify_variable`` checks them against its type: ``var.read`` has
  exactly the declared type, an assign's value too (a symbolic dim does not match a
  fixed size), a scatter's updates are rows of it. No variable is assigned twice in one
  graph (``assign_add``/``assign_sub`` and the scatters count as assigns).
- Graph results are defined; result names are unique and as many as the results.
- The ``__init__`` graph, if present, takes no arguments.

Errors are ``VerifyError``s located at the offending op, whose message names the graph,
the op's index in it and its kind, e.g.
``model.py:12: @predict: op 3 'add': uses %h, which is defined later (op 5)``.

An op definition may add its own checks (region signatures, say) by overriding
``OpDef.verify_op(op, module)``, which raises ``TfcError``; the verifier calls it after
the generic checks.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from tfc.errors import TfcError, VerifyError
from tfc.ir.core import INIT_GRAPH, Graph, Module, Op, Value, attr_key
from tfc.ir.registry import lookup, region_count_problem, writes_variable


def verify_module(module: Module, copies: Mapping[int, Graph] | None = None) -> None:
    """Check every graph of ``module`` against its variables; raise ``VerifyError``.

    ``copies`` maps ``id(region)`` to the region of ``module`` it is a copy of
    (``Graph.clone``, renamed: what ``module_from_bytes`` reads a version-2 reference as,
    and tells its caller). A copy of a region that passed in this call is not checked
    again: what is checked of a region is of its ops, attrs, types and result names, which
    a copy has the same of, not of its name or its arguments' names (its own values are
    new, defined once each by the copy). The op that holds copies is checked as any op,
    but for its kind's own checks (``OpDef.verify_op``: region signatures, what a fusion
    may hold), which are of its attrs, types, device and regions: they passed for an op
    with the same attrs, types and device whose regions the copies are of."""
    for name, graph in module.graphs.items():
        if graph.name != name:
            raise VerifyError(f"graph registered as @{name} is named @{graph.name}")
        if name == INIT_GRAPH and graph.args:
            raise VerifyError(
                f"@{INIT_GRAPH} takes no arguments, but has {len(graph.args)} "
                f"({', '.join(graph.arg_names)})")
    checked: dict[tuple, Any] = {}
    for graph in module.graphs.values():
        _GraphVerifier(graph, module, f"@{graph.name}", (), checked, copies or None).run()


def verify_graph(graph: Graph, module: Module | None = None) -> None:
    """Check one graph (and its regions); without ``module``, variables go unchecked
    except that none may be assigned twice."""
    _GraphVerifier(graph, module, f"@{graph.name}", (), {}).run()


def value_name(v: Value) -> str:
    """How a value is named in messages: its name, else where it comes from."""
    if v.name:
        return f"%{v.name}"
    if v.op is None:
        return f"argument {v.index}"
    return f"result {v.index} of '{v.op.kind}'"


class _GraphVerifier:
    """One graph's checks; ``outer`` holds the values defined so far in each enclosing
    graph (for messages only); ``checked`` the type checks passed (``check_types``), by
    the identities of what they depended on: one dict per ``verify_module`` call, whose
    module keeps those objects alive while it lives (an id is not reused meanwhile)."""

    def __init__(self, graph: Graph, module: Module | None, path: str,
                 outer: tuple[set[Value], ...], checked: dict[tuple, Any],
                 copies: Mapping[int, Graph] | None = None,
                 passed: set[int] | None = None) -> None:
        self.graph, self.module, self.path, self.outer = graph, module, path, outer
        self.checked = checked
        # (``verify_module``'s copies, and the ids of the regions that passed: in this
        # call only, while the module keeps them alive)
        self.copies = copies
        self.passed: set[int] = passed if passed is not None else set()
        self.defined: set[Value] = set()
        self.assigned: dict[str, int] = {}

    def fail(self, message: str, op: Op | None = None, index: int | None = None) -> VerifyError:
        where = f"{self.path}: op {index} '{op.kind}'" if op is not None else self.path
        return VerifyError(f"{where}: {message}", op.loc if op is not None else None)

    def run(self) -> None:
        for i, a in enumerate(self.graph.args):
            if a in self.defined:
                raise self.fail(f"argument {i} ({value_name(a)}) is listed twice")
            self.defined.add(a)
        for i, op in enumerate(self.graph.ops):
            self.check_op(i, op)
        self.check_results()

    def check_op(self, i: int, op: Op) -> None:
        defined = self.defined
        inputs, results = op.inputs, op.results
        for v in inputs:
            if v not in defined:
                raise self.fail(self.undefined_use(v), op, i)
        try:
            opdef = lookup(op.kind)
        except TfcError as e:
            raise self.fail(e.message, op, i) from None
        # (the ids of objects the module holds: see the class docstring)
        checked = self.checked
        key = (opdef, id(op.attrs), len(inputs), *[id(v.type) for v in inputs],
               None, *[id(r.type) for r in results])
        if key not in checked:
            self.check_types(i, op, opdef)
            checked[key] = (op.attrs, inputs, results)  # (keeps them alive)
        for j, r in enumerate(results):
            if r.op is not op or r.index != j:
                raise self.fail(f"result {j} ({value_name(r)}) does not point back to this op",
                                op, i)
            if r in defined:
                raise self.fail(f"result {j} ({value_name(r)}) is defined twice", op, i)
        names_variable = checked.get(("names_variable", opdef))  # (of the kind alone)
        if names_variable is None:
            names_variable = checked["names_variable", opdef] = opdef.names_variable()
        if names_variable:
            self.check_var(i, op, opdef)
        want = opdef.region_names  # (region_count_problem's test, inline)
        if want is not None and len(op.regions) != len(want):
            raise self.fail(region_count_problem(op) or "", op, i)
        copies = self.copies
        for k, region in enumerate(op.regions):
            if copies is not None:
                like = copies.get(id(region))
                if like is not None and id(like) in self.passed:
                    continue  # (a copy of a region that passed: see verify_module)
            path = f"{self.path} > op {i} '{op.kind}' region {k}"
            _GraphVerifier(region, self.module, path, (*self.outer, defined),
                           self.checked, copies, self.passed).run()
            if copies is not None:
                self.passed.add(id(region))
        if copies is not None and op.regions:
            # (an op like one that passed, its regions copies of that one's: its own
            # checks, of its attrs, types and regions, pass too; see verify_module)
            done = ("verify_op", key, op.device,
                    *[id(copies.get(id(r), r)) for r in op.regions])
            if done not in checked:
                self.verify_op(i, op, opdef)
                checked[done] = op  # (keeps it alive)
        else:
            self.verify_op(i, op, opdef)
        self.defined.update(op.results)

    def verify_op(self, i: int, op: Op, opdef) -> None:
        try:
            opdef.verify_op(op, self.module)
        except TfcError as e:
            raise self.fail(e.message, op, i) from None

    def undefined_use(self, v: Value) -> str:
        name = value_name(v)
        # where each value of this graph is defined (op index), to tell "later" from "absent"
        position = {r: i for i, op in enumerate(self.graph.ops) for r in op.results}
        if v in position:
            return f"uses {name}, which is defined later (op {position[v]})"
        if any(v in values for values in self.outer):
            return (f"uses {name} from an enclosing graph; regions are isolated from above "
                    f"(pass it in as a region argument)")
        return f"uses {name}, which is not defined in this graph"

    def check_types(self, i: int, op: Op, opdef) -> None:
        missing = [k for k in opdef.attrs if k not in op.attrs]
        if missing:
            raise self.fail(f"attrs are incomplete: missing {', '.join(missing)}", op, i)
        try:
            opdef.check_arity(len(op.inputs))
            full = opdef.check_attrs(op.attrs)
            types = opdef.infer([v.type for v in op.inputs], full)
        except TfcError as e:
            raise self.fail(e.message, op, i) from None
        for k, v in full.items():
            if attr_key(v) != attr_key(op.attrs[k]):
                raise self.fail(f"attr {k}={op.attrs[k]!r} is not in normal form ({v!r})", op, i)
        if types is None:
            return  # declared result types (var.read): checked against the variable below
        declared = [r.type for r in op.results]
        if list(types) != declared:
            raise self.fail(f"result types {_types(declared)} differ from the inferred "
                            f"{_types(types)}", op, i)

    def check_var(self, i: int, op: Op, opdef) -> None:
        name = op.attrs.get("var")
        if not isinstance(name, str):
            raise self.fail("has no 'var' attr naming a variable", op, i)
        if writes_variable(op):
            if name in self.assigned:
                raise self.fail(f"variable @{name} is assigned twice in one graph "
                                f"(also by op {self.assigned[name]})", op, i)
            self.assigned[name] = i
        if self.module is None:
            return
        decl = self.module.variables.get(name)
        if decl is None:
            raise self.fail(f"variable @{name} is not declared in the module", op, i)
        try:
            opdef.verify_variable(op, decl.type)
        except TfcError as e:
            raise self.fail(e.message, op, i) from None

    def check_results(self) -> None:
        g = self.graph
        if len(g.result_names) != len(g.results):
            raise self.fail(f"{len(g.results)} results but {len(g.result_names)} result names")
        seen: set[str] = set()
        for k, (n, v) in enumerate(zip(g.result_names, g.results)):
            if n in seen:
                raise self.fail(f"result name '{n}' is used twice")
            seen.add(n)
            if v not in self.defined:
                raise self.fail(f"result {k} ('{n}'): {self.undefined_use(v)}")


def _types(types: Iterable) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"
