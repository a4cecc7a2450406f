"""Variables initialized by one op from attrs alone (zeros, fill, seeded random ...) are
stored in artifacts as that op, not as data, and computed when first needed with the
values the backend's ``__init__`` run always gave them."""

import json
import warnings
import zipfile
from types import MappingProxyType

import numpy as np
import pytest

from tfc.backends.base import get_backend
from tfc.errors import ArtifactError
from tfc.ir.core import INIT_GRAPH
from tfc.ir.parser import parse_module
from tfc.runtime import Program, load
from tfc.runtime import initializers as inits
from tfc.testing import compile_lowered

BACKENDS = ["reference", "llvm"]

# every kind of initializer op: each generator in several dtypes, a splat constant (what
# canonicalize folds `zeros` into), and a constant holding data (stored as data)
MODEL = """\
var @z : f32[3,4]
var @o : f64[5]
var @f : f16[2,3]
var @fi : i32[4]
var @r : f32[6]
var @u : f32[64,8]
var @u16 : f16[33]
var @n : f32[7,9]
var @n64 : f64[11]
var @t : f32[40]
var @ui : i64[17]
var @s : f32[2,2]
var @d : f32[3]
var @count : i64[]

graph @__init__() -> () {
  %0 = zeros {shape=[3, 4]} : f32[3,4]
  var.assign @z, %0
  %1 = ones {dtype=f64, shape=[5]} : f64[5]
  var.assign @o, %1
  %2 = fill {dtype=f16, shape=[2, 3], value=0.1} : f16[2,3]
  var.assign @f, %2
  %3 = fill {dtype=i32, shape=[4], value=-7.0} : i32[4]
  var.assign @fi, %3
  %4 = range {delta=0.1, dtype=f32, limit=0.6, start=0.0} : f32[6]
  var.assign @r, %4
  %5 = random.uniform {maxval=0.25, minval=-0.25, seed=1, shape=[64, 8]} : f32[64,8]
  var.assign @u, %5
  %6 = random.uniform {dtype=f16, seed=2, shape=[33]} : f16[33]
  var.assign @u16, %6
  %7 = random.normal {seed=3, shape=[7, 9], stddev=0.05} : f32[7,9]
  var.assign @n, %7
  %8 = random.normal {dtype=f64, mean=1.0, seed=4, shape=[11]} : f64[11]
  var.assign @n64, %8
  %9 = random.truncated_normal {seed=5, shape=[40]} : f32[40]
  var.assign @t, %9
  %10 = random.uniform_int {dtype=i64, maxval=1000, seed=6, shape=[17]} : i64[17]
  var.assign @ui, %10
  %11 = constant dense<f32[2,2]: 0.5> : f32[2,2]
  var.assign @s, %11
  %12 = constant dense<f32[3]: 1.0, 2.0, 3.0> : f32[3]
  var.assign @d, %12
  %13 = constant dense<i64[]: 0> : i64[]
  var.assign @count, %13
  return
}

graph @predict(%x: f32[3]) -> (y: f32[3]) {
  %0 = var.read @d : f32[3]
  %1 = mul %x, %0 : f32[3]
  return %1
}

graph @train() -> (count: i64[]) {
  %0 = var.read @n : f32[7,9]
  %1 = constant dense<f32[]: 2.0> : f32[]
  %2 = mul %0, %1 : f32[7,9]
  var.assign @n, %2
  %3 = constant dense<i64[]: 1> : i64[]
  var.assign_add @count, %3
  %4 = var.read @count : i64[]
  return %4
}
"""
RECIPES = {"z", "o", "f", "fi", "r", "u", "u16", "n", "n64", "t", "ui", "s", "count"}


def module():
    return parse_module(MODEL, "model.tfir")


def init_values(backend):
    """What the backend's run of the whole __init__ graph assigns (how every variable
    was initialized before initializers were kept as ops)."""
    exe = compile_lowered(get_backend(backend), module(), INIT_GRAPH)
    return dict(exe([], MappingProxyType({}), 0).updates)


def assert_same_bits(got, want):
    assert set(got) == set(want)
    for name, w in want.items():
        g = np.asarray(got[name])
        assert g.dtype == w.dtype and g.shape == w.shape, name
        assert g.tobytes() == np.ascontiguousarray(w).tobytes(), name


def test_recipes_are_the_ops_computed_from_attrs_alone():
    assert set(inits.recipes(module())) == RECIPES  # not @d: its constant holds data


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_are_bit_for_bit_those_of_the_init_graph(backend, tmp_path):
    want = init_values(backend)
    p = Program(module(), backend=backend)
    assert set(p.initializers) == RECIPES
    assert_same_bits(p.variables, want)
    # and after a save (before any run: ops, not data) and a load, on either backend
    p = Program(module(), backend=backend)
    p.save(tmp_path / "m.tfc")
    for other in BACKENDS:
        assert_same_bits(load(tmp_path / "m.tfc", backend=other).variables, want)


def test_artifact_stores_ops_not_data(tmp_path):
    p = Program(module())
    p.save(tmp_path / "m.tfc")
    with zipfile.ZipFile(tmp_path / "m.tfc") as zf:
        manifest = json.loads(zf.read("manifest.json"))
        names = zf.namelist()
        text = zf.read("module.tfir").decode()
    stored = {n for n, info in manifest["variables"].items() if info.get("initializer")}
    assert stored == RECIPES and manifest["version"] == 2
    assert [n for n in names if n.startswith("variables/")] == [manifest["variables"]["d"]["file"]]
    assert "random.normal {seed=3, shape=[7, 9], stddev=0.05}" in text


