"""tools/bench.py: a smoke run in --quick mode prints its tables and writes JSON; each
contender is timed in processes of its own, on the same inputs; a framework that is
missing or fails to import only drops its column; the timing helper and the goal marks
say what BENCHMARKS.md asks."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"


@pytest.fixture(scope="module")
def tools():
    sys.path.insert(0, str(TOOLS))
    try:
        yield (importlib.import_module("bench"), importlib.import_module("bench_report"),
               importlib.import_module("bench_timing"))
    finally:
        sys.path.remove(str(TOOLS))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick run with PyTorch, JAX and TensorFlow shadowed by packages that fail to
    import (as a broken install would), and the slow-BLAS variables set (they must be
    unset)."""
    tmp = tmp_path_factory.mktemp("bench")
    for name in ("torch", "jax", "tensorflow"):
        (tmp / "fake" / name).mkdir(parents=True)
        (tmp / "fake" / name / "__init__.py").write_text(
            f"raise ImportError('{name} is broken on purpose (test)')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp / "fake"),
                                        env.get("PYTHONPATH", "")])
    env["OPENBLAS_CORETYPE"] = "Haswell"
    out = tmp / "out.json"
    proc = subprocess.run([sys.executable, str(TOOLS / "bench.py"), "--quick", "--backend",
                           "reference", "--json", str(out)], env=env, capture_output=True,
                          text=True, timeout=240, cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def test_quick_run_prints_tables(quick_run):
    stdout, _ = quick_run
    assert "timed workloads, 2 thread(s)" in stdout or "timed workloads, 1 thread(s)" in stdout
    for label in ("gelu_tanh(x*1.7+0.3)", "matmul f32 64x64", "MLP 64-32-32-10 SGD step",
                  "CNN conv3x3", "100 element-wise ops", "compile MLP step, cold",
                  "MLP step (batch 32) peak", "tfc/numpy", "goal (BENCHMARKS.md)",
                  "f32 FMA peak of the cores", "compile scaling (",
                  "compile scaling: 4-layer", "compile scaling: 16-layer"):
        assert label in stdout, label
    assert "OPENBLAS_CORETYPE was 'Haswell', unset for every contender" in stdout
    assert "BLAS openblas" in stdout  # numpy's BLAS, named by threadpoolctl
    assert "each contender in its own process" in stdout  # how the table was timed
    assert "each contender timed in processes of its own" in stdout and "run order: chain" in stdout


def test_broken_frameworks_only_drop_columns(quick_run):
    stdout, report = quick_run
    meta = report["meta"]
    assert meta["contenders"] == ["tfc", "numpy"]
    for name in ("torch", "jax", "tf", "tf-xla"):
        assert "broken on purpose" in meta["missing"][name]
        assert f"{name}: does not load" in stdout
        assert f"tfc/{name}" not in stdout
    assert "n/a <= 0.1x JAX jit dispatch" in stdout  # against a dropped column: n/a, no mark


def test_json_has_raw_numbers(quick_run):
    _, report = quick_run
    speed = next(iter(report["speed"].values()))
    mlp = speed["rows"]["mlp16"]["results"]
    for name in ("tfc", "numpy"):
        r = mlp[name]
        assert r["min"] <= r["median"] <= r["max"] and r["n"] >= 3
    assert set(report["memory"]) == {"tfc", "numpy"}
    assert report["memory"]["tfc"]["peak_rss"] > 0
    assert report["compile"]["tfc"]["cold"] > 0 and report["compile"]["tfc"]["cached"] > 0
    assert report["meta"]["backend"] == "reference"


def test_each_contender_runs_in_its_own_process(quick_run):
    """No two frameworks share a process (their thread pools would slow each other down),
    yet every contender of a row got the same inputs (seeded, checked by digest)."""
    _, report = quick_run
    speed = next(iter(report["speed"].values()))
    for row_id in ("chain", "matmul64", "mlp16", "cnn4", "dispatch"):
        res = speed["rows"][row_id]["results"]
        assert res["tfc"]["pid"] != res["numpy"]["pid"], row_id
        digests = speed["rows"][row_id]["inputs"]
        assert set(digests) == {"tfc", "numpy"} and digests["tfc"] == digests["numpy"]
    rows = speed["rows"]
    assert rows["copy"]["results"]["numpy"]["pid"] == rows["chain"]["results"]["numpy"]["pid"]
    assert rows["chain"]["results"]["tfc"]["pid"] != rows["dispatch"]["results"]["tfc"]["pid"]
    pids = [(p["contender"], p["pid"]) for p in speed["processes"]]
    assert len({pid for _, pid in pids}) == len(pids)  # one process per contender and group
    assert list(rows)[:3] == ["copy", "chain", "matmul64"]  # the table's order, not the run's
    assert set(speed["order"]) == {"chain", "matmul", "peak", "mlp", "cnn", "dispatch"}
    # The FMA peak: in a process of its own, where no BLAS pool ran (one spinning after
    # tfc's products halved the 2-thread peak), and only tfc's process is started for it.
    peak = rows["fma_peak"]["results"]["tfc"]
    assert speed["order"]["peak"] == ["tfc"] and rows["fma_peak"]["group"] == "peak"
    assert peak["pid"] not in {rows[r]["results"]["tfc"]["pid"] for r in ("matmul64", "mlp16")}
    assert list(speed["versions"]) == ["tfc", "numpy"]


def test_contender_order_rotates(tools):
    bench, _, _ = tools
    cs = ["tfc", "numpy", "torch", "jax"]
    firsts = [bench.contender_order(cs, g, 0)[0] for g in range(4)]
    assert firsts == cs  # each contender leads one group
    assert bench.contender_order(cs, 0, 1) == ["numpy", "torch", "jax", "tfc"]
    assert sorted(bench.contender_order(cs, 3, 1)) == sorted(cs)
    assert bench.contender_order([], 2, 0) == []
    assert bench.timed_groups(["dispatch", "memory", "chain"]) == ["chain", "dispatch"]


def test_cells_with_differing_inputs_become_errors(tools):
    bench, _, _ = tools
    ok = {"median": 1.0, "min": 1.0, "max": 1.0, "n": 20}
    rows = {"a": {"results": {c: dict(ok) for c in "wxyz"},
                  "inputs": {"w": "d1", "x": "d1", "y": "d2", "z": "d1"}},
            "b": {"results": {c: dict(ok) for c in "wx"}, "inputs": {"w": "d1", "x": "d2"}},
            "c": {"results": {"w": dict(ok)}, "inputs": {"w": "d1"}}}
    bench.check_inputs(rows)
    a = rows["a"]["results"]
    assert "inputs differ" in a["y"]["error"] and all("error" not in a[c] for c in "wxz")
    assert all("inputs differ" in rows["b"]["results"][c]["error"] for c in "wx")  # a tie
    assert rows["c"]["results"]["w"] == ok


def test_input_digest_sees_values_shapes_and_dtypes(tools):
    import numpy as np
    wl = importlib.import_module("bench_workloads")
    data = wl.Data()
    d = wl.input_digest((data.mlp_params((4, 3, 2)), *data.mlp_batch(3, (4, 3, 2))))
    assert d == wl.input_digest((wl.Data().mlp_params((4, 3, 2)),
                                 *wl.Data().mlp_batch(3, (4, 3, 2))))
    x = np.arange(6, dtype=np.float32)
    assert len({wl.input_digest((x,)), wl.input_digest((x.reshape(2, 3),)),
                wl.input_digest((x.astype(np.float64),)), wl.input_digest((x[::-1],)),
                wl.input_digest(([x],))}) == 5


def test_a_contender_dying_before_it_loads_drops_its_column(tools, monkeypatch):
    """A framework whose import kills the worker (no version reported) is listed as
    unavailable and not started again for later groups; the others' rows are kept."""
    bench, _, _ = tools
    started = []

    def fake_worker(kind, args, threads, contenders, backend, rows=None, group=None):
        [name] = contenders
        started.append((group, name))
        if name == "jax":
            return {"error": "worker crashed (SIGSEGV)"}
        row = {"id": group, "group": group, "label": group, "kind": group, "unit": "ms",
               "results": {name: {"median": 1.0, "min": 1.0, "max": 1.0, "n": 20,
                                  "pid": len(started)}}, "inputs": {name: "d"}}
        return {"pid": len(started), "row_ids": [group], "rows": {group: row},
                "versions": {name: "1"}, "blas": {name: []}, "unavailable": {}}

    monkeypatch.setattr(bench, "run_worker", fake_worker)
    args = bench.parse_args(["--only", "chain,dispatch", "--quick"])
    res = bench.run_speed(args, 1, ["tfc", "jax", "numpy"], "reference")
    assert res["unavailable"] == {"jax": "worker crashed (SIGSEGV)"}
    assert ("dispatch", "jax") not in started and ("chain", "jax") in started
    assert set(res["rows"]["dispatch"]["results"]) == {"tfc", "numpy"}
    assert res["order"] == {"chain": ["tfc", "jax", "numpy"], "dispatch": ["numpy", "tfc"]}


def test_default_backend_is_llvm_when_it_loads(tools):
    bench, _, _ = tools
    from tfc.backends.base import get_backend
    try:
        get_backend("llvm")
        expected = "llvm"
    except Exception:
        expected = "reference"
    assert bench.resolve_backend("auto") == expected
    assert bench.resolve_backend("reference") == "reference"


def test_a_crash_in_native_code_loses_only_its_cell(tmp_path):
    """A contender that kills the worker (as a bad JIT kernel would) loses its cell of
    that row; the other contenders' cells and the later rows are still measured."""
    out = tmp_path / "out.json"
    env = dict(os.environ, TFC_BENCH_CRASH="chain:tfc")
    proc = subprocess.run([sys.executable, str(TOOLS / "bench.py"), "--quick", "--backend",
                           "reference", "--only", "chain,dispatch", "--contenders",
                           "tfc,numpy", "--json", str(out)], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = next(iter(json.loads(out.read_text())["speed"].values()))["rows"]
    assert rows["chain"]["results"]["tfc"] == {
        "error": "worker crashed (SIGSEGV)",
        "rounds": [{"error": "worker crashed (SIGSEGV)", "round": 0}]}
    assert rows["chain"]["results"]["numpy"]["n"] >= 3
    assert rows["chain"]["label"].startswith("gelu_tanh")
    assert rows["copy"]["results"]["numpy"]["n"] >= 3
    assert all(rows["dispatch"]["results"][c]["n"] >= 3 for c in ("tfc", "numpy"))
    assert "worker crashed" in proc.stdout


def test_markdown_from_json(quick_run, tools, tmp_path):
    bench, _, _ = tools
    _, report = quick_run
    text = bench.render(report, markdown=True)
    assert "| workload | tfc | numpy | tfc/numpy | goal (BENCHMARKS.md) | status |" in text
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    proc = subprocess.run([sys.executable, str(TOOLS / "bench.py"), "--from-json", str(path),
                           "--markdown"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "| matmul f32 128x128 |" in proc.stdout


def test_not_installed_frameworks_are_listed(tools, monkeypatch):
    bench, _, _ = tools
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    present, missing = bench.available(["tfc", "numpy", "torch", "jax"])
    assert present == ["tfc", "numpy"]
    assert "pip install torch==2.13.0" in missing["torch"]
    assert "pip install jax jaxlib" in missing["jax"]


def test_unknown_workload_is_refused(tools):
    bench, _, _ = tools
    with pytest.raises(SystemExit, match="unknown workload 'mpl'"):
        bench.parse_args(["--only", "mpl"])
    assert bench.parse_args(["--only", "tiny,MLP"]).only == ["dispatch", "mlp"]


def test_measure_takes_at_least_runs_samples(tools):
    _, _, bt = tools
    calls = []
    stats = bt.measure(lambda: calls.append(1), runs=20, warmup=2, min_sample_s=1e-4)
    assert stats.n == 20 and stats.inner >= 1 and stats.note == ""
    assert stats.min <= stats.median <= stats.max
    assert len(calls) >= 2 + 20 * stats.inner


def test_measure_runs_fewer_slow_steps_and_says_so(tools):
    _, _, bt = tools
    import time
    stats = bt.measure(lambda: time.sleep(0.01), runs=20, warmup=1, budget_s=0.02, floor=3)
    assert stats.n == 3 and "fewer than 20" in stats.note


def test_worker_env_unsets_slow_blas_vars(tools):
    _, _, bt = tools
    env = bt.worker_env(1, {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1",
                            "PATH": "/bin"})
    assert "OPENBLAS_CORETYPE" not in env and "OPENBLAS_L2_SIZE" not in env
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env["OMP_NUM_THREADS"] == "1"
    assert "intra_op_parallelism_threads=1" in env["XLA_FLAGS"]
    assert "XLA_FLAGS" not in bt.worker_env(2, {"PATH": "/bin"})


def _speed(results: dict, kind: str, work: float = 1.0, **extra) -> dict:
    row = {"label": kind, "kind": kind, "unit": "ms", "work": work, **extra,
           "results": {k: {"median": v, "min": v, "max": v, "n": 20} for k, v in results.items()}}
    return {"rows": {kind: row}}


def test_goal_marks(tools):
    _, br, _ = tools
    cs = ["tfc", "numpy", "torch", "jax", "tf", "tf-xla"]
    times = {"tfc": 1.0, "numpy": 3.0, "torch": 2.5, "jax": 1.2, "tf": 1.3, "tf-xla": 1.25}
    [row] = br.speed_rows(_speed(times, "mlp"), cs, " ")
    [rivals] = row.clauses  # no floor_limit: no GEMM-floor clause
    assert rivals.ok is True and rivals.detail == "0.83x JAX" and row.status == "pass"
    assert row.ratios == {"numpy": pytest.approx(1 / 3), "torch": 0.4,
                          "jax": pytest.approx(1 / 1.2), "tf": pytest.approx(1 / 1.3),
                          "tf-xla": 0.8}
    [row] = br.speed_rows(_speed({**times, "tf-xla": 1.05}, "cnn"), cs, " ")
    assert row.clauses[0].ok is False and row.clauses[0].detail == "0.95x TF XLA"
    assert "the best of TF (graph and XLA), JAX and PyTorch" in row.clauses[0].text
    [row] = br.speed_rows(_speed({"tfc": 1.0, "numpy": 3.0}, "cnn"), ["tfc", "numpy"], " ")
    assert row.status == "n/a" and all(c.ok is None for c in row.clauses)
    rows = _speed({"tfc": 1.0, "numpy": 0.98}, "matmul", work=2e9)["rows"]
    rows["mlp"] = _speed({"tfc": 1.0}, "mlp", work=2e9, floor_limit=1.05)["rows"]["mlp"]
    out = br.speed_rows({"rows": rows}, ["tfc", "numpy"], " ")
    assert out[0].clauses[0].ok is True  # 98% of numpy's BLAS
    floor = out[1].clauses[0]  # 2 GFLOP at numpy's 2.04 GFLOP/s: floor 0.98 s, tfc 1.0 s
    assert floor.ok is True and floor.text == "<= 1.05x its GEMM floor"
    assert floor.detail.startswith("1.02x of 980.00 ms at 2 GFLOP/s, numpy")


def test_compile_scaling_goals(tools):
    """The scaling row's goals: cold <= 1.0x JAX; the edit's compile (less a steady step)
    <= 10% of cold's."""
    _, br, _ = tools
    cells = {"tfc-cold": {"first": 0.5, "compile": 0.4, "step": 0.02},
             "tfc-edit": {"first": 0.2, "compile": 0.1, "step": 0.02},
             "tfc-cached": {"first": 0.1, "compile": 0.03, "step": 0.02},
             "jax": {"first": 1.0}, "tf": {"error": "timed out"}}
    [row] = br.scaling_rows({"64": cells}, ["tfc", "jax", "tf"])
    assert row.cells["tfc"] == "0.500 s / 0.200 s / 0.100 s"
    assert row.cells["tf"].startswith("error: timed out")
    assert row.ratios["jax"] == 0.5 and row.ratios["tf"] is None
    cold, edit = row.clauses
    assert cold.ok is True and cold.detail == "0.50x"
    assert edit.ok is False and edit.detail == "21%"  # (0.1 - 0.02) / (0.4 - 0.02)
    cells["tfc-edit"] = {"first": 0.12, "compile": 0.05, "step": 0.02}
    [row] = br.scaling_rows({"64": cells}, ["tfc"])
    assert row.clauses[1].ok is True and row.clauses[0].ok is None  # no JAX: n/a


def test_chain_goal_depends_on_the_threads(tools):
    """>= 95% of the copy bandwidth on 2 threads, >= 70% on 1; <= 0.3x JAX."""
    _, br, _ = tools
    speed = _speed({"tfc": 1.25, "jax": 5.0}, "chain", work=8.0, copy_work=8.0)
    speed["rows"]["copy"] = _speed({"numpy": 1.0}, "copy", work=8.0)["rows"]["copy"]
    for threads, ok in ((1, True), (2, False)):
        chain = br.speed_rows({**speed, "threads": threads}, ["tfc", "numpy", "jax"], " ")[0]
        bandwidth, jax = chain.clauses
        assert bandwidth.ok is ok and bandwidth.detail == "80%"
        assert jax.ok is True and jax.text == "<= 0.3x JAX"


def test_best_of_rivals_is_never_a_pass_against_some(tools):
    """A clause against the best of JAX, TF and PyTorch passes only when every one ran;
    missed against those that ran, it is a miss."""
    _, br, _ = tools
    all_ran = {"jax": 0.5, "torch": 0.4, "tf": 0.85, "tf-xla": 0.7}
    clause, best = br.best_of_rivals("x", 0.9, all_ran)
    assert clause.ok is True and best == "tf" and clause.detail == "0.85x TF"
    clause, best = br.best_of_rivals("x", 0.9, {"jax": 0.5, "tf": None, "torch": 0.4})
    assert clause.ok is None and "TF, TF XLA not measured" in clause.detail
    clause, best = br.best_of_rivals("x", 0.9, {"jax": 0.5, "tf-xla": 0.95})
    assert clause.ok is False and best == "tf-xla" and clause.detail == "0.95x TF XLA"
    assert br.best_of_rivals("x", 0.9, {"numpy": 0.1}) == (br.Clause("x", None), None)


def test_missed_mlp_goals_say_the_gemm_rate_they_need(tools):
    """2 GFLOP of GEMMs; TF (the fastest rival) 1.0 s: 0.9x TF is 0.9 s, 2.22 GFLOP/s =
    1.11x the peak; the peak row is 1 GFLOP at its fastest step, 0.5 s: 2 GFLOP/s."""
    _, br, _ = tools
    rows = _speed({"tfc": 1.0, "jax": 1.5, "torch": 4.0, "tf": 1.0, "tf-xla": 1.2}, "mlp",
                  work=2e9)["rows"]
    rows["fma_peak"] = _speed({"tfc": 0.5}, "peak", work=1e9, headline="fastest",
                              unit="GFLOP/s")["rows"]["peak"]
    rows["fma_peak"]["results"]["tfc"]["median"] = 0.8  # the headline is the fastest step
    rows["fma_peak"]["self_timed"] = True
    out = br.speed_rows({"rows": rows}, ["tfc", "torch", "jax", "tf", "tf-xla"], " ")
    [rivals] = out[0].clauses
    assert rivals.ok is False
    assert rivals.detail == "1.00x TF; needs GEMMs at 2 GFLOP/s = 1.11x the FMA peak"
    assert out[1].ratios == {} and out[1].clauses == []  # the peak is a reference row
    assert out[1].cells["tfc"].startswith("2 GFLOP/s (fastest step, CPU time) ")


def test_tf_columns_render_without_tensorflow(tools):
    """TensorFlow's two columns (graph and XLA), their ratios and their compile and memory
    cells come from saved numbers: the report needs no TensorFlow to render them."""
    bench, br, _ = tools
    cs = ["tfc", "numpy", "tf", "tf-xla"]
    speed = _round({"tfc": 0.002, "numpy": 0.004, "tf": 0.0025, "tf-xla": 0.003})
    speed["rows"]["mlp"]["floor_limit"] = 1.15
    report = {"meta": {"date": "d", "machine": {"cpu": "c", "cores": 2, "simd": ["avx2"],
                                                "memory_gib": 1, "python": "3"},
                       "backend": "llvm", "quick": False, "threads": [1], "missing": {},
                       "environment": {}, "contenders": cs},
              "speed": {"1": speed},
              "compile": {"tfc": {"cold": 0.3, "cached": 0.004, "recompiled": 0.01},
                          "tf": {"cold": 0.5}, "tf-xla": {"cold": 1.2}, "jax": {"cold": 0.7}},
              "memory": {c: {"batch": 1024, "baseline_rss": 2**20, "peak_rss": m * 2**20}
                         for c, m in (("tfc", 100), ("numpy", 80), ("tf", 700),
                                      ("tf-xla", 800))}}
    text = bench.render(report, markdown=True)
    assert ("| workload | tfc | numpy | tf | tf-xla | tfc/numpy | tfc/tf | tfc/tf-xla | "
            "goal (BENCHMARKS.md) | status |") in text
    assert "| 2.50 ms [2.50–2.50] n=20 | 3.00 ms [3.00–3.00] n=20 | 0.50x | 0.80x | 0.67x |" \
        in text
    assert "n/a <= 0.9x the best of JAX, TF and PyTorch (0.80x TF; JAX, PyTorch not " \
        "measured)" in text
    assert "| 0.300 s | — | 0.500 s | 1.200 s | — | 0.60x | 0.25x |" in text
    assert "n/a <= 0.5x the smallest of PyTorch's, JAX's and TF's (0.14x TF; JAX, " in text


@pytest.mark.slow  # ~20 s: TensorFlow's import and two XLA compiles
def test_tf_contender_matches_numpy(tools, tmp_path):
    """TensorFlow's versions of every workload (graph and XLA) compute what numpy's do on
    tiny inputs, with its thread pools at the bench's count (only where TensorFlow is
    installed; in a process of its own, in the bench's environment for 1 thread)."""
    pytest.importorskip("tensorflow")
    _, _, bt = tools
    script = tmp_path / "tf_check.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(TOOLS)!r})
import numpy as np
import bench_timing as bt
from bench_frameworks import TfContender, TfXlaContender
from bench_workloads import Data, NumpyContender, Sizes
d, s, ref = Data(), Sizes.quick(), NumpyContender(1)
for c in (TfContender(1), TfXlaContender(1)):
    tf = c.tf
    assert tf.config.threading.get_intra_op_parallelism_threads() == 1
    assert tf.config.threading.get_inter_op_parallelism_threads() == 1
    x = d.chain_x(999)
    np.testing.assert_allclose(c.chain(x)(), ref.chain(x)(), rtol=1e-5, atol=1e-6)
    a, b = d.matmul_ab(48)
    np.testing.assert_allclose(c.matmul(a, b)(), a @ b, rtol=1e-4, atol=1e-4)
    t = d.tiny_x()
    np.testing.assert_allclose(c.tiny(t)(), ref.tiny(t)(), rtol=1e-5, atol=1e-6)
    p, (xb, yb) = d.mlp_params(s.mlp_dims), d.mlp_batch(8, s.mlp_dims)
    mine, theirs = c.mlp(p, xb, yb), ref.mlp(p, xb, yb)
    np.testing.assert_allclose([mine() for _ in range(3)], [theirs() for _ in range(3)],
                               rtol=1e-4)
    p, (xb, yb) = d.cnn_params(), d.cnn_batch(2)
    mine, theirs = c.cnn(p, xb, yb), ref.cnn(p, xb, yb)
    np.testing.assert_allclose([mine() for _ in range(3)], [theirs() for _ in range(3)],
                               rtol=1e-4)
    p, (xb, yb) = d.mlp_params(s.mlp_dims), d.mlp_batch(8, s.mlp_dims)
    assert c.compile_mlp(p, xb, yb)["cold"] > 0
    print(c.name, "ok", c.version())
""")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=bt.worker_env(1))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tf ok" in proc.stdout and "tf-xla ok" in proc.stdout
    assert "jit_compile=True" in proc.stdout


def test_peak_steps_are_timed_by_their_cpu_time(tools):
    """A peak step reports the CPU seconds of its slowest thread (what the FMA units ran;
    another process holding a core does not add to it), and the bench times the row by
    what the step reports, not by the wall clock."""
    import time
    _, _, bt = tools
    bp = importlib.import_module("bench_peak")
    peak = bp.FmaPeak(2)
    t0 = time.perf_counter()
    cpu = peak.step()
    assert 0 < cpu <= (time.perf_counter() - t0) * 1.01
    reported = iter([0.5, 0.1, 0.3, 0.2, 0.4, 9.0])
    stats = bt.measure_self_timed(lambda: next(reported), runs=5, warmup=1)
    assert (stats.median, stats.min, stats.max, stats.n) == (0.3, 0.1, 0.9e1, 5)


def test_peak_loop_keeps_every_fma_pipe_busy_on_avx2_and_avx512(tools):
    """The FMA-peak loop, as O3 compiles it for an AVX-512 host (Zen 4, Skylake-X), an
    AVX2 one (Zen 3, Haswell) and this host: CHAINS independent FMAs per iteration on the
    widest registers (zmm / ymm), more chains than latency x pipes (so the loop is not
    latency-bound), nothing else in the loop but the counter: no spills, no reloads."""
    import re
    bp = importlib.import_module("bench_peak")
    assert bp.CHAINS > bp.FMA_LATENCY * bp.FMA_PIPES
    host_width = bp.vector_width()
    for cpu, width in (("znver4", 16), ("skylake-avx512", 16), ("znver3", 8),
                       ("haswell", 8), (None, host_width)):
        asm = bp.loop_assembly(cpu, width)
        loops = re.findall(r"^(\.LBB\d+_\d+):\n((?:\t.*\n)*?)\tj\w+\t\1$", asm, re.M)
        assert len(loops) == 1, (cpu, asm)
        body = [line.split() for line in loops[0][1].splitlines() if line.strip()]
        fmas = [ins for ins in body if ins[0].startswith("vfmadd")]
        reg = "zmm" if width == 16 else "ymm"
        assert len(fmas) == bp.CHAINS, (cpu, loops[0][1])
        assert all(all(op.strip("%,").startswith(reg) for op in ins[1:]) for ins in fmas)
        assert len({ins[-1] for ins in fmas}) == bp.CHAINS  # independent accumulators
        assert len(body) <= bp.CHAINS + 2 and "(" not in loops[0][1]  # counter; no memory
    assert host_width == (16 if "avx512f" in open("/proc/cpuinfo").read() else 8)


# ---- rounds: every cell from several processes, the best median as its headline ---------

def test_quick_run_with_two_rounds(tmp_path):
    """``--rounds 2`` runs every group twice, each time in fresh processes: each cell keeps
    both process medians, its headline is the lower one, and the table shows both."""
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(TOOLS / "bench.py"), "--quick", "--rounds", "2",
                           "--backend", "reference", "--only", "chain,dispatch",
                           "--contenders", "tfc,numpy", "--markdown", "--json", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["meta"]["rounds"] == 2
    speed = next(iter(report["speed"].values()))
    cells = [("copy", "numpy"), ("chain", "tfc"), ("chain", "numpy"),
             ("dispatch", "tfc"), ("dispatch", "numpy")]
    for row_id, c in cells:
        res = speed["rows"][row_id]["results"][c]
        rounds = res["rounds"]
        assert [r["round"] for r in rounds] == [0, 1], (row_id, c)
        assert all(r["n"] >= 3 and r["min"] <= r["median"] <= r["max"] for r in rounds)
        assert rounds[0]["pid"] != rounds[1]["pid"]  # two processes, not one
        assert res["median"] == min(r["median"] for r in rounds)
        assert res["median"] == rounds[res["best_round"]]["median"]
    assert len(speed["round_orders"]) == 2
    assert speed["round_orders"][0]["chain"] == speed["round_orders"][1]["chain"][::-1]
    assert {p["round"] for p in speed["processes"]} == {0, 1} and len(speed["processes"]) == 8
    assert "best of 2 rounds" in proc.stdout and "round 2: chain" in proc.stdout
    assert proc.stdout.count(", rounds ") == 5  # one per measured cell


def test_one_round_renders_like_a_report_saved_before_rounds(quick_run, tools):
    """The default (one round) prints what it printed before rounds existed, and a JSON
    saved then (no ``rounds``, ``best_round``, ``round_orders``) renders the same."""
    bench, _, _ = tools
    _, report = quick_run
    assert report["meta"]["rounds"] == 1
    old = json.loads(json.dumps(report))
    del old["meta"]["rounds"]
    for speed in old["speed"].values():
        del speed["round_orders"]
        for p in speed["processes"]:
            del p["round"]
        for row in speed["rows"].values():
            for res in row["results"].values():
                res.pop("rounds", None)
                res.pop("best_round", None)
    new_text = bench.render(report, markdown=True)
    assert ", rounds " not in new_text and "rounds: the lowest" not in new_text
    assert bench.render(old, markdown=True) == new_text


def test_best_of_picks_the_lowest_median(tools):
    _, _, bt = tools
    assert bt.best_of([{"median": 3.0}, {"median": 2.0}, {"median": 2.5}]) == 1
    assert bt.best_of([{"median": 2.0}, {"median": 2.0}]) == 0  # a tie: the earliest
    assert bt.best_of([{"error": "x"}, {"median": 9.0}, {}]) == 1  # failed rounds skipped
    assert bt.best_of([{"error": "x"}, {"error": "y"}]) is None
    assert bt.best_of([]) is None


def _cell(*medians, **extra):
    rounds = [{"error": "boom", "round": i} if m is None else
              {"median": m, "min": m * 0.98, "max": m * 1.14, "n": 20, "inner": 1,
               "note": "", "round": i} for i, m in enumerate(medians)]
    ok = [m for m in medians if m is not None]
    head = dict(rounds[medians.index(min(ok))]) if ok else {"error": "boom"}
    head.pop("round", None)
    return {**head, "rounds": rounds, **extra}


def test_cell_shows_the_best_round_and_every_rounds_median(tools):
    _, br, _ = tools
    ms = {"unit": "ms"}
    cell = _cell(6.61e-3, 5.37e-3)
    assert br.format_cell(cell, ms, " ") == "5.37 ms [5.26–6.12] n=20, rounds 6.61/5.37"
    assert br.format_cell(_cell(5.37e-3, None), ms, " ").endswith(", rounds 5.37/error")
    many = _cell(5e-3, 6e-3, None, 7e-3, 5.5e-3, 6.5e-3)
    assert br.format_cell(many, ms, " ").endswith(", rounds 5.00–7.00 of 6, 1 failed")
    assert br.format_cell(_cell(None, None), ms, " ") == "error: boom (all 2 rounds)"
    us = br.format_cell(_cell(3.8e-6, 7.1e-6), {"unit": "us"}, " ")
    assert us == "3.8 µs [3.7–4.3] n=20, rounds 3.8/7.1"
    gbs = br.format_cell(_cell(2e-3, 1e-3), {"unit": "GB/s", "work": 8e6}, " | ")
    assert gbs == "8.0 GB/s | 1.00 ms [0.98–1.14] n=20, rounds 2.00/1.00"  # throughput of the best
    one = {"median": 5.37e-3, "min": 5.24e-3, "max": 6.12e-3, "n": 20}  # saved before rounds
    assert br.format_cell(one, ms, " ") == "5.37 ms [5.24–6.12] n=20"
    assert br.format_cell(_cell(5.37e-3), ms, " ") == br.format_cell(
        {k: v for k, v in _cell(5.37e-3).items() if k != "rounds"}, ms, " ")
    assert "best of 3 rounds" in br.speed_title(2, 3) and "best" not in br.speed_title(2)


def _round(results: dict, digests: dict | None = None, **extra) -> dict:
    """A ``run_speed`` result with one row, 'mlp', and the given medians per contender."""
    row = {"label": "mlp", "kind": "mlp", "unit": "ms", "work": 1.0,
           "results": {c: ({"error": m} if isinstance(m, str) else
                           {"median": m, "min": m, "max": m, "n": 20, "pid": int(m * 1e3)})
                       for c, m in results.items()},
           "inputs": digests or {c: "d" for c in results}}
    return {"threads": 1, "rows": {"mlp": row}, "row_ids": ["mlp"],
            "versions": {c: "1" for c in results}, "blas": {}, "unavailable": {},
            "tfc_graph_ops": {}, "order": {"mlp": list(results)}, "notes": [],
            "processes": [{"contender": c, "group": "mlp", "pid": 1} for c in results],
            **extra}


def test_combine_rounds_takes_each_contenders_best(tools):
    """Each contender's headline is its own best round (the rounds need not agree), and
    the ratio compares the headlines."""
    bench, br, _ = tools
    res = bench.combine_rounds([_round({"tfc": 0.007, "jax": 0.006}),
                                _round({"tfc": 0.005, "jax": 0.0075})])
    cells = res["rows"]["mlp"]["results"]
    assert cells["tfc"]["median"] == 0.005 and cells["tfc"]["best_round"] == 1
    assert cells["jax"]["median"] == 0.006 and cells["jax"]["best_round"] == 0
    assert cells["tfc"]["pid"] == 5 and [r["pid"] for r in cells["tfc"]["rounds"]] == [7, 5]
    [row] = br.speed_rows(res, ["tfc", "jax"], " ")
    assert row.ratios["jax"] == pytest.approx(0.005 / 0.006)
    assert [p["round"] for p in res["processes"]] == [0, 0, 1, 1]
    assert len(res["round_orders"]) == 2 and res["order"] == {"mlp": ["tfc", "jax"]}


def test_combine_rounds_keeps_failures_apart(tools):
    """A round that failed, or whose inputs differ from the other processes', is not the
    headline; a contender that loaded in one round is not dropped for failing in another."""
    bench, _, _ = tools
    r0 = _round({"tfc": "worker crashed (SIGSEGV)", "numpy": 0.004})
    r1 = _round({"tfc": 0.009, "numpy": 0.001}, digests={"tfc": "d", "numpy": "other"})
    r2 = _round({"tfc": 0.008}, unavailable={"numpy": "ImportError: flaky"})
    r2["versions"] = {"tfc": "1"}
    res = bench.combine_rounds([r0, r1, r2])
    cells = res["rows"]["mlp"]["results"]
    assert cells["tfc"]["median"] == 0.008 and cells["tfc"]["best_round"] == 2
    assert "error" in cells["tfc"]["rounds"][0]
    numpy_rounds = cells["numpy"]["rounds"]
    assert "inputs differ" in numpy_rounds[1]["error"] and numpy_rounds[1]["pid"] == 1
    assert cells["numpy"]["median"] == 0.004 and len(numpy_rounds) == 2  # not run in round 3
    assert res["unavailable"] == {}
    assert any("round 3: numpy did not load" in n for n in res["notes"])
    assert res["rows"]["mlp"]["inputs"] == {"tfc": "d", "numpy": "d"}
    all_failed = bench.combine_rounds([_round({"tfc": "boom"}), _round({"tfc": "bang"})])
    cell = all_failed["rows"]["mlp"]["results"]["tfc"]
    assert cell["error"] == "boom" and "best_round" not in cell and len(cell["rounds"]) == 2


def test_rounds_rotate_the_order_and_run_the_whole_sequence(tools, monkeypatch):
    """Rounds are the outermost loop (round 1 at every thread count, then round 2), and
    each round starts every group with another contender."""
    bench, _, _ = tools
    started = []

    def fake_worker(kind, args, threads, contenders, backend, rows=None, group=None):
        [name] = contenders
        started.append((threads, group, name))
        row = {"id": group, "group": group, "label": group, "kind": group, "unit": "ms",
               "results": {name: {"median": float(len(started)), "min": 0.0, "max": 9e9,
                                  "n": 20, "pid": len(started)}}, "inputs": {name: "d"}}
        return {"pid": len(started), "row_ids": [group], "rows": {group: row},
                "versions": {name: "1"}, "blas": {name: []}, "unavailable": {}}

    monkeypatch.setattr(bench, "run_worker", fake_worker)
    args = bench.parse_args(["--only", "chain,dispatch", "--contenders", "tfc,numpy",
                             "--threads", "1,2", "--rounds", "3", "--backend", "reference"])
    report = bench.collect(args)
    assert [t for t, _, _ in started] == [1] * 4 + [2] * 4 + [1] * 4 + [2] * 4 + [1] * 4 + [2] * 4
    one = report["speed"]["1"]
    assert [o["chain"][0] for o in one["round_orders"]] == ["tfc", "numpy", "tfc"]
    cell = one["rows"]["chain"]["results"]["tfc"]
    assert len(cell["rounds"]) == 3 and cell["best_round"] == 0  # the earliest is fastest here
    assert report["meta"]["rounds"] == 3 and report["meta"]["contenders"] == ["tfc", "numpy"]


def test_rounds_must_be_positive(tools):
    bench, _, _ = tools
    with pytest.raises(SystemExit):
        bench.parse_args(["--rounds", "0"])
    assert bench.parse_args([]).rounds == 1
    cs = ["tfc", "numpy", "torch"]
    assert [bench.contender_order(cs, 1, 0, r)[0] for r in range(3)] == ["numpy", "torch", "tfc"]
