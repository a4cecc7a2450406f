"""The Functional API: ``tfc.keras.Input`` and ``Functional``, the model that
``tfc.Model(inputs, outputs)`` makes (as Keras's ``Model`` does), on the engine of
``tfc.layers.engine``.

``x = tfc.keras.Input(shape=(784,), name="pixels")`` is a placeholder of the default graph
(batch dim ``B``), layers called on it append their ops at once (graph mode, as TensorFlow
1's Keras), and ``tfc.Model(inputs, outputs)`` takes the placeholders and the tensors they
lead to, one each or lists or dicts of them. Its inference graph is the one the user built;
its training graph (when a layer behaves differently in training: dropout) is the same
layer calls replayed with ``training=True`` (``tfc.layers.nodes``), as ``Sequential`` calls
its layers again, so the three ways of writing one network give the same IR. A layer
called twice is one set of weights.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from tfc.api.graph import Graph, Tensor, as_dtype, get_default_graph, user_location
from tfc.errors import TfcError, TypeMismatch
from tfc.ir import core as ir
from tfc.ir.registry import make_op
from tfc.layers.base import _snake_case
from tfc.layers.engine import Model, _tensors
from tfc.layers.nodes import Node, Ref, flatten, node_of, pack, producer


def Input(shape: Sequence[int | None], dtype: Any = "float32",  # noqa: N802 (Keras)
          name: str | None = None,
          batch_size: int | None = None) -> Tensor:
    """A model input (``tf.keras.Input``): a placeholder ``[B, *shape]`` of the default
    graph (``batch_size`` fixes the batch dim), named ``name`` (by default ``input``,
    ``input_1`` ...); that name is the key of its arrays in ``fit``'s dicts."""
    if isinstance(shape, int):
        shape = (shape,)
    return get_default_graph().placeholder(as_dtype(dtype), [batch_size, *shape],
                                           name or "input")


# ---- structures of tensors and arrays ------------------------------------------------------

def _unique(names: Sequence[str]) -> list[str]:
    """Names made unique with ``_1``, ``_2`` suffixes (two outputs of one layer)."""
    out: list[str] = []
    for n in names:
        name, i = n, 0
        while name in out:
            i += 1
            name = f"{n}_{i}"
        out.append(name)
    return out


def _short(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1]


# ---- the functional graph: which layer calls and ops lead from inputs to outputs ----------

def _producers(graph: Graph, outputs: Sequence[Tensor], stop: set[ir.Value]
               ) -> tuple[list[Node | ir.Op], set[ir.Value]]:
    """The layer calls and the ops outside layers that ``outputs`` depend on, back to the
    values in ``stop`` (the inputs), in the order they were built (a topological order);
    and the placeholders reached. A walk by hand, not recursion: models may be deep."""
    order = {id(op): i for i, op in enumerate(graph.ir.ops)}
    items: dict[int, tuple[tuple[int, int, int], Node | ir.Op]] = {}
    seen: set[ir.Value] = set()
    reached: set[ir.Value] = set()
    todo: list[tuple[ir.Value, Ref | None]] = [(t.value, producer(t, graph)) for t in outputs]
    while todo:
        v, ref = todo.pop()
        if ref is not None:
            node = ref[0]
            if id(node) not in items:
                items[id(node)] = ((node.mark, 0, node.seq), node)
                todo.extend((t.value, p) for t, p in zip(node.inputs, node.producers))
            continue
        if v in seen:
            continue
        seen.add(v)
        if v in stop or v.op is None:
            reached.add(v)
            continue
        index = order.get(id(v.op), len(order))
        items[id(v.op)] = ((index, 1, 0), v.op)
        todo.extend((u, producer(u, graph, index)) for u in v.op.inputs)
    return [item for _, item in sorted(items.values(), key=lambda kv: kv[0])], reached


