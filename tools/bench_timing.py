"""Timing, environment and machine facts shared by the benchmark's workers (``bench.py``).

Everything here is about measuring fairly on a shared, noisy 2-core machine: every
contender runs in worker processes of its own whose environment has OpenBLAS's slow-down
variables removed and the same thread count set, times are the median of at least 20
timed samples after a warm-up (with min and max), and each contender's BLAS library is
named from what threadpoolctl sees loaded in its process. With several rounds (``bench.py
--rounds N``) each cell has one median per process, and ``best_of`` picks the headline.
"""

from __future__ import annotations

import math
import os
import platform
import resource
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

# Set on some machines here; they make OpenBLAS pick slower kernels (about 2x on sgemm).
SLOW_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
# Thread-count variables every BLAS / OpenMP runtime a contender may load reads at start.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "TFC_NUM_THREADS")


@dataclass
class Stats:
    """Seconds per call of one contender on one workload: median, min and max over
    ``n`` timed samples, each the mean of ``inner`` back-to-back calls."""

    median: float
    min: float
    max: float
    n: int
    inner: int
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def measure(fn: Callable[[], Any], *, runs: int = 20, warmup: int = 3,
            min_sample_s: float = 1e-3, budget_s: float = 20.0, floor: int = 5) -> Stats:
    """Time ``fn`` alone: ``measure_many`` with one contender."""
    out = measure_many({"fn": fn}, runs=runs, warmup=warmup, min_sample_s=min_sample_s,
                       budget_s=budget_s, floor=floor)["fn"]
    if isinstance(out, BaseException):
        raise out
    return out


def measure_many(fns: dict[str, Callable[[], Any]], *, runs: int = 20, warmup: int = 3,
                 min_sample_s: float = 1e-3, budget_s: float = 20.0,
                 floor: int = 5) -> dict[str, "Stats | Exception"]:
    """Time each contender's step ``fns[name]`` (which must finish its work before
    returning, i.e. synchronize); a step that raises gets its exception instead.

    After ``warmup`` untimed calls (the first compiles, for jit contenders), calls that take
    less than ``min_sample_s`` are batched so that timer resolution does not matter
    (per-call overhead workloads). ``runs`` samples are timed unless that would take longer
    than ``budget_s`` for that contender: then as many as fit, never fewer than ``floor``,
    and the note says so. Samples of several ``fns`` are taken round-robin, so that a
    burst of load hits them alike; ``bench.py`` passes one contender per process (several
    frameworks' thread pools in one process slow each other down), and spreads the
    fairness over processes instead (see its docstring).
    """
    plans: dict[str, tuple[int, int, str]] = {}
    out: dict[str, Stats | Exception] = {}
    for name, fn in fns.items():
        try:
            plans[name] = _plan(fn, runs, warmup, min_sample_s, budget_s, floor)
        except Exception as e:  # noqa: BLE001  (reported in the contender's cell)
            out[name] = e
    samples: dict[str, list[float]] = {name: [] for name in plans}
    for i in range(max((n for n, _, _ in plans.values()), default=0)):
        for name, (n, inner, _) in plans.items():
            if i >= n or name in out:
                continue
            fn = fns[name]
            try:
                t = time.perf_counter()
                for _ in range(inner):
                    fn()
                samples[name].append((time.perf_counter() - t) / inner)
            except Exception as e:  # noqa: BLE001
                out[name] = e
    for name, (n, inner, note) in plans.items():
        if name not in out:
            out[name] = stats_of(samples[name], inner, note)
    return {name: out[name] for name in fns}


def stats_of(samples: list[float], inner: int = 1, note: str = "") -> Stats:
    """Median, min and max of ``samples`` (seconds per call)."""
    s = sorted(samples)
    mid = len(s) // 2
    median = s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])
    return Stats(median, s[0], s[-1], len(s), inner, note)


def measure_self_timed(fn: Callable[[], float], *, runs: int = 20,
                       warmup: int = 3) -> Stats:
    """Statistics of the seconds ``fn`` reports for each of ``runs`` calls after ``warmup``
    untimed ones: for a step that times itself on another clock (the FMA peak's CPU time,
    which other tenants of the cores cannot add to)."""
    for _ in range(warmup):
        fn()
    return stats_of([fn() for _ in range(runs)])


