"""tools/bench_cuda.py (issue #19's GPU benchmarks) and tools/gpu_check.sh, without a GPU:
the dry modes run every row of the harness (numpy for cupy, PyTorch on the CPU, the
generated kernels on the CUDA emulator) and check each row's numbers; the goals come out
right from the rows; a failing row only loses its cell; no GPU is one clear error."""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"


@pytest.fixture(scope="module")
def bc():
    sys.path.insert(0, str(TOOLS))
    try:
        yield importlib.import_module("bench_cuda")
    finally:
        sys.path.remove(str(TOOLS))


def _can_emulate() -> str | None:
    """Why the generated kernels cannot run here (None when they can)."""
    try:
        from tfc.backends.cuda import nvrtc
    except ImportError as e:
        return f"no tfc.backends.cuda ({e})"
    if not nvrtc.available():
        return "no NVRTC (pip install nvidia-cuda-nvrtc==13.0.*)"
    if shutil.which("g++") is None:
        return "no g++ for the CUDA emulator"
    return None


def _torch() -> bool:
    try:
        importlib.import_module("torch")
    except Exception:  # noqa: BLE001  (not installed, or broken: the rows say so)
        return False
    return True


def _run(tmp_path, *args, timeout=300):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(TOOLS / "bench_cuda.py"), "--json", str(out),
                           "--no-torch-compile", "--runs", "2", "--row-budget", "0.05", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def _cells(report):
    return {(r["workload"], r["contender"]): r for r in report["rows"]}


def _assert_checked(row):
    assert "error" not in row, row
    assert row["check"].startswith("ok"), row
    assert row["median_s"] > 0


def test_cpu_dry_run_times_and_checks_every_row(tmp_path):
    stdout, report = _run(tmp_path, "--device", "cpu", "--quick")
    cells = _cells(report)
    workloads = {w for w, _ in cells}
    assert workloads == {"chain f32 1M", "matmul f32 128", "matmul f16 128",
                         "MLP 64-32-32-10 step, batch 64",
                         "CNN 28x28 conv3x3x32-pool-dense step, batch 4",
                         "random: sum(dropout(X, 0.5)), X f32 64x256"}
    assert report["target"] == "cpu" and report["tfc_backend"] in ("llvm", "reference")
    for (w, c), row in cells.items():
        if c == "tfc step":
            _assert_checked(row)
        elif c.startswith("torch"):
            if _torch():
                _assert_checked(row)
            else:
                assert "torch" in row["error"]
        elif c.startswith(("copy", "numpy")):
            assert "error" not in row and row["median_s"] > 0
    kernel = cells[("chain f32 1M", "tfc kernel")]
    if _can_emulate() is None:  # the generated kernel on the emulator, checked
        _assert_checked(kernel)
        assert "1 kernel(s)" in kernel["note"] and "meaningless" in kernel["unit"]
    else:
        assert kernel["error"]
    # a dry run meets and misses nothing, whatever its ratios
    assert report["goals"] and all(g["met"] is None for g in report["goals"])
    assert "goals (issue #19)" in stdout and "dry mode" in stdout


@pytest.mark.slow
def test_emulated_run_is_the_cuda_backend_on_the_emulator(tmp_path):
    why = _can_emulate()
    if why:
        pytest.skip(why)
    _, report = _run(tmp_path, "--device", "emulated", "--workloads", "mlp")
    assert report["tfc_backend"] == "cuda"
    steps = [r for r in report["rows"] if r["contender"].startswith("tfc")]
    assert [r["contender"] for r in steps] == ["tfc step", "tfc step, batch on device"]
    for step in steps:
        _assert_checked(step)
        assert "cuda @train_step: 10 kernels" in step["note"]  # the compile report: on the GPU


def _stats(bc, seconds):
    return bc.Stats(seconds, seconds, seconds, 3, 1)


def _row(bc, workload, contender, seconds=None, **kw):
    return bc.Row(workload, contender, None if seconds is None else _stats(bc, seconds), **kw)


