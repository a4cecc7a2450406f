"""Cost-model device placement: the greedy simulated execution of the TensorFlow paper,
judged by a model of what the runtime really pays (``tfc.passes.cost_model``).

Ops are visited in topological order. For each, every device it may run on is tried in
a simulation of the step so far: the op starts when its device is free and its inputs
have arrived (a value from another device of this process after the hand-off latency;
from another host after the link's latency plus its bytes over the link), and takes the
cost model's seconds on that device: by op class and size from the calibrated curves,
with the device's share of the host's cores, fusion accounted. The op goes where it
would finish first.

Constraints, as in TensorFlow: a user's ``device`` scope pins an op (to any device of
the module that matches it); a variable and every op that reads or writes it share one
device (the variable's own scope, else where the first of them goes); ops made for a
gradient with ``colocate_gradients_with_ops`` arrive already pinned; and a device gets
only ops its backend can run.

Greedy is myopic, so ``place_graph`` compares candidates under the same model and
constraints and keeps the least: each device alone (a one-device program with all the
host's cores), greedy over all devices, greedy over as many devices as the host has
cores (when there are more devices than cores), and round robin. Each candidate's
estimate is made for the devices it uses (every device with an op, free or not, as the
runtime partitions): their thread shares, the executor's per-stage and hand-off costs
when there are several, and never less than the host's
total work over its cores. A split must beat the best device alone by ``SPLIT_MARGIN``
(the model's error on splits) unless a profiling run measured the ops. So a sequential
chain stays on one device unless splitting it pays. The report (``PlacementReport``, printed by ``tfc compile``) says which won,
gives every candidate's estimate, and says whether the rates are calibrated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Mapping, Sequence

from tfc.devices import DeviceProfile, load_profile, matches, parse_device, task_of
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.types import SYMBOL_SIZE
from tfc.passes.compress import transfer_nbytes, transfer_policy
from tfc.passes.cost_model import CostModel, MeasuredCosts, variables_of
from tfc.passes.manager import register_pass
from tfc.units import format_ms as _ms

__all__ = ["SYMBOL_SIZE", "PlacementReport", "Simulation", "assign", "estimate_placed",
           "place_graph", "simulate_placed"]

VAR_KINDS_PREFIX = "var."
# How much faster than the best device alone a split's estimate must be to be chosen
# (unless a profiling run measured the ops): the model's error on split placements.
# Splitting trades kernels on all cores for kernels on a share of them plus the executor's
# stages and hand-offs; on the #16 host the model predicted greedy splits 1.3-1.9x too
# fast (a 64-layer MLP, two LSTM towers) while one-device predictions were within 10%,
# so a split that the model calls 10% faster measured 20-50% slower. 25% is the
# accuracy the model is held to (tools/bench_placement.py).
SPLIT_MARGIN = 0.25
GREEDY, SINGLE_DEVICE, ROUND_ROBIN = "greedy", "single device", "round robin"


@dataclass
class PlacementReport:
    """Where each op of one graph went and what the model expects of the step.

    ``chosen`` names the candidate placement that won (``GREEDY``, ``SINGLE_DEVICE``,
    ``ROUND_ROBIN`` or ``greedy on N devices``); ``estimated_s`` is its estimate, never
    above the others' (``candidates``)."""

    graph: str
    devices: list[str]
    placement: list[tuple[str, str, str]]  # (op kind, result or "-", device), in op order
    chosen: str
    greedy_s: float
    single_device_s: float
    single_device: str  # the device of the best single-device placement
    round_robin_s: float
    transfers: int
    transfer_bytes: int  # on the wire: f16 bytes for the values fp16 transfers compress
    measured_s: float | None = None
    ops_per_device: dict[str, int] = field(default_factory=dict)
    others: dict[str, float] = field(default_factory=dict)  # further candidates' estimates
    rates: str = "default rates"  # where the model's rates come from (DeviceProfile.describe)

    @property
    def candidates(self) -> dict[str, float]:
        """Each candidate placement's estimated step."""
        return {GREEDY: self.greedy_s, **self.others, SINGLE_DEVICE: self.single_device_s,
                ROUND_ROBIN: self.round_robin_s}

    @property
    def estimated_s(self) -> float:
        """The chosen placement's estimated step."""
        return self.candidates[self.chosen]

    def summary(self) -> str:
        per = ", ".join(f"{d}: {n}" for d, n in self.ops_per_device.items())
        others = ", ".join(f"{name}: {_ms(s)}" for name, s in self.candidates.items()
                           if name != self.chosen and name != SINGLE_DEVICE)
        single = f"single device {self.single_device}: {_ms(self.single_device_s)}"
        alternatives = ", ".join(x for x in (others, single if self.chosen != SINGLE_DEVICE
                                             else "") if x)
        line = (f"@{self.graph}: {len(self.placement)} ops on {len(self.devices)} devices "
                f"({per}); {self.transfers} transfers ({self.transfer_bytes} B at "
                f"B={SYMBOL_SIZE}); estimated step {_ms(self.estimated_s)} by {self.chosen}"
                + (f" on {self.single_device}" if self.chosen == SINGLE_DEVICE else "")
                + f" ({alternatives}); {self.rates}")
        if self.measured_s is not None:
            line += f"; measured {_ms(self.measured_s)}"
        return line


