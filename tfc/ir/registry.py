"""The op registry: one ``OpDef`` per op kind, holding everything tfc knows about it.

An entry declares its attrs and its traits (what kind of op it is: PURE, VIEW, REDUCTION,
COMPOSITE ..., which passes and backends ask instead of keeping lists of op names),
infers result types (numpy broadcasting over symbolic dims), implements the op in numpy
(the reference every backend is tested against), estimates its cost and, for a
composite, builds its expansion into primitive ops. Backends key their lowerings by the
same name. Op definitions live
in ``tfc.ops``, a layer above this one, which registers them when it is imported; the
package (``tfc/__init__.py``) imports it first, so any ``import tfc...`` has every op
registered. The registry itself never imports the ops.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from tfc.errors import Location, TfcError, TypeMismatch, UnknownOp
from tfc.ir.core import Op
from tfc.ir.types import DType, TensorType

if TYPE_CHECKING:
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph, Value


class Trait(str, enum.Enum):
    """What kind of op an entry is, declared once on it (``OpDef.traits``) and asked by
    every pass and backend (``opdef.has(Trait.VIEW)``), as MLIR/xDSL op traits. What each
    one promises is what its consumers rely on; ``tests/ir/test_registry_traits.py``
    checks every entry that declares one against it."""

    # CSE merges only PURE ops; RANDOM and STATEFUL ops are never merged, folded or
    # reordered across one another.
    PURE = "pure"
    COMMUTATIVE = "commutative"
    # Result element [i] is a function of the inputs' elements at [i], inputs broadcast
    # as numpy does: fusion chains them, the emitter computes them per element.
    ELEMENTWISE = "elementwise"
    STATEFUL = "stateful"
    RANDOM = "random"
    WRITES_VARIABLE = "writes_variable"  # updates the variable named by its `var` attr
    # The result is input 0 reinterpreted: the same elements in the same row-major order,
    # the same dtype (other inputs give at most a shape). The memory plan aliases it to
    # its input and the LLVM backend reads it in place (no kernel, no copy).
    VIEW = "view"
    # Folds the ``axes`` of input 0 (attrs ``axes``: None for all, ``keepdims``) into one
    # element each: the reduce/row kernels and fusion's reduce and row kinds.
    REDUCTION = "reduction"
    # The result is input 0 broadcast as numpy does to the result's shape (same dtype).
    BROADCAST = "broadcast"
    # Every element is a function of its index and the attrs alone; a tensor input, if
    # any, gives only the result's shape (``zeros_like``). Kernels compute it anywhere.
    GENERATOR = "generator"
    # Defined by primitive ops: the entry's ``expand`` builds them (``tfc.ir.expand``).
    # Fusion expands a composite inside its regions; a backend with no kernel of its own
    # for the op compiles its expansion.
    COMPOSITE = "composite"


# The traits by their short names, as op definitions import them.
PURE = Trait.PURE
COMMUTATIVE = Trait.COMMUTATIVE
ELEMENTWISE = Trait.ELEMENTWISE
STATEFUL = Trait.STATEFUL
RANDOM = Trait.RANDOM
WRITES_VARIABLE = Trait.WRITES_VARIABLE
VIEW = Trait.VIEW
REDUCTION = Trait.REDUCTION
BROADCAST = Trait.BROADCAST
GENERATOR = Trait.GENERATOR
COMPOSITE = Trait.COMPOSITE

FLOAT = frozenset({DType.f16, DType.f32, DType.f64})
INT = frozenset({DType.i32, DType.i64})
NUMERIC = FLOAT | INT
ALL = NUMERIC | {DType.bool}

REQUIRED = object()


@dataclass(frozen=True)
class AttrSpec:
    """One attr: its kind (checked when an op is built), default, and meaning."""

    kind: str  # int float bool str ints floats dtype shape tensor var any
    default: Any = REQUIRED
    doc: str = ""

    def check(self, op: str, name: str, v: Any) -> Any:
        if _ALREADY_NORMAL.get(self.kind) is type(v):
            return v  # (the common case, checked and converted alike by the rules below)
        if self.kind == "ints" and type(v) is tuple and _all_exact_ints(v):
            return v  # (what the conversion below makes of it: a tuple of the same ints)
        if v is None and self.default is None:
            return None
        ok = _ATTR_CHECKS[self.kind](v)
        if not ok:
            raise TypeMismatch(f"{op}: attr {name}={v!r} is not of kind {self.kind}")
        convert = _ATTR_CONVERT.get(self.kind)
        return v if convert is None else convert(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _all_exact_ints(v: tuple) -> bool:
    for x in v:
        if type(x) is not int:
            return False
    return True


_ATTR_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": _is_int,
    "float": lambda v: isinstance(v, (int, float, np.floating)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, (bool, np.bool_)),
    "str": lambda v: isinstance(v, str),
    "ints": lambda v: isinstance(v, (list, tuple)) and all(_is_int(x) for x in v),
    "floats": lambda v: isinstance(v, (list, tuple)) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in v),
    "dtype": lambda v: isinstance(v, DType),
    "shape": lambda v: isinstance(v, (list, tuple)) and all(
        _is_int(x) or isinstance(x, str) for x in v),
    "tensor": lambda v: isinstance(v, np.ndarray),
    "var": lambda v: isinstance(v, str),
    "any": lambda v: True,
}
_ATTR_CONVERT: dict[str, Callable[[Any], Any]] = {
    "int": int, "float": float, "bool": bool,
    "ints": lambda v: tuple(int(x) for x in v),
    "floats": lambda v: tuple(float(x) for x in v),
    "shape": lambda v: tuple(int(x) if _is_int(x) else x for x in v),
}
# Per kind, the one Python type whose values the check accepts and the conversion returns
# unchanged (``int(3) is 3``, ``bool(True) is True``): ``AttrSpec.check`` returns such a
# value at once. A test holds each against the full rules.
_ALREADY_NORMAL: dict[str, type] = {
    "int": int, "float": float, "bool": bool, "str": str, "var": str, "dtype": DType,
    "tensor": np.ndarray,
}


@dataclass(frozen=True)
class Cost:
    """Work of one op: floating-point operations and bytes moved (inputs + outputs)."""

    flops: float
    bytes: float


class OpDef:
    """The definition of one op kind. Subclass it, or instantiate a family class."""

    name: str = ""
    attrs: Mapping[str, AttrSpec] = {}
    traits: frozenset[Trait] = frozenset({PURE})
    num_inputs: int | None = None  # None: variadic
    summary: str = ""
    # flops per output element, for the default cost
    flops_per_element: float = 1.0
    # The regions the op owns, by role (``cond``: then, else); most ops own none, and the
    # verifier holds every op to its count. Ops with regions check their signatures in
    # ``verify_op``. None: any number (test-only ops), as ``num_inputs``.
    region_names: tuple[str, ...] | None = ()

    def infer(self, inputs: Sequence[TensorType],
              attrs: Mapping[str, Any]) -> list[TensorType] | None:
        """Result types; None for ops whose result types are declared by the builder
        (``var.read``: the type is the variable's, which the verifier checks)."""
        raise NotImplementedError

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        raise NotImplementedError

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        out_elems = sum(t.nbytes(symbol_size) // t.dtype.itemsize for t in outputs)
        moved = sum(t.nbytes(symbol_size) for t in (*inputs, *outputs))
        return Cost(self.flops_per_element * out_elems, moved)

    # Gradients (reverse mode). ``gradient`` builds, with ``b`` (a
    # ``tfc.ir.autodiff.GradBuilder``), the gradient of each input of ``op`` from the
    # gradients of its results (None where a result's gradient is zero), returning None
    # for inputs that get none. Ops through which no gradient flows (comparisons, argmax,
    # shape) set ``differentiable = False`` instead.
    differentiable: bool = True

    def gradient(self, b: Any, op: Op, grads: Sequence["Value | None"]
                 ) -> Sequence[Any]:
        raise NotImplementedError

    def expand(self, b: "Builder", inputs: Sequence["Value"],
               attrs: Mapping[str, Any]) -> list["Value"]:
        """The op as primitive ops appended with ``b`` on ``inputs`` (standing for the op's
        inputs), giving its results' types and the reference's numbers; a COMPOSITE op
        defines it (``tfc.ir.expand`` calls it for fusion and for backends). Raise a
        ``TfcError`` when these inputs cannot be expanded (a symbolic class count)."""
        raise NotImplementedError

    def fill_value(self, attrs: Mapping[str, Any]) -> np.ndarray | None:
        """The one value every element of the result has, as a 0-d array, for a GENERATOR
        without inputs that fills its result (``fill``, ``zeros``); None otherwise. Passes
        ask this instead of running the reference, which would materialize the whole
        tensor (16 GiB for a ``zeros`` of 65536 x 65536)."""
        return None

    def has(self, trait: Trait) -> bool:
        return trait in self.traits

    def names_variable(self) -> bool:
        """Whether the op reads or updates a module variable (it has a ``var`` attr)."""
        return any(spec.kind == "var" for spec in self.attrs.values())

    def verify_variable(self, op: Op, var: TensorType) -> None:
        """Check ``op`` against ``var``, the declared type of the variable its ``var``
        attr names (the verifier calls it once it has found the declaration); raise a
        ``TfcError`` naming what differs. Every op that names a variable defines it: the
        native code of a state op trusts these types, so nothing may go unchecked."""
        raise TfcError(f"{self.name}: names a variable but its definition has no "
                       "verify_variable rule")

    def verify_op(self, op: Op, module: Any) -> None:
        """Checks of this op kind beyond the generic ones (region signatures, say), which
        the verifier runs after those; raise a ``TfcError`` naming what is wrong. Most ops
        have none."""

    def check_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Attrs with defaults filled in; unknown or ill-kinded attrs are errors."""
        specs = self.attrs
        out: dict[str, Any] = {}
        for k, v in attrs.items():
            spec = specs.get(k)
            if spec is None:
                hint = nearest_hint(k, list(specs))
                known = ", ".join(specs) or "none"
                raise TypeMismatch(f"{self.name}: unknown attr '{k}'{hint} (known: {known})")
            out[k] = spec.check(self.name, k, v)
        if len(out) != len(specs):  # (out's keys are some of specs')
            for k, spec in specs.items():
                if k not in out:
                    if spec.default is REQUIRED:
                        raise TypeMismatch(f"{self.name}: missing required attr '{k}'")
                    out[k] = spec.default
        return out

    def check_arity(self, n: int) -> None:
        if self.num_inputs is not None and n != self.num_inputs:
            raise TypeMismatch(f"{self.name} takes {self.num_inputs} inputs, got {n}")


_REGISTRY: dict[str, OpDef] = {}


def _add(opdef: OpDef | type) -> OpDef:
    inst = opdef() if isinstance(opdef, type) else opdef
    if not inst.name:
        raise TfcError(f"op definition {inst!r} has no name")
    if inst.name in _REGISTRY:
        raise TfcError(f"op {inst.name!r} is defined twice")
    _REGISTRY[inst.name] = inst
    return inst


def register(opdef: OpDef | type) -> Any:
    """Add an op definition (an instance, or a class to instantiate) to the registry."""
    _add(opdef)
    return opdef


def unregister(name: str) -> None:
    """Remove op ``name`` (for tests that define ops of their own); unknown names are ignored."""
    _REGISTRY.pop(name, None)


@contextlib.contextmanager
def registered(*opdefs: OpDef | type) -> Iterator[None]:
    """Register ``opdefs`` for the duration of a ``with`` block (test-only ops), so that
    registry walks elsewhere never see them."""
    names: list[str] = []
    try:
        for opdef in opdefs:
            names.append(_add(opdef).name)
        yield
    finally:
        for name in names:
            unregister(name)


def nearest_hint(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def lookup(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        if not _REGISTRY:  # (only while the package itself is being imported)
            raise UnknownOp(f"unknown op '{name}': no op is registered yet (the ops "
                            "register when tfc.ops is imported)") from None
        raise UnknownOp(f"unknown op '{name}'{nearest_hint(name, list(_REGISTRY))}") from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


def infer_types(kind: str, inputs: Sequence[TensorType], attrs: Mapping[str, Any],
                loc: Location | None = None
                ) -> tuple[OpDef, dict[str, Any], list[TensorType] | None]:
    """Checked attrs and inferred result types of an op, errors located at ``loc``."""
    opdef = _REGISTRY.get(kind) or lookup(kind)
    try:
        opdef.check_arity(len(inputs))
        full = opdef.check_attrs(attrs)
        types = opdef.infer(list(inputs), full)
    except TfcError as e:
        raise e.at(loc)
    return opdef, full, None if types is None else list(types)


def kinds_with(trait: Trait) -> frozenset[str]:
    """Every registered op kind that has ``trait`` (for tables and tests; a pass asking
    about one op calls ``lookup(op.kind).has(trait)``)."""
    return frozenset(k for k, d in all_ops().items() if d.has(trait))


def writes_variable(op: Op) -> bool:
    """Whether ``op`` updates a variable (at the end of the step): an assign or a scatter."""
    return lookup(op.kind).has(WRITES_VARIABLE)


def region_count_problem(op: Op) -> str | None:
    """Why ``op`` does not own exactly the regions its definition names (``region_names``);
    None when it does."""
    want = lookup(op.kind).region_names
    if want is None or len(op.regions) == len(want):
        return None
    roles = f"({', '.join(want)})" if want else "(it takes none)"
    return f"{op.kind}: has {len(op.regions)} regions, expected {len(want)} {roles}"


def make_op(kind: str, inputs: Sequence["Value"], attrs: Mapping[str, Any] | None = None, *,
            device: str | None = None, loc: Location | None = None,
            regions: Sequence["Graph"] = (), names: Sequence[str | None] = (),
            result_types: Sequence[TensorType] | None = None) -> Op:
    """Build an op with checked attrs and inferred result types.

    ``result_types`` is needed only for ops whose types are declared (``var.read``).
    Every op is built here, so this is ``infer_types`` written out without its copies:
    the types are inferred once per op, and nothing checks them again while building.
    """
    opdef = _REGISTRY.get(kind) or lookup(kind)
    in_types = [v.type for v in inputs]
    try:
        if opdef.num_inputs is not None and opdef.num_inputs != len(in_types):
            opdef.check_arity(len(in_types))  # (raises)
        full = opdef.check_attrs(attrs or {}) if attrs or opdef.attrs else {}
        types: Sequence[TensorType] | None = opdef.infer(in_types, full)
    except TfcError as e:
        raise e.at(loc)
    if types is None:
        if result_types is None:
            raise TfcError(f"{kind}: result types must be given", loc)
        types = result_types
    return Op(kind, inputs, full, types, device=device, loc=loc, regions=regions, names=names)


# ---- helpers shared by op definitions -------------------------------------------------

_TYPES: dict[tuple[tuple, str], TensorType] = {}
_MAX_TYPES = 4096


def tensor_type(dtype: DType, shape: tuple) -> TensorType:
    """``TensorType(dtype, shape)`` for a shape made of the dims of valid types (an
    input's, a numpy array's): one object per distinct type, as types are frozen, so that
    inference builds (and checks the dims of) each type once rather than once per op.
    Only for such dims: the cache's keys do not tell ``1`` from ``True`` or ``1.0``."""
    key = (shape, dtype._value_)  # (an enum member hashes in Python; its value in C)
    t = _TYPES.get(key)
    if t is None:
        if len(_TYPES) >= _MAX_TYPES:
            _TYPES.clear()
        t = _TYPES[key] = TensorType(dtype, shape)
    return t


def expect_dtype(op: str, t: TensorType, allowed: frozenset[DType], what: str = "input") -> None:
    if t.dtype not in allowed:
        names = ", ".join(sorted(d.value for d in allowed))
        raise TypeMismatch(f"{op}: {what} has dtype {t.dtype.value}, expected one of {names}")


def same_dtype(op: str, types: Sequence[TensorType]) -> DType:
    first = types[0].dtype
    for t in types:
        if t.dtype is not first:
            break
    else:
        return first
    dts = {t.dtype for t in types}
    if len(dts) > 1:
        shown = " and ".join(str(t) for t in types)
        raise TypeMismatch(f"{op}: inputs have different dtypes: {shown} (use cast)")
    return types[0].dtype


def normalize_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise TypeMismatch(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(op: str, axes: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    if len(axes) == 1:  # (the usual case, as below)
        return (normalize_axis(op, axes[0], rank),)
    out = tuple(sorted({normalize_axis(op, a, rank) for a in axes}))
    if len(out) != len(axes):
        raise TypeMismatch(f"{op}: repeated axis in {list(axes)}")
    return out
