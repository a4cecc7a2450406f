"""The TF1-style graph the Python API builds into: tensors, operations, variables, scopes.

Every op a user creates is appended, type-checked, to one IR graph (``Graph.ir``) whose
arguments are the placeholders. Nothing runs while building. Entry points, sessions and
artifacts later cut the part they need out of it (``tfc.api.extract``), so building
a large graph and running a small piece of it costs only that piece: the TensorFlow
paper's partial execution.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from tfc.devices import normalize_device
from tfc.errors import Location, TfcError, TypeMismatch
from tfc.ir import core as ir
from tfc.ir.registry import make_op
from tfc.ir.types import DType, TensorType

_TFC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


_given = threading.local()  # per thread: locations that source_location blocks give


@contextlib.contextmanager
def source_location(loc: Location | None) -> Iterator[None]:
    """Locate every op built inside at ``loc`` instead of the calling Python line: for
    frontends that build the graph from another source text (``.tfm`` model files), and
    passes that build ops with ``tfc.api`` (None: no location)."""
    stack = _given.__dict__.setdefault("stack", [])
    stack.append(loc)
    try:
        yield
    finally:
        stack.pop()


def user_location(skip: int = 1) -> Location | None:
    """The file and line of the innermost caller outside tfc: where the user built an op
    (or the location a ``source_location`` block gives)."""
    stack = getattr(_given, "stack", None)
    if stack:
        return stack[-1]
    f: FrameType | None = sys._getframe(skip)
    while f is not None:
        path = f.f_code.co_filename
        inside = _inside_tfc.get(path)
        if inside is None:
            if len(_inside_tfc) >= _MAX_LOCATIONS:
                _inside_tfc.clear()
            inside = _inside_tfc[path] = (path.startswith(_TFC_DIR)
                                          or path.startswith("<frozen"))
        if not inside:
            key = (path, f.f_lineno)
            loc = _locations.get(key)
            if loc is None:
                if len(_locations) >= _MAX_LOCATIONS:
                    _locations.clear()
                loc = _locations[key] = Location(path, f.f_lineno)
            return loc
        f = f.f_back
    return None


# The Location of each user line that built ops: a model's loop builds the same lines
# over and over, and a Location is frozen, so they share one (bounded, for processes that
# build from ever new sources).
_locations: dict[tuple[str, int], Location] = {}
_inside_tfc: dict[str, bool] = {}  # per source file: whether it is tfc's own
_MAX_LOCATIONS = 1 << 14


def as_dtype(d: Any) -> DType:
    """``tfc.float32``, a numpy dtype, or a name (``"float32"``, ``"f32"``)."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str) and d in DType.__members__:
        return DType[d]
    try:
        return DType.from_numpy(np.dtype(d))
    except TypeError:
        raise TypeMismatch(f"unknown dtype {d!r}") from None


@dataclass
class Entry:
    """A named entry point: feeds and fetches by name, and ops run for their effects."""

    name: str
    feeds: dict[str, "Tensor"]
    fetches: dict[str, "Tensor"]
    targets: list["Operation"] = field(default_factory=list)
    loc: Location | None = None


