"""An op lowered like one before reuses its kernels (``kernel_memo``): the kernel
functions built in llvmlite stop growing with the number of identical layers, ops that
differ in anything their code depends on (a constant, a shape, a symbolic dim, shared
storage) get kernels of their own, and every number stays the reference backend's."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.backends.llvm import LLVMBackend, kernel_memo
from tfc.backends.llvm.entry import GraphCompiler
from tfc.backends.reference import ReferenceBackend
from tfc.pipeline import lower_entry

from tests.backends.llvm.test_kernel_units import check_against_reference, mlp


def built_functions(module, monkeypatch) -> int:
    """How many kernel functions lowering built for ``train_step`` (before
    ``dedup_kernels`` merges identical ones)."""
    made: list[int] = []
    real = GraphCompiler.lower_all

    def counting(self, lower):
        failed = real(self, lower)
        made.append(sum(1 for f in self.comp.module.functions if f.blocks))
        return failed
    monkeypatch.setattr(GraphCompiler, "lower_all", counting)
    LLVMBackend(use_cache=False).compile(lower_entry(module, "train_step", "llvm"),
                                         "train_step")
    monkeypatch.undo()
    return made[0]


def test_identical_layers_are_lowered_once(monkeypatch):
    four, _ = mlp(4)
    sixteen, values = mlp(16)
    assert built_functions(sixteen, monkeypatch) == built_functions(four, monkeypatch)
    exe = LLVMBackend(use_cache=False).compile(
        lower_entry(sixteen, "train_step", "llvm"), "train_step")
    check_against_reference(sixteen, values, exe)


def test_an_edited_layer_gets_kernels_of_its_own(monkeypatch):
    plain, _ = mlp(8)
    edited, values = mlp(8, edited=3)
    assert built_functions(edited, monkeypatch) > built_functions(plain, monkeypatch)
    exe = LLVMBackend(use_cache=False).compile(
        lower_entry(edited, "train_step", "llvm"), "train_step")
    check_against_reference(edited, values, exe)


@pytest.mark.parametrize("case", ["constants", "shapes", "symbolic", "shared"])
def test_ops_alike_but_for_what_their_code_sees_compute_their_own_values(case):
    """Pairs of ops with the same kinds whose kernels must differ: inlined constants of
    different values, different static shapes, a symbolic batch (a run-time param), and
    an op whose two inputs are one value (one pointer) beside one with two values."""
    rng = np.random.default_rng(3)
    batch = "B" if case == "symbolic" else 4
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [batch, 6], name="x")
        z = tfc.placeholder(tfc.float32, [batch, 6], name="z")
        u = tfc.placeholder(tfc.float32, [batch, 3], name="u")
        if case == "constants":
            outs = {"a": tfc.nn.relu(x) * 1.5 + 0.25, "b": tfc.nn.relu(z) * 2.5 + 0.75}
        elif case == "shapes":
            outs = {"a": tfc.tanh(x) * 3.0, "b": tfc.tanh(u) * 3.0}
        elif case == "symbolic":
            outs = {"a": tfc.tanh(x * 3.0) - 1.0, "b": tfc.tanh(z * 3.0) - 1.0,
                    "c": tfc.reduce_sum(tfc.exp(x * 0.5), axis=1),
                    "d": tfc.reduce_sum(tfc.exp(z * 0.5), axis=1)}
        else:
            outs = {"a": x * z + x, "b": x * x + x}
        tfc.entry("main", feeds={"x": x, "z": z, "u": u}, fetches=outs)
    module = g.as_module()
    n = 5 if case == "symbolic" else 4
    feeds = [rng.standard_normal((n, 6)).astype(np.float32),
             rng.standard_normal((n, 6)).astype(np.float32),
             rng.standard_normal((n, 3)).astype(np.float32)]
    want = ReferenceBackend().compile(lower_entry(module, "main", "reference"), "main")(
        feeds, {}, 0)
    got = LLVMBackend(use_cache=False).compile(lower_entry(module, "main", "llvm"), "main")(
        feeds, {}, 0)
    for w, v in zip(want.fetches, got.fetches):
        np.testing.assert_allclose(v, w, rtol=1e-5, atol=1e-6)


def test_signatures_tell_apart_constants_and_shared_inputs():
    """The signature itself: a different inlined constant, or an input shared, differ."""
    from tfc.backends.llvm.context import Storage
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph, Module
    from tfc.ir.types import DType, TensorType
    g = Graph("main")
    t = TensorType(DType.f32, (4,))
    a, b = g.add_arg(t, "a"), g.add_arg(t, "b")
    bld = Builder(g)
    two = bld("constant", value=np.array(2.0, np.float32))
    three = bld("constant", value=np.array(3.0, np.float32))
    ops = [bld("mul", a, two), bld("mul", b, two), bld("mul", a, three), bld("mul", a, a),
           bld("mul", a, b)]
    gc = GraphCompiler(Module({"main": g}), g, None)
    for i, v in enumerate([two, three, *ops]):
        gc.comp.storage[v] = Storage("arena", i)
    gc.comp.storage[a] = Storage("feed", 0)
    gc.comp.storage[b] = Storage("feed", 1)
    keys = [kernel_memo.signature(gc, v.op) for v in ops]
    assert keys[0][0] == keys[1][0]  # the same code, on other storages
    assert keys[0] != keys[2]  # 2.0 against 3.0
    assert keys[3] != keys[4]  # a * a takes one pointer, a * b two


def _lowered_mlp(layers: int):
    """A lowered MLP training step and the backend's lowering of it (``_lower``)."""
    four, _ = mlp(layers)
    module = lower_entry(four, "train_step", "llvm")
    return module, LLVMBackend(use_cache=False)._lower(module, "train_step")[2]


