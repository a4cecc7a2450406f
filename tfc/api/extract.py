"""Cutting entry graphs out of the graph the Python API built (partial execution).

An entry (or one ``Session.run``) names feeds, fetches and target ops (assigns run for
their effect). Only the ops those need are copied into a fresh IR graph; a fed value
becomes an argument and its producers are cut away, so any tensor can be fed, as in
TensorFlow. The ``__init__`` graph is the same cut, with every variable's initializer as
its targets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from tfc.errors import FeedError, TfcError
from tfc.ir import core as ir
from tfc.ir.registry import writes_variable
from tfc.passes.manager import paused_gc

if TYPE_CHECKING:
    from tfc.api.graph import Graph, Operation, Tensor


def _needed(build: ir.Graph, roots: Sequence[ir.Value], targets: Sequence[ir.Op],
            fed: set[ir.Value]) -> tuple[set[ir.Op], list[ir.Value]]:
    """The ops of ``build`` the roots and targets depend on, and the unfed args reached."""
    ops: set[ir.Op] = set()
    args: list[ir.Value] = []
    stack: list[ir.Value] = list(roots)
    for t in targets:
        if t not in ops:
            ops.add(t)
            stack.extend(t.inputs)
    seen: set[ir.Value] = set()
    while stack:
        v = stack.pop()
        if v in seen or v in fed:
            continue
        seen.add(v)
        if v.op is None:
            args.append(v)
        elif v.op not in ops:
            ops.add(v.op)
            stack.extend(v.op.inputs)
    return ops, args


def needed_placeholders(graph: "Graph", fetches: Sequence["Tensor"],
                        targets: Sequence["Operation"]) -> list["Tensor"]:
    """The placeholders the fetches and targets depend on, in declaration order."""
    from tfc.api.graph import Tensor
    tops = [op for t in targets for op in t.ir_ops()]
    _, args = _needed(graph.ir, [t.value for t in fetches], tops, set())
    return [Tensor(graph, a) for a in sorted(args, key=lambda a: a.index)]


def extract(build: ir.Graph, name: str, feeds: Sequence[tuple[str, ir.Value]],
            fetches: Sequence[tuple[str, ir.Value]], targets: Sequence[ir.Op] = (),
            what: str = "", *, borrow: bool = False) -> ir.Graph:
    """A new graph computing ``fetches`` and running ``targets`` from ``feeds``.

    ``borrow``: a *view* instead, which copies nothing: its ops are ``build``'s own and
    its arguments the fed values themselves (named as they are, not as ``feeds`` says).
    It has the extract's content (the same ops in the same order, so the same encoding
    up to the arguments' names) and signature, for a caller that only reads it (a
    cache key, the feeds' checks: ``Session``) and would rather not copy a deep model's
    ops (a third of a cached compile's cost). It must never be changed, nor lowered (the
    passes work in place: they would change the built graph)."""
    with paused_gc():  # (its ops live on: a collection would find nothing, see paused_gc)
        return _extract(build, name, feeds, fetches, targets, what, borrow)


def _extract(build: ir.Graph, name: str, feeds: Sequence[tuple[str, ir.Value]],
             fetches: Sequence[tuple[str, ir.Value]], targets: Sequence[ir.Op],
             what: str, borrow: bool = False) -> ir.Graph:
    fed = {v for _, v in feeds}
    if len(fed) != len(feeds):
        raise FeedError(f"{what or name}: a tensor is fed twice")
    ops, unfed = _needed(build, [v for _, v in fetches], targets, fed)
    if unfed:
        p = unfed[0]
        need = ", ".join(n for n, _ in fetches) or "the requested operations"
        raise FeedError(f"{what or name}: {need} needs placeholder '{p.name}' of type "
                        f"{p.type}, which is not fed")
    graph = ir.Graph(name)
    if borrow:  # (appended, not given to Graph(): that would claim them as its own)
        graph.args.extend(v for _, v in feeds)
    mapping: dict[ir.Value, ir.Value] = {}
    for feed_name, v in feeds:
        if not borrow:
            mapping[v] = graph.add_arg(v.type, feed_name)
    assigned: dict[str, ir.Op] = {}
    writes: dict[str, bool] = {}  # per kind: writes_variable
    new_ops = graph.ops
    copied = mapping.__getitem__
    for op in build.ops:
        if op not in ops:
            continue
        w = writes.get(op.kind)
        if w is None:
            w = writes[op.kind] = writes_variable(op)
        if w:
            var = op.attrs["var"]
            if var in assigned:
                raise TfcError(f"{what or name}: variable '{var}' is assigned twice in one "
                               f"step (also at {assigned[var].loc})", op.loc)
            assigned[var] = op
        if borrow:
            new_ops.append(op)
            continue
        # regions are copied so that passes over the entry never touch the built graph
        new = op.clone(list(map(copied, op.inputs)),
                       [r.clone() for r in op.regions] if op.regions else None)
        new_ops.append(new)
        mapping.update(zip(op.results, new.results))
    graph.set_results([v for _, v in fetches] if borrow else [mapping[v] for _, v in fetches],
                      [n for n, _ in fetches])
    return graph


def copy_view(view: ir.Graph, feed_names: Sequence[str]) -> ir.Graph:
    """The graph ``extract`` cuts out, made from the view ``extract(borrow=True)`` of the
    same request gave (its ``feeds`` named ``feed_names``): the same ops copied in the
    same order, without walking the built graph again (the view holds what the request
    needs, checked: a copy is what a miss lowers, after the view was its key)."""
    with paused_gc():
        graph = ir.Graph(view.name)
        mapping: dict[ir.Value, ir.Value] = {
            v: graph.add_arg(v.type, n) for v, n in zip(view.args, feed_names)}
        copied = mapping.__getitem__
        new_ops = graph.ops
        for op in view.ops:
            new = op.clone(list(map(copied, op.inputs)),
                           [r.clone() for r in op.regions] if op.regions else None)
            new_ops.append(new)
            mapping.update(zip(op.results, new.results))
        graph.set_results([mapping[v] for v in view.results], list(view.result_names))
        return graph


def build_module(graph: "Graph") -> ir.Module:
    """The module of a built graph: its variables, ``__init__`` and its entries."""
    module = ir.Module()
    for var in graph.variables.values():
        module.variables[var.name] = var.decl
    inits = [op for var in graph.variables.values() for op in var.initializer.ir_ops()]
    if inits:
        module.add_graph(extract(graph.ir, ir.INIT_GRAPH, [], [], inits,
                                 what="variable initializers"))
    for fn in graph.functions:
        fn.export(graph)
    for e in graph.entries.values():
        try:
            g = extract(graph.ir, e.name, [(n, t.value) for n, t in e.feeds.items()],
                        [(n, t.value) for n, t in e.fetches.items()],
                        [op for t in e.targets for op in t.ir_ops()], what=f"entry '{e.name}'")
        except TfcError as err:
            raise err.at(e.loc)
        module.add_graph(g)
    return module