class Graph:
    """A dataflow graph under construction (``tf.Graph``)."""

    def __init__(self) -> None:
        self.ir = ir.Graph("__build__")
        self.variables: dict[str, Variable] = {}
        # partitioned variables by logical name (their shards are in ``variables``), and
        # the owned weights of each sharded gather's indices (``tfc.api.partitioned``)
        self.partitioned_variables: dict[str, Any] = {}
        self.owned_weights: dict[ir.Value, Tensor] = {}
        self.partitioners: list[Any] = []  # ``tfc.variable_partitioner`` scopes
        self.entries: dict[str, Entry] = {}
        self.functions: list[Any] = []  # tfc.function objects with a signature, traced on export
        self.seed: int | None = None
        self._scopes: list[str] = []
        self._devices: list[str | None] = []
        self._used_names: set[str] = set()
        # per base name taken, the last suffix ``unique_name`` gave it (``_1``, ``_2`` ...):
        # every lower one is taken too, so the next search starts there
        self._name_suffixes: dict[str, int] = {}
        self._seeds = itertools.count(1)
        self._symbols = itertools.count(1)
        self._session: Any = None
        # ``tfc.control_dependencies`` blocks: the operations each one adds to the
        # operations made inside it (None: a block that clears the outer ones)
        self._control_scopes: list[list["Operation"] | None] = []
        # ``tfc.variable_scope`` blocks, innermost last; the root scope; default names
        # given (``tfc.api.variable_scope``)
        self.variable_scopes: list[Any] = []
        self.root_variable_scope: Any = None
        self.used_variable_scopes: set[str] = set()
        self.collections: dict[str, list[Any]] = {}  # ``tfc.add_to_collection``
        # each layer call's record by its output value (``tfc.layers.nodes``): what the
        # Functional API replays for a training graph or on other inputs
        self.layer_calls: dict[ir.Value, Any] = {}

    # ---- scopes --------------------------------------------------------------------

    @contextlib.contextmanager
    def as_default(self) -> Iterator["Graph"]:
        _graph_stack.append(self)
        try:
            yield self
        finally:
            _graph_stack.pop()

    def unique_name(self, name: str) -> str:
        """``scope/name``, suffixed ``_1``, ``_2`` ... when taken, as TensorFlow names ops."""
        prefix = self._scopes[-1] if self._scopes else ""
        base = f"{prefix}/{name}" if prefix else name
        used = self._used_names
        out = base
        if out in used:
            # names are never given back, so base_1 ... base_i (i: the last suffix given to
            # base) are all taken: the first free one is past them, as a scan from 1 finds
            i = self._name_suffixes.get(base, 0)
            while True:
                i += 1
                out = f"{base}_{i}"
                if out not in used:
                    break
            self._name_suffixes[base] = i
        used.add(out)
        return out

    @contextlib.contextmanager
    def name_scope(self, name: str) -> Iterator[str]:
        """Prefix names made inside with ``name/``; a name ending in ``/`` is absolute and
        re-enters that scope (as in TensorFlow)."""
        scope = name.rstrip("/") if name.endswith("/") else self.unique_name(name)
        self._scopes.append(scope)
        try:
            yield scope
        finally:
            self._scopes.pop()

    @contextlib.contextmanager
    def device(self, spec: str | None) -> Iterator[None]:
        self._devices.append(normalize_device(spec))
        try:
            yield
        finally:
            self._devices.pop()

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs: Sequence[Any] | None) -> Iterator[None]:
        """Operations made inside (assigns, ``group``, ``no_op``, an optimizer's update)
        also run ``control_inputs`` (``tf.control_dependencies``); ``None`` clears the
        enclosing blocks'. Tensors among ``control_inputs`` are pure values, whose running
        changes nothing, so they add nothing; tensors made inside carry no dependency (a
        fetch runs only what it needs: fetch the operation with the tensor)."""
        if control_inputs is None:
            self._control_scopes.append(None)
        else:
            from tfc.api.tensor import as_operation
            ops = [as_operation(c) for c in control_inputs
                   if not isinstance(c, (Tensor, Variable))]
            self._control_scopes.append(ops)
        try:
            yield
        finally:
            self._control_scopes.pop()

    def active_control_inputs(self) -> list["Operation"]:
        """The operations the enclosing ``control_dependencies`` blocks add."""
        out: list[Operation] = []
        for scope in reversed(self._control_scopes):
            if scope is None:
                break
            out[:0] = scope
        return out

    @property
    def current_device(self) -> str | None:
        return self._devices[-1] if self._devices else None

    def next_seed(self, seed: int | None) -> int:
        """An op's seed: the user's, else one drawn from the graph seed and a counter, so a
        graph built twice draws the same numbers (as TensorFlow with a graph-level seed)."""
        if seed is not None:
            return int(seed)
        n = next(self._seeds)
        return n if self.seed is None else (self.seed * 1_000_003 + n) % (1 << 63)

    def new_symbol(self) -> str:
        return f"D{next(self._symbols)}"

    def encloses(self, other: "Graph") -> bool:
        """Whether ops built in this graph may use tensors of ``other``: its own, and
        (for a control-flow region being traced, ``tfc.api.control``) enclosing graphs'."""
        return other is self

    # ---- building --------------------------------------------------------------------

    def create_op(self, kind: str, inputs: Sequence["Tensor"], attrs: dict[str, Any], *,
                  name: str | None = None, result_types: Sequence[TensorType] | None = None,
                  loc: Location | None = None, device: str | None = None) -> ir.Op:
        for t in inputs:
            if t.graph is not self:
                raise TfcError(f"{kind}: input {t} is from another graph", loc)
        if not device:
            device = self._devices[-1] if self._devices else None  # (``current_device``)
        op = make_op(kind, [t.value for t in inputs], attrs, device=device,
                     loc=loc or user_location(),
                     names=[self.unique_name(name)] if name else (), result_types=result_types)
        return self.ir.append(op)

    def placeholder(self, dtype: Any, shape: Sequence[int | str | None] | None,
                    name: str | None = None) -> "Tensor":
        if shape is None:
            raise TypeMismatch("placeholder needs a shape, its rank at least: tfc compiles "
                               "for known ranks (write [] for a scalar, None for an unknown "
                               "dim: [None], [None, 784])", user_location())
        dims = [("B" if i == 0 else self.new_symbol()) if d is None else d
                for i, d in enumerate(shape)]
        arg = self.ir.add_arg(TensorType(as_dtype(dtype), tuple(dims)),
                              self.unique_name(name or "Placeholder"))
        return Tensor(self, arg, user_location())

    @property
    def placeholders(self) -> list["Tensor"]:
        return [Tensor(self, a) for a in self.ir.args]

    def entry(self, name: str, feeds: dict[str, Any] | None, fetches: Any,
              targets: Sequence[Any] = (), loc: Location | None = None) -> Entry:
        from tfc.api.tensor import as_operation, convert_to_tensor
        if name in self.entries or name == ir.INIT_GRAPH:
            raise TfcError(f"entry '{name}' is declared twice", loc)
        if isinstance(fetches, dict):
            named = {str(k): v for k, v in fetches.items()}
        elif isinstance(fetches, (list, tuple)):
            named = {f"out{i}": v for i, v in enumerate(fetches)}
        else:
            named = {"out0": fetches}
        tensors: dict[str, Tensor] = {}
        ops: list[Operation] = [as_operation(t) for t in targets]
        for k, v in named.items():
            if isinstance(v, Operation):
                ops.append(v)
            elif hasattr(v, "entry_fetches"):  # tfc.summary's: one named fetch per summary
                tensors.update(v.entry_fetches())
            else:
                tensors[k] = convert_to_tensor(v)
        feed_map = ({k: convert_to_tensor(v) for k, v in feeds.items()} if feeds is not None
                    else None)
        if feed_map is None:
            from tfc.api.extract import needed_placeholders
            feed_map = {p.value.name or f"arg{p.value.index}": p for p in
                        needed_placeholders(self, list(tensors.values()), ops)}
        e = Entry(name, feed_map, tensors, ops, loc)
        self.entries[name] = e
        return e

    def as_module(self) -> ir.Module:
        from tfc.api.extract import build_module
        return build_module(self)