def test_signatures_only_for_ops_with_kernels(monkeypatch):
    """Ops that make no kernel (``var.read``, views, a ``var.assign``: a copy at most) are
    lowered without a signature: only ops with kernels to reuse pay for one."""
    calls: list[str] = []
    real = kernel_memo._signature  # (what lower_once computes signatures with)

    def counting(graph_compiler, op, *args, **kwargs):
        calls.append(op.kind)
        return real(graph_compiler, op, *args, **kwargs)
    monkeypatch.setattr(kernel_memo, "_signature", counting)
    module, gc = _lowered_mlp(4)
    kinds = [op.kind for op in module.graphs["train_step"].ops]
    assert "var.read" in kinds and calls
    assert not {"var.read", "var.assign"} & set(calls)
    assert len(calls) <= sum(k not in ("var.read", "var.assign") for k in kinds)


def _kernel_fusions(module, graph) -> list:
    """The fusions of ``graph`` that get kernels: not the SGD scales that weight updates
    folded into GEMMs absorb (the plan leaves their values out: no storage, no kernel)."""
    unplanned = set(module.memory_plans[graph.name].unplanned)
    return [op for op in graph.ops
            if op.kind == "fusion" and not any(r in unplanned for r in op.results)]


def test_type_texts_are_made_once_per_distinct_type(monkeypatch):
    """A signature names types by their text: made once per dtype and shape in a lowering,
    not once per value (a 256-layer MLP had ~10k values of 9 types)."""
    from tfc.ir.types import TensorType
    module, _ = _lowered_mlp(6)
    graph = module.graphs["train_step"]
    gc = GraphCompiler(module, graph, module.memory_plans["train_step"])
    gc.assign_storage()
    made: list[str] = []
    real = TensorType.__str__

    def counting(self):
        text = real(self)
        made.append(text)
        return text
    monkeypatch.setattr(TensorType, "__str__", counting)
    fusions = _kernel_fusions(module, graph)
    keys = [kernel_memo.signature(gc, op) for op in fusions]
    monkeypatch.undo()
    assert len(keys) >= 6 and all(k is not None for k in keys)
    assert len(made) == len(set(made))  # each type's text once
    # and the keys are those of texts made afresh each time
    fresh = GraphCompiler(module, graph, module.memory_plans["train_step"])
    fresh.assign_storage()
    for op, key in zip(fusions, keys):
        fresh.memo_keys = None
        assert kernel_memo.signature(fresh, op) == key


