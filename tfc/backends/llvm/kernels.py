"""The lowering table: op kind -> the kernel(s) that compute it, keyed by the op's name.

``lower(graph_compiler, op)`` emits the kernels of one top-level op of a graph into the module of
``graph_compiler`` (an ``entry.GraphCompiler``) and raises ``Unsupported`` for what this backend
cannot compile (the executable then runs the whole graph on the reference backend and
says so). The families:

- no kernel: ``var.read``, ``constant`` (storage of their own) and VIEW ops (``reshape``,
  ``expand_dims``, ``squeeze``, ``identity`` ...: they share their input's storage);
- ``fusion`` regions and every op the expression emitter computes element by element
  (element-wise ops, broadcasts, transpose, slice, pad, tile, one_hot, gather, fills):
  a point-wise loop kernel (``kernels_loop.pointwise``);
- REDUCTION ops, and COMPOSITE ops without a kernel of their own (the softmax family),
  expanded into primitives by their registry entry (``tfc.ir.expand``): the reduction
  kernels of ``kernels_loop``;
- matrix products and convolutions (``kernels_linalg``: BLAS; convolutions with few
  input channels as direct loops), inverses and determinants
  (``kernels_lapack``: LAPACK), pooling, arg-reductions,
  concat / stack / split, scatter and shapes (``kernels_array``);
- variable updates: ``var.assign`` computes into the update buffer (or copies once the
  value is computed), ``assign_add``/``assign_sub`` are kernels over the start-of-step
  value, ``scatter_add``/``scatter_sub`` a copy of it (none when in place) and a kernel
  adding the rows (their indices checked first); an update by a (scaled) matrix product is
  that product's GEMM accumulating into the update buffer (``gemm_update``);
- control flow (``scan``, ``cond``, ``while``): one kernel running its regions' kernels
  in LLVM loops and branches (``kernels_control``);
- random ops (``uniform``, ``uniform_like``, ``normal``, ``truncated_normal``,
  ``uniform_int``): element rules (``kernels_random``), bit for bit the reference's
  Philox stream; ``shuffle``: a sort kernel there too.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from tfc.backends.llvm import (kernel_memo, kernels_array,  # noqa: F401
                               kernels_control, kernels_lapack, kernels_linalg, kernels_random)
from tfc.backends.llvm.context import Storage
from tfc.backends.llvm.irutil import i64
from tfc.backends.llvm.entry import GraphCompiler, no_kernel
from tfc.passes import gemm_update
from tfc.backends.llvm.kernels_expr import (Emitter, inline_kind, is_reduction, kind_has,
                                            small_constant)
from tfc.backends.llvm.kernels_loop import pointwise, reduction, split_rows
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.backends.llvm.runtime.error_detail import MAX_DETAIL_INTS
from tfc.errors import TfcError
from tfc.ir.core import Graph, Op, Value
from tfc.ir.expand import expansion
from tfc.ir.registry import COMPOSITE, make_op, normalize_axes, normalize_axis
from tfc.ir.types import DType
from tfc.ops.array import gather_error, label_error

Lowering = Callable[[GraphCompiler, Op], None]
FLOATS = (DType.f32, DType.f64)
# f16 is computed in f32 (``irutil``'s compute type): element-wise ops round after each
# op; reductions accumulate in f32 and round once when stored (except the column-order
# path of ``kernels_loop``, whose scratch accumulators are f16: a rounding per row, as
# numpy's own axis-0 f16 sums); f16 matrix products, inverses and determinants are f32
# LAPACK/BLAS calls rounded once (``kernels_lapack``).


def check_indices_first(graph_compiler: GraphCompiler, ops: Sequence[Op],
                        outer: Mapping[Value, Value]) -> None:
    """Indices that ``ops`` use (a ``gather``'s, the class labels of a checking
    ``one_hot``: the cross-entropy's) and that come from outside (``outer``: a value with
    storage; a feed, as a rule) are scanned by a check kernel before the kernel that uses
    them, which then does not check them: an error names the first bad index, as the
    reference does. (A fused loss and its gradient pick the same labels twice: one scan.)"""
    scanned: set[tuple | None] = set()
    for op in ops:
        if op.kind == "one_hot" and op.attrs.get("labels_of"):
            index_of = 0
        elif op.kind == "gather":
            index_of = 1
        else:
            continue
        indices = outer.get(op.inputs[index_of])
        if indices is None or indices not in graph_compiler.comp.storage:
            continue  # computed in the kernel: it checks them itself
        if op.kind == "one_hot":
            depth, check = op.attrs["depth"], op.attrs["labels_of"]
            if indices.type.rank > MAX_DETAIL_INTS:
                continue
            key = (indices, depth)
            message = label_error(check, "{value}", "{ints}", depth)
            # (bound and ints are called by check_indices below, in this iteration)
            bound, ints = (lambda kernel: i64(depth)), (lambda kernel, idx: idx)
        else:
            params = op.inputs[0]
            axis = normalize_axis(op.kind, op.attrs["axis"], params.type.rank)
            if params.type.rank > MAX_DETAIL_INTS:
                continue
            key = None  # params may differ
            message = gather_error("{value}", f"{{int{axis}}}", axis, "{ints}")
            bound = (lambda kernel: kernel.dim(params, axis))
            ints = (lambda kernel, idx: kernel.dims(params))
        if key is None or key not in scanned:
            scanned.add(key)
            kernels_array.check_indices(graph_compiler, indices, bound, message, ints, op.loc)
        graph_compiler.comp.checked_indices.add(op)


def _region_kernel(graph_compiler: GraphCompiler, name: str, region: Graph, outer_in: list[Value],
                   outer_out: list[Value]) -> None:
    """A kernel computing ``region`` (args bound to ``outer_in``'s storage) into the
    storage of ``outer_out``."""
    check_indices_first(graph_compiler, list(region.walk()), dict(zip(region.args, outer_in)))
    st = graph_compiler.comp.storage
    for a, x in zip(region.args, outer_in):
        st[a] = st[x]
    leaves = list(region.args)
    for op in region.walk():
        if op.kind == "constant" and small_constant(op.result) is None:
            st[op.result] = graph_compiler.const_storage(op.attrs["value"])
            leaves.append(op.result)
        elif not (inline_kind(op.kind) or is_reduction(op.kind)):
            raise Unsupported(f"{op.kind} in a fused region")
    reduces = [op for op in region.ops if is_reduction(op.kind)]
    scratch = None
    if reduces:
        x0, n = reduces[0].inputs[0], len(reduces)
        axes = normalize_axes(reduces[0].kind, reduces[0].attrs["axes"], x0.type.rank)
        keep = [a for a in range(x0.type.rank) if a not in axes]
        rows = split_rows(axes)  # a row of accumulators per index of axis 0
        graph_compiler.comp.scratch.append(
            lambda binding: 8 * n * max(
                1, int(np.prod([binding.shape(x0)[a] for a in keep], dtype=np.int64))
                * (binding.shape(x0)[0] if rows else 1)))
        scratch = Storage("scratch", 0)
    storages = [*leaves, *outer_out]
    kernel = graph_compiler.kernel(name, storages, [scratch] if scratch else [])
    emitter = Emitter(kernel, leaves)
    pairs = list(zip(region.results, outer_out))
    if reduces:
        assert scratch is not None  # made above for the reductions

        def then() -> tuple:
            """The second kernel of a split column order (same storages)."""
            k2 = graph_compiler.kernel(name + "_fold", storages, [scratch])
            return k2, Emitter(k2, leaves), k2.storage_ptr(scratch)

        reduction(kernel, emitter, region.ops, pairs, kernel.storage_ptr(scratch), then)
    else:
        pointwise(kernel, emitter, pairs)
    kernel.finish()


def lower_fusion(graph_compiler: GraphCompiler, op: Op) -> None:
    _region_kernel(graph_compiler, f"fusion_{op.attrs.get('kind', 'loop')}", op.regions[0],
                   list(op.inputs), list(op.results))


def lower_inline(graph_compiler: GraphCompiler, op: Op) -> None:
    """One op computed element by element (an element-wise op, a movement op ...)."""
    leaves = [x for x in op.inputs if small_constant(x) is None]
    check_indices_first(graph_compiler, [op], {x: x for x in leaves})
    kernel = graph_compiler.kernel(op.kind, [*leaves, *op.results])
    emitter = Emitter(kernel, leaves)
    pointwise(kernel, emitter, [(r, r) for r in op.results])
    kernel.finish()


def lower_reduce(graph_compiler: GraphCompiler, op: Op) -> None:
    x = op.inputs[0]
    kernel = graph_compiler.kernel(op.kind, [x, op.result])
    emitter = Emitter(kernel, [x])
    reduction(kernel, emitter, [op], [(op.result, op.result)])
    kernel.finish()


def lower_expanded(graph_compiler: GraphCompiler, op: Op) -> None:
    """A COMPOSITE op as one kernel over its expansion (a row kernel for the softmax
    family: per row a max phase, a sum-of-exp phase, then the outputs)."""
    try:
        region = expansion(op)
    except TfcError as e:  # e.g. a symbolic number of classes
        raise Unsupported(str(e)) from e
    graph_compiler.comp.regions.append((region, list(op.inputs)))
    _region_kernel(graph_compiler, op.kind, region, list(op.inputs), list(op.results))


def lower_nothing(graph_compiler: GraphCompiler, op: Op) -> None:
    return None


# ---- variable updates --------------------------------------------------------------------

def _var_values(graph_compiler: GraphCompiler, op: Op) -> tuple[Value, Value]:
    """Values standing for the variable's start-of-step value and its update buffer."""
    name = op.attrs["var"]
    decl = graph_compiler.module.variables[name]
    if not decl.type.is_static:
        raise Unsupported("a variable with a symbolic shape")
    old, new = Value(decl.type, name=f"{name}.old"), Value(decl.type, name=f"{name}.new")
    graph_compiler.comp.storage[old] = Storage("var", name)
    graph_compiler.comp.storage[new] = Storage("upd", graph_compiler.update_index[name])
    return old, new


def lower_assign(graph_compiler: GraphCompiler, op: Op) -> None:
    name = op.attrs["var"]
    v = op.inputs[0]
    old, new = _var_values(graph_compiler, op)
    if op.kind == "var.assign":
        graph_compiler.copy_now(v, graph_compiler.comp.storage[new], nbytes_of=new)
        return
    kind = "add" if op.kind == "var.assign_add" else "sub"
    upd = make_op(kind, [old, v])
    if upd.result.type.shape != old.type.shape:
        raise Unsupported(f"{op.kind} with a value of type {v.type} for @{name}")
    leaves = [old] + ([v] if small_constant(v) is None else [])
    kernel = graph_compiler.kernel(op.kind.replace(".", "_"), [*leaves, new])
    emitter = Emitter(kernel, leaves)
    pointwise(kernel, emitter, [(upd.result, new)])
    kernel.finish()


def lower_gemm_update(graph_compiler: GraphCompiler, upd: gemm_update.GemmUpdate) -> None:
    """``var <- var + alpha * matmul`` as one GEMM into the update buffer, at the
    matmul's place in the schedule (where its operands are surely alive)."""
    old, new = _var_values(graph_compiler, upd.assign)
    mm = upd.matmul
    graph_compiler.copy_now(old, graph_compiler.comp.storage[new], nbytes_of=new)

    def gemm(graph_compiler: GraphCompiler, mm: Op) -> None:
        a, bm = mm.inputs
        kernel = graph_compiler.kernel("gemm_update", [a, bm, new])
        kernel.whole()
        kernels_linalg.batched_gemm(kernel, mm, a.dtype, kernel.ptr(a), kernel.ptr(bm),
                                    kernel.ptr(new), alpha=upd.alpha, beta=1.0)
        kernel.finish()

    # the same update of another layer's variable of that type: the same kernel
    kernel_memo.lower_once(graph_compiler, mm, gemm, variable=upd.assign.attrs["var"],
                           tag=("gemm_update", upd.alpha))


def lower_var_scatter(graph_compiler: GraphCompiler, op: Op) -> None:
    """The variable copied into its update buffer (a ``Copy`` step: none when the update
    is made in place, ``GraphCompiler.in_place_updates``), then the rows added there;
    every variable scatter's indices are checked before the first of them
    (``check_var_scatters``)."""
    kernels_array.check_var_scatters(graph_compiler)
    old, new = _var_values(graph_compiler, op)
    indices, updates = op.inputs
    graph_compiler.copy_now(old, graph_compiler.comp.storage[new], nbytes_of=new)
    kernels_array.scatter_rows(graph_compiler, new, new, indices, updates,
                               sign=1 if op.kind == "var.scatter_add" else -1, op=op)


# ---- the table ----------------------------------------------------------------------------

LOWERINGS: dict[str, Lowering] = {
    "fusion": lower_fusion,
    "var.assign": lower_assign,
    "var.assign_add": lower_assign,
    "var.assign_sub": lower_assign,
    "var.scatter_add": lower_var_scatter,
    "var.scatter_sub": lower_var_scatter,
    **kernels_linalg.LOWERINGS,
    **kernels_array.LOWERINGS,
    **kernels_random.LOWERINGS,
    **kernels_lapack.LOWERINGS,
    **kernels_control.LOWERINGS,  # scan, cond, while: regions run inside one kernel
}
from tfc.backends.llvm import kernels_segment  # noqa: E402  (segment_reduce: segment25)
LOWERINGS.update(kernels_segment.LOWERINGS)


def _gemm_updates(graph_compiler: GraphCompiler) -> dict[Op, gemm_update.GemmUpdate]:
    """``gemm_update.find`` of the graph: the memory plan's where it asked and the graph
    has the ops it planned (its schedule; the answer does not depend on their order),
    else found now."""
    plan, graph = graph_compiler.plan, graph_compiler.graph
    found = plan.gemm_updates if plan is not None else None  # (a region's graph: no plan)
    if found is not None and plan.named[1] == tuple(graph.ops):  # (Ops: by identity)
        return found
    return gemm_update.find(graph)


def lower(graph_compiler: GraphCompiler, op: Op) -> None:
    updates = graph_compiler.gemm_updates
    if updates is None:
        updates = graph_compiler.gemm_updates = _gemm_updates(graph_compiler)
    if updates:
        upd = updates.get(op)
        if upd is not None:  # the matmul's kernel computes the update; the rest emit nothing
            if op is upd.matmul:
                lower_gemm_update(graph_compiler, upd)
            return
    kind = op.kind
    known = graph_compiler.lowerings  # (lowering_of once per kind in a graph)
    fn = known.get(kind)
    if fn is None:
        fn = known[kind] = lowering_of(kind)
        if fn is None:
            raise Unsupported(kind)
    if fn is lower_nothing:  # no kernel: no template to reuse, no signature to compute
        return
    if kind == "var.assign":  # a copy at most: no template either
        fn(graph_compiler, op)
        return
    kernel_memo.lower_once(graph_compiler, op, fn)  # an op lowered like one before: reused


def lowering_of(kind: str) -> Lowering | None:
    """How ``kind`` is lowered: by its name (``LOWERINGS``), else by what the op is: no
    kernel (storage of its own, a VIEW), the reduction kernel (REDUCTION), an element by
    element kernel (what the emitter computes), its expansion (COMPOSITE); None when this
    backend cannot lower it."""
    fn = LOWERINGS.get(kind)
    if fn is not None:
        return fn
    if no_kernel(kind):
        return lower_nothing
    if is_reduction(kind):
        return lower_reduce
    if inline_kind(kind):
        return lower_inline
    if kind_has(kind, COMPOSITE):
        return lower_expanded
    return None


def supported_kinds() -> set[str]:
    """Kinds this backend lowers (placement and the registry test read this)."""
    from tfc.ir.registry import all_ops
    return {k for k in all_ops() if lowering_of(k) is not None}
