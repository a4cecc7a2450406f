"""The benchmark's report: rows of times, throughputs and ratios, BENCHMARKS.md's goal next
to each row with a pass/miss mark, rendered as a rich table or as Markdown.

A ratio is tfc's median time over the other contender's (lower is better), as in
BENCHMARKS.md; a goal clause whose other side was not measured (PyTorch or JAX missing)
is shown as n/a, never as a pass. Each contender's times come from processes of its own
(``bench.py``'s docstring says why and in which order), so the titles and the header say
so: a reader comparing with an older report, timed round-robin in one shared process,
should know the layouts differ. With several rounds (``bench.py --rounds N``) a cell's
headline is the best of its N process medians and the others follow it (``rounds``), so
that a reader sees how far the host moved the contender between processes; the ratios
and goals use the headlines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONTENDERS = ("tfc", "numpy", "torch", "jax")
OTHERS = ("numpy", "torch", "jax")
CACHED_GOAL_S = 0.050
PROCESS_NOTE = ("each contender timed in processes of its own (one per workload group, "
                "no other framework loaded)")


def speed_title(threads: int | str, rounds: int = 1) -> str:
    """The title of one thread count's table: what a cell holds and how it was timed."""
    if rounds <= 1:
        return (f"timed workloads, {threads} thread(s) — median [min–max] of n timed steps, "
                f"each contender in its own process; ratios are tfc time / other time")
    return (f"timed workloads, {threads} thread(s) — best of {rounds} rounds: the lowest "
            f"process median with that process's [min–max] of n timed steps, then every "
            f"round's median in run order; each contender in its own process; ratios are "
            f"tfc's best time / other's best time")


@dataclass
class Clause:
    """One part of a goal: its text, whether it holds (None: cannot tell), and the number."""

    text: str
    ok: bool | None
    detail: str = ""

    def mark(self) -> str:
        sign = "n/a" if self.ok is None else "✓" if self.ok else "✗"
        return f"{sign} {self.text}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Row:
    label: str
    cells: dict[str, str] = field(default_factory=dict)
    ratios: dict[str, float | None] = field(default_factory=dict)
    clauses: list[Clause] = field(default_factory=list)

    @property
    def status(self) -> str:
        known = [c.ok for c in self.clauses if c.ok is not None]
        if not self.clauses:
            return ""
        if not known:
            return "n/a"
        return "pass" if all(known) else "miss"


# ---- numbers ------------------------------------------------------------------------

def _median(result: dict[str, Any] | None) -> float | None:
    if not result or "median" not in result:
        return None
    return float(result["median"])


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _at_most(text: str, ratio: float | None, limit: float) -> Clause:
    if ratio is None:
        return Clause(text, None)
    return Clause(text, ratio <= limit, f"{ratio:.2f}x")


def _time(seconds: float, unit: str) -> str:
    if unit == "us":
        return f"{seconds * 1e6:.1f} µs"
    if unit == "s":
        return f"{seconds:.3f} s"
    return f"{seconds * 1e3:.2f} ms"


def _throughput(work: float, seconds: float, unit: str) -> str:
    if unit == "GB/s":
        return f"{work / seconds / 1e9:.1f} GB/s"
    return f"{work / seconds / 1e9:.0f} GFLOP/s"


ROUNDS_LISTED = 5  # more rounds than this are shown as their range


def rounds_text(result: dict[str, Any], time_unit: str) -> str:
    """``rounds 5.37/6.61`` (every process median in run order, ``error`` for a failed
    round), or ``rounds 5.37–6.61 of 8`` past ``ROUNDS_LISTED``; empty for one round
    (and for results saved before rounds existed)."""
    rounds = result.get("rounds") or []
    if len(rounds) < 2:
        return ""
    medians = [r.get("median") if "error" not in r else None for r in rounds]
    if len(rounds) <= ROUNDS_LISTED:
        return "rounds " + "/".join("error" if m is None else _time(m, time_unit).split()[0]
                                    for m in medians)
    ok = [m for m in medians if m is not None]
    failed = len(medians) - len(ok)
    text = (f"rounds {_time(min(ok), time_unit).split()[0]}–"
            f"{_time(max(ok), time_unit).split()[0]} of {len(rounds)}") if ok else "rounds"
    return text + (f", {failed} failed" if failed else "")


def format_cell(result: dict[str, Any] | None, row: dict[str, Any], sep: str) -> str:
    """``12.3 GB/s · 5.41 ms [5.10–6.02] n=20, rounds 5.41/6.20`` (``sep`` joins the
    throughput and time; the rounds part only when there were several)."""
    if not result:
        return "—"
    unit, work = row["unit"], row.get("work")
    time_unit = "us" if unit == "us" else "ms"
    if "error" in result:
        rounds = len(result.get("rounds") or [])
        every = f" (all {rounds} rounds)" if rounds > 1 else ""
        return "error: " + str(result["error"])[:60] + every
    spread = (f"{_time(result['median'], time_unit)} "
              f"[{_time(result['min'], time_unit).split()[0]}–"
              f"{_time(result['max'], time_unit).split()[0]}] n={result['n']}")
    if result.get("note"):
        spread += f" ({result['note']})"
    across = rounds_text(result, time_unit)
    if across:
        spread += ", " + across
    if unit in ("GB/s", "GFLOP/s") and work:
        return _throughput(work, result["median"], unit) + sep + spread
    return spread