class Simulation:
    """The step as far as it has been placed: when each device is free, when each value
    is available where, the work each device did and the stages the executor runs.

    ``threads`` is each device's thread count (its share of the host's cores among the
    devices the step is expected to use). ``executor``: whether the step runs on the
    multi-device executor (per-stage costs) rather than as one native program."""

    def __init__(self, model: CostModel, graph: Graph, devices: Sequence[str],
                 threads: Mapping[str, int], compressed: Collection[Value] = (),
                 executor: bool = True) -> None:
        self.model = model
        self.graph = graph
        self.devices = list(devices)
        self.threads = dict(threads)
        self.compressed = compressed  # values that cross devices as f16 (fp16 transfers)
        self.executor = executor
        self.free = {d: 0.0 for d in devices}
        self.busy = {d: 0.0 for d in devices}  # seconds of kernels each device ran
        self.device_of: dict[Op, str] = {}
        self.home: dict[Value, str] = {}
        self.ready: dict[tuple[Value, str], float] = {}  # (value, device) -> arrival
        self.stage_of: dict[Value, int] = {}  # device crossings on the longest path in
        self.stages: set[tuple[str, int]] = set()
        self.op_stage: dict[Op, int] = {}
        self.op_time: dict[Op, float] = {}  # each op's kernel seconds where it was placed
        self.group_of: dict[Op, Op] = {}  # a fused op's kernel (its first op)
        self.group_reads: dict[Op, set[Value]] = {}  # what each kernel reads from memory
        self.transfers = 0
        self.transfer_bytes = 0
        model.prepare(graph)

    def exec_time(self, op: Op, device: str) -> float:
        return self.model.op_seconds_in(op, self.graph, self.threads.get(device, 1), device,
                                        self.device_of, self.group_of, self.group_reads)

    def arrival(self, v: Value, device: str) -> float:
        if v.op is None:  # a feed: on the host, wherever it is needed
            return 0.0
        if (v, device) in self.ready:
            return self.ready[(v, device)]
        src = self.home[v]
        return (self.ready[(v, src)] + self._send_s()
                + self.model.transfer_seconds(v, src, device, v in self.compressed,
                                              len(self.threads)))

    def _send_s(self) -> float:
        """The work of one send (or one recv) call on a device's thread."""
        return self.model.transfer_s / 2

    def _new_transfers(self, op: Op, device: str) -> list[Value]:
        return [v for v in op.inputs if v.op is not None and (v, device) not in self.ready
                and self.home[v] != device]

    def wire_bytes(self, v: Value) -> int:
        """Bytes of ``v`` as it crosses devices (f16 when compressed); between devices of
        one process they are handed over, not copied (``CostModel.transfer_seconds``)."""
        return transfer_nbytes(v, v in self.compressed, self.model.symbol_size)

    def _stage(self, op: Op, device: str) -> int:
        return max((self.stage_of.get(v, 0) + (v.op is not None and self.home[v] != device)
                    for v in op.inputs), default=0)

    def _stage_cost(self, op: Op, device: str) -> float:
        if not self.executor or (device, self._stage(op, device)) in self.stages:
            return 0.0
        return self.model.stage_s

    def finish(self, op: Op, device: str) -> float:
        start = max([self.free[device], *(self.arrival(v, device) for v in op.inputs)])
        recvs = len(set(self._new_transfers(op, device))) * self._send_s()
        return start + recvs + self._stage_cost(op, device) + self.exec_time(op, device)

    def commit(self, op: Op, device: str) -> float:
        end = self.finish(op, device)
        for v in dict.fromkeys(self._new_transfers(op, device)):
            src = self.home[v]
            self.ready[(v, device)] = self.arrival(v, device)
            self.transfers += 1
            self.transfer_bytes += self.wire_bytes(v)
            self.free[src] += self._send_s()  # the send call, on the sender's thread
            self.busy[src] += self._send_s()
            self.busy[device] += self._send_s()  # the recv call
        work = self.exec_time(op, device)
        if self.executor:
            work += self.model.executor_extra_seconds(op, self.threads.get(device, 1), device)
        stage = self._stage(op, device)
        self.stages.add((device, stage))
        if self.model.fusible(op):
            root = self.model.fused_root(op, device, self.device_of, self.group_of) or op
            reads = self.model.kernel_reads(op, root, device, self.device_of, self.group_reads)
            self.group_of[op] = root
            self.group_reads.setdefault(root, set()).update(reads)
        self.device_of[op] = device
        self.op_stage[op] = stage
        self.op_time[op] = work
        self.free[device] = end
        self.busy[device] += work
        for r in op.results:
            self.home[r] = device
            self.stage_of[r] = stage
            self.ready[(r, device)] = end
        return end

    @property
    def makespan(self) -> float:
        """The step: the fixed cost of a step (the executor's, when it runs the step) plus
        the last device's finish (``staged_finish`` on the executor), but never less than
        the host's work (each CPU device's kernel seconds times its threads; a GPU's
        kernels do not run on the host's cores) spread over its cores (more threads than
        cores take turns)."""
        host = sum(self.busy[d] * self.threads.get(d, 1) for d in self.busy
                   if parse_device(d).kind == "cpu") / self.model.cores
        if not self.executor:
            return (self.model.step_seconds(self.graph)
                    + max(max(self.free.values(), default=0.0), host))
        return self.model.executor_step_s + max(self.staged_finish(), host)

    def staged_finish(self) -> float:
        """When the last stage ends, as the executor runs the step: each device's ops
        in stages (``tfc.passes.partition``: an op's stage is the most device crossings
        on a path into it); a stage starts when its device's previous stage has ended
        and every value it receives has arrived, i.e. the stage that computed it has
        ended, sent it, and the hand-off is done; it then runs its ops back to back. So
        an op waits for all of its stage's receives, not only its own inputs, which a
        simulation op by op misses (a 64-layer MLP split by greedy: 3 stages a device,
        each waiting for the other's). Each stage is a compiled graph the executor calls:
        it pays ``stage_s`` and, as a one-device step does, for each of its feeds, fetches,
        variables and updates (``stage_boundary_seconds``). That Python work (the call,
        its arguments and results, the send and recv calls) holds the interpreter lock,
        so the stages' Python work runs on one timeline shared by all devices, and only
        their kernels (native code, the lock released) run side by side: charged on
        each device's own timeline, round robin over 2-4 devices was predicted at
        0.20-0.67 of its measured step on the 2-core host, on the shared one 0.25-0.67
        (every one of 26 rows closer; the two towers' greedy split, few stages, moves
        0.78 -> 0.79). Each process has its own interpreter: the devices of one cluster
        task share one timeline, another task's stages do not wait for it."""
        return max(self.stage_ends().values(), default=0.0)

    def stage_ends(self) -> dict[tuple[str, int], float]:
        """When each stage (device, stage index) ends, from the step's start, as
        ``staged_finish`` runs them."""
        stages: dict[tuple[str, int], float] = {}
        incoming: dict[tuple[str, int], dict[tuple[Value, str], tuple[str, int]]] = {}
        sends: dict[tuple[str, int], set[tuple[Value, str]]] = {}
        recvs: dict[tuple[str, int], set[tuple[Value, str]]] = {}
        for op, device in self.device_of.items():
            key = (device, self.op_stage[op])
            stages[key] = stages.get(key, 0.0) + self.op_time[op]
            for v in op.inputs:
                if v.op is None or self.device_of[v.op] == device:
                    continue
                src = (self.device_of[v.op], self.op_stage[v.op])
                incoming.setdefault(key, {})[(v, device)] = src
                sends.setdefault(src, set()).add((v, device))
                recvs.setdefault(key, set()).add((v, device))
        boundary = self.stage_boundary_seconds()
        send_s = self._send_s()
        end: dict[tuple[str, int], float] = {}
        last: dict[str, float] = {}
        interpreter: dict[str | None, float] = {}  # per process: when
        # its interpreter lock is next free
        for key in sorted(stages, key=lambda k: (k[1], self.devices.index(k[0])
                                                 if k[0] in self.devices else 0)):
            device = key[0]
            ready = max([last.get(device, 0.0),
                         *(end[src] + self.model.transfer_seconds(v, src[0], dst,
                                                                  v in self.compressed,
                                                                  len(self.threads))
                           for (v, dst), src in incoming.get(key, {}).items())])
            # a value that no kernel of the stage wrote (a variable's) is copied out
            copies = sum(self.model.copy_seconds(v, self.threads.get(device, 1), device)
                         for v, _ in sends.get(key, ()) if v.op is not None
                         and self.model.is_free(v.op) and v.op.kind.startswith("var."))
            python = (self.model.stage_s + boundary.get(key, 0.0)
                      + send_s * (len(sends.get(key, ())) + len(recvs.get(key, ()))))
            process = task_of(device)  # (None: this process)
            # the stage's Python work waits for its process's lock
            ready = max(ready, interpreter.get(process, 0.0))
            interpreter[process] = ready + python
            end[key] = last[device] = ready + python + stages[key] + copies
        return end

    def device_finish(self) -> dict[str, float]:
        """When each device with ops is done with its part of the step, from the step's
        start: its last stage's end on the executor (plus the executor's fixed step
        cost, which each process pays), else its last op's."""
        if not self.executor:
            return {d: self.model.step_seconds(self.graph) + self.free[d]
                    for d in set(self.device_of.values())}
        out: dict[str, float] = {}
        for (device, _), end in self.stage_ends().items():
            out[device] = max(out.get(device, 0.0), self.model.executor_step_s + end)
        return out

    def stage_boundary_seconds(self) -> dict[tuple[str, int], float]:
        """Each stage's ``CostModel.boundary_seconds``, for the stage graph
        ``tfc.passes.partition.cut_stages`` makes of it: its arguments are the values
        its ops use from outside it (feeds, received values, earlier stages' values), its
        results the values it defines that leave it (used by another stage, or fetched),
        its variables those its ops use and write."""
        key_of = {op: (device, self.op_stage[op]) for op, device in self.device_of.items()}
        inputs: dict[tuple[str, int], set[Value]] = {}
        outputs: dict[tuple[str, int], set[Value]] = {}
        ops: dict[tuple[str, int], list[Op]] = {}
        for op, key in key_of.items():
            ops.setdefault(key, []).append(op)
            for v in op.inputs:
                if v.op is None or key_of[v.op] != key:
                    inputs.setdefault(key, set()).add(v)
                if v.op is not None and key_of[v.op] != key:
                    outputs.setdefault(key_of[v.op], set()).add(v)
        for r in self.graph.results:
            if r.op is not None and r.op in key_of:
                outputs.setdefault(key_of[r.op], set()).add(r)
        out = {}
        for key, stage_ops in ops.items():
            used, written = variables_of(stage_ops)
            out[key] = self.model.boundary_seconds(len(inputs.get(key, ())),
                                                   len(outputs.get(key, ())),
                                                   len(used), len(written))
        return out


