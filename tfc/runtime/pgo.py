"""Profile-guided placement: place by the cost model, run, measure, place again.

``tfc compile model.py --devices cpu:0,cpu:1 --profile-runs N`` (``compile_with_report(
profile_runs=N)``, which calls ``profile_guided_placement``) does what the TensorFlow
white paper's cost model meant by "measured execution time":

1. **before**: the module is lowered as without the flag: the cost model places it.
2. **profile**: every entry runs ``N`` steps (after two warm-up steps) with synthetic
   feeds (``tfc.runtime.feeds.synthetic_feeds``, as ``tfc bench`` makes them, at
   ``batch``) on the real devices, compiled with kernel timing on (the LLVM backend's
   ``profiled()``). Each kernel's time, and each copy's between them (into fetches and
   update buffers), goes to the ops of the unfused graph it works for
   (``LLVMExecutable.step_times``, a fusion's region ``sources``, ``op_times``); a
   kernel that computes several ops (a fusion, a GEMM that also updates its weight)
   has no timestamps inside, so its time is split over them in proportion to the cost
   model's own estimates of them: the shares are the model's guess, their sum is what
   was measured. Ops that emit no kernel (reads of variables, constants, views) cost 0.
   What comes out is a ``MeasuredCosts`` (``tfc.passes.cost_model``): per op signature
   (symbols counted as ``batch``) the median seconds of one such op over the quieter
   half of the steps (``EntryProfile.quiet_steps``: a busy host's neighbours stall
   whole steps in bursts, which are not what the op costs), the thread count
   each device ran with, the median hand-off of a transfer (send in one thread -> recv
   returning in the other, from the executor's trace, for transfers the receiver waited
   for) and the median fixed cost of a step (its wall time less the span of its
   kernels and copies: ``Program.run``, the executor's dispatch, the variable updates),
   apart for one-device programs and the multi-device executor. Op times taken at
   different thread counts (a split entry runs at the devices' share of the cores, a
   one-device entry at all of them) are scaled by the model's curves to one count.
3. **after**: a fresh copy of the module, with ``module.measured_costs`` set, is placed
   and lowered again: the placer now uses the measured costs where it has them (scaled
   by its curves to its own thread counts and symbol size).
4. **decide by measurement**: before, after and everything on one device (as far as
   device scopes allow; skipped when a placement already is that) run ``N`` timed steps
   of every entry, interleaved step by step so that drifts of a busy machine hit all
   alike, on ordinary (unprofiled) code; the module whose summed median step is least
   is kept. So the result is never slower, as measured, than the cost model's
   placement or than one device.

Every entry is profiled and timed (``tfc compile`` has no entry option; each entry's
placement changes with the measured costs, so each must be measured to keep "never
worse"; the choice is per module, by the sum of the entries' median steps: variables
are shared, so entries cannot each keep another placement). The report estimates at
``batch`` too, as ``tfc bench`` does (``tfc.runtime.estimate.estimate_entry``).
Profiling needs a backend that times its kernels (the LLVM backend): on any other
``profile_guided_placement`` raises a one-line ``TfcError``, never doing nothing.
Programs made for measuring are twins with copies of the initial variables: the
module kept is compiled into the artifact exactly as without the flag.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from tfc.backends.base import Backend, get_backend
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op
from tfc.passes.fusion import fused_ops
from tfc.runtime.estimate import estimate_entry, unfused_graph, unfused_ops
from tfc.runtime.feeds import synthetic_feeds
from tfc.runtime.trace import Tracer

if TYPE_CHECKING:
    from tfc.passes.cost_model import CostModel, MeasuredCosts
    from tfc.pipeline import Target
    from tfc.runtime.program import Program

WARMUP_STEPS = 2
DEFAULT_BATCH = 64
BEFORE, AFTER, ONE_DEVICE = "before", "after", "one device"


# ---- kernels -> ops ------------------------------------------------------------------------

def op_times(steps: Sequence[tuple[Sequence[Op], float, float]],
             estimate: Callable[[Op], float], graph: Graph | None = None) -> dict[Op, float]:
    """Each unfused op's seconds in one step, from the timed steps of a native entry
    (``(ops of the graph, start, end)`` per kernel or copy: ``step_times()``). A step's
    time is split over the unfused ops it works for in proportion to ``estimate(op)``
    (equally when every estimate is 0); an op with several steps gets their sum. With
    ``graph``, every other op it computes gets 0: it has no kernel. The times add up to
    those of the steps that work for ops (all but copies of fetched feeds)."""
    out: dict[Op, float] = {}
    if graph is not None:
        out.update((op, 0.0) for op in unfused_ops(graph))
    for ops, start, end in steps:
        members = list(dict.fromkeys(src for op in ops for src in fused_ops(op)))
        if not members:
            continue
        seconds = max(0.0, end - start)
        weights = [max(0.0, float(estimate(m))) for m in members]
        total = sum(weights)
        for m, w in zip(members, weights):
            share = w / total if total > 0 else 1.0 / len(members)
            out[m] = out.get(m, 0.0) + seconds * share
    return out


# ---- profiling runs ------------------------------------------------------------------------

class HandoffTracer(Tracer):
    """The executor's tracer, also keeping when each key was sent and each stage's
    receives were waited for (the executor takes a stage's receives in one wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: dict[str, float] = {}
        self.received: list[tuple[list[str], float, float]] = []  # (keys, start, end)

    def send(self, device: str, key: str, nbytes: int, at: float) -> None:
        super().send(device, key, nbytes, at)
        self.sent[key] = at

    def recvs(self, device: str, keys: list[str], start: float, end: float) -> None:
        super().recvs(device, keys, start, end)
        self.received.append((list(keys), start, end))

    def handoffs(self) -> list[float]:
        """This step's hand-offs: from the last send a wait was for to the wait
        returning, for the waits that began before that send (the others found their
        values there: their latency was hidden, and what the receiver paid was a lookup,
        which ``lookups`` gives)."""
        out = []
        for keys, start, end in self.received:
            last = max((self.sent[k] for k in keys if k in self.sent), default=None)
            if last is not None and start <= last:
                out.append(end - last)
        return out

    def lookups(self) -> list[float]:
        """This step's time in recv per transfer, whether it waited or not."""
        return [(end - start) / len(keys) for keys, start, end in self.received]

    def clear(self) -> None:
        self.sent.clear()
        self.received.clear()
        self.events.clear()


@dataclass
class EntryProfile:
    """What the profiled steps of one entry measured."""

    entry: str
    threads: int  # the thread count of each device that ran ops
    executor: bool  # whether the steps ran on the multi-device executor
    op_seconds: dict[Op, list[float]] = field(default_factory=dict)  # per step
    kernel_s: list[float] = field(default_factory=list)  # per step: its ops' kernels, copies
    step_s: list[float] = field(default_factory=list)    # per step: wall time
    fixed_s: list[float] = field(default_factory=list)   # per step: wall less native span
    handoff_s: list[float] = field(default_factory=list)  # per transfer waited for
    lookup_s: list[float] = field(default_factory=list)   # per transfer: time in recv

    def quiet_steps(self) -> list[int]:
        """The steps whose ops' total time is at most the median's: what the ops cost.
        On a busy host a neighbour stalls whole steps in bursts (a kernel split over the
        pool waits a scheduler slice, ~16 ms on the 2-core host, for a preempted worker),
        often in half of the steps or more, so a median over every step can be a
        neighbour's burst; the quieter half of the steps is what the placement costs."""
        if not self.kernel_s:
            return list(range(max((len(v) for v in self.op_seconds.values()), default=0)))
        middle = float(np.median(self.kernel_s))
        return [i for i, s in enumerate(self.kernel_s) if s <= middle]


def _stage_executables(exe: Any, device: str) -> list[tuple[str, Any]]:
    """The backend executables a step of ``exe`` runs, each with its device: a
    partitioned entry's stages, or ``exe`` itself (on ``device``)."""
    from tfc.runtime.executor import PartitionedExecutable
    if isinstance(exe, PartitionedExecutable):
        return [(plan.device, st.executable) for plan in exe.plans for st in plan.stages
                if st.executable is not None]
    return [(device, exe)]


def _threads(program: "Program", exe: Any) -> int:
    """The threads each device of ``exe`` ran its kernels with: what the executor gave
    the devices that compute (``PartitionedExecutable.threads``), else what the backend
    runs a one-device program with."""
    from tfc.devices import cpu_count
    from tfc.runtime.executor import PartitionedExecutable
    if isinstance(exe, PartitionedExecutable):
        return min(exe.threads.values(), default=1)
    count = getattr(program.backend, "thread_count", None)
    return int(count()) if count is not None else cpu_count()


def model_estimate(model: "CostModel", graph: Graph, device: str, threads: int
                   ) -> Callable[[Op], float]:
    """The cost model's seconds of each unfused op of ``graph`` (a compiled graph, all
    on ``device``) in its fused context (``CostModel.op_seconds_in``): the weights by
    which ``op_times`` splits a kernel that computes several ops."""
    unfused, copy_of = unfused_graph(graph)
    device_of = {op: device for op in unfused.ops}

    def estimate(op: Op) -> float:
        return model.op_seconds_in(copy_of.get(op, op), unfused, threads, device, device_of)
    return estimate


def profile_entry(program: "Program", entry: str, feeds: Mapping[str, Any], steps: int,
                  model: "CostModel", warmup: int = WARMUP_STEPS) -> EntryProfile:
    """Run ``warmup`` then ``steps`` steps of ``entry`` on ``program``, whose backend
    times its kernels (``LLVMBackend.profiled()``), and map the kernel times to ops
    (``op_times``, kernels and the copies between them; ``model``'s estimates split
    steps that work for several ops)."""
    from tfc.runtime.executor import PartitionedExecutable
    for _ in range(warmup):
        program.run(entry, feeds)
    exe = program._executable(entry)
    executables = _stage_executables(exe, (program.module.devices or ["/cpu:0"])[0])
    if not all(getattr(e, "profiling", False) for _, e in executables):
        raise TfcError(f"entry '{entry}' was not compiled with kernel timing (the "
                       f"{program.backend.name} backend cannot time its kernels)")
    threads = _threads(program, exe)
    timed = [(e, e.graph, model_estimate(model, e.graph, d, threads)) for d, e in executables]
    tracer = HandoffTracer()
    traced = exe if isinstance(exe, PartitionedExecutable) else None
    out = EntryProfile(entry, threads, traced is not None)
    if traced is not None:
        traced.tracer = tracer
    try:
        for i in range(steps):
            tracer.step = i
            t0 = time.perf_counter()
            program.run(entry, feeds)
            wall = time.perf_counter() - t0
            first, last, total = None, None, 0.0
            for e, graph, estimate in timed:
                spans = e.step_times()
                for ops, start, end in spans:
                    first = start if first is None else min(first, start)
                    last = end if last is None else max(last, end)
                    total += (end - start) if ops else 0.0
                for op, s in op_times(spans, estimate, graph).items():
                    out.op_seconds.setdefault(op, []).append(s)
            out.step_s.append(wall)
            out.kernel_s.append(total)
            span = 0.0 if first is None or last is None else last - first
            out.fixed_s.append(max(0.0, wall - span))
            out.handoff_s += tracer.handoffs()
            out.lookup_s += tracer.lookups()
            tracer.clear()
    finally:
        if traced is not None:
            traced.tracer = None
    return out


def measured_costs(profiles: Sequence[EntryProfile], symbol_size: int,
                   source: str = "profile run", model: "CostModel | None" = None
                   ) -> "MeasuredCosts":
    """The ``MeasuredCosts`` of ``profiles``, over all entries and their quiet steps
    (``quiet_steps``):

    - per op signature (``op_signature(op, symbol_size)``, ``symbol_size`` the batch the
      steps ran at) the median seconds of one such op, every sample first scaled by the
      cost model's curves (``model``, default the device profile's) from the threads its
      entry ran with to the least of them, ``threads``: an entry split over the devices
      runs at their share of the cores, one on a single device at all of them, and a
      sample of one is no sample of the other;
    - the median hand-off of a transfer (of those the receiver waited for; else the
      median time spent in a recv);
    - the median fixed cost of a step (its wall time less the span of its native steps:
      ``Program.run``, the dispatch, the update of the variables), apart for the steps of
      one-device programs (``step_s``) and of the multi-device executor
      (``executor_step_s``): each replaces the model's fixed cost of its kind only."""
    from tfc.devices import load_profile
    from tfc.passes.cost_model import CostModel, MeasuredCosts, op_signature
    if model is None or model.symbol_size != symbol_size or model.measured is not None:
        model = CostModel(model.profile if model is not None else load_profile(), symbol_size)
    threads = min((p.threads for p in profiles), default=1)
    samples: dict[str, list[float]] = {}
    for p in profiles:
        quiet = p.quiet_steps()
        for op, secs in p.op_seconds.items():
            scale = 1.0
            if p.threads != threads:
                there = model.op_seconds(op, p.threads, op.device)
                scale = model.op_seconds(op, threads, op.device) / there if there > 0 else 1.0
            samples.setdefault(op_signature(op, symbol_size), []).extend(
                secs[i] * scale for i in quiet if i < len(secs))
    handoffs = [h for p in profiles for h in p.handoff_s] or \
        [h for p in profiles for h in p.lookup_s]

    def fixed(executor: bool) -> float | None:
        steps = [p.fixed_s[i] for p in profiles if p.executor == executor
                 for i in p.quiet_steps() if i < len(p.fixed_s)]
        return float(statistics.median(steps)) if steps else None

    return MeasuredCosts(
        threads=threads,
        seconds={sig: float(statistics.median(v)) for sig, v in samples.items()},
        handoff_s=float(statistics.median(handoffs)) if handoffs else None,
        step_s=fixed(executor=False), executor_step_s=fixed(executor=True),
        source=source, symbol_size=symbol_size)


# ---- measuring candidate placements --------------------------------------------------------

def time_steps(programs: Mapping[str, "Program"], feeds: Mapping[str, Mapping[str, Any]],
               steps: int, warmup: int = WARMUP_STEPS) -> dict[str, dict[str, list[float]]]:
    """Wall seconds of ``steps`` steps of every entry of ``feeds`` on every program
    (``{name: {entry: [s, ...]}}``), after ``warmup`` steps each, interleaved: step i of
    every program and entry runs before step i + 1 of any, so that what else the machine
    does hits every candidate alike."""
    for program in programs.values():
        for entry, f in feeds.items():
            for _ in range(warmup):
                program.run(entry, f)
    out: dict[str, dict[str, list[float]]] = {n: {e: [] for e in feeds} for n in programs}
    clock = time.perf_counter
    for _ in range(steps):
        for name, program in programs.items():
            for entry, f in feeds.items():
                t0 = clock()
                program.run(entry, f)
                out[name][entry].append(clock() - t0)
    return out


def fresh_copy(module: Module) -> Module:
    """A copy of ``module`` to lower again: its graphs cloned (but a partitioned entry's
    stage graphs) and variable declarations copied (placement sets their devices), its
    devices and transfer setting; nothing of a lowering (plans, tables) or of a profile."""
    stages = module.stage_graphs()
    return Module({n: g.clone() for n, g in module.graphs.items() if n not in stages},
                  {n: dataclasses.replace(d) for n, d in module.variables.items()},
                  devices=list(module.devices), fp16_transfers=module.fp16_transfers)


def pin_unplaced(module: Module, device: str) -> Module:
    """``module`` with every entry op that no device scope pins put on ``device``, as a
    user's scope would: placement then puts everything on one device, as far as the
    user's own scopes allow."""
    for graph in module.entries.values():
        for op in graph.ops:
            if op.device is None:
                op.device = device
    return module


def placement_of(module: Module) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What the placement pass decided for every entry of a lowered ``module`` (each
    op's device, in op order), to tell placements apart."""
    return tuple((name, tuple(d for _, _, d in rep.placement))
                 for name, rep in sorted(module.placement_reports.items()))


def on_one_device(module: Module) -> bool:
    """Whether every entry of a placed ``module`` runs all its ops on one device."""
    return all(len({d for _, _, d in rep.placement}) <= 1
               for rep in module.placement_reports.values())


# ---- the report ----------------------------------------------------------------------------

@dataclass
class CandidateResult:
    """One placement that was measured: how it was made, and per entry its estimated step
    at the profile's batch by the cost model alone (``modelled_s``) and with the measured
    costs (``remodelled_s``), and its measured median step."""

    name: str
    made_by: dict[str, str]  # per entry: the placer's winning candidate, or the device
    modelled_s: dict[str, float]
    remodelled_s: dict[str, float]
    measured_s: dict[str, float]

    @property
    def total_s(self) -> float:
        """The measured median steps of every entry, summed: what the choice compares."""
        return sum(self.measured_s.values())


@dataclass
class ProfileReport:
    """What ``profile_guided_placement`` measured and kept, for ``tfc compile``'s report."""

    runs: int
    batch: int
    threads: int
    candidates: list[CandidateResult]
    kept: str
    ops_measured: dict[str, int]  # per entry of the kept module: ops with measured costs
    ops_modelled: dict[str, int]  # ... and ops the model estimated from its curves
    signatures: int  # distinct op signatures measured
    handoff_s: float | None
    handoffs: int  # transfers the hand-off median is over
    step_s: float | None  # measured fixed cost of a one-device program's step
    same_as_before: bool = False  # the measured costs gave the cost model's placement
    executor_step_s: float | None = None  # ... and of a step of the multi-device executor

    def candidate(self, name: str) -> CandidateResult:
        return next(c for c in self.candidates if c.name == name)

    def header(self) -> list[str]:
        """What was run and measured (lines)."""
        out = [f"profile-guided placement: {self.runs} profiled and {self.runs} timed steps "
               f"of every entry and placement, synthetic feeds at batch {self.batch}, "
               f"{self.threads} thread{'s' if self.threads != 1 else ''} per device"]
        parts = [f"{self.signatures} op signatures"]
        if self.handoff_s is not None:
            parts.append(f"hand-off {self.handoff_s * 1e6:.1f} us per transfer (median of "
                         f"{self.handoffs})")
        if self.step_s is not None:
            parts.append(f"fixed step cost {self.step_s * 1e6:.1f} us on one device")
        if self.executor_step_s is not None:
            parts.append(f"fixed step cost {self.executor_step_s * 1e6:.1f} us on the "
                         f"executor")
        out.append("measured: " + ", ".join(parts))
        out += [f"@{e}: {n} ops with measured costs, {self.ops_modelled[e]} modelled"
                for e, n in self.ops_measured.items()]
        return out

    def columns(self) -> list[str]:
        """The table's columns: the estimates are the cost model's without and with the
        measured costs, at the profile's batch; measured is the median step."""
        return ["entry", "placement", "made by", "model", "with measured", "measured"]

    def rows(self) -> list[list[str]]:
        """Per entry and placement: the estimates and the measurement (a table)."""
        entries = list(self.candidates[0].measured_s) if self.candidates else []
        return [[f"@{e}", c.name + (" (kept)" if c.name == self.kept else ""),
                 c.made_by[e], _ms(c.modelled_s[e]), _ms(c.remodelled_s[e]),
                 _ms(c.measured_s[e])]
                for e in entries for c in self.candidates]

    def verdict(self) -> str:
        """Which placement was kept, and why (one line)."""
        kept = self.candidate(self.kept)
        others = ", ".join(f"{c.name} {_ms(c.total_s)}" for c in self.candidates
                           if c.name != self.kept)
        same = ("; the measured costs gave the cost model's placement again"
                if self.same_as_before else "")
        return (f"kept: the {self.kept} placement, {_ms(kept.total_s)} per step of every "
                f"entry measured" + (f" (against {others})" if others else "") + same)

    def lines(self) -> list[str]:
        """The whole report as plain text lines."""
        rows = [self.columns(), *self.rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        table = ["  " + "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip()
                 for r in rows]
        return [*self.header(), *table, self.verdict()]


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms"


# ---- the driver's entry point --------------------------------------------------------------

def profiling_backend(name: str) -> Backend:
    """The backend ``name`` with kernel timing on; a one-line ``TfcError`` for a backend
    that cannot time its kernels."""
    backend = get_backend(name)
    profiled = getattr(backend, "profiled", None)
    if profiled is None:
        raise TfcError(f"profile-guided placement (--profile-runs) needs the llvm backend: "
                       f"it times every kernel, and the {name} backend cannot")
    return profiled()


def check_profile_target(target: "Target", runs: int, batch: int) -> None:
    """Refuse, before any work, what profile-guided placement cannot do."""
    if runs < 1:
        raise TfcError(f"--profile-runs must be at least 1, not {runs}")
    if batch < 1:
        raise TfcError(f"--profile-batch must be at least 1, not {batch}")
    if len(target.devices) < 2:
        raise TfcError("--profile-runs places the model across devices; give two or more "
                       "with --devices")
    profiling_backend(target.backend)


def _release(program: "Program") -> None:
    """Stop the executor threads of a program made for measuring (it is dropped)."""
    for exe in program._executables.values():
        close = getattr(exe, "close", None)
        if close is not None:
            close()


def _estimates(module: Module, batch: int, measured: "MeasuredCosts | None"
               ) -> dict[str, float]:
    """Each entry's estimated step as ``module`` places it, at ``batch``, by the cost
    model with ``measured`` costs (or without)."""
    return {name: estimate_entry(module, name, batch, measured) for name in module.entries}


def _made_by(name: str, module: Module, device: str) -> dict[str, str]:
    """Per entry, what made the placement: the placer's winning candidate, or ``all on``
    the device everything was put on."""
    reports = module.placement_reports
    return {e: f"all on {device}" if name == ONE_DEVICE else
            reports[e].chosen if e in reports else "-" for e in module.entries}


def _op_counts(module: Module, measured: "MeasuredCosts", batch: int
               ) -> tuple[dict[str, int], dict[str, int]]:
    """Per entry of ``module``: how many of its unfused ops have a measured cost, and
    how many the model estimates from its curves."""
    from tfc.passes.cost_model import op_signature
    have, model = {}, {}
    for name, graph in module.entries.items():
        ops = unfused_ops(graph)
        hits = sum(1 for op in ops if op_signature(op, batch) in measured.seconds)
        have[name], model[name] = hits, len(ops) - hits
    return have, model


def profile_guided_placement(
        source: Module, before: Module, target: "Target", lower: Callable[[Module], Module],
        make_program: Callable[[Module], "Program"], runs: int, batch: int = DEFAULT_BATCH,
        progress: Callable[[str], None] | None = None) -> tuple[Module, ProfileReport]:
    """Profile ``before`` (``source`` lowered for ``target``: placed by the cost model),
    place ``source`` again with what was measured, and return whichever lowered module
    runs fastest by measurement, with the report (see the module docstring).

    ``lower(module)`` lowers a module for ``target`` as the compile did ``before`` (the
    user's passes, placement, partition, the backend's); it is called on fresh copies
    of ``source`` (loaded, not lowered), which is not changed. ``make_program(lowered)``
    makes the program of a lowered module with the compile's initial state; profiled
    and timed steps run on twins of it, with copies of its variables."""
    from tfc.devices import load_profile
    from tfc.passes.cost_model import CostModel
    from tfc.runtime.program import Program

    check_profile_target(target, runs, batch)
    say = progress or (lambda message: None)
    timed_backend = get_backend(target.backend)
    profiled_backend = profiling_backend(target.backend)

    start = make_program(before)
    initial, step = dict(start.variables), start.step
    feeds = {name: synthetic_feeds(graph, batch) for name, graph in before.entries.items()}

    def twin(lowered: Module, backend: Backend) -> "Program":
        return Program(lowered, initial, backend=backend, step=step,
                       cluster="inprocess")  # (a cluster's tasks are measured as threads)

    say(f"profiling {len(feeds)} entr{'y' if len(feeds) == 1 else 'ies'} of the cost "
        f"model's placement ({runs} steps each)")
    profiled = twin(before, profiled_backend)
    model = CostModel(load_profile(), symbol_size=batch)
    profiles = []
    try:
        for entry, f in feeds.items():
            try:
                profiles.append(profile_entry(profiled, entry, f, runs, model))
            except TfcError as e:
                raise TfcError(f"profiling entry '{entry}' with synthetic feeds (batch "
                               f"{batch}) failed: {e}") from None
    finally:
        _release(profiled)
    measured = measured_costs(profiles, batch, model=model)

    fresh = fresh_copy(source)
    fresh.measured_costs = measured
    after = lower(fresh)
    modules = {BEFORE: before}
    same = placement_of(after) == placement_of(before)
    if not same:
        modules[AFTER] = after
    if not any(on_one_device(m) for m in modules.values()):
        modules[ONE_DEVICE] = lower(pin_unplaced(fresh_copy(source), target.devices[0]))
    say(f"timing {len(modules)} placements ({', '.join(modules)}), {runs} steps each")
    twins = {n: twin(m, timed_backend) for n, m in modules.items()}
    try:
        times = time_steps(twins, feeds, runs)
    finally:
        for program in twins.values():
            _release(program)
    results = [CandidateResult(name, _made_by(name, m, target.devices[0]),
                               _estimates(m, batch, None), _estimates(m, batch, measured),
                               {e: float(np.median(t)) for e, t in times[name].items()})
               for name, m in modules.items()]
    best = min(results, key=lambda c: c.total_s)  # the first of equals: before
    kept = modules[best.name]
    have, modelled = _op_counts(kept, measured, batch)
    report = ProfileReport(runs, batch, measured.threads, results, best.name, have, modelled,
                           len(measured.seconds), measured.handoff_s,
                           sum(len(p.handoff_s) for p in profiles)
                           or sum(len(p.lookup_s) for p in profiles),
                           measured.step_s, same_as_before=same,
                           executor_step_s=measured.executor_step_s)
    return kept, report
