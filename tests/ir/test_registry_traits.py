"""Registry walks, one per op trait: every entry declaring a trait keeps its promise.

Passes and backends ask an op's traits (``opdef.has(Trait.VIEW)``) instead of keeping
lists of kinds, so a trait declared on the wrong op would mislead all of them at once:
the memory plan aliases a VIEW's result to its input, the reduction kernels fold a
REDUCTION over its ``axes``, kernels compute a GENERATOR from the index alone, fusion and
the LLVM backend compile a COMPOSITE's expansion instead of the op. Each test checks what
those consumers rely on, on each op's examples (``tfc.op_examples``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tfc.ir.interpret import ExecContext, run_graph
from tfc.errors import TfcError
from tfc.ir.core import Graph, Op
from tfc.ir.expand import expand_into, expansion
from tfc.ir.registry import (BROADCAST, COMPOSITE, GENERATOR, PURE, RANDOM, REDUCTION,
                             STATEFUL, VIEW, OpDef, Trait, all_ops, infer_types, kinds_with,
                             lookup, make_op)
from tfc.ir.types import DType, TensorType, broadcast_shapes
from tfc.op_examples import DTYPES, feeds, variants
from tfc.ops.fusion import fused_reduction, loop_op_problem
from tfc.ops.reduce import reduced_shape

OPS = sorted(n for n in all_ops() if not n.startswith("test."))  # not ops other tests register
FLOATS = (DType.f32, DType.f64, DType.f16)
TOL = {DType.f32: 2e-6, DType.f64: 1e-13, DType.f16: 2e-3}
TOL_NP = {d.np: tol for d, tol in TOL.items()}


def _with(trait: Trait) -> list[str]:
    names = sorted(n for n in kinds_with(trait) if n in OPS)
    assert names, f"no op declares {trait.name}"  # a walk over nothing checks nothing
    return names


def _examples(name: str, dtypes: tuple[DType, ...] = DTYPES) -> list[tuple[Any, ...]]:
    found = list(variants(name, dtypes))
    assert found, f"no example builds {name}: add one to tfc.op_examples"
    return found


def _reference(name: str, inputs: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    opdef = lookup(name)
    return opdef.reference(ExecContext({}), inputs, opdef.check_attrs(attrs))


def test_traits_are_declared_as_trait_members() -> None:
    for name in OPS:
        for t in lookup(name).traits:
            assert isinstance(t, Trait), f"{name}: trait {t!r} is not a Trait"


@pytest.mark.parametrize("trait", [VIEW, REDUCTION, BROADCAST, GENERATOR, COMPOSITE])
def test_category_ops_are_pure_with_one_result(trait: Trait) -> None:
    """Consumers replace, alias or recompute these ops freely: none may be random,
    stateful or have more than one result."""
    for name in _with(trait):
        opdef = lookup(name)
        assert opdef.has(PURE) and not opdef.has(RANDOM) and not opdef.has(STATEFUL), name
        for _, ins, attrs, outs in _examples(name):
            assert len(outs) == 1, f"{name}: {len(outs)} results"


@pytest.mark.parametrize("name", _with(VIEW))
def test_views_are_their_input_reinterpreted(name: str) -> None:
    """The memory plan gives a VIEW's result its input's storage and the LLVM backend
    emits no kernel for it: the result must be input 0's elements, same dtype, same count,
    same row-major order (other inputs give at most a shape)."""
    assert lookup(name).num_inputs in (1, 2), name
    rng = np.random.default_rng(0)
    for label, ins, attrs, outs in _examples(name):
        x, out = ins[0], outs[0]
        assert out.dtype == x.dtype, f"{name} {label}: dtype {x.dtype} -> {out.dtype}"
        assert out.num_elements() == x.num_elements(), f"{name} {label}: {x} -> {out}"
        inputs = feeds(name, ins, rng)
        (got,) = _reference(name, inputs, attrs)
        assert got.dtype == inputs[0].dtype
        np.testing.assert_array_equal(got.reshape(-1), inputs[0].reshape(-1))


@pytest.mark.parametrize("name", _with(REDUCTION))
def test_reductions_fold_axes_of_their_input(name: str) -> None:
    """The reduction kernels and fusion read ``axes`` (None: all) and ``keepdims`` of a
    REDUCTION, reduce input 0 over them to a result of its dtype, and fold its elements in
    any order and grouping (reassociated, split across threads and rows)."""
    opdef = lookup(name)
    assert opdef.num_inputs == 1, name
    assert opdef.attrs["axes"].kind == "ints" and opdef.attrs["axes"].default is None, name
    assert opdef.attrs["keepdims"].kind == "bool", name
    rng = np.random.default_rng(0)
    x = TensorType(DType.f64, (2, 3, 4))
    xv = rng.uniform(0.5, 1.5, (2, 3, 4))
    for axes in (None, (0,), (1,), (2,), (-1,), (0, 2)):
        for keepdims in (False, True):
            attrs = {"axes": axes, "keepdims": keepdims}
            _, full, outs = infer_types(name, [x], attrs)
            norm = tuple(range(3)) if axes is None else tuple(sorted(a % 3 for a in axes))
            assert outs == [TensorType(x.dtype, reduced_shape(x.shape, norm, keepdims))], \
                f"{name} {attrs}: {outs}"
            (whole,) = _reference(name, [xv], full)
            # folded one axis at a time, last first, gives the same (up to rounding)
            part = xv
            for a in sorted(norm, reverse=True):
                (part,) = _reference(name, [part], {"axes": (a,), "keepdims": True})
            np.testing.assert_allclose(whole, part.reshape(whole.shape), rtol=1e-12)
    for _, ins, attrs, outs in _examples(name):
        assert outs[0].dtype == ins[0].dtype, f"{name}: {ins[0]} -> {outs[0]}"


@pytest.mark.parametrize("name", _with(BROADCAST))
def test_broadcasts_are_numpy_broadcasts_of_their_input(name: str) -> None:
    """Fusion and the emitter read a BROADCAST's result at index ``i`` as input 0 at ``i``
    broadcast (numpy rules): same dtype, a shape input 0 broadcasts to."""
    rng = np.random.default_rng(0)
    for label, ins, attrs, outs in _examples(name):
        x, out = ins[0], outs[0]
        assert out.dtype == x.dtype, f"{name} {label}"
        assert broadcast_shapes(x.shape, out.shape) == tuple(out.shape), \
            f"{name} {label}: {x} does not broadcast to {out}"
        inputs = feeds(name, ins, rng)
        (got,) = _reference(name, inputs, attrs)
        np.testing.assert_array_equal(got, np.broadcast_to(inputs[0], got.shape))


@pytest.mark.parametrize("name", _with(GENERATOR))
def test_generators_read_no_input_values(name: str) -> None:
    """Kernels compute a GENERATOR's element from its index alone (``flat_ok``), and fusion
    copies a splat one into every region that uses it: its tensor inputs, if any, give
    only a shape, so other input values give the same result, and no gradient flows."""
    opdef = lookup(name)
    assert not opdef.differentiable, f"{name}: a generator's result has no gradient"
    for label, ins, attrs, outs in _examples(name):
        first = _reference(name, feeds(name, ins, np.random.default_rng(1)), attrs)
        other = _reference(name, feeds(name, ins, np.random.default_rng(2)), attrs)
        assert [a.shape for a in first] == [tuple(t.shape) for t in outs], f"{name} {label}"
        for a, b in zip(first, other):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} {label} read its input")


def test_composite_is_declared_with_an_expand_rule() -> None:
    """``tfc.ir.expand`` calls ``expand`` of exactly the COMPOSITE ops."""
    for name in OPS:
        defines = type(lookup(name)).expand is not OpDef.expand
        assert defines == lookup(name).has(COMPOSITE), \
            f"{name}: COMPOSITE trait {lookup(name).has(COMPOSITE)}, expand rule {defines}"


def _example_op(name: str, ins: list[TensorType], attrs: dict[str, Any]) -> Op:
    g = Graph("example")
    return g.append(make_op(name, [g.add_arg(t) for t in ins], attrs))


@pytest.mark.parametrize("name", _with(COMPOSITE))
def test_composites_expand_to_fusible_primitives_with_the_same_numbers(name: str) -> None:
    """Fusion puts a COMPOSITE's expansion in a region and the LLVM backend compiles it
    when it has no kernel for the op: the expansion has the op's types, computes the op's
    reference numbers (f16 in f32, as the reference), and holds only primitive ops a
    fusion region may hold."""
    rng = np.random.default_rng(0)
    for label, ins, attrs, outs in _examples(name):
        op = _example_op(name, ins, attrs)
        graph = expansion(op)
        assert [v.type for v in graph.results] == outs, f"{name} {label}"
        for inner in graph.ops:
            assert not lookup(inner.kind).has(COMPOSITE), f"{name}: expands to {inner.kind}"
            assert fused_reduction(inner.kind) or loop_op_problem(inner) is None, \
                f"{name} {label}: its expansion holds {inner.kind}, which fusion cannot hold"
        inputs = feeds(name, ins, rng)
        want = _reference(name, inputs, op.attrs)
        got = run_graph(graph, inputs, ExecContext({}))
        for w, g in zip(want, got):
            assert g.dtype == w.dtype and g.shape == w.shape, f"{name} {label}"
            tol = TOL_NP.get(np.dtype(w.dtype), 0)
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{name} {label}")


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmax_cross_entropy",
                                  "sparse_softmax_cross_entropy"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_family_expansions_stay_finite_for_large_logits(name: str,
                                                                dtype: DType) -> None:
    """The expansions subtract the max before ``exp``, as the references do: logits of
    1000 (f16: 30000) do not overflow."""
    ((label, ins, attrs, _),) = _examples(name, (dtype,))
    op = _example_op(name, ins, attrs)
    inputs = feeds(name, ins, np.random.default_rng(0))
    inputs[0] = (inputs[0] * (3e4 if dtype == DType.f16 else 1e3)).astype(dtype.np)
    got = run_graph(expansion(op), inputs, ExecContext({}))
    want = _reference(name, inputs, op.attrs)
    for w, g in zip(want, got):
        assert np.all(np.isfinite(g)), f"{name} {label}: {g}"
        # absolute error scales with the values (log-probabilities of about -1e3 here)
        np.testing.assert_allclose(g, w, rtol=TOL[dtype],
                                   atol=TOL[dtype] * max(1.0, float(np.abs(w).max())))


def test_expansion_of_an_op_that_is_not_composite_is_an_error() -> None:
    op = _example_op("add", [TensorType(DType.f32, (2,))] * 2, {})
    with pytest.raises(TfcError, match="add: not a composite op"):
        expand_into(Graph("g"), op, list(op.inputs))


def test_expansion_needing_static_classes_is_a_clear_error() -> None:
    """A symbolic class count cannot be expanded: a TfcError (fusion leaves the op alone,
    the LLVM backend runs the graph on the reference and says so)."""
    op = _example_op("sparse_softmax_cross_entropy",
                     [TensorType(DType.f32, ("B", "C")), TensorType(DType.i32, ("B",))], {})
    with pytest.raises(TfcError, match="static number of classes"):
        expansion(op)