# Ops the CUDA backend does not run (control flow, collectives: a graph holding one runs
# whole on the reference backend, ``tfc.backends.cuda``) or runs on the host (linear
# algebra, through copies): where a CPU device is there to take them, a GPU gets none.
# tests/passes/test_placement.py checks this against the backend's ``how_to_run``.
GPU_HOST_ONLY = frozenset({"cond", "while", "scan", "matrix_determinant", "matrix_inverse",
                           "all_reduce", "first_occurrence"})


def can_run(kind: str, device: str) -> bool:
    """Whether the backend of ``device``'s kind runs op ``kind`` natively: CPU backends
    run every op; the CUDA backend every op but ``GPU_HOST_ONLY``."""
    return parse_device(device).kind == "cpu" or kind not in GPU_HOST_ONLY


def _allowed(op: Op, devices: Sequence[str]) -> list[str]:
    ok = [d for d in devices if can_run(op.kind, d)]
    if not ok and all(parse_device(d).kind == "gpu" for d in devices):
        ok = list(devices)  # GPUs alone: the CUDA backend runs such a graph on the reference
    if op.device is not None:
        pinned = [d for d in ok if matches(op.device, d)]
        if not pinned:
            raise TfcError(f"{op.kind} is placed on {op.device} (a device scope), but the "
                           f"module is compiled for {', '.join(devices)}", op.loc)
        return pinned
    if not ok:
        raise TfcError(f"no device of {', '.join(devices)} can run {op.kind}", op.loc)
    return ok


