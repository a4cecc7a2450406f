"""The printer of the textual IR (docs/ir.md): ``Module`` -> text that parses back exactly.

Printing is deterministic, so print -> parse -> print is the identity on text. Values
print as ``%name`` when a user named them and as ``%0, %1, ...`` otherwise (numbered per
graph; a region numbers afresh because it is isolated from above). Attrs at their
registry defaults are left out; floats print with ``repr`` so that they parse back to the
same bits, and dense tensors with the shortest text that round-trips in their dtype.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Mapping

import numpy as np

from tfc.errors import Location, TfcError, UnknownOp
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl, attr_key, freeze_attr
from tfc.ir.registry import REQUIRED, AttrSpec, lookup
from tfc.ir.types import DType, TensorType

INDENT = "  "
LOC_COLUMN = 52  # trailing '# file:line' comments start at this column when the line allows

_BARE_NAME = re.compile(r"^[A-Za-z0-9_./\-]+$")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIGITS = re.compile(r"^[0-9]+$")


# Display (``tfc ir`` on a terminal, messages) elides tensors of more elements than this.
ELIDE_ELEMENTS = 64
ELIDED = "__elided__"  # the body of an elided tensor: dense<f32[784,512]: __elided__ ...>


def print_module(module: Module, *, elide_above: int | None = None) -> str:
    """The whole module: its target (``target {devices=[...]}``, for a module compiled
    for devices), variable declarations, then the graphs, in dict order.

    ``elide_above`` (for display, as MLIR's ``--mlir-elide-elementsattrs-if-larger``)
    prints each tensor of more elements that are not all equal as
    ``dense<f32[784,512]: __elided__ sha256=1f2e...>``, which the parser refuses with a
    clear error; ``None`` (files, artifacts) prints every element, so the text parses
    back to the same module."""
    parts: list[str] = []
    target = print_target(module)
    if target:
        parts.append(target + "\n")
    if module.variables:
        parts.append("".join(print_var(v) + "\n" for v in module.variables.values()))
    parts.extend(print_graph(g, elide_above=elide_above) for g in module.graphs.values())
    return "\n".join(parts)


def print_target(module: Module) -> str:
    """``target {devices=["/cpu:0", "/cpu:1"], fp16_transfers=true}``: what the module is
    compiled for; empty for the default (one device, f32 transfers)."""
    attrs: dict[str, Any] = {}
    if module.devices:
        attrs["devices"] = list(module.devices)
    if module.fp16_transfers:
        attrs["fp16_transfers"] = True
    if not attrs:
        return ""
    return "target {" + ", ".join(f"{k}={format_attr(v)}" for k, v in attrs.items()) + "}"


def print_partitions(module: Module) -> str:
    """The partition tables of ``module``'s entries (``module.partitions``, each
    ``PartitionTable.describe()``) as ``//`` comment lines, to print after the module as
    ``print_memory_plans``: what each device's stages receive, run and send. Empty when
    no entry was partitioned."""
    out = []
    for entry, table in module.partitions.items():
        graph = module.graphs.get(entry)
        names = graph.result_names if graph is not None else []
        out.append("\n" + "".join(f"// {line}\n" for line in table.describe(names)))
    return "".join(out)


def print_memory_plans(module: Module) -> str:
    """The memory pass's plans of ``module``'s graphs (``module.memory_plans``, each
    ``MemoryPlan.report()``) as ``//`` comment lines, to print after the module: the
    parser skips them, so the text stays parseable. Empty when no graph was planned.
    One function for ``tfc ir`` and the FileCheck tests, so the tests check what users see."""
    reports = [plan.report() for name, plan in module.memory_plans.items()
               if name in module.graphs]
    return "".join("\n" + "".join(f"// {line}".rstrip() + "\n" for line in r.splitlines())
                   for r in reports)


def print_var(var: VariableDecl) -> str:
    """``var @NAME : TYPE [{device=..., trainable=false}] [# LOC]``."""
    attrs: dict[str, Any] = {}
    if var.device is not None:
        attrs["device"] = var.device
    if not var.trainable:
        attrs["trainable"] = False
    line = f"var {symbol_ref(var.name)} : {var.type}"
    if attrs:
        line += " {" + ", ".join(f"{attr_name(k)}={format_attr(v)}"
                                 for k, v in attrs.items()) + "}"
    return _with_loc(line, var.loc)


def print_graph(graph: Graph, indent: str = "", *, elide_above: int | None = None) -> str:
    """``graph @NAME(%arg: TYPE, ...) -> (name: TYPE, ...) { ... }`` ending in a newline
    (``elide_above``: as for ``print_module``)."""
    out: list[str] = []
    _GraphPrinter(out, elide_above).graph(graph, indent)
    return "".join(out)


def print_op(op: Op, names: Mapping[Value, str] | None = None) -> str:
    """One op on one line (regions included, on further lines), for messages and debugging:
    tensors of more than ``ELIDE_ELEMENTS`` elements are elided.

    ``names`` maps values to their printed names (``%x``); results it lacks print as
    ``%?`` and operands it lacks as ``%<undefined ...>``.
    """
    out: list[str] = []
    p = _GraphPrinter(out, ELIDE_ELEMENTS)
    p.op(op, dict(names or {}), "")
    return "".join(out).rstrip("\n")


# ---- names -----------------------------------------------------------------------------

def symbol_ref(name: str) -> str:
    """``@name`` of a graph or variable; quoted when it has other characters."""
    return "@" + _name_text(name)


def value_ref(name: str) -> str:
    return "%" + _name_text(name)


def result_name(name: str) -> str:
    return _name_text(name)


def attr_name(name: str) -> str:
    return name if _WORD.match(name) else json.dumps(name)


def _name_text(name: str) -> str:
    return name if _BARE_NAME.match(name) else json.dumps(name)


class _Namer:
    """Printed names of one graph's values: user names kept (made unique), others numbered."""

    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def define(self, v: Value) -> str:
        name = v.name
        if not name or _DIGITS.match(name):
            text = str(self.counter)
            self.counter += 1
        else:
            text = name
            if text in self.used:
                i = 1
                while f"{name}_{i}" in self.used:
                    i += 1
                text = f"{name}_{i}"
            self.used.add(text)
        ref = value_ref(text)
        self.names[v] = ref
        return ref


# ---- graphs and ops ----------------------------------------------------------------------

class _GraphPrinter:
    """Appends the text of graphs and ops to ``out`` (a list of strings joined once)."""

    def __init__(self, out: list[str], elide_above: int | None = None) -> None:
        self.out = out
        self.elide_above = elide_above

    def graph(self, graph: Graph, indent: str) -> None:
        namer = _Namer()
        args = ", ".join(f"{namer.define(a)}: {a.type}" for a in graph.args)
        names = list(graph.result_names) + [
            f"out{i}" for i in range(len(graph.result_names), len(graph.results))]
        results = ", ".join(f"{result_name(n)}: {v.type}"
                            for n, v in zip(names, graph.results))
        self.out.append(f"{indent}graph {symbol_ref(graph.name)}({args}) -> ({results}) {{\n")
        inner = indent + INDENT
        for op in graph.ops:
            self.op(op, namer.names, inner, namer)
        ret = ", ".join(_use(namer.names, v) for v in graph.results)
        self.out.append(f"{inner}return {ret}\n" if ret else f"{inner}return\n")
        self.out.append(f"{indent}}}\n")

    def op(self, op: Op, names: dict[Value, str], indent: str,
           namer: _Namer | None = None) -> None:
        spec = _attr_specs(op.kind)
        attrs = dict(op.attrs)
        head: str | None = None
        if isinstance(attrs.get("var"), str) and _kind_of(spec, "var") in ("var", None):
            head = symbol_ref(attrs.pop("var"))
        elif isinstance(attrs.get("value"), np.ndarray) and \
                _kind_of(spec, "value") in ("tensor", None):
            head = format_tensor(attrs.pop("value"), self.elide_above)
        parts: list[str] = []
        if op.results:
            defs = [namer.define(r) if namer else names.get(r, "%?") for r in op.results]
            parts.append(", ".join(defs) + " =")
        parts.append(op.kind)
        args = [head] if head is not None else []
        args += [_use(names, v) for v in op.inputs]
        if args:
            parts.append(", ".join(args))
        shown = {k: v for k, v in attrs.items() if not _is_default(spec, k, v)}
        if shown:
            parts.append("{" + ", ".join(
                f"{attr_name(k)}={format_attr(v, _kind_of(spec, k), self.elide_above)}"
                for k, v in sorted(shown.items())) + "}")
        if op.results:
            parts.append(": " + ", ".join(str(r.type) for r in op.results))
        line = indent + " ".join(parts)
        if op.regions:
            self.out.append(line + " (\n")
            for r in op.regions:
                self.graph(r, indent + INDENT)
            line = indent + ")"
        if op.device is not None:
            line += f" on {json.dumps(op.device)}"
        self.out.append(_with_loc(line, op.loc) + "\n")


def _use(names: Mapping[Value, str], v: Value) -> str:
    # A value not defined in this graph (broken IR, or one from above a region) still
    # prints, so that a dump of invalid IR is readable; it does not parse back.
    return names.get(v) or f"%<undefined {v.name or ''}:{v.type}>"


def _with_loc(line: str, loc: Location | None) -> str:
    if loc is None:
        return line
    return f"{line:<{LOC_COLUMN}}  # {loc}"


def _attr_specs(kind: str) -> Mapping[str, AttrSpec] | None:
    try:
        return lookup(kind).attrs
    except UnknownOp:
        return None


def _kind_of(spec: Mapping[str, AttrSpec] | None, name: str) -> str | None:
    if spec is None or name not in spec:
        return None
    return spec[name].kind


def _is_default(spec: Mapping[str, AttrSpec] | None, name: str, value: Any) -> bool:
    if spec is None or name not in spec or spec[name].default is REQUIRED:
        return False
    return attr_key(freeze_attr(spec[name].default)) == attr_key(value)


# ---- attribute values -------------------------------------------------------------------

def format_attr(v: Any, kind: str | None = None, elide_above: int | None = None) -> str:
    """One attr value. ``kind`` ``shape`` prints symbols bare: ``[B, 784]``, ``[?, 3]``;
    ``elide_above``: as for ``format_tensor``."""
    if kind == "shape" and isinstance(v, (tuple, list)):
        return "[" + ", ".join(_format_dim(d) for d in v) + "]"
    if v is None:
        return "none"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return format_float(float(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, DType):
        return v.value
    if isinstance(v, np.ndarray):
        return format_tensor(v, elide_above)
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(format_attr(x, elide_above=elide_above) for x in v) + "]"
    raise TfcError(f"cannot print attr value {v!r} of type {type(v).__name__}")


def _format_dim(d: Any) -> str:
    if isinstance(d, str):
        return d if d == "?" or _WORD.match(d) else json.dumps(d)
    return format_attr(d)


def format_float(x: float) -> str:
    """``repr``: the shortest text that parses back to the same double; always has a point
    or an exponent (``1.0``, ``1e-05``) or is ``inf``, ``-inf``, ``nan``."""
    if math.isnan(x):
        return "nan"
    return repr(x)


def format_tensor(a: np.ndarray, elide_above: int | None = None) -> str:
    """``dense<f32[2,2]: 1.0, 2.0, 3.0, 4.0>``, or one element when all are equal (NaN-aware,
    -0.0 distinct from 0.0); ``dense<f32[0]>`` when there are no elements. A tensor of
    more than ``elide_above`` elements that is not a splat prints as ``dense<f32[784,512]:
    __elided__ sha256=HASH>`` (the first 16 hex digits of the SHA-256 of its bytes, so
    equal tensors show equal hashes): display only, it does not parse."""
    try:
        dtype = DType.from_numpy(a.dtype)
    except TfcError:
        raise TfcError(f"cannot print a tensor attr of numpy dtype {a.dtype}") from None
    head = f"dense<{TensorType(dtype, a.shape)}"
    if a.size == 0:
        return head + ">"
    flat = a.reshape(-1)
    if is_splat(flat):
        flat = flat[:1]
    elif elide_above is not None and flat.size > elide_above:
        digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]
        return f"{head}: {ELIDED} sha256={digest}>"
    return f"{head}: {', '.join(format_elements(flat))}>"


def is_splat(flat: np.ndarray) -> bool:
    """Whether every element prints like the first (NaNs equal; -0.0 and 0.0 differ)."""
    first = flat[0]
    if flat.dtype.kind == "f":
        same = (flat == first) & (np.signbit(flat) == np.signbit(first))
        if np.isnan(first):
            same = np.isnan(flat)
        return bool(np.all(same))
    return bool(np.all(flat == first))


def format_elements(flat: np.ndarray) -> list[str]:
    """Each element's text: the shortest that parses back (through float64) to the same
    value of the tensor's dtype; ``true``/``false`` for bool."""
    if flat.dtype == np.bool_:
        return ["true" if b else "false" for b in flat.tolist()]
    if flat.dtype.kind in "iu":
        return [str(x) for x in flat.tolist()]
    texts = flat.astype(str)
    back = texts.astype(np.float64).astype(flat.dtype)
    bad = ~((back == flat) & (np.signbit(back) == np.signbit(flat)) |
            (np.isnan(back) & np.isnan(flat)))
    out = texts.tolist()
    # A fallback never needed so far: the double's repr is exact for any f16/f32 value.
    for i in np.flatnonzero(bad):
        out[i] = format_float(float(flat[i]))
    return out