def _keras_order(graph: Graph, plan: Sequence[Node | ir.Op], outputs: Sequence[Tensor],
                 stop: set[ir.Value]) -> tuple[list[Node | ir.Op], list[Any]]:
    """The plan in the order Keras 3's Functional runs its nodes, and the layers in the
    order of its ``layers`` (so ``get_weights`` lists the weights as Keras's does), from
    Keras's ``map_graph``: a depth-first walk from the outputs (each node after the
    nodes it takes inputs from; each operation numbered when first reached), the depth
    of a node the longest path from it to an output (every node of a shared layer at the
    layer's greatest depth), then the nodes by decreasing depth, within a depth in the
    order the walk gave them a depth, and the layers by decreasing depth, within a depth
    by their number. (Build order differs for branches: a layer shared by two branches
    updates its state in Keras's order, and a tower built last may come first.)"""
    in_plan = {id(item) for item in plan}
    index = {id(op): i for i, op in enumerate(graph.ir.ops)}

    def source(v: ir.Value, ref: Ref | None) -> Node | ir.Op | None:
        item = ref[0] if ref is not None else None if v in stop or v.op is None else v.op
        return item if item is not None and id(item) in in_plan else None

    def parents(item: Node | ir.Op) -> list[Node | ir.Op]:
        if isinstance(item, Node):
            pairs = [(t.value, p) for t, p in zip(item.inputs, item.producers)]
        else:
            at = index.get(id(item), len(index))
            pairs = [(u, producer(u, graph, at)) for u in item.inputs]
        return [src for v, p in pairs if (src := source(v, p)) is not None]

    def operation(item: Node | ir.Op) -> int:
        return id(item.layer) if isinstance(item, Node) else id(item)

    numbers: dict[int, int] = {}  # operation -> when first reached
    finished: set[int] = set()
    walked: list[Node | ir.Op] = []  # each node after its parents (Keras's build_map)
    for t in outputs:
        root = source(t.value, producer(t, graph))
        if root is None or id(root) in finished:
            continue
        numbers.setdefault(operation(root), len(numbers))
        stack = [(root, iter(parents(root)))]
        busy = {id(root)}
        while stack:
            item, todo = stack[-1]
            for p in todo:
                if id(p) not in finished and id(p) not in busy:
                    numbers.setdefault(operation(p), len(numbers))
                    busy.add(id(p))
                    stack.append((p, iter(parents(p))))
                    break
            else:
                stack.pop()
                busy.discard(id(item))
                finished.add(id(item))
                walked.append(item)
    by_id = {id(item): item for item in walked}
    depth: dict[int, int] = {}
    op_depth: dict[int, int] = {}
    for item in reversed(walked):
        d = max(depth.setdefault(id(item), 0), op_depth.get(operation(item), 0))
        op_depth[operation(item)] = depth[id(item)] = d
        for p in parents(item):
            depth[id(p)] = max(d + 1, depth.get(id(p), 0))
    entered = {i: n for n, i in enumerate(depth)}  # the order the walk gave each a depth
    ordered = sorted(entered, key=lambda i: (-depth[i], entered[i]))
    layer_of = {id(item.layer): item.layer for item in walked if isinstance(item, Node)}
    keys = sorted((k for k in op_depth if k in layer_of),
                  key=lambda k: (-op_depth[k], numbers[k]))
    return [by_id[i] for i in ordered], [layer_of[k] for k in keys]


def _replay(graph: Graph, plan: Sequence[Node | ir.Op], inputs: Sequence[Tensor],
            new_inputs: Sequence[Tensor], outputs: Sequence[Tensor], training: bool
            ) -> list[Tensor]:
    """The plan's layer calls made again on ``new_inputs`` (the same layers: shared
    weights) with ``training`` (unless a call was given its own); the ops outside layers
    are copied where one of their inputs changed. Returns the new ``outputs``. Tensors are
    known by the call output they are (a layer that returned its input made a tensor of
    its own), else by their value."""
    env: dict[Any, Tensor] = {a.value: b for a, b in zip(inputs, new_inputs)}
    order = {id(op): i for i, op in enumerate(graph.ir.ops)}
    for item in plan:
        if isinstance(item, Node):
            args = [env.get(p if p is not None else t.value, t)
                    for t, p in zip(item.inputs, item.producers)]
            for i, out in enumerate(item.call_again(args, training)):
                env[(item, i)] = out
            continue
        index = order.get(id(item), len(order))
        keys = [p if p is not None else u
                for u, p in ((u, producer(u, graph, index)) for u in item.inputs)]
        if not any(k in env for k in keys):
            continue  # independent of the inputs (a constant, a variable's read): shared
        values = [env[k].value if k in env else u for k, u in zip(keys, item.inputs)]
        op = make_op(item.kind, values, dict(item.attrs), device=item.device, loc=item.loc,
                     regions=item.regions, result_types=[r.type for r in item.results])
        graph.ir.append(op)
        for old, new in zip(item.results, op.results):
            env[old] = Tensor(graph, new)
    results = []
    for t in outputs:
        p = producer(t, graph)
        results.append(env.get(p if p is not None else t.value, t))
    return results


# ---- the model --------------------------------------------------------------------------

