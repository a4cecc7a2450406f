"""tfc.pipeline, the one owner of the pass pipeline: targets, pass options, the memory
budget, IR dumps after every pass (fusion and memory included), the compile report's
timings, the artifact's final IR, and no other caller of the pass manager."""

from __future__ import annotations

import ast
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tfc.backends.llvm import LLVMBackend
from tfc.cli import main
from tfc.compiler.driver import compile_with_report
from tfc.errors import TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
from tfc.ir.types import DType, TensorType
from tfc.passes import PassSpec, parse_bytes, parse_pipeline
from tfc.pipeline import Target, lower, lower_entry, target_pipeline

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MODEL = """\
var @w : f32[2]

graph @__init__() -> () {
  %0 = constant dense<f32[2]: 1.0, 2.0> : f32[2]
  var.assign @w, %0
  return
}

graph @predict(%x: f32[B,2]) -> (y: f32[B,2]) {
  %w = var.read @w : f32[2]
  %0 = add %x, %w : f32[B,2]
  %1 = tanh %0 : f32[B,2]
  %2 = mul %1, %1 : f32[B,2]
  return %2
}
"""


def mlp_like(n: int = 64) -> Module:
    g = Graph("f")
    x = g.add_arg(TensorType(DType.f32, ("B", n)), "x")
    b = Builder(g)
    g.set_results([b("tanh", b("exp", b("mul", x, x)))])
    return Module({"f": g})


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.tfir"
    path.write_text(MODEL)
    return path


# ---- pass options --------------------------------------------------------------------

def test_options_parse_into_specs() -> None:
    specs = parse_pipeline("canonicalize, cse,memory{budget=64MiB},dce")
    assert specs == [PassSpec("canonicalize"), PassSpec("cse"),
                     PassSpec("memory", (("budget", 64 << 20),)), PassSpec("dce")]
    assert str(specs[2]) == f"memory{{budget={64 << 20}}}"
    assert parse_pipeline([str(specs[2])]) == [specs[2]]  # text round trip
    assert [parse_bytes(t) for t in ("4096", "1GiB", "2KiB", "3MB", "7B")] == [
        4096, 1 << 30, 2048, 3_000_000, 7]


@pytest.mark.parametrize("text, message", [
    ("memroy", "unknown pass 'memroy' (did you mean 'memory'?)"),
    ("memory{budgt=1}", "pass 'memory' has no option 'budgt' (its options: budget, gemm_updates)"),
    ("cse{budget=1}", "pass 'cse' has no option 'budget' (its options: none)"),
    ("memory{budget=lots}", "pass 'memory': bad value 'lots' for option 'budget'"),
    ("memory{budget=1,budget=2}", "option 'budget' is given twice"),
    ("memory{budget}", "option 'budget' should be key=value"),
    ("memory{budget=1", "unbalanced braces"),
    ("{budget=1}", "bad pass"),
])
def test_bad_pipelines_are_clear_errors(text: str, message: str) -> None:
    with pytest.raises(TfcError) as e:
        parse_pipeline(text)
    assert message in str(e.value)


def matmul_chain() -> Module:
    """x @ w -> tanh -> @ w: after fusion, intermediates of f32[B,64] live in the arena."""
    g = Graph("f")
    x = g.add_arg(TensorType(DType.f32, ("B", 64)), "x")
    w = g.add_arg(TensorType(DType.f32, (64, 64)), "w")
    b = Builder(g)
    g.set_results([b("matmul", b("tanh", b("matmul", x, w)), w)])
    return Module({"f": g})


def test_memory_budget() -> None:
    module = lower(matmul_chain(), Target("llvm"), passes="memory{budget=1MiB}")
    arena = module.memory_plans["f"].arena_bytes({"B": 128, "?": 128})
    assert arena > 4096
    with pytest.raises(TfcError) as e:
        lower(matmul_chain(), Target("llvm"), passes="cse,memory{budget=4KiB}")
    assert str(e.value) == (f"memory: the arena of @f needs {arena} bytes "
                            f"({arena / 1024:.1f} KiB) (at the nominal size B=128 of its "
                            f"symbolic dims), over the budget of 4096 bytes (4.0 KiB)")
    static = Graph("g")
    x = static.add_arg(TensorType(DType.f32, (4, 256)), "x")
    b = Builder(static)
    static.set_results([b("tanh", b("exp", x))])
    with pytest.raises(TfcError, match=r"@g needs 4096 bytes \(4.0 KiB\), over the budget "
                                       r"of 100 bytes") as e:
        lower(Module({"g": static}), Target("reference"), passes="memory{budget=100}")
    assert "nominal" not in str(e.value)