def _variable_of(op: Op) -> str | None:
    return op.attrs.get("var") if op.kind.startswith(VAR_KINDS_PREFIX) else None


# Picks a device for an op among its candidates (the simulation so far, the op's index).
Chooser = Callable[[Op, list[str], "Simulation", int], str]


@dataclass
class _Candidate:
    """One complete placement of a graph and its estimated step."""

    assign: dict[Op, str]
    var_device: dict[str, str]
    sim: Simulation

    @property
    def estimate_s(self) -> float:
        return self.sim.makespan


def _active(assign: Mapping[Op, str], devices: Sequence[str]) -> list[str]:
    """The devices a placement runs on: every device that has any op, free or not. This
    is the runtime's rule (``tfc.passes.partition.single_device`` keeps an entry whole
    only when all its ops share one device; the executor gives a thread share to every
    device with a stage), so a variable pinned to another device makes the model simulate
    the executor, as the runtime runs it."""
    used = set(assign.values())
    return [d for d in devices if d in used] or [devices[0]]


def simulate(model: CostModel, graph: Graph, assign: Mapping[Op, str], devices: Sequence[str],
             compressed: Collection[Value] = ()) -> Simulation:
    """The step of ``graph`` placed as ``assign``, for the devices it actually uses: one
    device runs as a one-device program with all the host's cores; several run on the
    executor, each with its share of the cores."""
    active = _active(assign, devices)
    sim = Simulation(model, graph, devices, model.threads(active), compressed,
                     executor=len(active) > 1)
    for op in graph.ops:
        sim.commit(op, assign[op])
    return sim


