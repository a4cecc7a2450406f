"""Placement benchmark (issue #16): does the cost model predict the step the runtime
measures, and does the placement it picks pay off?

For each model (every example in ``examples/``, among them the deep MLP ``deep_mlp.py``,
the CNN ``cnn_digits.py`` and the two towers ``two_towers.py``) and each number of logical
devices (1, 2 and 4: ``/cpu:0``, ``/cpu:0,/cpu:1``, ...), the model is compiled as
``tfc compile --devices`` does (``tfc.pipeline.lower`` with ``Target(backend, devices)``:
optimization, placement, partition, lowering) and its entry (``train_step`` where there
is one, else the first) is timed with ``tfc.runtime.profiler.bench_entry`` on synthetic
feeds (batch 64, as ``tfc bench`` makes them). Beside it are timed, in the same process
and interleaved with it:

- the one-device program: the model compiled with no devices (``tfc compile`` without
  ``--devices``), the baseline a placement must not lose to;
- the alternatives within the multi-device compile, by forcing the assignment after
  the same optimization passes: every op on ``/cpu:0`` (device scopes kept), the greedy
  split whether or not it beats one device (the two towers' split, which the placer
  takes only by ``SPLIT_MARGIN``), and round robin over the devices (variables' ops kept
  on their variable's device, as the placer keeps them). They show whether the model's
  ranking of the candidates is the measured one.

Each program is timed ``--repeats`` times (default 5), round-robin over the model's
programs with the order rotated each round, so that a burst of load on this shared host
hits all of them alike; one repeat is ``bench_entry`` with warm-up steps and
``--steps`` timed steps (default: as many as take ~0.15 s, 3 to 200). A program's
measured step is the median of its repeats' medians.

Predicted is the model's step at the feeds' batch, ``tfc.runtime.estimate.estimate_entry``
of the entry as compiled: what ``tfc bench`` (``BenchReport.estimated_s``) and
``tfc compile --profile-runs`` print for the same module.
The chosen candidate and every candidate's estimate come from the compile's
``module.placement_reports[entry]`` (those are at the placer's symbol size).

Checks, per row, and the exit status (1 when any row fails one):

- prediction: ``|predicted / measured - 1| <= 25%``;
- never worse: ``measured <= one-device measured x (1 + noise)``, where ``noise`` is the
  larger of the two programs' relative spreads (the interquartile range of a program's
  repeat medians over their median), and at least 5%. Noise above 50% makes the check
  inconclusive, which fails it: on a host that busy the answer would be the load's.
  Not judged (and not counted) where the user's device scopes pin the entry's ops to
  several devices (``mlp_devices_digits.py`` does, on purpose): the placer keeps user
  pins, so the row measures the user's split; the table says so in "chosen".

The header gives the host's load average before and after: on a host shared with other
jobs, a step that waits for a descheduled BLAS or pool thread can take ten times as long
(the deep MLP's one-device step measured 56-99 ms beside two test suites, 9 ms alone),
so numbers taken at a load above the core count are not the program's.

A row that cannot compile with a clear ``TfcError`` (device scopes that pin ops to a
device the row does not have) is reported as skipped, with the message; any other
failure is an error and fails the run.

    python tools/bench_placement.py                         # the full table (a few minutes)
    python tools/bench_placement.py --models deep_mlp.py,cnn_digits.py --devices 1,2
    python tools/bench_placement.py --quick --models ridge_gd.py     # a smoke run
    python tools/bench_placement.py --json out.json        # also the raw numbers
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_timing import machine_info  # noqa: E402  (a sibling tool module)

from tfc.devices import load_profile  # noqa: E402
from tfc.passes.placement import GREEDY, ROUND_ROBIN, assign  # noqa: E402
from tfc.units import format_ms as _ms  # noqa: E402

TOLERANCE = 0.25      # |predicted / measured - 1| a prediction may be off by
NOISE_FLOOR = 0.05    # the least noise allowed for in the never-worse check
NOISE_CAP = 0.5       # above this the never-worse check is inconclusive (and fails)
BATCH = 64
TARGET_REPEAT_S = 0.15
MIN_STEPS, MAX_STEPS = 3, 200
NOT_MODELS = {"data.py": "a data helper of the examples, not a model"}
ALL_ON_FIRST = "all on /cpu:0"
ALTERNATIVES = (ALL_ON_FIRST, GREEDY, ROUND_ROBIN)  # GREEDY, ROUND_ROBIN: the placer's names


# ---- what is measured ---------------------------------------------------------------

@dataclass
class Timing:
    """One program's measurement: the median step of each repeat, and the prediction."""

    medians: list[float] = field(default_factory=list)
    predicted_s: float | None = None

    @property
    def median_s(self) -> float:
        return statistics.median(self.medians)

    @property
    def spread(self) -> float:
        """How much this program's step moved between repeats: the interquartile range of
        the repeat medians over their median (robust to one repeat that a burst of load
        on the host slowed down; the max-min range is not)."""
        if len(self.medians) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.medians, n=4, method="inclusive")
        return (q3 - q1) / self.median_s