def best_of(process_results: list[dict[str, Any]]) -> int | None:
    """The index of the headline among one cell's process results (one per round): the
    lowest median, the earliest round on a tie; None when every round failed.

    Why the best: each process median is already robust to a burst within its process;
    what differs between rounds is the host's state over minutes, and other tenants only
    ever add time. The lowest median estimates the contender on a quiet host, and the
    same rule for every contender keeps the ratios fair (docs/benchmarks.md, "Rounds")."""
    best: int | None = None
    for i, res in enumerate(process_results):
        if not res or "error" in res or "median" not in res:
            continue
        if best is None or float(res["median"]) < float(process_results[best]["median"]):
            best = i
    return best


def _plan(fn: Callable[[], Any], runs: int, warmup: int, min_sample_s: float,
          budget_s: float, floor: int) -> tuple[int, int, str]:
    """Warm ``fn`` up and choose (timed samples, calls per sample, note)."""
    est = math.inf
    for _ in range(max(1, warmup)):
        t = time.perf_counter()
        fn()
        est = min(est, time.perf_counter() - t)
    inner = 1 if est >= min_sample_s else min(100_000, math.ceil(min_sample_s / max(est, 1e-9)))
    if inner > 1:  # re-estimate the per-call time on a batch: single calls are too coarse
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        est = (time.perf_counter() - t) / inner
        inner = max(1, math.ceil(min_sample_s / max(est, 1e-9)))
    n, note = runs, ""
    if est * inner * runs > budget_s:
        n = max(floor, int(budget_s / (est * inner)))
        if n < runs:
            note = f"fewer than {runs}: slow"
    return n, inner, note


# ---- the environment of a worker ----------------------------------------------------

def worker_env(threads: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every contender's worker runs in: OpenBLAS's slow-down variables
    removed, every runtime told to use ``threads`` threads, JAX kept on the CPU."""
    env = dict(os.environ if base is None else base)
    for var in SLOW_BLAS_VARS:
        env.pop(var, None)
    for var in THREAD_VARS:
        env[var] = str(threads)
    env["JAX_PLATFORMS"] = "cpu"
    env["CUDA_VISIBLE_DEVICES"] = ""  # PyTorch eager and JAX on the CPU, as BENCHMARKS.md asks
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "multi_thread_eigen" not in f
             and "intra_op_parallelism_threads" not in f]
    if threads == 1:
        flags += ["--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1"]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    return env


def pin_threads(threads: int) -> list[int]:
    """Restrict this process to ``threads`` cores (where it may use more), so thread pools
    that size themselves from the CPU count (XLA, PyTorch) see the same number."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return []
    if threads < len(allowed):
        os.sched_setaffinity(0, allowed[:threads])
        return allowed[:threads]
    return allowed


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_info() -> dict[str, Any]:
    """CPU model, cores and memory, for the report's header."""
    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("", platform.machine()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    mem_gib = None
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        pass
    simd = [f for f in ("avx512f", "avx2", "fma") if f in flags]
    return {"cpu": model, "cores": usable_cores(), "simd": simd,
            "memory_gib": round(mem_gib, 1) if mem_gib else None,
            "python": platform.python_version(), "platform": platform.platform()}


# ---- BLAS libraries, as threadpoolctl sees them -------------------------------------

def blas_libraries() -> list[dict[str, Any]]:
    """The BLAS / OpenMP libraries loaded in this process (threadpoolctl's view)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("internal_api", "version", "num_threads", "architecture", "threading_layer",
            "filepath", "user_api")
    return [{k: lib.get(k) for k in keep} for lib in threadpool_info()]


def new_libraries(before: list[dict[str, Any]],
                  after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Libraries in ``after`` that ``before`` did not have (what a contender loaded)."""
    seen = {lib["filepath"] for lib in before}
    return [lib for lib in after if lib["filepath"] not in seen]


def describe_library(lib: dict[str, Any]) -> str:
    """``openblas 0.3.31 (Haswell, 2 threads) numpy.libs/libscipy_openblas64_.so``."""
    path = str(lib.get("filepath") or "")
    short = "/".join(path.split("/")[-2:])
    bits = [b for b in (lib.get("architecture"),
                        f"{lib.get('num_threads')} threads" if lib.get("num_threads") else None)
            if b]
    extra = f" ({', '.join(bits)})" if bits else ""
    return f"{lib.get('internal_api')} {lib.get('version') or ''}{extra} {short}".replace("  ", " ")


def limit_threads(threads: int) -> Any:
    """Cap every loaded BLAS/OpenMP pool at ``threads``. The cap lasts until the process
    ends (threadpoolctl undoes it only on leaving a ``with`` block or when asked)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return threadpool_limits(limits=threads)


# ---- memory ---------------------------------------------------------------------------

def rss_bytes() -> int:
    """This process's resident set size now."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