# ---- targets -------------------------------------------------------------------------

def test_target_pipelines() -> None:
    names = lambda specs: [p.name for p in specs]  # noqa: E731
    assert names(target_pipeline(Target("llvm"))) == ["canonicalize", "cse", "dce", "fusion",
                                                      "memory"]
    assert names(target_pipeline(Target("reference"))) == ["canonicalize", "cse", "dce"]
    assert names(target_pipeline(Target("llvm"), "cse")) == ["cse", "fusion", "memory"]
    # a lowering pass named with options runs in the backend's place, once
    assert target_pipeline(Target("llvm"), "memory{budget=1KiB},cse") == [
        PassSpec("cse"), PassSpec("fusion"), PassSpec("memory", (("budget", 1024),))]
    assert names(target_pipeline(Target("llvm", ("/cpu:0",)), "")) == [
        "placement", "fusion", "memory"]
    two = ("/cpu:0", "/cpu:1")
    assert names(target_pipeline(Target("llvm", two, True), "")) == [
        "placement", "partition", "compress", "fusion", "memory"]
    assert names(target_pipeline(Target("reference", two), "")) == ["placement", "partition"]
    assert names(target_pipeline(Target("llvm", two), "", place=False)) == [
        "partition", "fusion", "memory"]


def test_lower_records_the_target_and_lower_entry_leaves_the_module() -> None:
    module = mlp_like()
    assert module.lowered_for is None
    one = lower_entry(module, "f", "llvm")
    assert one.lowered_for == Target("llvm") and "f" in one.memory_plans
    assert not module.memory_plans and [op.kind for op in module.graphs["f"].ops] == [
        "mul", "exp", "tanh"]
    assert [op.kind for op in one.graphs["f"].ops] == ["fusion"]
    assert lower(module, Target("llvm")) is module and module.lowered_for == Target("llvm")


def test_lower_entry_remembers_lowerings_by_content(monkeypatch) -> None:
    """Building and compiling the same graph again (a new module, equal content) runs no
    pass; another graph, or the same one with big constants, is lowered anew."""
    import tfc.passes.manager as manager
    first = lower_entry(mlp_like(), "f", "llvm")
    runs: list[str] = []
    real = manager.PassManager.run
    monkeypatch.setattr(manager.PassManager, "run",
                        lambda self, m: runs.append("ran") or real(self, m))
    assert lower_entry(mlp_like(), "f", "llvm") is first and runs == []
    other = lower_entry(mlp_like(32), "f", "llvm")
    assert other is not first and runs == ["ran"]
    assert lower_entry(mlp_like(), "f", "reference").lowered_for == Target("reference")

    def heavy() -> Module:
        g = Graph("f")
        x = g.add_arg(TensorType(DType.f32, (1 << 19,)), "x")
        b = Builder(g)
        g.set_results([b("add", x, b("constant", value=np.ones(1 << 19, np.float32)))])
        return Module({"f": g})
    assert lower_entry(heavy(), "f", "llvm") is not lower_entry(heavy(), "f", "llvm")


def test_llvm_backend_refuses_a_module_that_was_not_lowered() -> None:
    with pytest.raises(TfcError, match=r"@f has no memory plan.*lower it first "
                                       r"\(tfc.pipeline.lower"):
        LLVMBackend().compile(mlp_like(), "f")
    exe = LLVMBackend().compile(lower(mlp_like(), Target("llvm")), "f")
    x = np.full((3, 64), 0.5, np.float32)
    np.testing.assert_allclose(exe([x], {}, 0).fetches[0], np.tanh(np.exp(x * x)),
                               rtol=1e-6)


# ---- dumps, reports, artifacts ---------------------------------------------------------