def _place(model: CostModel, graph: Graph, devices: Sequence[str],
           declared: Mapping[str, str], choose: Chooser, compressed: Collection[Value],
           allowed: Mapping[Op, list[str]]) -> _Candidate:
    """A placement of ``graph`` that keeps every constraint (scopes, backends: each op's
    ``allowed`` devices; a variable's ops on its device), ``choose`` deciding among the
    devices that remain; then its step estimated for the devices it uses."""
    sim = Simulation(model, graph, devices, model.threads(devices), compressed,
                     executor=len(devices) > 1)
    var_device = dict(declared)
    assign: dict[Op, str] = {}
    for i, op in enumerate(graph.ops):
        candidates = allowed[op]
        var = _variable_of(op)
        if var is not None and var in var_device:
            candidates = ([d for d in candidates if _is_on(var_device[var], d, devices)]
                          or candidates)
        device = choose(op, candidates, sim, i)
        sim.commit(op, device)
        assign[op] = device
        if var is not None and var not in var_device:
            var_device[var] = device
    return _Candidate(assign, var_device, simulate(model, graph, assign, devices, compressed))


def _is_on(home: str, device: str, devices: Sequence[str]) -> bool:
    """Whether ``device`` is where a variable whose device is ``home`` lives: ``home`` is
    one of ``devices`` (where an earlier entry placed it: only there, though ``/cpu:0``
    would also match ``/job:w/task:1/cpu:0``) or a user's scope that ``device`` matches."""
    return device == home if home in devices else matches(home, device)


