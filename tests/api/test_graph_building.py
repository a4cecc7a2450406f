"""What building a graph costs per op, held by counts rather than timings (issue 21: a
user who edits one layer pays the graph building again): each weight is copied once,
names are found without scanning their suffixes, each distinct type and source line is
built once, and each op's types are inferred once. Plus the fast paths of inference and
attr checking, held against the general rules they shortcut."""

import itertools

import numpy as np
import pytest

import tfc
from tfc.api import graph as api_graph
from tfc.errors import TypeMismatch
from tfc.ir import core
from tfc.ir import registry
from tfc.ir.registry import AttrSpec, OpDef, lookup, make_op
from tfc.ir.types import DType, TensorType, broadcast_shapes


def _mlp(layers: int, width: int = 8) -> tfc.Graph:
    rng = np.random.default_rng(0)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, width], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        h = x
        for i in range(layers):
            w = tfc.Variable(rng.standard_normal((width, width)).astype(np.float32),
                             name=f"W{i}")
            b = tfc.Variable(np.zeros(width, np.float32), name=f"b{i}")
            h = tfc.matmul(h, w) + b
            if i < layers - 1:
                h = tfc.nn.relu(h)
        loss = tfc.reduce_mean(
            tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    return g


# ---- copies, names, shared objects ------------------------------------------------------

def test_a_weight_is_copied_once(monkeypatch):
    """``constant`` freezes the copy it made, so the op keeps that array rather than
    copying it again (for a 256-layer MLP: 64 MB less to copy)."""
    handed: list[tuple[np.ndarray, object]] = []
    freeze = core.freeze_attr

    def spy(v):
        out = freeze(v)
        if isinstance(v, np.ndarray):
            handed.append((v, out))
        return out

    monkeypatch.setattr(core, "freeze_attr", spy)
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    c = tfc.constant(w)
    v = tfc.Variable(w, name="W")
    assert len(handed) == 2
    assert all(out is given for given, out in handed)  # frozen by constant, kept as is
    for t in (c, v.initial_value):
        kept = t.value.op.attrs["value"]
        assert not kept.flags.writeable and kept.base is None
        assert not np.shares_memory(kept, w)  # a snapshot: the user's array stays theirs
    w[0, 0] = 99.0
    assert c.value.op.attrs["value"][0, 0] == 0.0


def test_constants_of_views_and_reshapes_are_frozen_copies():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    for value, kw in [(base.T, {}), (base[:, ::2], {}), (base, {"shape": [6, 4]}),
                      (2.5, {"shape": [2, 3]}), ([1, 2, 3], {"dtype": tfc.int64})]:
        t = tfc.constant(value, **kw)
        kept = t.value.op.attrs["value"]
        assert kept.flags.c_contiguous and not kept.flags.writeable
        assert not np.shares_memory(kept, base)
        np.testing.assert_array_equal(
            kept, np.asarray(value).astype(kept.dtype).reshape(kept.shape)
            if "shape" not in kw or np.asarray(value).size != 1
            else np.broadcast_to(np.asarray(value, kept.dtype), kept.shape))


class _CountingSet(set):
    lookups = 0

    def __contains__(self, item):
        type(self).lookups += 1
        return super().__contains__(item)


def test_unique_names_resume_after_the_last_suffix():
    g = tfc.get_default_graph()
    g._used_names = _CountingSet(g._used_names)
    _CountingSet.lookups = 0
    n = 1500
    names = [g.unique_name("v") for _ in range(n)]
    assert names == ["v"] + [f"v_{i}" for i in range(1, n)]
    # about two lookups per name; a scan from _1 would make n*n/2 (over a million)
    assert _CountingSet.lookups <= 3 * n


def test_unique_names_are_tensorflows():
    """The same names as a scan from ``_1`` gives, names taken explicitly included."""
    g = tfc.get_default_graph()
    got = [g.unique_name(n) for n in ["v", "v_2", "v", "v", "v", "v_1", "w", "v_4_1"]]
    assert got == ["v", "v_2", "v_1", "v_3", "v_4", "v_1_1", "w", "v_4_1"]
    with g.name_scope("s") as s:
        assert s == "s" and g.unique_name("v") == "s/v" and g.unique_name("v") == "s/v_1"
    with g.name_scope("s") as s2:
        assert s2 == "s_1"
    # a region traced in the graph names its ops as if built in line
    p = tfc.placeholder(tfc.float32, [], name="p")
    tfc.cond(p > 0.0, lambda: tfc.identity(p, name="v"), lambda: tfc.identity(p, name="v"))
    assert g.unique_name("v") == "v_7"


def test_one_location_per_user_line():
    x = tfc.placeholder(tfc.float32, [2])
    ys = [tfc.nn.relu(x) for _ in range(3)]
    locs = [y.value.op.loc for y in ys]
    assert locs[0] is locs[1] is locs[2]
    assert locs[0].file == __file__ and locs[0].line > 0


def test_inferred_types_are_built_once_per_distinct_type(monkeypatch):
    built = itertools.count()
    post_init = TensorType.__post_init__

    def counting(self):
        next(built)
        post_init(self)

    monkeypatch.setattr(TensorType, "__post_init__", counting)
    _mlp(3)  # (warms the cache with this width's types)
    before = next(built)
    g = _mlp(40)
    made = next(built) - before - 1
    # the ~890 ops of 40 layers, forward and backward, have a dozen distinct types (the
    # placeholders declare theirs); each new op built one before (574 on main). The bound
    # leaves room for the cache being emptied once (it holds 4096 types at most).
    assert len(g.ir.ops) > 850
    assert made <= 40, made


def test_each_op_is_inferred_once(monkeypatch):
    calls: dict[str, int] = {}
    for name in ("matmul", "add", "relu", "var.assign_sub", "optimizer.grad", "constant"):
        opdef = lookup(name)
        infer = opdef.infer

        def counting(inputs, attrs, _infer=infer, _name=name):
            calls[_name] = calls.get(_name, 0) + 1
            return _infer(inputs, attrs)

        monkeypatch.setattr(opdef, "infer", counting)
    g = _mlp(5)
    kinds: dict[str, int] = {}
    for op in g.ir.ops:
        kinds[op.kind] = kinds.get(op.kind, 0) + 1
    assert calls == {k: kinds[k] for k in calls}


# ---- the fast paths agree with the general rules -------------------------------------------

_DIMS = [1, 2, 3, "B", "N", "?"]


def _shapes(rng: np.random.Generator, n: int):
    for _ in range(n):
        ra, rb = rng.integers(0, 4, 2)
        a = tuple(_DIMS[i] for i in rng.integers(0, len(_DIMS), ra))
        b = tuple(_DIMS[i] for i in rng.integers(0, len(_DIMS), rb))
        if rng.random() < 0.5 and ra:  # b a suffix of a (a bias), or the other way round
            b = a[int(rng.integers(0, ra + 1)):]
            if rng.random() < 0.5:
                a, b = b, a
        yield a, b


@pytest.mark.parametrize("kind", ["add", "mul", "greater", "logical_and"])
def test_binary_inference_is_broadcasting(kind):
    dtype = DType.bool if kind == "logical_and" else DType.f32
    out = {"greater": DType.bool}.get(kind, dtype)
    opdef = lookup(kind)
    for a, b in _shapes(np.random.default_rng(0), 400):
        want = broadcast_shapes(a, b)
        ta, tb = TensorType(dtype, a), TensorType(dtype, b)
        if want is None:
            with pytest.raises(TypeMismatch, match="do not broadcast"):
                opdef.infer([ta, tb], {})
            continue
        assert opdef.infer([ta, tb], {}) == [TensorType(out, want)], (a, b)


def test_where_and_matmul_inference_are_the_general_rules():
    where = lookup("where")
    for a, b in _shapes(np.random.default_rng(1), 200):
        want = broadcast_shapes(a, a, b)
        args = [TensorType(DType.bool, a), TensorType(DType.f32, a), TensorType(DType.f32, b)]
        if want is not None:
            assert where.infer(args, {}) == [TensorType(DType.f32, want)]
    mm = lookup("matmul")
    flags = {"transpose_a": False, "transpose_b": True}
    assert mm.infer([TensorType(DType.f32, ("B", 3)), TensorType(DType.f32, (5, 3))],
                    flags) == [TensorType(DType.f32, ("B", 5))]
    assert mm.infer([TensorType(DType.f32, (2, "B", 3)), TensorType(DType.f32, (5, 3))],
                    flags) == [TensorType(DType.f32, (2, "B", 5))]
    with pytest.raises(TypeMismatch, match="inner dims 3 and 4 differ"):
        mm.infer([TensorType(DType.f32, (2, 3)), TensorType(DType.f32, (4, 5))],
                 {"transpose_a": False, "transpose_b": False})


def test_attrs_already_normal_pass_as_the_rules_would():
    samples = {"int": 3, "float": 2.5, "bool": True, "str": "s", "var": "W",
               "dtype": DType.f32, "tensor": np.zeros(2)}
    assert set(samples) == set(registry._ALREADY_NORMAL)
    for kind, v in samples.items():
        assert type(v) is registry._ALREADY_NORMAL[kind]
        assert registry._ATTR_CHECKS[kind](v)
        convert = registry._ATTR_CONVERT.get(kind)
        if convert is not None:
            assert convert(v) is v or (convert(v) == v and type(convert(v)) is type(v))
        assert AttrSpec(kind).check("op", "a", v) is v
    ints = AttrSpec("ints")
    assert ints.check("op", "a", (1, 2)) == (1, 2)
    assert ints.check("op", "a", [np.int64(1), 2]) == (1, 2)
    assert type(ints.check("op", "a", (np.int64(1),))[0]) is int
    for bad in [(True,), (1.0,), "12"]:
        with pytest.raises(TypeMismatch, match="is not of kind ints"):
            ints.check("op", "a", bad)
    with pytest.raises(TypeMismatch, match="is not of kind int"):
        AttrSpec("int").check("op", "a", True)


def test_make_op_errors_are_unchanged():
    x = core.Value(TensorType(DType.f32, (2, 3)))
    i = core.Value(TensorType(DType.i32, (2, 3)))
    at = api_graph.Location("model.py", 7)
    with pytest.raises(TypeMismatch, match="model.py:7: add takes 2 inputs, got 1"):
        make_op("add", [x], loc=at)
    with pytest.raises(TypeMismatch, match="model.py:7: add: inputs have different dtypes"):
        make_op("add", [x, i], loc=at)
    with pytest.raises(TypeMismatch, match="model.py:7: sum: unknown attr 'axis'"):
        make_op("sum", [x], {"axis": 0}, loc=at)
    with pytest.raises(TypeMismatch, match="missing required attr 'var'"):
        make_op("var.assign", [x], loc=at)

    class Declared(OpDef):
        name = "test.declared"
        num_inputs = 0

        def infer(self, inputs, attrs):
            return None

    with registry.registered(Declared):
        with pytest.raises(tfc.TfcError, match="result types must be given"):
            make_op("test.declared", [])
        op = make_op("test.declared", [], result_types=[TensorType(DType.f32, ())])
        assert [str(r.type) for r in op.results] == ["f32[]"]


def test_bias_and_scalar_errors_name_the_users_line():
    x = tfc.placeholder(tfc.float32, [4, 3])
    b = tfc.Variable(np.zeros(4, np.float32), name="b")
    with pytest.raises(TypeMismatch) as e:
        x + b  # MARK-bias
    assert e.value.loc is not None and e.value.loc.file == __file__
    assert "add: shapes f32[4,3] and f32[4] do not broadcast" in str(e.value)