# ---- rows for the timed workloads -----------------------------------------------------

def speed_rows(speed: dict[str, Any], contenders: list[str], sep: str) -> list[Row]:
    rows_in = speed.get("rows", {})
    copy = rows_in.get("copy", {}).get("results", {}).get("numpy")
    gemm = _best_gemm_rate(rows_in)
    peak_row = rows_in.get("fma_peak")
    peak_t = _median((peak_row or {}).get("results", {}).get("tfc"))
    peak = peak_row["work"] / peak_t if peak_row and peak_t else None
    out = []
    for row_id, row in rows_in.items():
        res = row.get("results", {})
        r = Row(row["label"])
        for c in contenders:
            r.cells[c] = format_cell(res.get(c), row, sep)
        tfc = _median(res.get("tfc"))
        if row_id not in REFERENCE_ROWS:
            for o in OTHERS:
                if o in contenders:
                    r.ratios[o] = _ratio(tfc, _median(res.get(o)))
        r.clauses = _speed_goals(row_id, row, r.ratios, tfc, copy, gemm, peak)
        out.append(r)
    return out


REFERENCE_ROWS = ("copy", "gemm_ref", "fma_peak")  # machine limits: no ratios, no goals
GOAL_LIMITS = {"jax": ("<= 0.8x JAX jit", 0.8), "torch": ("<= 0.5x PyTorch eager", 0.5)}


def _best_gemm_rate(rows: dict[str, Any]) -> float | None:
    """numpy's best sgemm rate in this run (flop/s): the machine's measured GEMM rate."""
    best = None
    for row in rows.values():
        if row.get("kind") == "matmul":
            t = _median(row.get("results", {}).get("numpy"))
            if t:
                rate = row["work"] / t
                best = rate if best is None else max(best, rate)
    return best


def _speed_goals(row_id: str, row: dict[str, Any], ratios: dict[str, float | None],
                 tfc: float | None, copy: dict[str, Any] | None,
                 gemm_rate: float | None, peak: float | None = None) -> list[Clause]:
    """The goals' clauses of one row. A missed ratio goal of an MLP row also says the GEMM
    rate it needs (the step's matrix-product flops in the goal's time) against the cores'
    measured FMA ``peak``: above it, no code on this machine meets the goal."""
    kind = row.get("kind")
    if kind == "chain":
        clauses = []
        copy_t = _median(copy)
        if copy_t and tfc:
            copy_bw = row["copy_work"] / copy_t
            frac = (row["work"] / tfc) / copy_bw
            clauses.append(Clause(">= 90% of copy bandwidth", frac >= 0.9, f"{frac:.0%}"))
        else:
            clauses.append(Clause(">= 90% of copy bandwidth", None))
        clauses.append(_at_most("<= 0.5x numpy", ratios.get("numpy"), 0.5))
        clauses.append(_at_most("<= 0.9x JAX", ratios.get("jax"), 0.9))
        return clauses
    if kind == "matmul" and row_id != "gemm_ref":
        r = ratios.get("numpy")
        if r is None:
            return [Clause(">= 95% of numpy's BLAS", None)]
        return [Clause(">= 95% of numpy's BLAS", 1.0 / r >= 0.95, f"{1.0 / r:.0%}")]
    if kind in ("mlp", "cnn"):
        clauses = []
        for o, (text, limit) in GOAL_LIMITS.items():
            c = _at_most(text, ratios.get(o), limit)
            if kind == "mlp" and c.ok is False and peak and tfc:
                need = row["work"] * ratios[o] / (limit * tfc)  # other's time: tfc / ratio
                c.detail += (f"; needs GEMMs at {need / 1e9:.0f} GFLOP/s = "
                             f"{need / peak:.2f}x the FMA peak")
            clauses.append(c)
        if kind == "mlp" and row.get("gemm_goal"):
            if gemm_rate and tfc:
                ideal = row["work"] / gemm_rate
                clauses.append(Clause("<= 1.3x its GEMM flops at the GEMM rate",
                                      tfc <= 1.3 * ideal, f"{tfc / ideal:.2f}x of "
                                      f"{ideal * 1e3:.2f} ms at {gemm_rate / 1e9:.0f} GFLOP/s"))
            else:
                clauses.append(Clause("<= 1.3x its GEMM flops at the GEMM rate", None))
        return clauses
    if kind == "dispatch":
        return [_at_most("<= 0.2x JAX jit dispatch", ratios.get("jax"), 0.2)]
    return []


# ---- rows for compile time and memory ---------------------------------------------------

def _mib(n: float | None) -> str:
    return "—" if n is None else f"{n / 2**20:.1f} MiB"