def test_trained_variables_become_data(tmp_path):
    p = load_saved(tmp_path)
    assert p.run("train")["count"] == 0  # reads see the start of the step
    p.save(tmp_path / "m.tfc")
    q = load(tmp_path / "m.tfc")
    assert set(q.initializers) == RECIPES - {"n", "count"}  # what train writes is data now
    want = init_values("reference")
    assert np.array_equal(q.variables["n"], want["n"] * np.float32(2))
    assert q.variables["count"] == 1 and q.step == 1
    assert_same_bits({k: q.variables[k] for k in q.initializers},
                     {k: want[k] for k in q.initializers})


def load_saved(tmp_path):
    Program(module()).save(tmp_path / "m.tfc")
    return load(tmp_path / "m.tfc")


def test_set_and_restored_variables_are_data(tmp_path):
    p = load_saved(tmp_path)
    p.set_variable("z", np.ones((3, 4), np.float32))
    assert "z" not in p.initializers
    p.save_checkpoint(tmp_path / "c.tfckpt")
    p.restore_checkpoint(tmp_path / "c.tfckpt")
    assert not p.initializers


def test_a_huge_zeros_param_makes_a_small_artifact(tmp_path, capsys):
    """The issue's case: 16 GiB of zeros used to be written out as a 16 GiB artifact."""
    from tfc.cli import main
    src = tmp_path / "big.tfm"
    src.write_text("input x: f32[B, 65536]\nparam W: f32[65536, 65536] = zeros\n"
                   "entry predict(x) { return y = x @ W }\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is materialized, so nothing warns
        assert main(["compile", str(src), "-o", str(tmp_path / "big.tfc")]) == 0
    out = capsys.readouterr().out
    assert "16.0 GiB stored as initializer ops" in out
    assert (tmp_path / "big.tfc").stat().st_size < 10_000
    p = load(tmp_path / "big.tfc")
    assert p.initializers["W"].kind == "zeros"


def test_materializing_a_large_variable_warns(monkeypatch):
    monkeypatch.setattr(inits, "LARGE_VARIABLE_BYTES", 1000)
    p = Program(module())
    with pytest.warns(UserWarning, match=r"variable @u \(f32\[64,8\]\) takes 2\.0 KiB of "
                                         r"memory, materialized from its initializer "
                                         r"'random.uniform'"):
        p.variables


def test_forged_initializers_are_refused(tmp_path):
    Program(module()).save(tmp_path / "m.tfc")
    with zipfile.ZipFile(tmp_path / "m.tfc") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])

    def write(name, m):
        out = tmp_path / name
        with zipfile.ZipFile(out, "w") as zf:
            for n, data in members.items():
                zf.writestr(n, json.dumps(m).encode() if n == "manifest.json" else data)
        return out

    m = json.loads(json.dumps(manifest))
    m["variables"]["d"]["initializer"] = True  # d has data, and no initializer op
    with pytest.raises(ArtifactError, match="variable 'd' is stored as an initializer, but "
                                            "the __init__ graph assigns it no initializer op"):
        load(write("a.tfc", m))
    m = json.loads(json.dumps(manifest))
    del m["variables"]["z"]["initializer"]
    m["variables"]["z"]["file"] = m["variables"]["d"]["file"]
    with pytest.raises(ArtifactError, match="__init__ graph assigns variable 'z', which has a "
                                            "file"):
        load(write("b.tfc", m))


PY_MODEL = """\
import tfc
x = tfc.placeholder(tfc.float32, [None, 4], name="x")
w = tfc.Variable(tfc.random.normal([4, 3], stddev=0.1, seed=7), name="w")
b = tfc.Variable(tfc.zeros([3]), name="b")
v = tfc.Variable(tfc.random.uniform([3], seed=8) * 2.0, name="v")
tfc.entry("predict", feeds={"x": x}, fetches={"y": tfc.matmul(x, w) + b + v})
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_model_initializers(backend, tmp_path):
    """A Python model's `tfc.Variable(tfc.random.normal(...))` and `tfc.zeros` are kept as
    ops through `tfc compile`, with the values a run of its __init__ graph gives."""
    from tfc.compiler.driver import compile_with_report, make_program
    src = tmp_path / "model.py"
    src.write_text(PY_MODEL)
    compiled, _ = compile_with_report(src)
    exe = compile_lowered(get_backend(backend), compiled, INIT_GRAPH)
    want = dict(exe([], MappingProxyType({}), 0).updates)
    make_program(compiled, src, backend=backend).save(tmp_path / "m.tfc")
    p = load(tmp_path / "m.tfc")
    # `v` is computed (uniform * 2): stored as data
    assert {n: op.kind for n, op in p.initializers.items()} == {
        "w": "random.normal", "b": "constant"}
    assert_same_bits(p.variables, want)


def test_an_init_graph_that_computes_is_refused(tmp_path):
    """An artifact's __init__ may only hold initializer ops and their assigns."""
    from tfc.ir.bytecode import module_to_bytes
    from tfc.ir.printer import print_module
    from tfc.ir.registry import make_op
    Program(module()).save(tmp_path / "m.tfc")
    with zipfile.ZipFile(tmp_path / "m.tfc") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    m = parse_module(members["module.tfir"].decode(), "m.tfir")
    init = m.graphs[INIT_GRAPH]
    zeros = init.ops[0]
    init.ops.insert(1, make_op("neg", [zeros.results[0]]))
    members["module.tfcb"] = module_to_bytes(m)
    members["module.tfir"] = print_module(m).encode()
    manifest = json.loads(members["manifest.json"])
    del manifest["sha256"]  # as written before digests: the members are not checked
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(tmp_path / "bad.tfc", "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    with pytest.raises(ArtifactError, match="the __init__ graph does more than assign "
                                            r"initializer ops \(neg\)"):
        load(tmp_path / "bad.tfc")