def _greedy(op: Op, candidates: list[str], sim: Simulation, i: int) -> str:
    """Where the op would finish first (the TensorFlow paper's greedy heuristic)."""
    return min(candidates, key=lambda d: (sim.finish(op, d), candidates.index(d)))


def _greedy_within(subset: Sequence[str]) -> Chooser:
    """Greedy among ``subset`` where the op may run there (else among its candidates)."""
    def choose(op: Op, candidates: list[str], sim: Simulation, i: int) -> str:
        return _greedy(op, [d for d in candidates if d in subset] or candidates, sim, i)
    return choose


def _round_robin(op: Op, candidates: list[str], sim: Simulation, i: int) -> str:
    return candidates[i % len(candidates)]


def _on(device: str) -> Chooser:
    def choose(op: Op, candidates: list[str], sim: Simulation, i: int) -> str:
        return device if device in candidates else candidates[0]
    return choose


def _declared(variables: Mapping[str, VariableDecl], devices: Sequence[str]) -> dict[str, str]:
    """The variables' user-given devices, each checked to match one of ``devices``."""
    declared = {n: d.device for n, d in variables.items() if d.device is not None}
    for name, dev in declared.items():
        if not any(matches(dev, d) for d in devices):
            raise TfcError(f"variable @{name} is placed on {dev}, but the module is compiled "
                           f"for {', '.join(devices)}", variables[name].loc)
    return declared


def _apply(candidate: _Candidate, variables: Mapping[str, VariableDecl],
           devices: Sequence[str]) -> None:
    """Set each op's device and each touched variable's device as ``candidate`` placed them."""
    for op, d in candidate.assign.items():
        op.device = d
    for name, dev in candidate.var_device.items():
        if name in variables:
            variables[name].device = next(d for d in devices if _is_on(dev, d, devices))


def assign(graph: Graph, devices: Sequence[str], how: str,
           variables: Mapping[str, VariableDecl]) -> None:
    """Place ``graph`` as one of the placer's baselines, keeping the same constraints
    (device scopes, backends, a variable's ops on its device): ``how`` is ``ROUND_ROBIN``
    or one of ``devices`` (everything there that may run there), or ``GREEDY`` (the
    greedy split, whether or not it beats one device). For benchmarks that measure the
    alternatives the placer compared its choice with."""
    devices = list(devices)
    choose: Chooser
    if how == ROUND_ROBIN:
        choose = _round_robin
    elif how == GREEDY:
        choose = _greedy
    elif how in devices:
        choose = _on(how)
    else:
        raise TfcError(f"no placement {how!r}: {GREEDY!r}, {ROUND_ROBIN!r} or one of "
                       f"{', '.join(devices)}")
    allowed = {op: _allowed(op, devices) for op in graph.ops}
    model = CostModel(load_profile())
    _apply(_place(model, graph, devices, _declared(variables, devices), choose, (), allowed),
           variables, devices)


