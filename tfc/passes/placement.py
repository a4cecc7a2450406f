"""Cost-model device placement: the greedy simulated execution of the TensorFlow paper.

Ops are visited in topological order. For each, every device it may run on is tried in
a simulation of the step so far: the op starts when its device is free and its inputs
have arrived (a value from another device arrives after the link's latency plus its
bytes over the link's bandwidth, once per value and device), and takes the registry's
flops and bytes at the device's measured rates (``tfc calibrate``; ``tfc.devices``).
The op goes where it would finish first.

Constraints, as in TensorFlow: a user's ``device`` scope pins an op (to any device of
the module that matches it); a variable and every op that reads or writes it share one
device (the variable's own scope, else where the first of them goes); ops made for a
gradient with ``colocate_gradients_with_ops`` arrive already pinned; and a device gets
only ops its backend can run.

``place_graph`` also places the graph by two baselines under the same simulation and
constraints — each device alone, and round robin — and keeps whichever of the three has
the least estimate, so a placement is never estimated slower than one device; the
report (``PlacementReport``, printed by ``tfc compile``) says which won and gives each
estimate. With fp16 transfers a compressed value costs half its bytes on a link.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Mapping, Sequence

from tfc.devices import DeviceProfile, check_runnable, load_profile, matches, parse_device
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.registry import Cost, lookup
from tfc.passes.compress import transfer_nbytes, transfer_policy
from tfc.passes.manager import register_pass

# What a symbolic dim (the batch ``B``) counts as in cost estimates.
SYMBOL_SIZE = 128
VAR_KINDS_PREFIX = "var."


@dataclass
class PlacementReport:
    """Where each op of one graph went and what the simulation expects of the step.

    ``chosen`` names the candidate placement that won (``GREEDY``, ``SINGLE_DEVICE`` or
    ``ROUND_ROBIN``); ``estimated_s`` is its estimate, never above the others'."""

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

    @property
    def candidates(self) -> dict[str, float]:
        """Each candidate placement's estimated step."""
        return {GREEDY: self.greedy_s, SINGLE_DEVICE: self.single_device_s,
                ROUND_ROBIN: self.round_robin_s}

    @property
    def estimated_s(self) -> float:
        """The chosen placement's estimated step."""
        return self.candidates[self.chosen]

    def summary(self) -> str:
        per = ", ".join(f"{d}: {n}" for d, n in self.ops_per_device.items())
        line = (f"@{self.graph}: {len(self.placement)} ops on {len(self.devices)} devices "
                f"({per}); {self.transfers} transfers ({self.transfer_bytes} B at "
                f"B={SYMBOL_SIZE}); estimated step {_ms(self.estimated_s)} by {self.chosen} "
                f"(greedy: {_ms(self.greedy_s)}, single device {self.single_device}: "
                f"{_ms(self.single_device_s)}, round robin: {_ms(self.round_robin_s)})")
        if self.measured_s is not None:
            line += f"; measured {_ms(self.measured_s)}"
        return line


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms"


