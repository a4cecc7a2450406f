"""The verifier: one test per invariant, each checking that the error names the op's
kind, its index and its source location."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import Location, VerifyError
from tfc.ir.builder import Builder
from tfc.ir.core import INIT_GRAPH, Graph, Module, Op, VariableDecl
from tfc.ir.registry import OpDef, all_ops, registered
from tfc.ir.types import DType, TensorType
from tfc.ir.verifier import verify_graph, verify_module

F32_3 = TensorType(DType.f32, (3,))
F32_B3 = TensorType(DType.f32, ("B", 3))
LOC = Location("model.py", 12)


def graph_with_args(*types: TensorType, name: str = "main") -> tuple[Graph, list]:
    g = Graph(name)
    return g, [g.add_arg(t, f"a{i}") for i, t in enumerate(types)]


def module_of(*graphs: Graph, **variables: TensorType) -> Module:
    return Module({g.name: g for g in graphs},
                  {k: VariableDecl(k, t) for k, t in variables.items()})


def check_error(fn, *parts: str) -> VerifyError:
    with pytest.raises(VerifyError) as e:
        fn()
    for p in parts:
        assert p in str(e.value), f"{p!r} not in {str(e.value)!r}"
    return e.value


def test_valid_module_passes() -> None:
    g, (x, y) = graph_with_args(F32_B3, F32_3)
    b = Builder(g, loc=LOC)
    w = b("var.read", var="W", result_types=[F32_3])
    s = b("add", x, y)
    t = b("mul", s, w)
    b.op("var.assign", b("sum", t, axes=[0]), var="W")
    g.set_results([t], ["out"])
    init = Graph(INIT_GRAPH)
    c = Builder(init)("constant", value=np.ones(3, np.float32))
    Builder(init).op("var.assign", c, var="W")
    verify_module(module_of(g, init, W=F32_3))


def test_use_before_definition() -> None:
    g, (x,) = graph_with_args(F32_3)
    b = Builder(g, loc=LOC)
    e = b("exp", x)
    b("neg", e)
    g.ops.reverse()  # neg now uses exp's result before it is defined
    err = check_error(lambda: verify_graph(g), "@main: op 0 'neg'", "defined later (op 1)",
                      "model.py:12")
    assert err.loc == LOC


def test_value_from_another_graph() -> None:
    other, (z,) = graph_with_args(F32_3, name="other")
    g, (x,) = graph_with_args(F32_3)
    Builder(g, loc=LOC)("add", x, z)
    check_error(lambda: verify_graph(g), "op 0 'add'", "%a0", "not defined in this graph",
                "model.py:12")


class WithBody(OpDef):
    """A test-only op owning one region (its result is its input's type)."""

    name = "test.with_body"
    num_inputs = 1
    region_names = ("body",)

    def infer(self, inputs, attrs):
        return [inputs[0]]


def test_region_isolated_from_above() -> None:
    g, (x,) = graph_with_args(F32_3)
    b = Builder(g, loc=LOC)
    y = b("exp", x)
    region, (r,) = graph_with_args(F32_3, name="body")
    Builder(region, loc=Location("model.py", 20))("add", r, y)  # y is from the parent
    region.set_results([r])
    g.append(Op("test.with_body", [y], {}, [F32_3], loc=LOC, regions=[region]))
    with registered(WithBody):
        check_error(lambda: verify_graph(g), "op 1 'test.with_body' region 0: op 0 'add'",
                    "enclosing graph", "isolated from above", "model.py:20")


def test_region_valid() -> None:
    g, (x,) = graph_with_args(F32_3)
    region, (r,) = graph_with_args(F32_3, name="body")
    region.set_results([Builder(region)("exp", r)])
    g.append(Op("test.with_body", [x], {}, [F32_3], regions=[region]))
    with registered(WithBody):
        verify_graph(g)


def test_op_without_regions_may_not_own_one() -> None:
    """An ordinary op carrying a region (a mutation the parser accepts) was run by llvm's
    region code and corrupted the heap; every op owns exactly its schema's regions."""
    g, (x,) = graph_with_args(F32_3)
    region, (r,) = graph_with_args(F32_3, name="fused_0")
    region.set_results([r])
    g.append(Op("exp", [x], {}, [F32_3], loc=LOC, regions=[region]))
    check_error(lambda: verify_graph(g), "op 0 'exp'", "has 1 regions, expected 0",
                "model.py:12")
    g2, (x2,) = graph_with_args(F32_3)
    g2.append(Op("test.with_body", [x2], {}, [F32_3], loc=LOC))
    with registered(WithBody):
        check_error(lambda: verify_graph(g2), "has 0 regions, expected 1 (body)")


def test_value_defined_twice() -> None:
    g, (x,) = graph_with_args(F32_3)
    op = Builder(g, loc=LOC).op("exp", x)
    g.append(op)
    check_error(lambda: verify_graph(g), "op 1 'exp'", "defined twice", "model.py:12")


def test_argument_listed_twice() -> None:
    g, (x,) = graph_with_args(F32_3)
    g.args.append(x)
    check_error(lambda: verify_graph(g), "listed twice")


def test_unknown_op_kind() -> None:
    g, (x,) = graph_with_args(F32_3)
    g.append(Op("frobnicate", [x], {}, [F32_3], loc=LOC))
    check_error(lambda: verify_graph(g), "op 0 'frobnicate'", "unknown op", "model.py:12")


def test_result_type_differs_from_inference() -> None:
    g, (x, y) = graph_with_args(F32_B3, F32_3)
    g.append(Op("add", [x, y], {}, [F32_3], loc=LOC))
    check_error(lambda: verify_graph(g), "op 0 'add'", "f32[3]", "f32[B,3]", "model.py:12")


def test_inference_error_is_reported() -> None:
    g, (x, y) = graph_with_args(F32_3, TensorType(DType.f32, (4,)))
    g.append(Op("add", [x, y], {}, [F32_3], loc=LOC))
    check_error(lambda: verify_graph(g), "op 0 'add'", "do not broadcast", "model.py:12")


def test_attrs_must_be_complete() -> None:
    g, (x,) = graph_with_args(F32_3)
    g.append(Op("sum", [x], {"axes": None}, [TensorType(DType.f32, ())], loc=LOC))
    check_error(lambda: verify_graph(g), "op 0 'sum'", "missing keepdims", "model.py:12")


def test_unknown_attr() -> None:
    g, (x,) = graph_with_args(F32_3)
    g.append(Op("exp", [x], {"axis": 1}, [F32_3], loc=LOC))
    check_error(lambda: verify_graph(g), "op 0 'exp'", "unknown attr 'axis'")


def test_var_read_of_undeclared_variable() -> None:
    g, _ = graph_with_args()
    Builder(g, loc=LOC).op("var.read", var="V", result_types=[F32_3])
    verify_graph(g)  # without a module, variables are not checked
    check_error(lambda: verify_module(module_of(g, W=F32_3)), "op 0 'var.read'",
                "@V is not declared", "model.py:12")


def test_var_read_type_must_match_declaration() -> None:
    g, _ = graph_with_args()
    Builder(g, loc=LOC).op("var.read", var="W", result_types=[F32_B3])
    check_error(lambda: verify_module(module_of(g, W=F32_3)), "op 0 'var.read'",
                "declared f32[3]", "model.py:12")


def test_assign_type_must_be_exact() -> None:
    g, (x, y) = graph_with_args(F32_3, TensorType(DType.f32, (4,)))
    b = Builder(g, loc=LOC)
    b.op("var.assign", x, var="V")
    b.op("var.assign", y, var="W")
    check_error(lambda: verify_module(module_of(g, W=F32_3, V=F32_3)), "op 1 'var.assign'",
                "assigns a f32[4] to @W, declared f32[3]", "model.py:12")


@pytest.mark.parametrize("kind", ["var.assign", "var.assign_add", "var.assign_sub"])
@pytest.mark.parametrize("dims,declared", [(("B",), (4,)), (("?",), (4,)),
                                           (("B", 64), (10, 64))])
def test_assign_of_symbolic_value_to_fixed_variable(kind: str, dims: tuple,
                                                    declared: tuple) -> None:
    """A symbolic dim is not a fixed size: ``var.assign @v, %x`` with ``%x: f32[B]`` for
    ``@v: f32[4]`` read past %x's buffer when B < 4 (and f32[B,64] for f32[10,64]
    crashed the kmeans example)."""
    g, (x,) = graph_with_args(TensorType(DType.f32, dims))
    Builder(g, loc=LOC).op(kind, x, var="W")
    want = TensorType(DType.f32, declared)
    check_error(lambda: verify_module(module_of(g, W=want)), f"op 0 '{kind}'",
                f"assigns a {TensorType(DType.f32, dims)} to @W, declared {want}",
                "model.py:12")


def test_scatter_updates_must_be_rows_of_the_variable() -> None:
    i32_b = TensorType(DType.i32, ("B",))
    ok = TensorType(DType.f32, ("B", 3))
    for updates, bad in ((ok, False), (TensorType(DType.f32, ("B", "C")), True),
                         (TensorType(DType.f32, ("B", 4)), True),
                         (TensorType(DType.f64, ("B", 3)), True)):
        g, (i, u) = graph_with_args(i32_b, updates)
        Builder(g, loc=LOC).op("var.scatter_add", i, u, var="W")
        module = module_of(g, W=TensorType(DType.f32, (10, 3)))
        if bad:
            check_error(lambda: verify_module(module), "op 0 'var.scatter_add'",
                        "are not rows of @W", "model.py:12")
        else:
            verify_module(module)


def test_every_op_naming_a_variable_has_a_variable_rule() -> None:
    """State ops are checked by their registry entry's ``verify_variable``; an op with a
    ``var`` attr that lacks one would go unchecked into native code."""
    state = {k: d for k, d in all_ops().items() if d.names_variable()}
    assert {"var.read", "var.assign", "var.scatter_add"} <= set(state)
    for kind, opdef in state.items():
        assert type(opdef).verify_variable is not OpDef.verify_variable, kind


def test_assign_dtype_must_match() -> None:
    g, (x,) = graph_with_args(TensorType(DType.f64, (3,)))
    Builder(g, loc=LOC).op("var.assign_add", x, var="W")
    check_error(lambda: verify_module(module_of(g, W=F32_3)), "'var.assign_add'", "f64[3]")


def test_variable_assigned_twice() -> None:
    g, (x,) = graph_with_args(F32_3)
    b = Builder(g, loc=LOC)
    b.op("var.assign", x, var="W")
    b.loc = Location("model.py", 14)
    b.op("var.assign_sub", x, var="W")
    check_error(lambda: verify_graph(g), "op 1 'var.assign_sub'", "@W is assigned twice",
                "also by op 0", "model.py:14")


def test_undefined_graph_result() -> None:
    other, (z,) = graph_with_args(F32_3, name="other")
    g, _ = graph_with_args()
    g.set_results([z], ["loss"])
    check_error(lambda: verify_graph(g), "@main: result 0 ('loss')", "not defined")


def test_result_names_must_match_results() -> None:
    g, (x,) = graph_with_args(F32_3)
    g.results, g.result_names = [x], ["a", "b"]
    check_error(lambda: verify_graph(g), "1 results but 2 result names")


def test_result_names_unique() -> None:
    g, (x,) = graph_with_args(F32_3)
    g.set_results([x, x], ["a", "a"])
    check_error(lambda: verify_graph(g), "result name 'a' is used twice")


def test_init_graph_takes_no_args() -> None:
    init, _ = graph_with_args(F32_3, name=INIT_GRAPH)
    check_error(lambda: verify_module(module_of(init)), "@__init__ takes no arguments")


def test_graph_key_must_match_name() -> None:
    g, _ = graph_with_args()
    check_error(lambda: verify_module(Module({"other": g})), "registered as @other")


def test_each_distinct_op_is_type_checked_once_per_module(monkeypatch) -> None:
    """A decoded module shares types and attrs among equal ops (and a region copied from
    another its ops'): the type check of an op is a function of those, done once per
    distinct (kind, attrs, input and result types); the other checks run for every op."""
    from tfc.ir import verifier
    from tfc.ir.bytecode import module_from_bytes, module_to_bytes
    g, (x,) = graph_with_args(F32_B3)
    b = Builder(g)
    ys = [b("mul", b("exp", x), b("constant", value=np.array(2.0, np.float32)))
          for _ in range(20)]
    g.set_results(ys)
    module = module_from_bytes(module_to_bytes(module_of(g)), infer=False)
    checked = []
    real = verifier._GraphVerifier.check_types
    monkeypatch.setattr(verifier._GraphVerifier, "check_types",
                        lambda self, i, op, opdef: checked.append(op.kind) or real(
                            self, i, op, opdef))
    verify_module(module)
    assert sorted(checked) == ["constant", "exp", "mul"]
    # one op that differs (its result type) is checked, and rejected, as ever
    bad = module.graphs["main"].ops[-1]
    bad.results[0].type = F32_3
    check_error(lambda: verify_module(module), "@main: op 59 'mul'", "differ from the inferred")
    # an op defined twice is caught though its twin's check is remembered
    ops = module.graphs["main"].ops
    bad.results[0].type = ops[2].results[0].type
    ops.append(ops[2])
    check_error(lambda: verify_module(module), "@main: op 60 'mul'", "is defined twice")


REPEATED_REGIONS = """\
graph @main(%x: f32[3], %p: bool[]) -> (y: f32[3]) {
  %a = cond %p, %x : f32[3] (
    graph @then0(%t: f32[3]) -> (r: f32[3]) {
      %e = exp %t : f32[3]
      return %e
    }
    graph @else0(%t: f32[3]) -> (r: f32[3]) {
      return %t
    }
  )
  %b = cond %p, %a : f32[3] (
    graph @then1(%u: f32[3]) -> (r: f32[3]) {
      %e = exp %u : f32[3]
      return %e
    }
    graph @else1(%u: f32[3]) -> (r: f32[3]) {
      return %u
    }
  )
  return %b
}
"""


def _graphs_checked(monkeypatch) -> list[str]:
    from tfc.ir import verifier
    names: list[str] = []
    real = verifier._GraphVerifier.run
    monkeypatch.setattr(verifier._GraphVerifier, "run",
                        lambda self: names.append(self.graph.name) or real(self))
    return names


def test_a_copy_of_a_region_that_passed_is_checked_once(monkeypatch) -> None:
    """Regions the decoder read as copies (version-2 references) are checked as the region
    they copy, once (a 64-layer MLP's fusion regions are mostly copies); the op that holds
    copies is checked as any op, but for its kind's own checks (``OpDef.verify_op``) where
    an op with the same attrs and types, holding what they copy, passed them."""
    from tfc.ir.bytecode import module_from_bytes, module_to_bytes
    from tfc.ir.parser import parse_module
    data = module_to_bytes(parse_module(REPEATED_REGIONS))
    copies: dict[int, Graph] = {}
    module = module_from_bytes(data, infer=False, copies=copies)
    regions = [r for op in module.graphs["main"].ops for r in op.regions]
    assert copies == {id(regions[2]): regions[0], id(regions[3]): regions[1]}
    checked = _graphs_checked(monkeypatch)
    from tfc.ops.control import Cond
    holders: list[str] = []
    real = Cond.verify_op
    monkeypatch.setattr(Cond, "verify_op", lambda self, op, m: holders.append(
        op.results[0].name) or real(self, op, m))
    verify_module(module, copies)
    assert checked == ["main", "then0", "else0"]
    assert holders == ["a"]  # (cond %b: the same types, its regions copies of %a's)
    checked.clear()
    holders.clear()
    verify_module(module)
    assert checked == ["main", "then0", "else0", "then1", "else1"]
    assert holders == ["a", "b"]


def test_a_copy_of_a_region_not_checked_yet_is_checked(monkeypatch) -> None:
    """Only a copy of a region that passed in the same call is skipped."""
    from tfc.ir.parser import parse_module
    module = parse_module(REPEATED_REGIONS)
    regions = [r for op in module.graphs["main"].ops for r in op.regions]
    regions[0].ops[0].kind = "log"  # (then0 differs from then1 now: no copy of it)
    checked = _graphs_checked(monkeypatch)
    # then0 claimed to be a copy of then1, which comes after it
    verify_module(module, {id(regions[0]): regions[2], id(regions[3]): regions[1]})
    assert checked == ["main", "then0", "else0", "then1"]
    regions[0].results[0].type = TensorType(DType.f32, (4,))
    check_error(lambda: verify_module(module, {id(regions[0]): regions[2]}),
                "op 0 'cond' region 0: op 0 'log': result types (f32[4])")