def place_graph(graph: Graph, devices: Sequence[str], profile: DeviceProfile,
                variables: Mapping[str, VariableDecl],
                compressed: Collection[Value] = (),
                measured: MeasuredCosts | None = None) -> PlacementReport:
    """Set ``op.device`` on every op of ``graph`` (and the device of each variable it
    touches, in ``variables``); returns the report.

    Candidates, each estimated for the devices it uses (module docstring): every device
    alone, greedy over all devices, greedy over the first ``cores`` devices when there
    are more devices than the host's cores, and round robin. A split wins only when its
    estimate beats the best device alone by more than ``SPLIT_MARGIN`` (by any amount
    when ``measured`` op times are given), so the result is never estimated slower than
    one device.
    ``compressed`` are the values that cross devices as f16
    (``tfc.passes.compress.transfer_policy``), at half the bytes on a link between hosts;
    ``measured`` are a profiling run's op times (``Module.measured_costs``)."""
    declared = _declared(variables, devices)
    devices = list(devices)
    allowed = {op: _allowed(op, devices) for op in graph.ops}
    model = CostModel(profile, measured=measured)

    def place(choose: Chooser) -> _Candidate:
        return _place(model, graph, devices, declared, choose, compressed, allowed)

    greedy = place(_greedy)
    others: dict[str, _Candidate] = {}
    local = [d for d in devices if parse_device(d).kind == "cpu"]
    if model.cores < len(local) and model.cores > 1:
        subset = local[:model.cores]
        others[f"greedy on {len(subset)} devices"] = place(_greedy_within(subset))
    singles = {d: place(_on(d)) for d in devices}
    single_device = min(devices, key=lambda d: (singles[d].estimate_s, devices.index(d)))
    robin = place(_round_robin)
    splits = [(GREEDY, greedy), *others.items(), (ROUND_ROBIN, robin)]
    split, best = min(splits, key=lambda c: c[1].estimate_s)  # first of equals: greedy
    margin = 0.0 if measured is not None else SPLIT_MARGIN
    chosen = split
    if best.estimate_s >= (1.0 - margin) * singles[single_device].estimate_s:
        chosen, best = SINGLE_DEVICE, singles[single_device]

    _apply(best, variables, devices)
    counts = {d: sum(1 for v in best.assign.values() if v == d) for d in devices}
    return PlacementReport(
        graph.name, devices,
        [(op.kind, op.results[0].name or "-" if op.results else "-", best.assign[op])
         for op in graph.ops],
        chosen, greedy.estimate_s, singles[single_device].estimate_s,
        single_device, robin.estimate_s, best.sim.transfers, best.sim.transfer_bytes,
        ops_per_device=counts, others={k: c.estimate_s for k, c in others.items()},
        rates=profile.describe())


def estimate_placed(graph: Graph, devices: Sequence[str], symbol_size: int = SYMBOL_SIZE,
                    profile: DeviceProfile | None = None,
                    compressed: Collection[Value] = (),
                    measured: MeasuredCosts | None = None) -> float:
    """The modelled step time of ``graph`` as placed (every op's ``device``; unplaced ops
    on the first device), symbols counted as ``symbol_size``, ``compressed`` values
    crossing hosts as f16: what a compiled artifact's placement is expected to take. A
    graph on one device is a one-device program with all the host's cores."""
    return simulate_placed(graph, devices, symbol_size, profile, compressed,
                           measured).makespan


def simulate_placed(graph: Graph, devices: Sequence[str], symbol_size: int = SYMBOL_SIZE,
                    profile: DeviceProfile | None = None,
                    compressed: Collection[Value] = (),
                    measured: MeasuredCosts | None = None) -> Simulation:
    """The ``Simulation`` of ``graph`` as placed (``estimate_placed``'s arguments): its
    ``makespan`` is the step, its ``device_finish`` when each device is done."""
    devices = list(devices) or ["/cpu:0"]
    model = CostModel(profile or load_profile(), symbol_size, measured)
    assign = {op: op.device if op.device in devices else devices[0] for op in graph.ops}
    return simulate(model, graph, assign, devices, compressed)


@register_pass("placement")
def placement(module: Module) -> Module:
    """Place every entry graph's ops on ``module.devices`` (nothing to do for one device
    but checking scopes); reports land in ``module.placement_reports``. The cost model
    takes ``module.measured_costs`` (a profiling run's op times) when set."""
    devices = list(module.devices) or ["/cpu:0"]
    profile = load_profile()
    reports = {}
    for name, graph in module.entries.items():
        compressed = (transfer_policy([graph], module.variables) if module.fp16_transfers
                      else set())
        reports[name] = place_graph(graph, devices, profile, module.variables, compressed,
                                    getattr(module, "measured_costs", None))
    module.placement_reports = reports
    return module