class Simulation:
    """The step as far as it has been placed: when each device is free, when each value
    is available where."""

    def __init__(self, profile: DeviceProfile, devices: Sequence[str],
                 symbol_size: int = SYMBOL_SIZE, compressed: Collection[Value] = (),
                 costs: dict[Op, Cost | None] | None = None) -> None:
        self.profile = profile
        self.symbol_size = symbol_size
        self.compressed = compressed  # values that cross devices as f16 (fp16 transfers)
        # each op's registry cost (None: unknown), the same on every device: simulations
        # of one graph's candidate placements share it
        self.costs: dict[Op, Cost | None] = {} if costs is None else costs
        self.free = {d: 0.0 for d in devices}
        self.home: dict[Value, str] = {}
        self.ready: dict[tuple[Value, str], float] = {}  # (value, device) -> arrival
        self.transfers = 0
        self.transfer_bytes = 0

    def cost(self, op: Op) -> Cost | None:
        if op not in self.costs:
            try:
                self.costs[op] = lookup(op.kind).cost([v.type for v in op.inputs],
                                                      [r.type for r in op.results],
                                                      op.attrs, self.symbol_size)
            except (TfcError, NotImplementedError):
                self.costs[op] = None
        return self.costs[op]

    def exec_time(self, op: Op, device: str) -> float:
        rates = self.profile.rates(device)
        cost = self.cost(op)
        if cost is None:
            return rates.kernel_overhead_s
        return rates.kernel_overhead_s + max(cost.flops / rates.flops_per_s,
                                             cost.bytes / rates.bytes_per_s)

    def arrival(self, v: Value, device: str) -> float:
        if v.op is None:  # a feed: on the host, wherever it is needed
            return 0.0
        if (v, device) in self.ready:
            return self.ready[(v, device)]
        src = self.home[v]
        link = self.profile.link(src, device)
        return (self.ready[(v, src)] + link.latency_s
                + self.wire_bytes(v) / link.bytes_per_s)

    def wire_bytes(self, v: Value) -> int:
        return transfer_nbytes(v, v in self.compressed, self.symbol_size)

    def finish(self, op: Op, device: str) -> float:
        start = max([self.free[device], *(self.arrival(v, device) for v in op.inputs)])
        return start + self.exec_time(op, device)

    def commit(self, op: Op, device: str) -> float:
        for v in op.inputs:
            if v.op is not None and (v, device) not in self.ready:
                self.ready[(v, device)] = self.arrival(v, device)
                self.transfers += 1
                self.transfer_bytes += self.wire_bytes(v)
        end = self.finish(op, device)
        self.free[device] = end
        for r in op.results:
            self.home[r] = device
            self.ready[(r, device)] = end
        return end

    @property
    def makespan(self) -> float:
        return max(self.free.values(), default=0.0)


def can_run(kind: str, device: str) -> bool:
    """Whether a backend for ``device``'s kind runs op ``kind`` (CPU backends run every op;
    no GPU backend exists yet, so GPUs take none)."""
    return parse_device(device).kind == "cpu"


def _allowed(op: Op, devices: Sequence[str]) -> list[str]:
    ok = [d for d in devices if can_run(op.kind, d)]
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


GREEDY, SINGLE_DEVICE, ROUND_ROBIN = "greedy", "single device", "round robin"
# Picks a device for an op among its candidates (the simulation so far, the op's index).
Chooser = Callable[[Op, list[str], "Simulation", int], str]


@dataclass
class _Candidate:
    """One complete placement of a graph and its simulated step."""

    assign: dict[Op, str]
    var_device: dict[str, str]
    sim: Simulation


def _place(graph: Graph, devices: Sequence[str], profile: DeviceProfile,
           declared: Mapping[str, str], choose: Chooser, compressed: Collection[Value],
           allowed: Mapping[Op, list[str]], costs: dict[Op, Cost | None]) -> _Candidate:
    """A placement of ``graph`` that keeps every constraint (scopes, backends: each op's
    ``allowed`` devices; a variable's ops on its device), ``choose`` deciding among the
    devices that remain."""
    sim = Simulation(profile, devices, compressed=compressed, costs=costs)
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
    return _Candidate(assign, var_device, sim)


def _is_on(home: str, device: str, devices: Sequence[str]) -> bool:
    """Whether ``device`` is where a variable whose device is ``home`` lives: ``home`` is
    one of ``devices`` (where an earlier entry placed it: only there, though ``/cpu:0``
    would also match ``/job:w/task:1/cpu:0``) or a user's scope that ``device`` matches."""
    return device == home if home in devices else matches(home, device)


def _greedy(op: Op, candidates: list[str], sim: Simulation, i: int) -> str:
    """Where the op would finish first (the TensorFlow paper's greedy heuristic)."""
    return min(candidates, key=lambda d: (sim.finish(op, d), candidates.index(d)))