def test_print_after_fusion_and_memory_through_the_api(model: Path) -> None:
    out = io.StringIO()
    compile_with_report(model, print_after=["fusion", "memory"], stream=out, backend="llvm")
    text = out.getvalue()
    assert "IR Dump After fusion" in text and "= fusion " in text
    after_memory = text[text.index("IR Dump After memory"):]
    assert "// memory plan @predict" in after_memory
    with pytest.raises(TfcError, match="cannot print the IR after pass 'fusion': it is not "
                                       "in the pipeline"):
        compile_with_report(model, print_after="fusion", stream=out, backend="reference")


def test_print_after_in_the_cli(model: Path, tmp_path: Path, capsys) -> None:
    assert main(["ir", str(model), "--backend", "llvm", "--print-after", "fusion"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("// -----// IR Dump After fusion //----- //") and "= fusion " in err
    assert "= fusion " in out and "// memory plan @predict" in out  # tfc ir: the final IR
    assert main(["compile", str(model), "-o", str(tmp_path / "m.tfc"), "--backend", "llvm",
                 "-q", "--print-after-all"]) == 0
    err = capsys.readouterr().err
    for name in ("canonicalize", "cse", "dce", "fusion", "memory"):
        assert f"IR Dump After {name} //" in err
    for argv in (["ir", str(model), "--print-after", "placement"],
                 ["compile", str(model), "-o", str(tmp_path / "n.tfc"), "--print-after",
                  "placement"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: cannot print the IR after pass 'placement': it is "
                              "not in the pipeline")
    assert not (tmp_path / "n.tfc").exists()


def test_compile_report_times_every_pass(model: Path, tmp_path: Path, capsys) -> None:
    assert main(["compile", str(model), "-o", str(tmp_path / "m.tfc"),
                 "--backend", "llvm"]) == 0
    out = capsys.readouterr().out
    for name in ("canonicalize", "cse", "dce", "fusion", "memory"):
        assert f"pass {name}" in out
    _, report = compile_with_report(model, backend="llvm")
    assert [n for n, _ in report.pass_seconds] == [
        "canonicalize", "cse", "dce", "fusion", "memory"]
    # (the llvm backend's memory pass plans no buffers for what its GEMM updates absorb)
    assert report.pipeline == ["canonicalize", "cse", "dce", "fusion",
                               "memory{gemm_updates=True}"]


def test_the_artifact_stores_the_final_ir(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    out = tmp_path / "mlp.tfc"
    assert main(["compile", str(EXAMPLES / "mlp_digits.py"), "-o", str(out),
                 "--backend", "llvm", "-q"]) == 0
    with zipfile.ZipFile(out) as zf:
        ir = zf.read("module.tfir").decode()
    assert ir.count("= fusion ") >= 3
    from tfc.runtime import load
    program = load(out)
    x = np.zeros((2, 64), np.float32)
    fetches = program.run("predict", x=x)
    assert all(np.all(np.isfinite(v)) for v in fetches.values())


def test_an_artifact_compiled_again_for_other_devices_is_lowered_afresh(tmp_path: Path,
                                                                       capsys,
                                                                       monkeypatch) -> None:
    """A .tfc is the final IR of its target: compiled again for another target, its stage
    graphs, partition tables and memory plans go first (they were one device, or cut for
    other devices), and a table naming devices the module lacks is refused. (A profile
    under which the model splits: the default one keeps it on one device.)"""
    from tfc.devices import PROFILE_ENV, save_profile
    from tfc.runtime import load
    from tfc.testing import splitting_profile
    monkeypatch.setenv(PROFILE_ENV, str(save_profile(splitting_profile(),
                                                     tmp_path / "devices.json")))
    two, one = tmp_path / "two.tfc", tmp_path / "one.tfc"
    model = str(EXAMPLES / "mlp.tfm")
    assert main(["compile", model, "--devices", "cpu:0,cpu:1", "-o", str(two), "-q"]) == 0
    assert main(["compile", str(two), "-o", str(one), "-q"]) == 0  # failed: no memory plan
    x = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float32)
    a, b = load(two), load(one)
    assert set(a.module.partitions) == {"predict", "evaluate", "train_step"}
    assert not b.module.partitions and b.module.devices == []
    assert not [g for g in b.module.graphs if ".cpu" in g]  # no stage graph is left
    np.testing.assert_allclose(a.run("predict", x=x)["probs"], b.run("predict", x=x)["probs"],
                               rtol=1e-5, atol=1e-6)
    stale = a.module
    stale.devices = ["/cpu:0", "/cpu:2"]
    with pytest.raises(TfcError, match=r"device /cpu:1 is not one of the module's"):
        stale.partitions["predict"].check(stale)


# ---- one owner ---------------------------------------------------------------------------

def test_only_the_pipeline_runs_the_pass_manager() -> None:
    """Every caller goes through tfc.pipeline: no other module of tfc/ calls run_passes
    or builds a PassManager (imports included, inside functions too)."""
    allowed = {Path("tfc/passes/manager.py"), Path("tfc/pipeline.py"),
               Path("tfc/passes/__init__.py")}  # the package re-exports them
    offenders = []
    for path in sorted((ROOT / "tfc").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(rel))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.Name):
                names = [node.id]
            if {"run_passes", "PassManager"} & set(names):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, offenders


@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_a_program_never_runs_a_module_that_does_not_verify(backend):
    """A module handed to Program is verified before anything runs it: an add declared
    f32[3] on f32[4] inputs ran natively and returned [2, 2, 2, 0] (lower_entry lowered
    without verifying)."""
    from tfc.errors import VerifyError
    from tfc.ir.core import Graph, Module, Op
    from tfc.ir.types import DType, TensorType
    from tfc.runtime import Program
    g = Graph("f")
    x = g.add_arg(TensorType(DType.f32, (4,)), "x")
    add = g.append(Op("add", [x, x], {}, [TensorType(DType.f32, (3,))]))
    g.set_results([add.results[0]])
    with pytest.raises(VerifyError, match="differ from the inferred"):
        Program(Module({"f": g}, {}), backend=backend).run("f", x=np.ones(4, np.float32))


@pytest.fixture
def cuda_named(monkeypatch):
    """A ``cuda`` backend to lower for (``tfc.testing.StandInCudaBackend``: the CUDA
    backend's lowering passes), and a CUDA compiler said to be there."""
    from tfc.testing import use_stand_in_cuda
    use_stand_in_cuda(monkeypatch)


def test_a_gpu_among_the_devices_brings_the_cuda_backends_lowering_passes(cuda_named):
    """The GPU's part compiles on CUDA from fused, planned graphs, whatever the CPU
    part's backend; each lowering pass runs once."""
    from tfc.pipeline import lowering_passes, usable_as_lowered
    names = lambda t: [p.name for p in lowering_passes(t)]  # noqa: E731
    assert names(Target("reference", ("/cpu:0",))) == []
    assert names(Target("reference", ("/cpu:0", "/gpu:0"))) == ["fusion", "memory"]
    assert names(Target("llvm", ("/cpu:0", "/gpu:0"))) == ["fusion", "memory"]
    assert [p.name for p in target_pipeline(Target("reference", ("/cpu:0", "/gpu:0")))
            ][-3:] == ["partition", "fusion", "memory"]
    # a reference program runs a module lowered by llvm for the same devices as it is,
    # and with a GPU only if that lowering ran the GPU's passes
    m = Module({})
    m.lowered_for = Target("llvm", ("/cpu:0", "/gpu:0"))
    assert usable_as_lowered(m, Target("reference", ("/cpu:0", "/gpu:0")))
    m.lowered_for = Target("reference", ("/cpu:0",))
    assert not usable_as_lowered(m, Target("llvm", ("/cpu:0",)))


def test_compiling_for_a_gpu_needs_the_cuda_compiler_not_a_gpu(monkeypatch):
    from tfc.pipeline import check_devices_runnable, cuda_compile_unavailable
    check_devices_runnable(["/cpu:0", "/cpu:1"])  # no GPU: nothing asked
    monkeypatch.setattr("tfc.pipeline.cuda_compile_unavailable", lambda: "no NVRTC")
    with pytest.raises(TfcError, match="/gpu:1: cannot compile for a GPU on this machine: "
                                       "no NVRTC"):
        check_devices_runnable(["/cpu:0", "/gpu:1"])
    monkeypatch.undo()
    from tfc.backends import base
    monkeypatch.delitem(base.BACKENDS, "cuda", raising=False)
    assert cuda_compile_unavailable() == "this tfc has no CUDA backend"
