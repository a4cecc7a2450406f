"""The cost model: what one op, one transfer and one step cost on this host's devices.

It reads the calibrated ``DeviceProfile`` (``tfc calibrate``; ``tfc.devices``), whose
curves give the seconds of one kernel by op class, size and thread count:

- GEMM-like ops (``matmul``, ``conv2d`` and its gradients) by their flops on the GEMM
  curve (f64 ones on the f64 GEMM curve when measured; a matmul's output in whole
  ``GEMM_TILE`` tiles); LAPACK ops (``matrix_inverse``, ``matrix_determinant``,
  ``cholesky``) by their flops on the linalg curve when measured; every other
  op by the bytes it moves on the stream curve or by its flops at the
  measured vector rate, whichever takes longer (a softmax's exps and logs compute more
  than their bytes take to stream; a ``fusion`` counts the flops of the ops it fuses),
  arg-reductions (one dependent loop per result) at the measured serial rate,
  reductions whose innermost loop (along the last axis) is shorter than ``SHORT_ROW``
  (a softmax over 10 classes, a bias gradient of 10; and a fusion holding one) at the
  measured short-row rate (scalar code);
  ops that move no data at run time (views, ``var.read``, constants) cost nothing.
- Placement runs before fusion, but the backend runs an element-wise chain as one
  kernel that reads its inputs and writes its results once (``tfc.passes.fusion``). So a
  fusible op whose input comes from a fusible op on the same device joins that kernel:
  it pays no kernel start and only the bytes that cross the kernel's boundary (inputs
  from outside it, results used outside it). Charging every unfused op its own kernel
  and all its bytes overestimated the 64-layer MLP's element-wise work ~2.5x.
- A device's thread count is its share of the host's cores among the devices that run
  work in the step (``tfc.devices.threads_per_device``): two logical CPUs on a 2-core
  host have one thread each, not the host's rate each.
- A transfer between devices of one process hands a reference over: it costs the
  measured hand-off latency (more when the step's devices outnumber the host's cores:
  a receiver's thread must often be woken first) and nothing per byte. Between hosts it
  costs the link's
  latency plus bytes over its bandwidth. An edge into or out of a GPU adds the
  host<->device copy (latency plus bytes over the measured or default PCIe rate).
- A GPU (``/gpu:N``) costs ops by its own curves (``DeviceProfile.rates``) and takes
  no share of the host's cores.
- A control-flow op's regions are costed as the fused kernels they lower to (a copy of
  each fused as the fusion pass fuses it), a ``scan``'s body once per trip.
- Per step: a one-device program's ``Program.run`` costs ``step_s``, plus ``feed_s`` a
  feed, ``fetch_s`` a fetch, ``variable_s`` a variable it uses and ``update_s`` one it
  writes (``step_seconds``); a step of the
  multi-device executor ``executor_step_s``, plus ``stage_s`` and the same per-feed,
  fetch, variable and update costs (``boundary_seconds``) per stage on its device's
  thread and ``transfer_s`` per in-process transfer on the sending and on the receiving
  device's thread (the send and recv calls), besides the hand-off latency. There a
  variable's value that leaves its stage is a copy, and a variable update writes a new
  array (``executor_extra_seconds``).

``MeasuredCosts`` (from a profiling run, ``tfc compile --profile-runs``) overrides the
curves for the ops it measured, keyed by ``op_signature``: what the runtime measured is
better than any curve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping

import numpy as np

from tfc.devices import SHORT_ROW, DeviceProfile, DeviceRates, task_of, threads_per_device
from tfc.errors import TfcError
from tfc.ir.core import Graph, Op, Value
from tfc.ir.registry import VIEW, WRITES_VARIABLE, Cost, lookup
from tfc.ir.types import SYMBOL_SIZE, DType, TensorType
from tfc.ops.control import scan_length

# Ops run as GEMM-like kernels (blocked, compute-bound): costed by flops.
GEMM_KINDS = frozenset({"matmul", "conv2d", "conv2d_backprop_input",
                        "conv2d_backprop_filter"})
# Ops run as one dependent loop per result (not vectorized): costed by flops at the serial rate.
SERIAL_KINDS = frozenset({"argmax", "argmin"})
# A GEMM kernel computes its output in register tiles of about this many rows and
# columns: a product with a narrow output (N = 10 classes, a matrix-vector product) takes
# the time of whole tiles (f32 64x64 @ 64x10: 1.5x its flops on the square curve; f64
# 64x8 @ 8x1: 3.4x), so GEMMs are costed, and measured, in tiled flops.
GEMM_TILE = 8
# Ops run as LAPACK calls: costed by flops on the linalg curve (when measured).
LINALG_KINDS = frozenset({"matrix_inverse", "matrix_determinant", "cholesky",
                          "triangular_solve", "log_matrix_determinant"})
# Ops that move no data at run time: a pointer, a scalar, a shape.
FREE_KINDS = frozenset({"constant", "var.read", "shape", "rank", "size", "identity",
                        "stop_gradient", "no_op"})
# Ops that run the ops of their regions (placement runs before fusion: no ``fusion`` op here).
CONTROL_KINDS = frozenset({"scan", "while", "cond"})
# An array attr larger than this is keyed by its dtype and shape only.
_ATTR_ELEMENTS = 16


def _dim(d: Any, symbol_size: int) -> str:
    return str(d) if isinstance(d, int) else str(symbol_size)


def _type_key(t: TensorType, symbol_size: int) -> str:
    return f"{t.dtype.name}[{','.join(_dim(d, symbol_size) for d in t.shape)}]"


def _attr_text(v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.size > _ATTR_ELEMENTS:
            return f"<{v.dtype}{list(v.shape)}>"
        return f"{v.dtype}{list(v.shape)}{v.ravel().tolist()}"
    if isinstance(v, tuple):
        return "(" + ",".join(_attr_text(x) for x in v) + ")"
    return repr(v)


def op_signature(op: Op, symbol_size: int) -> str:
    """A stable text key of what ``op`` computes: its kind, input and result types (symbols
    as ``symbol_size``) and attrs (large arrays by dtype and shape). Two ops with the same
    signature cost the same."""
    ins = ",".join(_type_key(v.type, symbol_size) for v in op.inputs)
    outs = ",".join(_type_key(r.type, symbol_size) for r in op.results)
    attrs = ",".join(f"{k}={_attr_text(v)}" for k, v in op.attrs.items())
    return f"{op.kind}({ins})->({outs}){{{attrs}}}"


@dataclass
class MeasuredCosts:
    """What a profiling run measured (``tfc compile --profile-runs``)."""

    threads: int                # threads of the device the ops were measured on
    seconds: dict[str, float]   # op_signature -> median seconds of one such op
    handoff_s: float | None = None   # measured cost per in-process transfer, if measured
    step_s: float | None = None      # measured fixed cost per step, if measured
    executor_step_s: float | None = None  # ... per step of the multi-device executor
    source: str = "profile run"
    # the size symbolic dims had in the run (its batch): ``seconds`` is keyed with it, and
    # a model of another ``symbol_size`` scales the times by its curves
    symbol_size: int = SYMBOL_SIZE


@dataclass
class _GraphInfo:
    """What the fusion accounting needs of one graph: each value's consumers, results."""

    consumers: dict[Value, list[Op]] = field(default_factory=dict)
    results: set[Value] = field(default_factory=set)