@dataclass
class Row:
    """One model on one number of devices."""

    model: str
    entry: str
    devices: int
    status: str = "ok"     # ok, skipped (a clear TfcError, with the reason), error
    reason: str = ""
    chosen: str | None = None
    candidates: dict[str, float] = field(default_factory=dict)  # the placer's estimates
    timing: Timing | None = None
    one_device: Timing | None = None
    alternatives: dict[str, Timing] = field(default_factory=dict)
    pinned: list[str] = field(default_factory=list)  # devices the user's scopes name

    @property
    def pinned_split(self) -> bool:
        """Whether the user's device scopes pin the entry's ops to several devices: the
        placer keeps user pins, so such a row says what the user's split costs, not
        what the placer chose (``mlp_devices_digits.py`` pins its layers on purpose)."""
        return len(self.pinned) > 1

    @property
    def ratio(self) -> float | None:
        """predicted / measured."""
        if self.timing is None or self.timing.predicted_s is None:
            return None
        return self.timing.predicted_s / self.timing.median_s

    @property
    def noise(self) -> float:
        spreads = [t.spread for t in (self.timing, self.one_device) if t is not None]
        return max([NOISE_FLOOR, *spreads])

    @property
    def prediction_ok(self) -> bool | None:
        if self.status != "ok":
            return None
        return self.ratio is not None and abs(self.ratio - 1.0) <= TOLERANCE

    @property
    def not_slower_ok(self) -> bool | None:
        """Measured no slower than one device beyond noise (None: not judged, as for a
        split the user's scopes pin, ``pinned_split``)."""
        if (self.status != "ok" or self.timing is None or self.one_device is None
                or self.pinned_split):
            return None
        if self.noise > NOISE_CAP:  # any answer would be the load's, not the placement's
            return False
        return self.timing.median_s <= self.one_device.median_s * (1.0 + self.noise)

    @property
    def ranking_matches(self) -> bool | None:
        """Whether the model orders the chosen placement and the alternatives as the
        measurements do (None without alternatives or predictions)."""
        if self.timing is None or not self.alternatives:
            return None
        all_ = {"chosen": self.timing, **self.alternatives}
        if any(t.predicted_s is None for t in all_.values()):
            return None
        by_model = sorted(all_, key=lambda k: all_[k].predicted_s or 0.0)
        by_measure = sorted(all_, key=lambda k: all_[k].median_s)
        return by_model[0] == by_measure[0]

    @property
    def passed(self) -> bool:
        return self.status == "skipped" or (self.status == "ok" and bool(self.prediction_ok)
                                             and (bool(self.not_slower_ok)
                                                  or self.pinned_split))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key, t in [("timing", self.timing), ("one_device", self.one_device)]:
            out[key] = _timing_json(t)
        out["alternatives"] = {k: _timing_json(t) for k, t in self.alternatives.items()}
        out.update(ratio=self.ratio, noise=self.noise if self.status == "ok" else None,
                   pinned_split=self.pinned_split,
                   prediction_ok=self.prediction_ok, not_slower_ok=self.not_slower_ok,
                   ranking_matches=self.ranking_matches, passed=self.passed)
        return out