class Functional(Model):
    """A model of layer calls on ``tfc.keras.Input`` placeholders: what
    ``tfc.Model(inputs, outputs)`` makes. ``inputs`` and ``outputs`` are one tensor, a list
    or a dict of them; each output must depend on the inputs only (see ``Model``)."""

    def __init__(self, inputs: Any = None, outputs: Any = None, name: str | None = None
                 ) -> None:
        super().__init__(name=name or ("model" if type(self) is Functional
                                       else _snake_case(type(self).__name__)))
        self._plan: list[Node | ir.Op] = []  # the layer calls and ops __call__ replays
        if inputs is None or outputs is None:
            raise TfcError("tfc.Model needs both inputs and outputs", user_location())
        self._build_functional(inputs, outputs, user_location())

    def _build_functional(self, inputs: Any, outputs: Any, loc: Any) -> None:
        ins, in_keys, self._input_kind = flatten(inputs)
        outs, out_keys, self._output_kind = flatten(outputs)
        ins = _tensors(ins, f"model '{self.name}': inputs", loc)
        outs = _tensors(outs, f"model '{self.name}': outputs", loc)
        if not ins or not outs:
            raise TfcError(f"model '{self.name}' needs at least one input and one output", loc)
        graph = ins[0].graph
        for t in ins + outs:
            if t.graph is not graph:
                raise TfcError(f"model '{self.name}': its inputs and outputs must be in one "
                               f"graph", loc)
        for t in ins:
            if t.value.op is not None:
                raise TfcError(f"model '{self.name}': input {t} is not a placeholder "
                               f"(tfc.keras.Input)", loc)
        self.input_names = in_keys or _unique([_short(t.value.name or "input") for t in ins])
        stop = {t.value for t in ins}
        plan, used = _producers(graph, outs, stop)
        for name, t in zip(out_keys or [""] * len(outs), outs):
            _, reached = _producers(graph, [t], stop)
            described = name or _describe(t)
            strays = [v for v in reached if v not in stop]
            if strays:
                raise TfcError(f"model '{self.name}': output {described} depends on the "
                               f"placeholder '{strays[0].name}', which is not among the "
                               f"model's inputs", loc)
            if not reached & stop:
                raise TfcError(f"model '{self.name}': output {described} is not connected to "
                               f"the model's inputs", loc)
        for name, t in zip(self.input_names, ins):
            if t.value not in used:
                raise TfcError(f"model '{self.name}': input '{name}' is not used by any "
                               f"output (a dangling Input)", loc)
        self.output_names = out_keys or _unique([_output_name(t) for t in outs])
        self._plan, self.layers = _keras_order(graph, plan, outs, stop)
        self.graph = graph
        self.inputs, self.outputs = list(ins), list(outs)
        self.output_type = outs[0].type

    @property
    def uses_training(self) -> bool:
        """Whether the training graph differs: a layer uses ``training``."""
        return any(getattr(layer, "uses_training", False) for layer in self.layers)

    def call(self, inputs: Any, training: bool = False) -> Any:
        """The model's layer calls and ops replayed on ``inputs`` (tensors)."""
        assert self.inputs is not None and self.outputs is not None and self.graph is not None
        leaves, keys, kind = flatten(inputs)
        if kind == "dict":
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise TfcError(f"model '{self.name}': no input named '{missing[0]}' among "
                               f"{sorted(inputs)}", user_location())
            leaves = [inputs[n] for n in self.input_names]
        if len(leaves) != len(self.inputs):
            raise TfcError(f"model '{self.name}' takes {len(self.inputs)} inputs, got "
                           f"{len(leaves)}", user_location())
        from tfc.api.tensor import convert_to_tensor
        new = [convert_to_tensor(t) for t in leaves]
        for n, t, want in zip(self.input_names, new, self.inputs):
            if t.graph is not self.graph:
                raise TfcError(f"model '{self.name}' was built in another graph",
                               user_location())
            if t.dtype != want.dtype or t.type.rank != want.type.rank:
                raise TypeMismatch(f"model '{self.name}': input '{n}' is {want.type}, got "
                                   f"{t.type}", user_location())
        outs = _replay(self.graph, self._plan, self.inputs, new, self.outputs, training)
        return pack(self._output_kind, self.output_names, outs)

    def summary(self, print_fn: Callable[[Any], None] | None = None) -> None:
        """A table of the inputs and layers: output types, parameters, and what each
        layer is connected to."""
        from rich.console import Console
        from rich.table import Table
        assert self.inputs is not None
        table = Table(title=f"Model: {self.name}")
        for col in ("Layer (type)", "Output", "Params", "Connected to"):
            table.add_column(col)
        for name, t in zip(self.input_names, self.inputs):
            table.add_row(f"{name} (InputLayer)", str(t.type), "0", "")
        inputs = {t.value: n for n, t in zip(self.input_names, self.inputs)}
        calls: dict[int, list[Node]] = {}
        for item in self._plan:
            if isinstance(item, Node):
                calls.setdefault(id(item.layer), []).append(item)
        for layer in self.layers:
            nodes = calls[id(layer)]
            inbound = [p[0].layer.name if p is not None else inputs.get(t.value, _describe(t))
                       for n in nodes for t, p in zip(n.inputs, n.producers)]
            table.add_row(f"{layer.name} ({type(layer).__name__})",
                          ", ".join(str(t.type) for t in nodes[0].outputs),
                          f"{layer.count_params():,}", ", ".join(dict.fromkeys(inbound)))
        table.caption = f"Total params: {self.count_params():,}"
        (print_fn or Console().print)(table)


def _describe(t: Tensor) -> str:
    op = t.value.op
    return f"'{t.value.name}'" if op is None else f"{t.type} (made by {op.kind})"


def _output_name(t: Tensor) -> str:
    node = node_of(t)
    if node is not None:
        return _short(node.layer.name)
    return t.value.op.kind if t.value.op is not None else _short(t.value.name or "output")


def _distinct_layers(layers: Any) -> list[Any]:
    out: list[Any] = []
    for layer in layers:
        if not any(layer is other for other in out):
            out.append(layer)
    return out


__all__ = ["Input", "Functional", "Model"]
