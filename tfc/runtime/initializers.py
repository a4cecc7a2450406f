"""Variable initializers kept as ops (recipes), not as data.

A variable whose ``__init__`` value is one op computed from its attrs alone (``zeros``,
``ones``, ``fill``, ``range``, the seeded ``random.*`` ops, or a splat ``constant``: what
canonicalize folds ``zeros`` into) needs no stored data: an artifact keeps that op and
the value is computed when the program first needs it. A ``param W: f32[65536, 65536] =
zeros`` is then a one-line op in the artifact, not 16 GiB of ``.npy``. Any other
initializer (a ``constant`` holding the user's array, or a computation over several ops)
is run once and stored as data, as before.

Recipes are evaluated with each op's registry ``reference`` at step 0, the same function
on every backend; the llvm backend's generators are bit for bit the reference's, so the
values equal those the backend's ``__init__`` run computed (``tests/runtime/
test_initializers.py`` checks it for every generator on both backends).
"""

from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np

from tfc.errors import TfcError
from tfc.ir.core import INIT_GRAPH, Graph, Module, Op, VariableDecl
from tfc.ir.interpret import ExecContext
from tfc.ir.printer import is_splat
from tfc.ir.registry import STATEFUL, lookup, writes_variable
from tfc.units import format_bytes

# A variable larger than this that is materialized (from its initializer or a stored
# value) gets a warning naming it and its size: a typo in a shape ([65536, 65536]) should
# not silently take the machine's memory.
LARGE_VARIABLE_BYTES = 1 << 30  # 1 GiB


def is_recipe(op: Op) -> bool:
    """Whether ``op`` computes its value from its attrs alone and is cheap to store: an
    op without inputs, regions or state, and a ``constant`` only when it is a splat."""
    if op.inputs or op.regions or len(op.results) != 1:
        return False
    opdef = lookup(op.kind)
    if opdef.num_inputs != 0 or opdef.has(STATEFUL):
        return False
    if op.kind == "constant":
        value = op.attrs.get("value")
        return isinstance(value, np.ndarray) and _is_splat(value)
    return True


def _is_splat(a: np.ndarray) -> bool:
    """Whether every element of ``a`` equals the first (the printer's rule), checking
    three elements before all of them: a model's real weights are rejected at once."""
    if a.size <= 1:
        return True
    flat = a.reshape(-1)
    return is_splat(flat[[0, flat.size // 2, -1]]) and is_splat(flat)


def recipes(module: Module) -> dict[str, Op]:
    """Each variable whose ``__init__`` value is a recipe op (``is_recipe``), with it."""
    init = module.graphs.get(INIT_GRAPH)
    if init is None:
        return {}
    out: dict[str, Op] = {}
    for op in init.ops:
        if op.kind != "var.assign":
            continue
        name, source = op.attrs["var"], op.inputs[0].op
        if name in module.variables and source is not None and is_recipe(source) \
                and source.results[0].type == module.variables[name].type:
            out[name] = source
    return out


def without_recipes(init: Graph, names: set[str]) -> Graph | None:
    """``init`` without the assigns of ``names`` and the ops only they needed; ``None``
    when nothing that assigns a variable is left."""
    kept = [op for op in init.ops
            if not (writes_variable(op) and op.attrs.get("var") in names)]
    live: set[Op] = set()
    for op in reversed(kept):  # keep what the remaining assigns (and effects) need
        if op in live or writes_variable(op) or lookup(op.kind).has(STATEFUL):
            live.add(op)
            live.update(v.op for v in op.inputs if v.op is not None)
    ops = [op for op in kept if op in live]
    if not any(writes_variable(op) for op in ops):
        return None
    return Graph(init.name, ops=ops).clone()  # passes and backends may change their graph


def recipes_graph(ops: Mapping[str, Op], variables: Mapping[str, VariableDecl]) -> Graph:
    """An ``__init__`` graph that assigns each variable of ``ops`` its recipe."""
    from tfc.ir.registry import make_op
    graph = Graph(INIT_GRAPH)
    made: dict[Op, Op] = {}
    for name, op in ops.items():
        new = made.get(op)
        if new is None:
            new = made[op] = graph.append(op.clone([], []))
        graph.append(make_op("var.assign", [new.results[0]], {"var": name},
                             loc=variables[name].loc))
    graph.set_results([], [])
    return graph


def materialize(decl: VariableDecl, op: Op) -> np.ndarray:
    """The value of ``decl`` from its recipe ``op`` (at step 0, as ``__init__`` runs),
    warning first when it is large."""
    warn_if_large(decl, f"its initializer '{op.kind}'")
    try:
        (value,) = lookup(op.kind).reference(ExecContext({}, 0), [], op.attrs)
    except MemoryError:
        raise TfcError(f"not enough memory for variable @{decl.name} ({decl.type}, "
                       f"{format_bytes(decl.type.nbytes())})", decl.loc) from None
    return np.asarray(value)


def warn_if_large(decl: VariableDecl, source: str) -> None:
    """Warn that ``decl`` is being materialized from ``source`` when it is above
    ``LARGE_VARIABLE_BYTES``."""
    if not decl.type.is_static:
        return
    size = decl.type.nbytes()
    if size > LARGE_VARIABLE_BYTES:
        where = f" ({decl.loc})" if decl.loc is not None else ""
        warnings.warn(f"variable @{decl.name} ({decl.type}) takes {format_bytes(size)} of "
                      f"memory, materialized from {source}{where}", stacklevel=3)