_graph_stack: list[Graph] = []
_global_default = Graph()


def get_default_graph() -> Graph:
    return _graph_stack[-1] if _graph_stack else _global_default


def reset_default_graph() -> None:
    global _global_default
    if _graph_stack:
        raise TfcError("reset_default_graph() inside a `with graph.as_default()` block")
    _global_default = Graph()


class Operation:
    """An op run for its effect (an assign) or a group of them (``tf.group``)."""

    def __init__(self, graph: Graph, op: ir.Op | None = None,
                 control_inputs: Sequence["Operation"] = (), name: str | None = None,
                 in_control_scope: bool = True) -> None:
        self.graph, self.op, self.control_inputs = graph, op, list(control_inputs)
        if in_control_scope:  # (a variable's initializer is not: TF's init_scope)
            self.control_inputs += [c for c in graph.active_control_inputs()
                                    if c not in self.control_inputs]
        self.name = name or (op.kind if op else "group")

    def ir_ops(self) -> list[ir.Op]:
        """The IR ops this operation runs (a group's, flattened)."""
        out = [self.op] if self.op is not None else []
        for c in self.control_inputs:
            out.extend(c.ir_ops())
        return out

    @property
    def outputs(self) -> list["Tensor"]:
        return [Tensor(self.graph, v) for v in self.op.results] if self.op else []

    @property
    def device(self) -> str | None:
        return self.op.device if self.op else None

    def run(self, feed_dict: dict | None = None, session: Any = None) -> None:
        from tfc.api.session import default_session
        (session or default_session(self.graph)).run(self, feed_dict)

    def __repr__(self) -> str:
        return f"<tfc.Operation {self.name}>"


