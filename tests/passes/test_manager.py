"""The pass manager: pipelines, unknown names, registration, verification, dumps, timing."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tfc.errors import TfcError, VerifyError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
from tfc.ir.types import DType, TensorType
from tfc.passes import (DEFAULT_PIPELINE, PassManager, PassSpec, available_passes,
                        parse_pipeline, register_pass, run_passes)
from tfc.passes import manager

F32_3 = TensorType(DType.f32, (3,))


def small_module() -> Module:
    g = Graph("main")
    x = g.add_arg(F32_3, "x")
    b = Builder(g)
    one = b("constant", value=np.asarray(np.float32(1)))
    y = b("mul", b("add", x, b("sub", one, one)), one)
    b("exp", y)  # dead
    g.set_results([b("add", b("tanh", y), b("tanh", y))], ["out"])
    return Module({"main": g})


def test_builtin_passes_and_default_pipeline() -> None:
    assert {"canonicalize", "cse", "dce"} <= set(available_passes())
    m = run_passes(small_module(), DEFAULT_PIPELINE, verify=True)
    g = m.graphs["main"]
    assert [op.kind for op in g.ops] == ["tanh", "add"]
    assert g.ops[0].inputs == [g.args[0]]


def test_pipeline_parsing() -> None:
    assert parse_pipeline(" canonicalize, cse ,dce,") == [PassSpec("canonicalize"),
                                                          PassSpec("cse"), PassSpec("dce")]
    assert parse_pipeline(["cse", "dce"]) == [PassSpec("cse"), PassSpec("dce")]
    assert parse_pipeline("") == []


def test_unknown_pass_suggests_the_nearest_name() -> None:
    with pytest.raises(TfcError, match=r"unknown pass 'csee' \(did you mean 'cse'\?\)"):
        run_passes(small_module(), "canonicalize,csee")
    with pytest.raises(TfcError, match="did you mean 'dce'"):
        run_passes(small_module(), "cse", print_after="dcee")


def test_register_function_and_class_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager, "_PASSES", dict(manager._PASSES))
    seen: list[str] = []

    @register_pass("test-fn")
    def fn(module: Module) -> Module:
        seen.append("fn")
        return module

    @register_pass("test-cls")
    class Cls:
        def __call__(self, module: Module) -> None:  # in place, returns nothing
            seen.append("cls")

    m = small_module()
    assert run_passes(m, "test-fn,test-cls,test-fn") is m
    assert seen == ["fn", "cls", "fn"]
    with pytest.raises(TfcError, match="registered twice"):
        register_pass("test-fn")(fn)


def test_verify_blames_the_pass_that_broke_the_ir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager, "_PASSES", dict(manager._PASSES))

    @register_pass("test-breaker")
    def breaker(module: Module) -> Module:
        g = module.graphs["main"]
        g.ops.reverse()
        return module

    run_passes(small_module(), "test-breaker")  # unverified: nothing notices
    with pytest.raises(VerifyError, match="after pass 'test-breaker': @main: op 0"):
        run_passes(small_module(), "cse,test-breaker", verify=True)


def test_verify_checks_the_input_first() -> None:
    m = small_module()
    m.graphs["main"].ops.reverse()
    with pytest.raises(VerifyError) as e:
        run_passes(m, "cse", verify=True)
    assert "after pass" not in str(e.value)


def test_timings_are_recorded() -> None:
    timings: list[tuple[str, float]] = []
    run_passes(small_module(), "canonicalize,cse,dce", timings=timings)
    assert [n for n, _ in timings] == ["canonicalize", "cse", "dce"]
    assert all(t >= 0 for _, t in timings)
    pm = PassManager("cse,cse")
    pm.run(small_module())
    assert [n for n, _ in pm.timings] == ["cse", "cse"]


def _printer_available() -> bool:
    try:
        import tfc.ir.printer  # noqa: F401
    except ImportError:
        return False
    return True


needs_printer = pytest.mark.skipif(not _printer_available(),
                                   reason="tfc.ir.printer is not written yet")


@needs_printer
def test_print_after_writes_mlir_style_headers() -> None:
    from tfc.ir.printer import print_module

    out = io.StringIO()
    m = run_passes(small_module(), "canonicalize,cse,dce", print_after="cse", stream=out)
    text = out.getvalue()
    assert text.count("// -----// IR Dump After") == 1
    assert text.startswith("// -----// IR Dump After cse //----- //\n")
    after_dce = io.StringIO()
    run_passes(m, "dce", print_after_all=True, stream=after_dce)
    assert after_dce.getvalue() == (
        "// -----// IR Dump After dce //----- //\n" + print_module(m).rstrip("\n") + "\n\n")


@needs_printer
def test_print_after_all_defaults_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    run_passes(small_module(), ["canonicalize", "dce"], print_after_all=True)
    err = capsys.readouterr().err
    assert "IR Dump After canonicalize" in err and "IR Dump After dce" in err


def test_paused_gc_turns_the_collector_off_and_back_as_it_found_it() -> None:
    import gc
    assert gc.isenabled()
    with manager.paused_gc():
        assert not gc.isenabled()
        with manager.paused_gc():  # nested (a pipeline inside a compile)
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), manager.paused_gc():
        raise RuntimeError("a failing pass")
    assert gc.isenabled()
    gc.disable()
    try:
        with manager.paused_gc():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()


def test_no_cycle_collection_runs_during_a_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The objects a compile makes live until it ends: the collector's passes over them
    found nothing and cost up to half of lowering a large model (``paused_gc``)."""
    import gc
    monkeypatch.setattr(manager, "_PASSES", dict(manager._PASSES))
    collections: list[int] = []
    window: list[bool] = []

    @register_pass("test-gc-window")
    def toggle(module: Module) -> Module:
        window.append(not window[-1] if window else True)
        return module

    def record(phase: str, info: dict) -> None:
        if phase == "start" and window and window[-1]:
            collections.append(info["generation"])
    old = gc.get_threshold()
    gc.set_threshold(1)  # a collection at every allocation, were the collector on
    gc.callbacks.append(record)
    try:
        run_passes(small_module(), "test-gc-window,canonicalize,cse,dce,fusion,memory,"
                                   "test-gc-window")
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*old)
    assert window == [True, False] and collections == []


def test_type_key_is_equal_exactly_when_the_types_are() -> None:
    types = [TensorType(DType.f32, (3,)), TensorType(DType.f32, (3,)),
             TensorType(DType.f64, (3,)), TensorType(DType.f32, ("B", 3)),
             TensorType(DType.f32, ()), TensorType(DType.i32, (3,))]
    for a in types:
        for b in types:
            assert (manager.type_key(a) == manager.type_key(b)) == (a == b)