def compile_rows(compile_: dict[str, Any], contenders: list[str]) -> list[Row]:
    cold = Row("compile MLP step, cold (fresh process, empty compile cache: build + "
               "optimize + compile + 1st step)")
    cached = [("cached", Row("compile MLP step, cached (load the .tfc artifact + 1st step)")),
              ("recompiled", Row("compile MLP step again, warm compile cache (build + "
                                 "compile + 1st step)"))]
    for c in contenders:
        res = compile_.get(c)
        if res is None or "error" in res:
            cold.cells[c] = "—" if res is None else "error: " + str(res["error"])[:60]
            for _, row in cached:
                row.cells[c] = "—"
            continue
        cold.cells[c] = f"{res['cold']:.3f} s" if "cold" in res else "—"
        for key, row in cached:
            row.cells[c] = f"{res[key] * 1e3:.1f} ms" if key in res else "—"
    tfc = compile_.get("tfc") or {}
    t_cold, j_cold = tfc.get("cold"), (compile_.get("jax") or {}).get("cold")
    if "jax" in contenders:
        cold.ratios["jax"] = _ratio(t_cold, j_cold)
    cold.clauses = [_at_most("<= JAX's first-call time", _ratio(t_cold, j_cold), 1.0)]
    for key, row in cached:
        t = tfc.get(key)
        row.clauses = [Clause("<= 50 ms", None) if t is None else
                       Clause("<= 50 ms", t <= CACHED_GOAL_S, f"{t * 1e3:.1f} ms")]
    return [cold, *(row for _, row in cached)]


def memory_rows(memory: dict[str, Any], contenders: list[str]) -> list[Row]:
    batch = next((m.get("batch") for m in memory.values() if m and "batch" in m), "?")
    rss = Row(f"MLP step (batch {batch}) peak process RSS (+ growth over numpy + data)")
    arena = Row(f"MLP step (batch {batch}) arena bytes / no-reuse bytes (memory pass)")
    for c in contenders:
        res = memory.get(c)
        if not res:
            rss.cells[c] = arena.cells[c] = "—"
            continue
        arena.cells[c] = "—"
        if "error" in res or "peak_rss" not in res:
            rss.cells[c] = "error: " + str(res.get("error"))[:60]
            continue
        growth = res["peak_rss"] - res["baseline_rss"]
        rss.cells[c] = f"{_mib(res['peak_rss'])} (+{_mib(growth)})"
    tfc = memory.get("tfc") or {}
    t_rss = tfc.get("peak_rss")
    for o in OTHERS:
        if o in contenders:
            rss.ratios[o] = _ratio(t_rss, (memory.get(o) or {}).get("peak_rss"))
    rss.clauses = [_at_most("<= PyTorch's", rss.ratios.get("torch"), 1.0),
                   _at_most("<= JAX's", rss.ratios.get("jax"), 1.0)]
    a, n = tfc.get("arena_bytes"), tfc.get("no_reuse_bytes")
    if a is not None and n:
        peak = tfc.get("peak_live_bytes")
        arena.cells["tfc"] = f"{_mib(a)} / {_mib(n)}" + (
            f" (peak live {_mib(peak)})" if peak is not None else "")
        arena.clauses = [Clause("arena <= 0.6x the no-reuse sum", a <= 0.6 * n, f"{a / n:.2f}x")]
    else:
        if "tfc" in contenders and tfc.get("note"):
            arena.cells["tfc"] = tfc["note"]
        arena.clauses = [Clause("arena <= 0.6x the no-reuse sum", None)]
    return [rss, arena]


# ---- rendering --------------------------------------------------------------------------

def _ratio_text(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}x"


def _columns(contenders: list[str]) -> list[str]:
    return (["workload", *contenders]
            + [f"tfc/{o}" for o in OTHERS if o in contenders and "tfc" in contenders]
            + ["goal (BENCHMARKS.md)", "status"])


def _row_values(row: Row, contenders: list[str], sep: str) -> list[str]:
    ratios = [_ratio_text(row.ratios.get(o)) for o in OTHERS
              if o in contenders and "tfc" in contenders]
    goals = sep.join(c.mark() for c in row.clauses)
    return [row.label, *[row.cells.get(c, "—") for c in contenders], *ratios, goals, row.status]


def render_markdown(title: str, rows: list[Row], contenders: list[str]) -> str:
    cols = _columns(contenders)
    lines = [f"**{title}**", "", "| " + " | ".join(cols) + " |",
             "| " + " | ".join("---" for _ in cols) + " |"]
    for row in rows:
        vals = [v.replace("|", "\\|") for v in _row_values(row, contenders, "<br>")]
        lines.append("| " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def render_rich(console: Any, title: str, rows: list[Row], contenders: list[str]) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), show_lines=True, title_justify="left")
    for i, col in enumerate(_columns(contenders)):
        table.add_column(col, overflow="fold", no_wrap=False,
                         max_width=28 if i == 0 else 40 if col.startswith("goal") else 24)
    styles = {"pass": "green", "miss": "red", "n/a": "yellow"}
    for row in rows:
        vals = [escape(v) for v in _row_values(row, contenders, "\n")]
        vals[-1] = f"[{styles.get(row.status, 'white')}]{row.status}[/]" if row.status else ""
        table.add_row(*vals)
    console.print(table)