class TensorOperators:
    """Python's operators on ``Tensor`` and ``Variable`` (``a + b``, ``x[1:3]`` ...), as the
    type checker sees them: ``tfc.api.tensor`` installs them (each builds its registry op
    through ``binary_op`` or ``apply``, which need this module, so they cannot be written
    here). A test checks that the two lists agree."""

    __slots__ = ()

    if TYPE_CHECKING:
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __xor__(self, other: Any) -> Tensor: ...
        def __rxor__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...


class Tensor(TensorOperators):
    """A symbolic value of the graph: the result of an op or a placeholder."""

    __slots__ = ("graph", "value", "_loc")
    __array_priority__ = 1000  # numpy defers `array + tensor` to Tensor.__radd__

    def __init__(self, graph: Graph, value: ir.Value, loc: Location | None = None) -> None:
        self.graph, self.value, self._loc = graph, value, loc

    @property
    def type(self) -> TensorType:
        return self.value.type

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def shape(self) -> tuple[int | None, ...]:
        """Static dims as ints, symbolic ones as None (as ``tf.TensorShape``)."""
        return tuple(d if isinstance(d, int) else None for d in self.value.type.shape)

    def get_shape(self) -> tuple[int | None, ...]:
        return self.shape

    @property
    def name(self) -> str | None:
        return self.value.name

    @property
    def op(self) -> Operation | None:
        return Operation(self.graph, self.value.op) if self.value.op else None

    @property
    def device(self) -> str | None:
        return self.value.op.device if self.value.op else None

    def eval(self, feed_dict: dict | None = None, session: Any = None) -> np.ndarray:
        from tfc.api.session import default_session
        return (session or default_session(self.graph)).run(self, feed_dict)

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:  # identity, as TF1 (use tfc.equal for values)
        return isinstance(other, Tensor) and other.value is self.value

    def __bool__(self) -> bool:
        raise TypeError("a tfc.Tensor has no truth value while the graph is being built; "
                        "use tfc.cond or compare values after Session.run")

    def __len__(self) -> int:
        d = self.value.type.shape[0] if self.value.type.rank else None
        if not isinstance(d, int):
            raise TypeError(f"len() of a tensor of type {self.type} is not known statically")
        return d

    def __iter__(self) -> Iterator["Tensor"]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        name = f" '{self.name}'" if self.name else ""
        return f"<tfc.Tensor{name} {self.type}>"


def check_assignable(var: str, declared: TensorType, value: TensorType,
                     loc: Location | None) -> None:
    """The verifier's rule for a value written to a variable (exactly its type; a
    symbolic batch dim is not a fixed size), checked when the assign is built."""
    if value == declared:
        return  # (the rule's first case, without importing it)
    from tfc.ops.state import check_assigned_type
    try:
        check_assigned_type("assign", var, declared, value)
    except TfcError as e:
        raise e.at(loc)


