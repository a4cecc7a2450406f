"""CUDA C to PTX without a GPU: NVRTC (or nvcc) options, error messages, the PTX cache."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tfc.backends.cuda import nvrtc
from tfc.backends.cuda.kernel import Kernel, Launch, Param, module_source

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="no NVRTC or nvcc "
                                 "(pip install 'nvidia-cuda-nvrtc==13.0.*')")

AXPY = Kernel("axpy", r"""
extern "C" __global__ void axpy(const float* a, const float* b, const float* c, float* y,
                                long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = a[i] * b[i] + c[i];
}
""", (Param("a", "const float*"), Param("b", "const float*"), Param("c", "const float*"),
      Param("y", "float*"), Param("sym_n", "long long")), Launch(("n",), 256, 256))

BROKEN = Kernel("broken", """extern "C" __global__ void broken(float* y) {
  float x = 1.0f;
  y[threadIdx.x] = x + undefined_name;
  y[0] = 2.0f;
}
""", (Param("y", "float*"),), Launch((1,), 32, 32))


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    return tmp_path / "cuda"


@needs_nvrtc
def test_ptx_has_the_kernel_for_the_architecture(private_cache):
    ptx = nvrtc.compile_ptx(module_source([AXPY]))
    assert ".visible .entry axpy(" in ptx and ".target sm_90" in ptx
    assert ".target sm_80" in nvrtc.compile_ptx(module_source([AXPY]), arch="compute_80")


@needs_nvrtc
def test_no_fma_contraction(private_cache):
    """``a*b + c`` rounds twice, as numpy computes it: without --fmad=false NVRTC fuses it."""
    ptx = nvrtc.compile_ptx(module_source([AXPY]))
    assert "mul.rn.f32" in ptx and "add.rn.f32" in ptx and "fma" not in ptx
    contracted, _ = nvrtc._compiler().compile(module_source([AXPY]), "tfc.cu",
                                              ("--gpu-architecture=compute_90", "-std=c++17"))
    assert "fma.rn.f32" in contracted  # the option is what keeps it out


@needs_nvrtc
def test_compile_error_shows_the_log_and_the_numbered_source(private_cache):
    source = module_source([BROKEN])
    bad_line = source.splitlines().index("  y[threadIdx.x] = x + undefined_name;") + 1
    with pytest.raises(nvrtc.CudaCompileError) as err:
        nvrtc.compile_ptx(source)
    message = str(err.value)
    assert "CUDA C does not compile (tfc.cu" in message
    assert 'identifier "undefined_name" is undefined' in message
    assert f">{bad_line:5d} |   y[threadIdx.x] = x + undefined_name;" in message
    assert f" {bad_line - 1:5d} |   float x = 1.0f;" in message
    assert not list(private_cache.glob("*.ptx"))  # nothing cached for a failure


@needs_nvrtc
def test_ptx_is_cached_by_source_and_options(private_cache, monkeypatch):
    ptx = nvrtc.compile_ptx(module_source([AXPY]))
    assert len(list(private_cache.glob("*.ptx"))) == 1
    real = nvrtc._compiler()

    def refuse(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(nvrtc, "_compiler", lambda: nvrtc._Compiler(real.identity, refuse))
    assert nvrtc.compile_ptx(module_source([AXPY])) == ptx
    with pytest.raises(AssertionError, match="compiled again"):  # other options: other key
        nvrtc.compile_ptx(module_source([AXPY]), arch="compute_80")


def test_bad_architecture_is_a_clear_error():
    with pytest.raises(nvrtc.CudaCompileError, match="bad CUDA architecture 'sm90'"):
        nvrtc.options_for("sm90")


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(nvrtc, "_compiler", lambda: None)
    assert not nvrtc.available()
    with pytest.raises(nvrtc.CudaCompileError, match="nvidia-cuda-nvrtc==13.0"):
        nvrtc.compile_ptx(module_source([AXPY]))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on PATH")
def test_nvcc_fallback_compiles_and_reports_errors_alike():
    nvcc = nvrtc._nvcc_compiler(shutil.which("nvcc"))
    ptx, _ = nvcc.compile(module_source([AXPY]), "tfc.cu", nvrtc.options_for("compute_90"))
    assert ptx is not None and ".entry axpy(" in ptx and "fma" not in ptx
    source = module_source([BROKEN])
    ptx, log = nvcc.compile(source, "tfc.cu", nvrtc.options_for("compute_90"))
    assert ptx is None and '"undefined_name" is undefined' in log
    bad_line = source.splitlines().index("  y[threadIdx.x] = x + undefined_name;") + 1
    assert f">{bad_line:5d} |" in nvrtc.source_context(source, log)


@needs_nvrtc
@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas on PATH")
def test_ptxas_assembles_the_ptx(tmp_path, private_cache):
    """The PTX is what the driver of a GPU with this CUDA version accepts."""
    path = tmp_path / "k.ptx"
    path.write_text(nvrtc.compile_ptx(module_source([AXPY])))
    run = subprocess.run(["ptxas", "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


def test_numbered_lines_marks_errors_and_joins_close_ranges():
    source = "\n".join(f"line {i}" for i in range(1, 21))
    text = nvrtc.numbered_lines(source, {5, 7, 18})
    assert text.splitlines()[0] == "     2 | line 2"
    assert ">    5 | line 5" in text and ">    7 | line 7" in text
    assert text.count("    6 | line 6") == 1  # overlapping context printed once
    assert "   ..." in text and ">   18 | line 18" in text and "   20 | line 20" in text
    assert "line 12\n" not in text + "\n"
    assert nvrtc.numbered_lines("a\nb", set()) == "     1 | a\n     2 | b"