def _timing_json(t: Timing | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {"median_s": t.median_s, "medians_s": t.medians, "spread": t.spread,
            "predicted_s": t.predicted_s}


# ---- compiling ----------------------------------------------------------------------

def device_names(n: int) -> tuple[str, ...]:
    return tuple(f"/cpu:{i}" for i in range(n))


def compile_program(path: Path, backend: str, devices: Sequence[str],
                    force: str | None = None) -> Any:
    """The program of ``path`` lowered for ``backend`` on ``devices`` as ``tfc compile``
    does; with ``force`` (one of ``ALTERNATIVES``) the entries' ops get that
    assignment instead of the placer's, after the same optimization passes."""
    from tfc.compiler.driver import load_source, make_program
    from tfc.pipeline import DEFAULT_PIPELINE, Target, lower, run_pipeline
    module = load_source(path)
    target = Target(backend, tuple(devices))
    if force is None:
        module = lower(module, target)
    else:
        run_pipeline(module, DEFAULT_PIPELINE)
        for graph in module.entries.values():
            assign(graph, list(devices), devices[0] if force == ALL_ON_FIRST else force,
                   module.variables)
        module = lower(module, target, passes="", place=False)
    return make_program(module, path, backend)


def user_devices(path: Path, entry: str) -> list[str]:
    """The devices the user's scopes pin ops of ``entry`` of ``path`` to (its ops'
    devices before placement), sorted."""
    from tfc.compiler.driver import load_source
    graph = load_source(path).graphs.get(entry)
    return sorted({op.device for op in graph.walk() if op.device}) if graph else []


def _first_line(e: Exception) -> str:
    """An error's message, its first line, paths in this repository made relative."""
    return (str(e).splitlines() or [""])[0].replace(f"{ROOT}/", "")


def entry_of(program: Any) -> str:
    """The entry a model is timed by: its training step where it has one."""
    entries = list(program.module.entries)
    return "train_step" if "train_step" in entries else entries[0]


# ---- timing -------------------------------------------------------------------------

@dataclass
class Contender:
    """A compiled program of one model, with its timing so far."""

    key: tuple[int, str]  # (devices, "chosen" / "one device" / an alternative)
    program: Any
    steps: int = MIN_STEPS
    timing: Timing = field(default_factory=Timing)


def predicted(program: Any, entry: str, batch: int) -> float:
    """The model's step of ``entry`` of ``program`` at ``batch`` (``estimate_entry``)."""
    from tfc.runtime.estimate import estimate_entry
    return float(estimate_entry(program.module, entry, batch))


def time_contenders(contenders: list[Contender], entry: str, feeds: dict[str, np.ndarray],
                    repeats: int, warmup: int, steps: int | None, batch: int) -> None:
    """Warm each program up (its first run compiles), size its steps, then time them all
    ``repeats`` times, round-robin, the order rotated by one each round."""
    from tfc.runtime.profiler import bench_entry
    for c in contenders:
        first = bench_entry(c.program, entry, feeds, steps=3, warmup=max(1, warmup))
        c.steps = steps or int(min(MAX_STEPS, max(MIN_STEPS,
                                                  math.ceil(TARGET_REPEAT_S / first.median_s))))
    for r in range(repeats):
        for c in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
            report = bench_entry(c.program, entry, feeds, c.steps, warmup=warmup)
            c.timing.medians.append(report.median_s)
            c.timing.predicted_s = predicted(c.program, entry, batch)


def bench_model(name: str, path: Path, device_counts: Sequence[int], backend: str,
                args: argparse.Namespace) -> list[Row]:
    """Every row of one model: compile its programs, time them together, judge."""
    from tfc.errors import TfcError
    from tfc.runtime.feeds import synthetic_feeds
    t0 = time.perf_counter()
    baseline = Contender((1, "one device"), compile_program(path, backend, ()))
    entry = entry_of(baseline.program)
    pinned = user_devices(path, entry)
    rows = {n: Row(name, entry, n, pinned=pinned) for n in device_counts}
    contenders = [baseline]
    for n in device_counts:
        devices = device_names(n)
        forced = [None] + (list(ALTERNATIVES) if n > 1 and args.alternatives else [])
        for how in forced:
            try:
                program = compile_program(path, backend, devices, force=how)
            except TfcError as e:
                if how is None:
                    rows[n].status, rows[n].reason = "skipped", _first_line(e)
                    break
                rows[n].reason += f"{how}: {_first_line(e)}; "
                continue
            except Exception as e:  # noqa: BLE001  (reported in the row; fails the run)
                rows[n].status, rows[n].reason = "error", f"{type(e).__name__}: {e}"
                break
            contenders.append(Contender((n, how or "chosen"), program))
            if how is None:
                placed = program.module.placement_reports.get(entry)
                if placed is not None:
                    rows[n].chosen = placed.chosen
                    rows[n].candidates = {k: float(v) for k, v in placed.candidates.items()}
    contenders = [c for c in contenders if c is baseline or rows[c.key[0]].status == "ok"]
    sig = baseline.program.entries.get(entry) or baseline.program.entry(entry)
    feeds = synthetic_feeds(sig, args.batch)
    t1 = time.perf_counter()
    time_contenders(contenders, entry, feeds, args.repeats, args.warmup, args.steps, args.batch)
    print(f"{name}: compiled {len(contenders)} programs in {t1 - t0:.1f} s, timed them in "
          f"{time.perf_counter() - t1:.1f} s", file=sys.stderr, flush=True)
    by_key = {c.key: c.timing for c in contenders}
    for n, row in rows.items():
        if row.status != "ok":
            continue
        row.timing = by_key[(n, "chosen")]
        row.one_device = by_key[(1, "one device")]
        row.alternatives = {how: by_key[(n, how)] for how in ALTERNATIVES
                            if (n, how) in by_key}
    return list(rows.values())


# ---- the report ---------------------------------------------------------------------

def _check(ok: bool | None, text: str) -> str:
    return "-" if ok is None else f"{'ok' if ok else 'FAIL'} {text}"


def markdown(rows: list[Row], header: dict[str, Any]) -> str:
    """The table the issue asks for: model x devices -> predicted, measured, one-device
    measured, chosen vs alternatives, and each row's checks."""
    m = header["machine"]
    lines = [f"Placement benchmark (#16) on {m['cpu']} ({m['cores']} cores, "
             f"{'/'.join(m['simd']) or 'no AVX'}), backend {header['backend']}, "
             f"{header['profile']}; batch {header['batch']}, {header['repeats']} repeats "
             f"(median of medians), {header['elapsed_s']:.0f} s in all; load average "
             f"{header['load_average'][0]} before, {header['load_average'][1]} after.",
             "",
             "| model | entry | devices | chosen | predicted | measured | pred/meas | "
             "1-device measured | meas/1-device | alternatives: measured (predicted) | checks |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.status != "ok":
            lines.append(f"| {r.model} | {r.entry} | {r.devices} | {r.status}: {r.reason} "
                         "| | | | | | | |")
            continue
        assert r.timing is not None and r.one_device is not None
        alts = "; ".join(f"{k}: {_ms(t.median_s)} ({_ms(t.predicted_s)})"
                         for k, t in r.alternatives.items())
        if r.ranking_matches is not None:
            alts += f"; model's best is measured best: {'yes' if r.ranking_matches else 'no'}"
        ratio = "n/a" if r.ratio is None else f"{r.ratio:.2f}"
        vs_one = r.timing.median_s / r.one_device.median_s
        slower = (f"not slower: inconclusive, noise {r.noise:.0%} (rerun on a quiet host)"
                  if r.noise > NOISE_CAP else f"not slower (noise {r.noise:.0%})")
        checks = ", ".join([_check(r.prediction_ok, "prediction"),
                            _check(r.not_slower_ok, slower) if not r.pinned_split else
                            "not slower: not judged, the user's scopes pin ops to "
                            f"{', '.join(r.pinned)} (the placer keeps user pins)"])
        chosen = r.chosen or "-"
        if r.pinned_split:
            chosen += f" (pinned by the user's scopes to {', '.join(r.pinned)})"
        lines.append(f"| {r.model} | {r.entry} | {r.devices} | {chosen} | "
                     f"{_ms(r.timing.predicted_s)} | {_ms(r.timing.median_s)} | {ratio} | "
                     f"{_ms(r.one_device.median_s)} | {vs_one:.2f} | {alts or '-'} | {checks} |")
    failed = [f"{r.model}@{r.devices}" for r in rows if not r.passed]
    lines += ["", f"{sum(r.passed for r in rows)}/{len(rows)} rows pass"
              + (f"; failing: {', '.join(failed)}" if failed else "")]
    return "\n".join(lines)


# ---- the command --------------------------------------------------------------------

def example_models() -> dict[str, Path]:
    """Every model in ``examples/`` by file name (``.py`` and ``.tfm``)."""
    return {p.name: p for p in sorted([*EXAMPLES.glob("*.py"), *EXAMPLES.glob("*.tfm")])
            if p.name not in NOT_MODELS}


def resolve_models(spec: str | None) -> dict[str, Path]:
    known = example_models()
    if spec is None:
        return known
    out = {}
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        path = known.get(item) or known.get(f"{item}.py") or Path(item)
        if not path.is_file():
            raise SystemExit(f"error: no model {item!r} (examples: {', '.join(known)})")
        out[path.name] = path
    return out


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help="comma-separated example file names or paths "
                   "(default: every example)")
    p.add_argument("--devices", default="1,2,4", help="logical device counts (1,2,4)")
    p.add_argument("--steps", type=int, help="timed steps per repeat (default: ~0.15 s worth, "
                   f"{MIN_STEPS} to {MAX_STEPS})")
    p.add_argument("--repeats", type=int, default=5, help="repeats per program (5)")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed steps per repeat (1; each program first runs 3 to compile)")
    p.add_argument("--batch", type=int, default=BATCH, help=f"synthetic batch ({BATCH})")
    p.add_argument("--backend", help="tfc backend (default: $TFC_BACKEND, else llvm)")
    p.add_argument("--no-alternatives", dest="alternatives", action="store_false",
                   help="skip timing all-on-/cpu:0 and round robin in multi-device compiles")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 2 repeats of 2 steps, 1 warm-up step")
    p.add_argument("--json", help="also write the rows and the header as JSON here")
    args = p.parse_args(argv)
    try:
        args.device_counts = sorted({int(s) for s in args.devices.split(",") if s.strip()})
    except ValueError:
        p.error(f"--devices takes counts like 1,2,4, not {args.devices!r}")
    if not args.device_counts or min(args.device_counts) < 1:
        p.error("--devices needs counts of at least 1")
    for flag in ("steps", "repeats", "batch"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error(f"--{flag} must be at least 1")
    if args.quick:
        args.repeats, args.steps, args.warmup = 2, 2, 1
    return args


def _load_average() -> float | None:
    """The host's 1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    from tfc.backends.base import default_backend_name
    backend = args.backend or default_backend_name()
    models = resolve_models(args.models)
    start = time.perf_counter()
    rows: list[Row] = []
    load_before = _load_average()
    for name, path in models.items():
        try:
            rows += bench_model(name, path, args.device_counts, backend, args)
        except Exception as e:  # noqa: BLE001  (a model that fails is a row, not a crash)
            rows.append(Row(name, "-", 1, "error", f"{type(e).__name__}: {e}"))
    header = {"machine": machine_info(), "backend": backend, "profile": load_profile().describe(),
              "batch": args.batch, "repeats": args.repeats, "steps": args.steps,
              "tolerance": TOLERANCE, "noise_floor": NOISE_FLOOR, "noise_cap": NOISE_CAP,
              "elapsed_s": time.perf_counter() - start,
              "load_average": [load_before, _load_average()]}
    print(markdown(rows, header))
    if args.json:
        Path(args.json).write_text(json.dumps({**header, "rows": [r.to_json() for r in rows]},
                                              indent=1))
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
