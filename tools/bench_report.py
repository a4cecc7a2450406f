"""The benchmark's report: rows of times, throughputs and ratios, BENCHMARKS.md's goal next
to each row with a pass/miss mark, rendered as a rich table or as Markdown.

A ratio is tfc's median time over the other contender's (lower is better), as in
BENCHMARKS.md; a goal clause whose other side was not measured (PyTorch, JAX or
TensorFlow missing) is shown as n/a, never as a pass: a "best of JAX, TF and PyTorch"
clause missed against the frameworks that ran is a miss, one met against only some of
them is n/a and says which were not measured. Each contender's times come from processes of its own
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

CONTENDERS = ("tfc", "numpy", "torch", "jax", "tf", "tf-xla")
OTHERS = ("numpy", "torch", "jax", "tf", "tf-xla")
# The frameworks of BENCHMARKS.md's "best of JAX, TF and PyTorch" goals (TF in both modes).
RIVALS = ("jax", "tf", "tf-xla", "torch")
RIVAL_NAMES = {"jax": "JAX", "tf": "TF", "tf-xla": "TF XLA", "torch": "PyTorch"}
CACHED_GOAL_S = 0.020
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
        if row.get("headline") == "fastest":
            clock = ", CPU time" if row.get("self_timed") else ""
            return (_throughput(work, result["min"], unit) + f" (fastest step{clock})" + sep
                    + spread)
        return _throughput(work, result["median"], unit) + sep + spread
    return spread


def _headline(result: dict[str, Any] | None, row: dict[str, Any]) -> float | None:
    """The time a row's cell stands for: the median, or the fastest step for a ceiling
    (``headline: fastest``, the FMA peak: other tenants only ever slow a step down)."""
    if row.get("headline") == "fastest" and result and "min" in result:
        return float(result["min"])
    return _median(result)


# ---- rows for the timed workloads -----------------------------------------------------

def speed_rows(speed: dict[str, Any], contenders: list[str], sep: str) -> list[Row]:
    rows_in = speed.get("rows", {})
    threads = int(speed.get("threads") or 2)
    copy = rows_in.get("copy", {}).get("results", {}).get("numpy")
    gemm = _best_gemm_rate(rows_in)
    peak_row = rows_in.get("fma_peak")
    peak_t = _headline((peak_row or {}).get("results", {}).get("tfc"), peak_row or {})
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
        goals = Goals(row, r.ratios, tfc, threads)
        r.clauses = goals.clauses(row_id, copy, gemm, peak)
        out.append(r)
    return out


REFERENCE_ROWS = ("copy", "gemm_ref", "fma_peak")  # machine limits: no ratios, no goals


def _best_gemm_rate(rows: dict[str, Any]) -> tuple[float, str] | None:
    """The best GEMM rate measured in this run (flop/s) and who ran it: every contender's
    matrix-product rows (numpy's sgemm reference too). BENCHMARKS.md's GEMM floor is a
    step's GEMM flops at this rate."""
    best = None
    for row in rows.values():
        if row.get("kind") != "matmul":
            continue
        for c, res in row.get("results", {}).items():
            t = _median(res)
            if t and (best is None or row["work"] / t > best[0]):
                best = (row["work"] / t, f"{c}, {row['label'].split(' (')[0]}")
    return best


def best_of_rivals(text: str, limit: float,
                   ratios: dict[str, float | None]) -> tuple[Clause, str | None]:
    """A "<= limit x the best of JAX, TF and PyTorch" clause and the fastest rival (None
    when none ran). tfc's ratio to the fastest rival is the largest ratio; a miss against
    the rivals that ran is a miss, a pass while some were not measured is n/a."""
    measured = {o: r for o, r in ratios.items() if o in RIVALS and r is not None}
    if not measured:
        return Clause(text, None), None
    best = max(measured, key=lambda o: measured[o])
    worst = measured[best]
    detail = f"{worst:.2f}x {RIVAL_NAMES[best]}"
    missing = [RIVAL_NAMES[o] for o in RIVALS if o not in measured]
    if worst > limit:
        return Clause(text, False, detail), best
    if missing:
        return Clause(text, None, detail + f"; {', '.join(missing)} not measured"), best
    return Clause(text, True, detail), best


@dataclass
class Goals:
    """BENCHMARKS.md's goals for one timed row: ``tfc`` is tfc's time, ``ratios`` tfc's
    time over each other contender's."""

    row: dict[str, Any]
    ratios: dict[str, float | None]
    tfc: float | None
    threads: int

    def clauses(self, row_id: str, copy: dict[str, Any] | None,
                gemm: tuple[float, str] | None, peak: float | None) -> list[Clause]:
        kind = self.row.get("kind")
        if kind == "chain":
            return self.chain(copy)
        if kind == "matmul" and row_id != "gemm_ref":
            r = self.ratios.get("numpy")
            text = ">= 98% of numpy's BLAS"
            return [Clause(text, None) if r is None else
                    Clause(text, 1.0 / r >= 0.98, f"{1.0 / r:.0%}")]
        if kind == "mlp":
            return [*self.floor(gemm), self.rivals(0.9, peak)]
        if kind == "cnn":
            return [self.rivals(0.8, None, "the best of TF (graph and XLA), JAX and PyTorch")]
        if kind == "dispatch":
            return [_at_most("<= 0.1x JAX jit dispatch", self.ratios.get("jax"), 0.1)]
        return []

    def chain(self, copy: dict[str, Any] | None) -> list[Clause]:
        """>= 95% of the copy bandwidth on 2 threads (or more), >= 70% on 1; <= 0.3x JAX."""
        need = 0.95 if self.threads >= 2 else 0.70
        text = f">= {need:.0%} of copy bandwidth"
        copy_t = _median(copy)
        if copy_t and self.tfc:
            frac = (self.row["work"] / self.tfc) / (self.row["copy_work"] / copy_t)
            bandwidth = Clause(text, frac >= need, f"{frac:.0%}")
        else:
            bandwidth = Clause(text, None)
        return [bandwidth, _at_most("<= 0.3x JAX", self.ratios.get("jax"), 0.3)]

    def floor(self, gemm: tuple[float, str] | None) -> list[Clause]:
        """<= 1.05x its GEMM floor at the largest batch, <= 1.15x at the others: the step's
        GEMM flops at the best GEMM rate of the run."""
        limit = self.row.get("floor_limit", 1.05 if self.row.get("gemm_goal") else None)
        if limit is None:
            return []
        text = f"<= {limit:.2f}x its GEMM floor"
        if not (gemm and self.tfc):
            return [Clause(text, None)]
        rate, who = gemm
        ideal = self.row["work"] / rate
        return [Clause(text, self.tfc <= limit * ideal,
                       f"{self.tfc / ideal:.2f}x of {ideal * 1e3:.2f} ms at "
                       f"{rate / 1e9:.0f} GFLOP/s, {who}")]

    def rivals(self, limit: float, peak: float | None,
               who: str = "the best of JAX, TF and PyTorch") -> Clause:
        """<= limit x the fastest framework. A missed MLP clause also says the GEMM rate
        it needs (the step's matrix-product flops in the goal's time) against the cores'
        measured FMA ``peak``: above it, no code on this machine meets the goal."""
        clause, best = best_of_rivals(f"<= {limit:g}x {who}", limit, self.ratios)
        if clause.ok is False and best is not None and peak and self.tfc:
            ratio = self.ratios[best]
            assert ratio is not None
            need = self.row["work"] * ratio / (limit * self.tfc)  # rival's time: tfc / ratio
            clause.detail += (f"; needs GEMMs at {need / 1e9:.0f} GFLOP/s = "
                              f"{need / peak:.2f}x the FMA peak")
        return clause


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
    t_cold = tfc.get("cold")
    for o in OTHERS:
        if o in contenders:
            cold.ratios[o] = _ratio(t_cold, (compile_.get(o) or {}).get("cold"))
    cold.clauses = [_at_most("<= 0.5x JAX's first-call time", cold.ratios.get("jax"), 0.5)]
    for key, row in cached:
        t = tfc.get(key)
        text = f"<= {CACHED_GOAL_S * 1e3:.0f} ms"
        row.clauses = [Clause(text, None) if t is None else
                       Clause(text, t <= CACHED_GOAL_S, f"{t * 1e3:.1f} ms")]
    return [cold, *(row for _, row in cached)]


EDIT_GOAL = 0.10  # a one-layer edit recompiles in <= 10% of the cold compile (issue 21)


def scaling_rows(scaling: dict[str, Any], contenders: list[str]) -> list[Row]:
    """One row per L of ``bench.py``'s compile-scaling cells: each contender's first call
    (tfc: cold, after a one-layer edit, cached), tfc cold over the others, and the goals:
    cold <= 1.0x JAX's first call; the edit's compile (the first ``Session.run`` less a
    steady step: the user's graph building and the step itself are the same in both) <=
    10% of cold's."""
    rows = []
    for layers, cells in scaling.items():
        row = Row(f"compile scaling: {layers}-layer MLP, first training step (tfc: cold / "
                  f"one-layer edit / cached)")

        def first(cell: str) -> float | None:
            res = cells.get(cell) or {}
            return res.get("first") if "error" not in res else None
        for c in contenders:
            if c == "tfc":
                parts = [first(x) for x in ("tfc-cold", "tfc-edit", "tfc-cached")]
                row.cells[c] = " / ".join("—" if t is None else f"{t:.3f} s" for t in parts)
            elif c in ("jax", "tf", "tf-xla"):
                t = first(c)
                err = (cells.get(c) or {}).get("error")
                row.cells[c] = f"{t:.3f} s" if t is not None else (
                    "error: " + str(err)[:60] if err else "—")
            else:
                row.cells[c] = "—"
        cold = first("tfc-cold")
        for o in ("jax", "tf", "tf-xla"):
            if o in contenders:
                row.ratios[o] = _ratio(cold, first(o))
        net = [_net_compile(cells.get(x) or {}) for x in ("tfc-cold", "tfc-edit")]
        edit_ratio = _ratio(net[1], net[0])
        row.clauses = [_at_most("cold <= 1.0x JAX's first call", row.ratios.get("jax"), 1.0),
                       Clause("one-layer edit's compile <= 10% of cold's", None)
                       if edit_ratio is None else
                       Clause("one-layer edit's compile <= 10% of cold's",
                              edit_ratio <= EDIT_GOAL, f"{edit_ratio:.0%}")]
        rows.append(row)
    return rows


def _net_compile(cell: dict[str, Any]) -> float | None:
    """A tfc cell's compile: its first ``Session.run`` less one steady step."""
    if "compile" not in cell or "step" not in cell:
        return None
    return max(cell["compile"] - cell["step"], 0.0)


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
    rss.clauses = [best_of_rivals("<= 0.5x the smallest of PyTorch's, JAX's and TF's", 0.5,
                                  rss.ratios)[0]]
    a, n = tfc.get("arena_bytes"), tfc.get("no_reuse_bytes")
    if a is not None and n:
        peak = tfc.get("peak_live_bytes")
        arena.cells["tfc"] = f"{_mib(a)} / {_mib(n)}" + (
            f" (peak live {_mib(peak)})" if peak is not None else "")
        arena.clauses = [Clause("arena <= 0.5x the no-reuse sum", a <= 0.5 * n, f"{a / n:.2f}x")]
    else:
        if "tfc" in contenders and tfc.get("note"):
            arena.cells["tfc"] = tfc["note"]
        arena.clauses = [Clause("arena <= 0.5x the no-reuse sum", None)]
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