def _round_robin(op: Op, candidates: list[str], sim: Simulation, i: int) -> str:
    return candidates[i % len(candidates)]


def _on(device: str) -> Chooser:
    def choose(op: Op, candidates: list[str], sim: Simulation, i: int) -> str:
        return device if device in candidates else candidates[0]
    return choose


def place_graph(graph: Graph, devices: Sequence[str], profile: DeviceProfile,
                variables: Mapping[str, VariableDecl],
                compressed: Collection[Value] = ()) -> PlacementReport:
    """Set ``op.device`` on every op of ``graph`` (and the device of each variable it
    touches, in ``variables``); returns the report.

    Greedy is myopic (it cannot see a join coming, or that a transfer now costs a slow
    link later), so it competes with the two baselines under the same simulation and
    the same constraints: every device alone (as far as scopes allow) and round robin.
    The placement with the least estimate wins (greedy on ties), so the result is never
    estimated slower than one device. ``compressed`` are the values that cross devices
    as f16 (``tfc.passes.compress.transfer_policy``), at half the bytes."""
    declared = {n: d.device for n, d in variables.items() if d.device is not None}
    for name, dev in declared.items():
        if not any(matches(dev, d) for d in devices):
            raise TfcError(f"variable @{name} is placed on {dev}, but the module is compiled "
                           f"for {', '.join(devices)}", variables[name].loc)

    allowed = {op: _allowed(op, devices) for op in graph.ops}
    costs: dict[Op, Cost | None] = {}

    def place(choose: Chooser) -> _Candidate:
        return _place(graph, devices, profile, declared, choose, compressed, allowed, costs)

    greedy = place(_greedy)
    singles = {d: place(_on(d)) for d in devices}
    single_device = min(devices, key=lambda d: (singles[d].sim.makespan, devices.index(d)))
    robin = place(_round_robin)
    ranked = [(GREEDY, greedy), (SINGLE_DEVICE, singles[single_device]), (ROUND_ROBIN, robin)]
    chosen, best = min(ranked, key=lambda c: c[1].sim.makespan)  # first of equals: greedy

    for op, d in best.assign.items():
        op.device = d
    for name, dev in best.var_device.items():
        if name in variables:
            variables[name].device = next(d for d in devices if _is_on(dev, d, devices))
    counts = {d: sum(1 for v in best.assign.values() if v == d) for d in devices}
    return PlacementReport(
        graph.name, list(devices),
        [(op.kind, op.results[0].name or "-" if op.results else "-", best.assign[op])
         for op in graph.ops],
        chosen, greedy.sim.makespan, singles[single_device].sim.makespan,
        single_device, robin.sim.makespan, best.sim.transfers, best.sim.transfer_bytes,
        ops_per_device=counts)


def estimate_placed(graph: Graph, devices: Sequence[str], symbol_size: int = SYMBOL_SIZE,
                    profile: DeviceProfile | None = None,
                    compressed: Collection[Value] = ()) -> float:
    """The simulated step time of ``graph`` as placed (every op's ``device``; unplaced ops
    on the first device), symbols counted as ``symbol_size``, ``compressed`` values
    crossing devices as f16: what a compiled artifact's placement is expected to take."""
    devices = list(devices) or ["/cpu:0"]
    sim = Simulation(profile or load_profile(), devices, symbol_size, compressed)
    for op in graph.ops:
        sim.commit(op, op.device if op.device in devices else devices[0])
    return sim.makespan


@register_pass("placement")
def placement(module: Module) -> Module:
    """Place every entry graph's ops on ``module.devices`` (nothing to do for one device
    but checking scopes); reports land in ``module.placement_reports``."""
    devices = list(module.devices) or ["/cpu:0"]
    check_runnable(devices)
    profile = load_profile()
    reports = {}
    for name, graph in module.entries.items():
        compressed = (transfer_policy([graph], module.variables) if module.fp16_transfers
                      else set())
        reports[name] = place_graph(graph, devices, profile, module.variables, compressed)
    module.placement_reports = reports
    return module
