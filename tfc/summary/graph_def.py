"""An entry's IR graph as a TensorFlow ``GraphDef``, for TensorBoard's Graphs dashboard.

One ``NodeDef`` per op (its kind as the node's op, its inputs, its device, its result
types as ``_output_shapes`` and ``T`` attrs, its IR attrs as strings), one per argument
(``Placeholder``), one per variable the entry reads or assigns (``VariableV2``, which its
``var.read`` / ``var.assign`` ops take as an input, so TensorBoard draws the edge) and one
per fetch (``_Retval``). Nodes are named by their value's name where it has one
(``dense/kernel``: TensorBoard folds ``/``-scopes into boxes), else by their kind with a
numeric suffix, as TensorFlow names ops (``matmul``, ``matmul_1``).

Devices are the placement's: a module compiled for several devices (``tfc compile
--devices cpu:0,cpu:1``, or a ``Program`` loaded from it) has every op's device set, and
TensorBoard colours the nodes by device ("Color: Device"). An op without a device (a
module never placed) gets the module's only device, or none. Ops that own regions
(``cond``, ``while``, ``scan``) are one node each; their bodies are not drawn.
"""

from __future__ import annotations

from typing import Any, Mapping

from tfc.errors import TfcError
from tfc.ir import core as ir
from tfc.ir.types import DType, TensorType

_TF_DTYPES = {DType.f16: "DT_HALF", DType.f32: "DT_FLOAT", DType.f64: "DT_DOUBLE",
              DType.i32: "DT_INT32", DType.i64: "DT_INT64", DType.bool: "DT_BOOL"}
_VAR_KINDS_PREFIX = "var."  # var.read, var.assign, var.assign_add ...


def entry_graph(source: Any, entry: str | None = None) -> tuple[ir.Graph, ir.Module | None]:
    """The entry graph (and its module) of a ``Program``, an IR ``Module``, a built
    ``tfc.Graph`` with entries, or an IR ``Graph`` itself. ``entry`` may be left out when
    there is one."""
    if isinstance(source, ir.Graph):
        return source, None
    module = getattr(source, "module", None)  # a runtime Program
    if not isinstance(module, ir.Module):
        module = source if isinstance(source, ir.Module) else None
    if module is None and hasattr(source, "as_module"):  # tfc.Graph
        module = source.as_module()
    if module is None:
        raise TfcError(f"add_graph: expected a Program, an IR Module, a tfc.Graph or an IR "
                       f"Graph, not {type(source).__name__}")
    entries = module.entries
    if entry is None:
        if len(entries) != 1:
            raise TfcError(f"add_graph: the module has {len(entries)} entries "
                           f"({', '.join(entries) or 'none'}); name one")
        entry = next(iter(entries))
    if entry not in entries:
        raise TfcError(f"add_graph: unknown entry '{entry}' (entries: "
                       f"{', '.join(entries) or 'none'})")
    return entries[entry], module


def _shape_proto(t: TensorType) -> Any:
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    return TensorShapeProto(dim=[TensorShapeProto.Dim(size=d if isinstance(d, int) else -1)
                                 for d in t.shape])


def _type_attrs(types: list[TensorType]) -> dict[str, Any]:
    from tensorboard.compat.proto.attr_value_pb2 import AttrValue
    from tensorboard.compat.proto.types_pb2 import DataType
    attrs = {"_output_shapes": AttrValue(list=AttrValue.ListValue(
        shape=[_shape_proto(t) for t in types]))}
    if types:
        attrs["T"] = AttrValue(type=DataType.Value(_TF_DTYPES.get(types[0].dtype,
                                                                  "DT_INVALID")))
    return attrs


def _attr_text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:197] + "..."


class _Names:
    """Unique node names: a value's own name, else its op's kind (``add``, ``add_1``)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, wanted: str) -> str:
        name, i = wanted, 0
        while name in self.used:
            i += 1
            name = f"{wanted}_{i}"
        self.used.add(name)
        return name


def graph_def(graph: ir.Graph, variables: Mapping[str, ir.VariableDecl] | None = None,
              default_device: str | None = None) -> Any:
    """The ``GraphDef`` proto of ``graph`` (see the module docstring)."""
    from tensorboard.compat.proto.attr_value_pb2 import AttrValue
    from tensorboard.compat.proto.graph_pb2 import GraphDef
    from tensorboard.compat.proto.versions_pb2 import VersionDef
    variables = variables or {}
    names = _Names()
    ref: dict[ir.Value, str] = {}
    gd = GraphDef(versions=VersionDef(producer=22))
    device = default_device or ""

    for i, arg in enumerate(graph.args):
        node = gd.node.add(name=names.take(arg.name or f"arg{i}"), op="Placeholder",
                           device=device)
        for k, v in _type_attrs([arg.type]).items():
            node.attr[k].CopyFrom(v)
        ref[arg] = node.name

    var_nodes: dict[str, str] = {}

    def var_node(name: str, op_device: str | None) -> str:
        if name not in var_nodes:
            decl = variables.get(name)
            node = gd.node.add(name=names.take(name), op="VariableV2",
                               device=(decl.device if decl and decl.device else op_device)
                               or device)
            if decl is not None:
                for k, v in _type_attrs([decl.type]).items():
                    node.attr[k].CopyFrom(v)
            var_nodes[name] = node.name
        return var_nodes[name]

    for op in graph.ops:
        inputs = []
        first = op.results[0].name if op.results and op.results[0].name else None
        var = op.attrs.get("var")
        if op.kind.startswith(_VAR_KINDS_PREFIX) and isinstance(var, str):
            inputs.append(var_node(var, op.device))
            first = f"{var}/{op.kind[len(_VAR_KINDS_PREFIX):]}"  # dense/kernel/read
        for v in op.inputs:
            inputs.append(ref.get(v, f"unknown_input_{id(v):x}"))
        node = gd.node.add(name=names.take(first or op.kind), op=op.kind, input=inputs,
                           device=op.device or device)
        for k, v in _type_attrs([r.type for r in op.results]).items():
            node.attr[k].CopyFrom(v)
        for k, v in op.attrs.items():
            node.attr[k].CopyFrom(AttrValue(s=_attr_text(v).encode()))
        if op.loc is not None:
            node.attr["_source"].CopyFrom(AttrValue(s=str(op.loc).encode()))
        for j, r in enumerate(op.results):
            ref[r] = node.name if j == 0 else f"{node.name}:{j}"

    for name, v in zip(graph.result_names, graph.results):
        node = gd.node.add(name=names.take(f"fetch/{name}"), op="_Retval",
                           input=[ref.get(v, "")], device=(v.op.device if v.op else None)
                           or device)
    return gd


def entry_graph_def(source: Any, entry: str | None = None) -> Any:
    """The ``GraphDef`` of ``source``'s entry (``entry_graph``'s arguments)."""
    graph, module = entry_graph(source, entry)
    devices = list(module.devices) if module is not None else []
    return graph_def(graph, module.variables if module is not None else None,
                     devices[0] if len(devices) == 1 else None)