class Variable(TensorOperators):
    """State that persists across steps (``tf.Variable``).

    It is declared in the module, initialized once by the ``__init__`` graph, read with
    one ``var.read`` per graph (the value at the start of the step) and updated by
    assigns that land at the end of the step.
    """

    def __new__(cls, *args: Any, partitioner: Any = None, **kwargs: Any) -> "Variable":
        """With a ``partitioner`` (``tfc.fixed_size_partitioner(k)``, or the innermost
        ``tfc.variable_partitioner`` scope's), a ``PartitionedVariable``: one logical
        variable stored as row blocks."""
        if partitioner is None and cls is Variable:
            scopes = get_default_graph().partitioners
            partitioner = scopes[-1] if scopes else None
        if partitioner is not None and cls is Variable:
            from tfc.api.partitioned import PartitionedVariable
            cls = PartitionedVariable
        return object.__new__(cls)

    def __init__(self, initial_value: Any, trainable: bool = True, name: str | None = None,
                 dtype: Any = None, partitioner: Any = None) -> None:
        from tfc.api.tensor import convert_to_tensor
        g = get_default_graph()
        loc = user_location()
        self.graph = g
        self.name = g.unique_name(name or "Variable")
        device = g.current_device
        if callable(initial_value):  # (it may build named ops: they go in the scope)
            with g.name_scope(self.name + "/Initializer/"):
                value = initial_value()
                init = convert_to_tensor(value,
                                         dtype=as_dtype(dtype) if dtype is not None else None)
        else:  # a value: at most an unnamed constant, which no scope changes
            init = convert_to_tensor(initial_value,
                                     dtype=as_dtype(dtype) if dtype is not None else None)
        self._define(init, device, trainable, loc)

    def _define(self, init: Tensor, device: str | None, trainable: bool, loc: Any) -> None:
        """The variable ``self.name`` with initial value ``init``: its declaration, read
        and initializer, in its graph."""
        g = self.graph
        if not init.type.is_static:
            raise TypeMismatch(f"variable '{self.name}' needs a static shape, its initial "
                               f"value has type {init.type}", loc)
        self.decl = ir.VariableDecl(self.name, init.type, device, trainable, loc)
        self.initial_value = init
        read = g.create_op("var.read", [], {"var": self.name}, result_types=[init.type],
                           loc=loc).result
        read.name = self.name  # the read is the variable's value: print it as %W
        self._read = Tensor(g, read, loc)
        self.initializer = Operation(
            g, g.create_op("var.assign", [init], {"var": self.name}, loc=loc),
            name=f"{self.name}/Assign", in_control_scope=False)
        g.variables[self.name] = self

    @property
    def type(self) -> TensorType:
        return self.decl.type

    @property
    def dtype(self) -> DType:
        return self.decl.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.decl.type.static_shape

    @property
    def trainable(self) -> bool:
        return self.decl.trainable

    @property
    def device(self) -> str | None:
        return self.decl.device

    def value(self) -> Tensor:
        return self._read

    read_value = value

    def _update(self, kind: str, value: Any, name: str | None) -> Operation:
        from tfc.api.tensor import convert_to_tensor
        loc = user_location()
        v = convert_to_tensor(value, dtype=self.dtype)
        check_assignable(self.name, self.decl.type, v.type, loc)
        op = self.graph.create_op(kind, [v], {"var": self.name}, loc=loc,
                                  device=self.decl.device)
        return Operation(self.graph, op, name=name or f"{self.name}/{kind.split('.')[1]}")

    def assign(self, value: Any, name: str | None = None) -> Operation:
        return self._update("var.assign", value, name)

    def assign_add(self, delta: Any, name: str | None = None) -> Operation:
        return self._update("var.assign_add", delta, name)

    def assign_sub(self, delta: Any, name: str | None = None) -> Operation:
        return self._update("var.assign_sub", delta, name)

    def eval(self, session: Any = None) -> np.ndarray:
        return self._read.eval(session=session)

    def __repr__(self) -> str:
        return f"<tfc.Variable '{self.name}' {self.type}>"