class CostModel:
    """Seconds of ops, transfers and steps on the devices of ``profile`` (module docstring).

    ``cores`` overrides the profile's (the host the devices share)."""

    def __init__(self, profile: DeviceProfile, symbol_size: int = SYMBOL_SIZE,
                 measured: MeasuredCosts | None = None, cores: int | None = None) -> None:
        self.profile = profile
        self.symbol_size = symbol_size
        self.measured = measured
        self.cores = max(1, int(cores if cores is not None else profile.cores))
        self._costs: dict[Op, Cost | None] = {}
        self._fusible: dict[Op, bool] = {}
        self._splats: dict[Op, bool] = {}
        self._short: dict[Op, bool] = {}
        self._signatures: dict[Op, str] = {}
        self._graphs: dict[int, _GraphInfo] = {}
        # id(region) -> (region, the region fused): the region is kept so its id stays its
        self._fused_regions: dict[int, tuple[Graph, Graph]] = {}
        self._at_measured: CostModel | None = None  # at measured.symbol_size, when other

    # ---- fixed costs ----------------------------------------------------------------

    @property
    def step_s(self) -> float:
        """Fixed cost of one step of a one-device program (a ``Program.run``; measured
        on one if it was)."""
        if self.measured is not None and self.measured.step_s is not None:
            return self.measured.step_s
        return self.profile.step_s

    def step_seconds(self, graph: Graph) -> float:
        """Fixed cost of one step of ``graph`` as a one-device program: the step's, each
        of its feeds', fetches' and variables', and each variable update's (a profiling
        run's measured fixed cost instead, which holds them)."""
        if self.measured is not None and self.measured.step_s is not None:
            return self.measured.step_s
        used, written = variables_of(graph.ops)
        return self.profile.step_s + self.boundary_seconds(len(graph.args), len(graph.results),
                                                           len(used), len(written))

    def boundary_seconds(self, feeds: int, fetches: int, variables: int, updates: int) -> float:
        """What a compiled graph's call costs for what crosses its boundary: each feed,
        fetch and variable it uses, and each variable update it returns. One rule for a
        one-device step (``step_seconds``) and for each stage graph the multi-device
        executor calls (``tfc.passes.placement.Simulation.staged_finish``)."""
        p = self.profile
        return (p.feed_s * feeds + p.fetch_s * fetches + p.variable_s * variables
                + p.update_s * updates)

    @property
    def executor_step_s(self) -> float:
        """Fixed cost of one step of the multi-device executor (measured on the executor
        if it was: a one-device step's fixed cost is another)."""
        if self.measured is not None and self.measured.executor_step_s is not None:
            return self.measured.executor_step_s
        return self.profile.executor_step_s

    @property
    def stage_s(self) -> float:
        """What the multi-device executor adds per stage it runs."""
        return self.profile.stage_s

    @property
    def transfer_s(self) -> float:
        """The work of one in-process send and its recv (each device's thread pays it)."""
        return self.profile.transfer_s

    @property
    def handoff_s(self) -> float:
        """One in-process transfer: send in one thread -> recv returns in another."""
        return self.handoff_seconds(2)

    def handoff_seconds(self, devices: int) -> float:
        """One in-process transfer in a step that ``devices`` devices run (measured by a
        profiling run if it was; else the profile's, which costs a hand-off more when
        the devices' threads outnumber the cores: ``DeviceProfile.handoff_seconds``)."""
        if self.measured is not None and self.measured.handoff_s is not None:
            return self.measured.handoff_s
        return self.profile.handoff_seconds(devices)

    # ---- ops ------------------------------------------------------------------------

    def cost(self, op: Op) -> Cost | None:
        """The registry's flops and bytes of ``op`` (None: the registry cannot say); a
        ``fusion``'s bytes are its own (what crosses the kernel's boundary), its flops
        those of the ops it fuses."""
        if op not in self._costs:
            try:
                cost = lookup(op.kind).cost([v.type for v in op.inputs],
                                            [r.type for r in op.results],
                                            op.attrs, self.symbol_size)
                if op.kind == "fusion" and op.regions:
                    cost = Cost(self.flops(op.regions[0].ops), cost.bytes)
                self._costs[op] = cost
            except (TfcError, NotImplementedError):
                self._costs[op] = None
        return self._costs[op]

    def flops(self, ops: Iterable[Op]) -> float:
        """The registry's flops of ``ops`` (0 for those it cannot say)."""
        return float(sum(c.flops for c in map(self.cost, ops) if c is not None))

    def signature(self, op: Op) -> str:
        if op not in self._signatures:
            self._signatures[op] = op_signature(op, self.symbol_size)
        return self._signatures[op]

    def threads(self, active: Collection[str]) -> dict[str, int]:
        """Each active device's thread count: its share of the host's cores."""
        return threads_per_device(sorted(active), self.cores)

    def is_free(self, op: Op) -> bool:
        """Ops that move no data at run time (views, pointers, shapes)."""
        if op.kind in FREE_KINDS:
            return True
        try:
            return lookup(op.kind).has(VIEW)
        except TfcError:
            return False

    def is_gemm(self, op: Op) -> bool:
        return op.kind in GEMM_KINDS

    def fusible(self, op: Op) -> bool:
        """Whether the backend fuses ``op`` with its element-wise neighbours
        (``tfc.passes.fusion.classify``)."""
        if op not in self._fusible:
            from tfc.passes.fusion import classify
            try:
                info = classify(op)
            except (TfcError, NotImplementedError):
                info = None
            self._fusible[op] = info is not None and info.role in ("ew", "reduce")
        return self._fusible[op]

    def _splat(self, op: Op) -> bool:
        """Whether ``op`` is a splat constant (fusion copies it into kernels)."""
        if op.inputs:
            return False
        if op not in self._splats:
            from tfc.passes.fusion import splat_value
            try:
                self._splats[op] = splat_value(op) is not None
            except (TfcError, NotImplementedError):
                self._splats[op] = False
        return self._splats[op]

    def _rates(self, device: str | None) -> DeviceRates:
        return self.profile.rates(device or "/cpu:0")

    def _curve_seconds(self, op: Op, threads: int, device: str | None = None) -> float:
        """Seconds of ``op`` as a kernel of its own on the profile's curves."""
        if self.is_free(op):
            return 0.0
        if op.kind in CONTROL_KINDS:
            return self._control_seconds(op, threads, device)
        rates = self._rates(device)
        cost = self.cost(op)
        if cost is None:
            return rates.kernel_s
        if self.is_gemm(op):
            return rates.gemm_seconds(self.gemm_flops(op, cost.flops), threads,
                                      f64=_is_f64(op))
        if op.kind in LINALG_KINDS:
            linalg = rates.linalg_seconds(cost.flops, threads)
            if linalg is not None:
                return linalg
        return max(rates.stream_seconds(cost.bytes, threads),
                   self._compute_seconds(op, cost.flops, threads, rates))

    def _compute_seconds(self, op: Op, flops: float, threads: int, rates: DeviceRates
                         ) -> float:
        """Seconds of the non-GEMM compute ``flops`` of ``op``: at the serial rate for an
        arg-reduction, at the short-row rate for a row kernel over short rows (when
        measured), else at the vector rate."""
        if op.kind in SERIAL_KINDS:
            return rates.serial_seconds(flops, threads)
        if self.short_rows(op):
            short = rates.short_row_seconds(flops, threads)
            if short is not None:
                return short
        return rates.vector_seconds(flops, threads)

    def gemm_flops(self, op: Op, flops: float) -> float:
        """The flops of GEMM-like ``op`` as the GEMM curve counts them: a ``matmul``'s
        output dims rounded up to whole ``GEMM_TILE`` tiles (``tiled_gemm_flops``), the
        registry's ``flops`` for the others."""
        if op.kind != "matmul" or op.result.type.rank < 2:
            return flops
        m, n = (d if isinstance(d, int) else self.symbol_size
                for d in op.result.type.shape[-2:])
        return flops * tile(m) / m * tile(n) / n if m > 0 and n > 0 else flops

    def short_rows(self, op: Op) -> bool:
        """Whether ``op`` is (or, a ``fusion``, holds) a reduction whose innermost loop,
        along the last axis, is shorter than ``SHORT_ROW``: too short to vectorize
        (``tfc.backends.llvm.kernels_loop``: a row-order kernel runs each row's phases
        over it)."""
        if op not in self._short:
            ops = op.regions[0].ops if op.kind == "fusion" and op.regions else [op]
            self._short[op] = any(self._short_reduction(o) for o in ops)
        return self._short[op]

    def _short_reduction(self, op: Op) -> bool:
        """Whether ``op`` is a reduction whose kernel's innermost loop, along the last
        axis, is short: the reduced extent when it reduces the last axis (row order),
        else the kept last axis (accumulate and column orders: a bias gradient's sum
        over the batch of 10-wide rows ran at the short-row rate too, 0.36 us for 640
        elements against 0.05 at the vector rate)."""
        from tfc.passes.fusion import classify
        try:
            info = classify(op)
        except (TfcError, NotImplementedError):
            return False
        if info is None or info.role != "reduce" or not info.axes or not info.dom:
            return False
        last = len(info.dom) - 1
        axes = info.axes if last in info.axes else (last,)
        row = 1
        for a in axes:
            d = info.dom[a]
            row *= d if isinstance(d, int) else self.symbol_size
        return row < SHORT_ROW

    def _control_seconds(self, op: Op, threads: int, device: str | None) -> float:
        """A control-flow op runs the ops of its regions: a ``scan`` its body once per
        step (an LSTM's scan is nearly all of its step; the registry's bytes-moved cost
        said ~1/30 of it), a ``cond`` the dearer branch, a ``while`` its condition and
        body for a trip count unknown before it runs, counted as one trip."""
        device = device or "/cpu:0"
        bodies = [self._region_seconds(r, threads, device) for r in op.regions]
        kernel_s = self._rates(device).kernel_s
        if op.kind == "scan":
            nc, nx = op.attrs["num_carry"], op.attrs["num_xs"]
            trips = scan_length([v.type for v in op.inputs[nc:nc + nx]], op.attrs["length"])
            n = trips if isinstance(trips, int) else self.symbol_size
            return n * (bodies[0] + kernel_s)
        if op.kind == "cond":
            return kernel_s + max(bodies, default=0.0)
        return kernel_s + sum(bodies)

    def _region_seconds(self, region: Graph, threads: int, device: str) -> float:
        """One run of ``region`` as the fused kernels it lowers to: each kernel once with
        the bytes that cross its boundary and the flops of its ops (op by op, a scan
        body's element-wise ops were charged their reads again each, the LSTM's scans
        came out ~2x what they cost compiled)."""
        region = self._fused_region(region)
        device_of = {o: device for o in region.ops}
        return sum(self.op_seconds_in(o, region, threads, device, device_of)
                   for o in region.ops)

    def _fused_region(self, region: Graph) -> Graph:
        """``region`` fused as the fusion pass fuses it (a copy; itself when nothing in it
        fuses, e.g. a region of a compiled graph, already fused)."""
        if id(region) not in self._fused_regions:
            fused = region
            if any(self.fusible(o) for o in region.ops):
                from tfc.passes.fusion import fuse_graph
                fused = region.clone()
                fuse_graph(fused)
            self._fused_regions[id(region)] = (region, fused)
        return self._fused_regions[id(region)][1]

    def _measured_seconds(self, op: Op, threads: int, device: str | None) -> float | None:
        """The profiling run's seconds of ``op``, scaled by the curves from the threads and
        the symbol size it was measured at to ``threads`` and ``symbol_size``."""
        if self.measured is None:
            return None
        there_model = self._measured_model()
        seconds = self.measured.seconds.get(there_model.signature(op))
        if seconds is None:
            return None
        if threads == self.measured.threads and there_model is self:
            return seconds
        there = there_model._curve_seconds(op, self.measured.threads, device=device)
        here = self._curve_seconds(op, threads, device=device)
        return seconds * here / there if there > 0 else seconds

    def _measured_model(self) -> "CostModel":
        """This model at the symbol size of the measurements (itself when they agree)."""
        assert self.measured is not None
        size = self.measured.symbol_size
        if size == self.symbol_size:
            return self
        if self._at_measured is None:
            self._at_measured = CostModel(self.profile, size, cores=self.cores)
        return self._at_measured

    def op_seconds(self, op: Op, threads: int, device: str | None = None) -> float:
        """Seconds of ``op`` run as a kernel of its own with ``threads`` threads: measured if
        a profiling run measured it (scaled from its threads and symbol size), else the curves."""
        seconds = self._measured_seconds(op, threads, device)
        return seconds if seconds is not None else self._curve_seconds(op, threads,
                                                                       device=device)

    def prepare(self, graph: Graph) -> None:
        """Index ``graph``'s consumers, for ``op_seconds_in``'s fusion accounting."""
        if id(graph) in self._graphs:
            return
        info = _GraphInfo(results=set(graph.results))
        for op in graph.ops:
            for v in op.inputs:
                info.consumers.setdefault(v, []).append(op)
        self._graphs[id(graph)] = info

    def fused_root(self, op: Op, device: str, device_of: Mapping[Op, str],
                   group_of: Mapping[Op, Op]) -> Op | None:
        """The kernel (its first op) that fusible ``op`` joins on ``device``: that of its
        first fusible producer there; None when it starts a kernel of its own."""
        if not self.fusible(op):
            return None
        for v in op.inputs:
            p = v.op
            if p is not None and self.fusible(p) and device_of.get(p) == device:
                return group_of.get(p, p)
        return None

    def kernel_reads(self, op: Op, root: Op | None, device: str, device_of: Mapping[Op, str],
                     group_reads: Mapping[Op, set[Value]]) -> list[Value]:
        """The inputs fusible ``op`` reads from memory in its kernel: not those computed
        in the kernel, not splat constants (copied in as scalars), not those the kernel
        already read for another of its ops."""
        seen = group_reads.get(root, set()) if root is not None else set()
        out = []
        for v in op.inputs:
            p = v.op
            if p is not None and self.fusible(p) and device_of.get(p) == device:
                continue
            if p is not None and self._splat(p):
                continue
            if v not in seen and v not in out:
                out.append(v)
        return out

    def op_seconds_in(self, op: Op, graph: Graph, threads: int, device: str,
                      device_of: Mapping[Op, str], group_of: Mapping[Op, Op] | None = None,
                      group_reads: Mapping[Op, set[Value]] | None = None) -> float:
        """Seconds ``op`` adds to ``device``'s timeline in ``graph``, fusion accounted:
        a fusible op that follows a fusible producer on the same device is part of that
        producer's kernel (``group_of``: each op's kernel; ``group_reads``: what each
        kernel reads), so it pays no kernel start and only the bytes that cross the
        kernel's boundary: inputs from outside it (each once), results used outside it.
        Ops a profiling run measured take their measured seconds."""
        measured = self._measured_seconds(op, threads, device)
        if measured is not None:
            return measured
        if not self.fusible(op):
            return self._curve_seconds(op, threads, device=device)
        self.prepare(graph)
        info = self._graphs[id(graph)]
        group_of = group_of or {}
        root = self.fused_root(op, device, device_of, group_of)
        reads = self.kernel_reads(op, root, device, device_of, group_reads or {})
        nbytes = float(sum(v.type.nbytes(self.symbol_size) for v in reads))
        for r in op.results:
            consumers = info.consumers.get(r, ())
            if r in info.results or not consumers or any(not self.fusible(c)
                                                         for c in consumers):
                nbytes += r.type.nbytes(self.symbol_size)
        rates = self._rates(device)
        cost = self.cost(op)
        compute = (self._compute_seconds(op, cost.flops, threads, rates) if cost is not None
                   else 0.0)
        if root is not None:  # part of a running kernel: its bytes, no kernel start
            moved = max(0.0, rates.stream_seconds(nbytes, threads) - rates.kernel_s) \
                if nbytes > 0 else 0.0
            return max(moved, compute)
        return max(rates.stream_seconds(nbytes, threads), compute)

    def executor_extra_seconds(self, op: Op, threads: int, device: str) -> float:
        """What ``op`` costs more on the multi-device executor than in a one-device
        program: a variable update there writes a new array (another device may still
        read the old value in the step), a copy of the variable besides the update."""
        try:
            writes = lookup(op.kind).has(WRITES_VARIABLE)
        except TfcError:
            return 0.0
        if not writes or not op.inputs:
            return 0.0
        nbytes = max(v.type.nbytes(self.symbol_size) for v in op.inputs)
        return self._rates(device).stream_seconds(2.0 * nbytes, threads)

    def copy_seconds(self, v: Value, threads: int, device: str) -> float:
        """A copy of ``v`` (read and write its bytes) on ``device``."""
        return self._rates(device).stream_seconds(2.0 * v.type.nbytes(self.symbol_size),
                                                  threads)

    # ---- transfers --------------------------------------------------------------------

    def transfer_seconds(self, v: Value, src: str, dst: str, compressed: bool,
                         devices: int = 2) -> float:
        """Seconds from ``v`` computed on ``src`` to ``v`` usable on ``dst`` in a step that
        ``devices`` devices run: the hand-off
        latency between devices of one process (a reference moves, no bytes;
        ``handoff_seconds``), the link's
        latency plus bytes over its bandwidth between hosts (f16 bytes when
        ``compressed``), plus, for a GPU at either end, the host<->device copy of those
        bytes (``DeviceProfile.host_copies``: a cpu/gpu edge is a PCIe copy)."""
        if src == dst:
            return 0.0
        from tfc.passes.compress import transfer_nbytes
        nbytes = transfer_nbytes(v, compressed, self.symbol_size)
        # a GPU's side of the edge: its host<->device copies (f16 bytes when compressed)
        copies = sum(link.latency_s + nbytes / link.bytes_per_s
                     for link in self.profile.host_copies(src, dst))
        if same_process(src, dst):
            return self.handoff_seconds(devices) + copies
        link = self.profile.link(src, dst)
        return link.latency_s + nbytes / link.bytes_per_s + copies


