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

``place_graph`` also estimates the step time of two baselines under the same
simulation — everything on the first device, and round robin — for the placement
report (``PlacementReport``, printed by ``tfc compile``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from tfc.devices import DeviceProfile, check_runnable, load_profile, matches, parse_device
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.registry import lookup
from tfc.passes.manager import register_pass

# What a symbolic dim (the batch ``B``) counts as in cost estimates.
SYMBOL_SIZE = 128
VAR_KINDS_PREFIX = "var."


@dataclass
class PlacementReport:
    """Where each op of one graph went and what the simulation expects of the step."""

    graph: str
    devices: list[str]
    placement: list[tuple[str, str, str]]  # (op kind, result or "-", device), in op order
    estimated_s: float
    all_on_one_s: float
    round_robin_s: float
    transfers: int
    transfer_bytes: int
    measured_s: float | None = None
    ops_per_device: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        per = ", ".join(f"{d}: {n}" for d, n in self.ops_per_device.items())
        line = (f"@{self.graph}: {len(self.placement)} ops on {len(self.devices)} devices "
                f"({per}); {self.transfers} transfers ({self.transfer_bytes} B at "
                f"B={SYMBOL_SIZE}); estimated step {_ms(self.estimated_s)} "
                f"(all on {self.devices[0]}: {_ms(self.all_on_one_s)}, round robin: "
                f"{_ms(self.round_robin_s)})")
        if self.measured_s is not None:
            line += f"; measured {_ms(self.measured_s)}"
        return line


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms"


class Simulation:
    """The step as far as it has been placed: when each device is free, when each value
    is available where."""

    def __init__(self, profile: DeviceProfile, devices: Sequence[str],
                 symbol_size: int = SYMBOL_SIZE) -> None:
        self.profile = profile
        self.symbol_size = symbol_size
        self.free = {d: 0.0 for d in devices}
        self.home: dict[Value, str] = {}
        self.ready: dict[tuple[Value, str], float] = {}  # (value, device) -> arrival
        self.transfers = 0
        self.transfer_bytes = 0

    def exec_time(self, op: Op, device: str) -> float:
        rates = self.profile.rates(device)
        ins = [v.type for v in op.inputs]
        outs = [r.type for r in op.results]
        try:
            cost = lookup(op.kind).cost(ins, outs, op.attrs, self.symbol_size)
        except (TfcError, NotImplementedError):
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
                + v.type.nbytes(self.symbol_size) / link.bytes_per_s)

    def finish(self, op: Op, device: str) -> float:
        start = max([self.free[device], *(self.arrival(v, device) for v in op.inputs)])
        return start + self.exec_time(op, device)

    def commit(self, op: Op, device: str) -> float:
        for v in op.inputs:
            if v.op is not None and (v, device) not in self.ready:
                self.ready[(v, device)] = self.arrival(v, device)
                self.transfers += 1
                self.transfer_bytes += v.type.nbytes(self.symbol_size)
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


def _simulate(graph: Graph, assign: Mapping[Op, str], profile: DeviceProfile,
              devices: Sequence[str], symbol_size: int = SYMBOL_SIZE) -> Simulation:
    sim = Simulation(profile, devices, symbol_size)
    for op in graph.ops:
        sim.commit(op, assign[op])
    return sim


def place_graph(graph: Graph, devices: Sequence[str], profile: DeviceProfile,
                variables: Mapping[str, VariableDecl]) -> PlacementReport:
    """Set ``op.device`` on every op of ``graph`` (and the device of each variable it
    touches, in ``variables``); returns the report."""
    # the baselines first: they see only the user's constraints
    first = {op: _allowed_or(op, devices, devices[0]) for op in graph.ops}
    robin: dict[Op, str] = {}
    var_robin: dict[str, str] = {}
    for i, op in enumerate(graph.ops):
        cands = _allowed(op, devices)
        var = _variable_of(op)
        if var is not None and var in var_robin:
            robin[op] = var_robin[var]
        else:
            robin[op] = cands[i % len(cands)]
            if var is not None:
                var_robin[var] = robin[op]
    all_on_one = _simulate(graph, first, profile, devices).makespan
    round_robin = _simulate(graph, robin, profile, devices).makespan
    sim = Simulation(profile, devices)
    var_device = {n: d.device for n, d in variables.items() if d.device is not None}
    for name, dev in var_device.items():
        if not any(matches(dev, d) for d in devices):
            raise TfcError(f"variable @{name} is placed on {dev}, but the module is compiled "
                           f"for {', '.join(devices)}", variables[name].loc)
    assign: dict[Op, str] = {}
    for op in graph.ops:
        candidates = _allowed(op, devices)
        var = _variable_of(op)
        if var is not None and var in var_device:
            candidates = [d for d in candidates if matches(var_device[var], d)] or candidates
        best = min(candidates, key=lambda d: (sim.finish(op, d), devices.index(d)))
        sim.commit(op, best)
        assign[op] = best
        if var is not None and var not in var_device:
            var_device[var] = best
    for op, d in assign.items():
        op.device = d
    for name, dev in var_device.items():
        if name in variables:
            exact = next(d for d in devices if matches(dev, d))
            variables[name].device = exact

    counts = {d: sum(1 for v in assign.values() if v == d) for d in devices}
    return PlacementReport(
        graph.name, list(devices),
        [(op.kind, op.results[0].name or "-" if op.results else "-", assign[op])
         for op in graph.ops],
        sim.makespan, all_on_one, round_robin,
        sim.transfers, sim.transfer_bytes, ops_per_device=counts)


def estimate_placed(graph: Graph, devices: Sequence[str], symbol_size: int = SYMBOL_SIZE,
                    profile: DeviceProfile | None = None) -> float:
    """The simulated step time of ``graph`` as placed (every op's ``device``; unplaced ops
    on the first device), symbols counted as ``symbol_size``: what a compiled artifact's
    placement is expected to take."""
    devices = list(devices) or ["/cpu:0"]
    assign = {op: op.device if op.device in devices else devices[0] for op in graph.ops}
    return _simulate(graph, assign, profile or load_profile(), devices,
                     symbol_size).makespan


def _allowed_or(op: Op, devices: Sequence[str], preferred: str) -> str:
    cands = _allowed(op, devices)
    return preferred if preferred in cands else cands[0]


@register_pass("placement")
def placement(module: Module) -> Module:
    """Place every entry graph's ops on ``module.devices`` (nothing to do for one device
    but checking scopes); reports land in ``module.placement_reports``."""
    devices = list(module.devices) or ["/cpu:0"]
    check_runnable(devices)
    profile = load_profile()
    reports = {}
    for name, graph in module.entries.items():
        reports[name] = place_graph(graph, devices, profile, module.variables)
    module.placement_reports = reports
    return module