def test_goals_from_rows(bc):
    rows = [_row(bc, "chain", "copy (xp.copyto)", 1.0),
            _row(bc, "chain", "tfc kernel", 1.1, metric=90.0, unit="% of copy bandwidth"),
            _row(bc, "matmul f32 2048", "cupy matmul", 0.9),
            _row(bc, "matmul f32 2048", "cupy same work", 1.0),
            _row(bc, "matmul f32 2048", "tfc step", 1.25),
            _row(bc, "MLP step", "tfc step", 0.7),
            _row(bc, "MLP step", "torch eager", 1.0),
            _row(bc, "MLP step", "torch.compile", 0.6),
            _row(bc, "CNN step", "tfc step", error="TfcError: boom"),
            _row(bc, "CNN step", "torch eager", 1.0)]
    got = {(g.workload, g.what): g for g in bc.goals(rows)}
    chain = got[("chain", "tfc kernel / copy bandwidth")]
    assert chain.value == pytest.approx(0.9) and chain.met is True
    mm = got[("matmul f32 2048", "cupy / tfc")]
    assert mm.value == pytest.approx(0.8) and mm.met is False
    assert got[("MLP step", "tfc / torch eager")].met is True
    compiled = got[("MLP step", "tfc / torch.compile")]
    assert compiled.value == pytest.approx(0.7 / 0.6) and compiled.met is False
    cnn = got[("CNN step", "tfc / torch eager")]
    assert cnn.value is None and cnn.met is None and cnn.missing == "tfc step failed"
    assert "MISSED" in compiled.text() and "n/a" in cnn.text()
    # the same rows from a dry mode: nothing is met or missed
    assert all(g.met is None for g in bc.goals(rows, dry=True))


def test_chain_goal_needs_a_copy_bandwidth_and_a_gpu(bc):
    no_copy = bc.goals([_row(bc, "chain", "tfc kernel", 1.0, metric=1.0, unit="GB/s")])
    assert no_copy[0].value is None and no_copy[0].missing == "no copy bandwidth"
    emulated = bc.goals([_row(bc, "chain", "copy (xp.copyto)", 1.0),
                         _row(bc, "chain", "tfc kernel", 1.0, metric=1.0,
                              unit="GB/s (emulated, meaningless)")])
    assert emulated[0].value is None and emulated[0].missing == "not measured on a GPU"


def test_a_failing_row_keeps_its_error_and_the_next_row_runs(bc, tmp_path):
    path = tmp_path / "b.json"
    bench = bc.Bench(bc.make_target("cpu"), bc.Sizes.quick(), bc.Budget(2, 0.05), str(path),
                     compile_torch=False, quiet=True)

    def broken():
        raise RuntimeError("kernel exploded")

    bench.row("w", "a", broken)
    bench.row("w", "b", lambda: (bc.time_step(lambda: None, bench.budget), 1.0, "x", "ok", ""))
    saved = json.loads(path.read_text())
    assert [r["contender"] for r in saved["rows"]] == ["a", "b"]
    assert saved["rows"][0]["error"] == "RuntimeError: kernel exploded"
    assert saved["rows"][1]["median_s"] >= 0 and "error" not in saved["rows"][1]


def test_checks_reject_wrong_numbers(bc):
    import numpy as np
    assert bc._check(np.ones(4), np.ones(4), rtol=1e-6, atol=0).startswith("ok")
    with pytest.raises(AssertionError, match="1 of 4 differ"):
        bc._check(np.array([1, 1, 1, 1.01]), np.ones(4), rtol=1e-6, atol=0)
    with pytest.raises(AssertionError, match="wrong shape"):
        bc._check(np.ones(3), np.ones(4), rtol=1e-6, atol=0)
    with pytest.raises(AssertionError, match="wrong result"):
        bc._check_scalar(2.5, 2.0, 0.1)
    with pytest.raises(AssertionError, match="wrong result"):
        bc._check_scalar(float("nan"), 2.0, 0.1)


def _gpu_present() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001  (no cupy, no driver)
        return False