def tile(d: int) -> int:
    """``d`` rounded up to whole ``GEMM_TILE`` tiles."""
    return -(-d // GEMM_TILE) * GEMM_TILE


def tiled_gemm_flops(m: int, k: int, n: int) -> float:
    """The flops of an ``m x k @ k x n`` product as the GEMM curve counts them: its
    output in whole tiles (``GEMM_TILE``)."""
    return 2.0 * tile(m) * k * tile(n)


def _is_f64(op: Op) -> bool:
    """Whether ``op`` computes in f64 (its first input's dtype)."""
    return bool(op.inputs) and op.inputs[0].type.dtype == DType.f64


def variables_of(ops: Iterable[Op]) -> tuple[set[str], set[str]]:
    """The variables ``ops`` (and the ops of their regions) use, and those they write."""
    used: set[str] = set()
    written: set[str] = set()
    for op in ops:
        name = op.attrs.get("var")
        if isinstance(name, str) and op.kind.startswith("var."):
            used.add(name)
            try:
                if lookup(op.kind).has(WRITES_VARIABLE):
                    written.add(name)
            except TfcError:
                pass
        for region in op.regions:
            u, w = variables_of(region.ops)
            used |= u
            written |= w
    return used, written


def same_process(a: str, b: str) -> bool:
    """Whether devices ``a`` and ``b`` belong to one process (the same host task)."""
    return task_of(a) == task_of(b)