def test_attr_keys_keep_apart_what_python_equality_merges():
    """Attr keys are exact: 1, True, 1.0 and '1' differ, and so do 0.0 and -0.0 (a kernel
    inlines them), and an array by its dtype, shape and bytes."""
    key = kernel_memo._attr_key
    values = [1, True, 1.0, "1", 0.0, -0.0, (1,), [1], np.array([1], np.int32),
              np.array([1], np.int64), np.array([[1]], np.int32)]
    assert len({key(v) for v in values}) == len(values)
    frozen = np.array([2.0, 3.0], np.float32)
    frozen.flags.writeable = False
    keys = kernel_memo.Keys()
    assert kernel_memo._attr_key(frozen, keys) == key(frozen.copy())
    writable = np.array([2.0, 3.0], np.float32)
    first = kernel_memo._attr_key(writable, keys)
    writable[0] = 5.0  # not frozen: never taken from the cache
    assert kernel_memo._attr_key(writable, keys) != first


def test_top_level_keys_are_op_keys_from_nothing():
    """``_top_key`` (a top-level op's key, inlined) is ``_op_key`` with nothing numbered,
    for every op of a lowered MLP, updates (attr ``var`` left out) included."""
    module, gc = _lowered_mlp(4)
    keys = kernel_memo.Keys()
    for op in module.graphs["train_step"].ops:
        for skip in ("", "var"):
            assert kernel_memo._top_key(op, keys, skip) == \
                kernel_memo._op_key(op, {}, kernel_memo.Keys(), skip)


def test_region_attrs_are_keyed_once_per_view(monkeypatch):
    """The attrs of fused regions' ops (one frozen view per template op, shared by every
    layer's copy) are keyed once per view: the keys made for the region constants do not
    grow with the layers."""
    def array_keys(layers: int) -> int:
        four, _ = mlp(layers)
        module = lower_entry(four, "train_step", "llvm")
        graph = module.graphs["train_step"]
        gc = GraphCompiler(module, graph, module.memory_plans["train_step"])
        gc.assign_storage()
        made: list[int] = []
        real = kernel_memo._attr_key

        def counting(v, keys=None):
            if isinstance(v, np.ndarray):
                made.append(1)
            return real(v, keys)
        monkeypatch.setattr(kernel_memo, "_attr_key", counting)
        for op in _kernel_fusions(module, graph):
            assert kernel_memo.signature(gc, op) is not None
        monkeypatch.undo()
        return len(made)
    assert array_keys(8) == array_keys(4) > 0


def test_lowering_labels_no_step(monkeypatch):
    """Step labels (profiles, ``kernel_labels``) are made when asked, not per op while
    lowering; asked, they name each kernel's op."""
    from tfc.backends.llvm import entry
    from tfc.backends.llvm.context import Kernel
    made: list[str] = []
    real = entry._label_text

    def counting(op, n):
        made.append(op.kind)
        return real(op, n)
    monkeypatch.setattr(entry, "_label_text", counting)
    module, gc = _lowered_mlp(4)
    assert not made
    labels = gc.kernel_labels()
    assert made and len(labels) == len(gc.calls)
    assert [k for k, _ in labels] == [k for k, s in enumerate(gc.steps)
                                     if isinstance(s, Kernel)]
    assert any(text.startswith("fusion#") for _, text in labels)


def test_one_storage_per_arena_buffer():
    """Values planned into one arena buffer share one ``Storage`` object (made once per
    buffer), and storages compare and hash as their (kind, index)."""
    from tfc.backends.llvm.context import Storage
    module, gc = _lowered_mlp(4)
    by_buffer: dict = {}
    for v, s in gc.comp.storage.items():
        if s.kind == "arena":
            by_buffer.setdefault(s.index, set()).add(id(s))
    assert by_buffer and all(len(ids) == 1 for ids in by_buffer.values())
    assert Storage("arena", 3) == Storage("arena", 3) and \
        hash(Storage("arena", 3)) == hash(Storage("arena", 3))
    assert Storage("arena", 3) != Storage("arena", 4) and str(Storage("out", 1)) == "out[1]"