def test_no_gpu_is_one_clear_error(tmp_path):
    if _gpu_present():
        pytest.skip("a GPU is present")
    proc = subprocess.run([sys.executable, str(TOOLS / "bench_cuda.py"), "--quick"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --device cuda: "), proc.stderr


def test_unknown_workload_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, str(TOOLS / "bench_cuda.py"), "--device", "cpu",
                           "--workloads", "chain,conv"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: unknown workload(s) conv" in proc.stderr


@pytest.mark.slow
def test_gpu_check_script_runs_its_stages_into_out(tmp_path):
    """The script's plumbing with the test stages skipped and the bench in its dry mode:
    versions, bench log and JSON and a summary with each stage's status and the goals."""
    bash = shutil.which("bash")
    if bash is None or shutil.which("timeout") is None:
        pytest.skip("no bash/timeout")
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), SKIP_STAGES="cuda_tests suite",
               BENCH_ARGS="--device cpu --quick --workloads matmul --no-torch-compile "
                          "--runs 2 --row-budget 0.05",
               TFC_CACHE_DIR=str(tmp_path / "cache"), PYTHON=sys.executable)
    proc = subprocess.run([bash, str(TOOLS / "gpu_check.sh")], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    assert "stage versions: rc=0" in summary
    assert "stage cuda_tests: skipped" in summary and "stage suite: skipped" in summary
    assert "stage bench: rc=0" in summary
    assert "matmul f32 128: numpy / tfc" in summary  # the goals, copied from the bench log
    report = json.loads((out / "bench.json").read_text())
    assert report["target"] == "cpu" and report["rows"]
    assert "== python" in (out / "versions.txt").read_text()
    assert len(list(out.iterdir())) <= 8
    missing = subprocess.run([bash, str(TOOLS / "gpu_check.sh")],
                             env={k: v for k, v in env.items() if k != "OUT"},
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert missing.returncode != 0 and "set OUT" in missing.stderr


def test_first_step_notes_say_when_the_gpu_did_not_run_it(bc, monkeypatch):
    """A graph the cuda backend hands to the reference backend (control flow) runs, and its
    row's note says so, with the compile report: such a time is no GPU number."""
    if _can_emulate():
        pytest.skip(_can_emulate())
    import numpy as np
    import tfc
    from tfc.runtime import Program

    monkeypatch.setenv("TFC_CUDA_DEVICE", "emulated")
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [4], name="x")
        y = tfc.cond(tfc.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)
        tfc.entry("f", feeds={"x": x}, fetches={"y": y})
    prog = Program(g.as_module(), backend="cuda")
    step, out, note = bc.first_step(prog, "f", ["x"], "y", np.ones(4, np.float32))
    assert np.array_equal(out, np.full(4, 2.0, np.float32))
    assert "runs on the reference backend" in note and "cond" in note
    assert np.array_equal(step(), out)


def test_table_groups_rows_run_later_under_their_workload(bc):
    """torch.compile's rows run last (deferred), yet print under their own workload."""
    report = {"target": "cpu", "facts": {"device": "test"}, "tfc_backend": "llvm"}
    rows = [_row(bc, "MLP", "tfc step", 1.0), _row(bc, "CNN", "tfc step", 2.0),
            _row(bc, "MLP", "torch.compile", 3.0)]
    lines = bc.render(report, rows).splitlines()
    mlp, cnn = lines.index("MLP"), lines.index("CNN")
    assert mlp < cnn and "torch.compile" in lines[mlp + 2]
    assert sum(line == "MLP" for line in lines) == 1


class _NumpyAsCupy:
    """numpy with cupy's few extra names the bench uses on a GPU (``cuda.Device()
    .synchronize()``, ``asnumpy``): the ``cuda`` target's code paths, run on the CPU."""

    class cuda:  # noqa: N801  (cupy's spelling)
        class Device:
            def synchronize(self):
                pass

    def __getattr__(self, name):
        import numpy
        return getattr(numpy, name)

    @staticmethod
    def asnumpy(a):
        import numpy
        return numpy.asarray(a)


@pytest.mark.slow
def test_the_cuda_targets_rows_with_numpy_posing_as_cupy(bc, monkeypatch, tmp_path):
    """What only a GPU run takes: several launches per sample, the chain's kernel row as a
    share of the copy bandwidth, goals met or missed (not n/a), with the kernels on the
    emulator and numpy in cupy's place."""
    if _can_emulate():
        pytest.skip(_can_emulate())
    monkeypatch.setenv("TFC_CUDA_DEVICE", "emulated")
    target = bc.Target("cuda", _NumpyAsCupy(), "cuda", "cpu", {"device": "numpy as cupy"})
    sizes = bc.Sizes(chain_n=1024, matmul=(32,), matmul_dtypes=("float32",))
    bench = bc.Bench(target, sizes, bc.Budget(2, 0.05), str(tmp_path / "b.json"),
                     compile_torch=False, quiet=True)
    assert bc._repeat(2 * 1024 * 4, target) == 50  # tiny work: many launches per sample
    bench.chain()
    bench.matmul()
    cells = {(r.workload, r.contender): r for r in bench.rows}
    kernel = cells[("chain f32 1K", "tfc kernel")]
    assert kernel.error == "" and kernel.check.startswith("ok")
    assert kernel.unit == "% of copy bandwidth" and kernel.stats.inner >= 50
    step = cells[("matmul f32 32", "tfc step")]
    assert step.error == "" and step.check.startswith("ok") and "cupy/tfc" in step.note
    got = {g.what: g for g in bc.goals(bench.rows)}
    assert got["tfc kernel / copy bandwidth"].met is not None
    assert got["tfc kernel / copy bandwidth"].value == pytest.approx(kernel.metric / 100)
    assert got["cupy / tfc"].met is not None
    assert json.loads((tmp_path / "b.json").read_text())["target"] == "cuda"
