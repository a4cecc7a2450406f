"""The ``replicate`` pass: a single-device training module as one module for a cluster.

``tfc compile model.py --cluster ps=2,workers=4 --strategy ps-sync|allreduce`` runs it
(``ClusterSpec``): between-graph replication, expressed as ordinary placed IR, which the
``partition`` pass then cuts by device into the tasks' graphs joined by ``send``/``recv``.
Tasks are named as TensorFlow names them: ``/job:ps/task:J/cpu:0`` and
``/job:worker/task:I/cpu:0`` (``ClusterSpec.ps_devices``/``worker_devices``).

What it needs from the model: the ``optimizer.grad {var}`` markers that
``Optimizer.apply_gradients`` puts on each gradient it applies (``tfc.ops.optimizer``).
An entry with markers is a *training step*; the markers cut it into

- the **worker part**: every op the markers' inputs are computed from, and every op of a
  fetch that depends on the batch. It is cloned once per worker, on
  ``/job:worker/task:I/cpu:0``, each clone on its shard of the global batch: every
  argument of rank >= 1 is split on axis 0 into W equal shards (a ``split`` op: a batch
  that does not divide is a run-time error naming the split). The gradients of one
  shard are those of its mean loss, so the mean of the W workers' gradients is the
  gradient of the global batch's mean loss: the loss must be a batch mean (Keras' and
  ``tf.losses``' are; a sum would make every gradient W times too small);
- the **update**: the ``var.assign``s (and scatters) and everything only they use
  (Adam's learning-rate factor and beta powers, ``global_step``), which sees each
  marker's value replaced by the mean of the workers' gradients.

Strategies:

- ``ps-sync`` (TensorFlow's ``SyncReplicasOptimizer`` semantics): variables live on the
  parameter-server tasks (``ps_placement``: ``greedy`` puts each variable, with its
  optimizer slots ``W/Adam``..., on the PS holding the fewest bytes so far, in creation
  order: TF's ``GreedyLoadBalancingStrategy``; ``round-robin`` deals them out in
  creation order: ``replica_device_setter``'s default); each is read once per step on
  its PS and sent to every worker that uses it; each gradient is summed on the PS that
  holds its variable, in worker order (a fixed order: every run sums alike), divided
  by W, and applied there once. A user's ``tfc.device("/job:ps/task:J")`` on a variable
  or an update op is kept. A worker's ``gather`` of a variable (an embedding lookup, or
  one shard of a partitioned variable) runs on that variable's PS: the worker sends its
  ids, the PS sends back their rows (``ps_gather_device``), never the whole table.
- ``allreduce`` (Horovod's): every worker holds a mirrored copy of every variable
  (``NAME/replica_I`` on worker I, worker 0 keeping ``NAME``; ``__init__`` gives the
  copies the same initial value); the gradients of one dtype are flattened into ONE
  buffer per worker (Horovod's tensor fusion: one ring per step, not one per
  variable), averaged by one ``all_reduce`` (a ring, ``tfc.passes.partition``: every
  worker gets bitwise the same mean) and split back; each worker applies the same
  update to its copy, so the copies stay bitwise equal.

- ``ps-async`` (Downpour SGD) is no placed module: each PS applies each worker's
  gradients on arrival, so the step is cut into two programs instead
  (``tfc.passes.async_split``) that ``tfc.distributed.AsyncPSTrainer`` runs
  (``tfc compile --strategy ps-async`` stores the step uncut for it:
  ``tfc.compiler.ps_training``); ``replicate_module`` refuses it with a line saying so.

A sparse gradient (``IndexedSlices``, a marker with indices and values) is gathered, not
averaged: its rows from every worker, each divided by W, concatenated in worker order
(rows named twice add up, in every optimizer), on the PS (``ps-sync``) or on every
worker (``allreduce``, an all-gather).

Fetches of a training step: a 0-d float fetch that depends on the batch (the loss) is
the mean of the workers' values; one whose leading dimension is the batch's is their
concatenation in worker order; any other comes from worker 0 (or from where it is
computed, when it does not depend on the batch). Entries without markers (predict,
evaluate) run on worker 0, reading the variables where they live; in ``allreduce`` an
assign there is applied to every copy, from worker 0's value.

Assumptions, checked where they can be: an update depends on the batch only through
the gradients (an error otherwise: the copies would diverge, or the PS would apply one
worker's value); a gradient is not computed from another marker's value. Not checked:
random ops in the worker part draw per worker with the same seed (one shard's dropout
mask is not the single process's), and an integer 0-d fetch comes from worker 0.

The markers are gone after this pass (and, without it, after ``fusion``: see
``strip_gradient_markers``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from tfc.devices import DeviceProfile, load_profile, normalize_device, parse_device, task_of
from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.registry import lookup, make_op, writes_variable
from tfc.ir.types import SYMBOL_SIZE
from tfc.ops.optimizer import GRAD_MARKER
from tfc.passes.manager import apply_substitution, register_pass
from tfc.units import format_ms as _ms

STRATEGIES = ("ps-sync", "allreduce", "ps-async")
PS_PLACEMENTS = ("greedy", "round-robin")
INIT_GRAPH = "__init__"


def ps_device(task: int) -> str:
    return f"/job:ps/task:{task}/cpu:0"


def worker_device(task: int) -> str:
    return f"/job:worker/task:{task}/cpu:0"


def rename_devices(module: Module, names: dict[str, str]) -> None:
    """Every op, variable and module device named in ``names`` renamed (before the
    module is partitioned: the partition tables are made from these names)."""
    for graph in module.graphs.values():
        for op in graph.walk():
            if op.device in names:
                op.device = names[op.device]
    for decl in module.variables.values():
        if decl.device in names:
            decl.device = names[decl.device]
    module.devices = [names.get(d, d) for d in module.devices]


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster to compile for: ``ps`` parameter-server tasks, ``workers`` worker tasks,
    the strategy (default: ``allreduce`` without a PS, else ``ps-sync``; ``ps-async``
    needs a PS too) and how ``ps-sync`` and ``ps-async`` place variables on the PS tasks
    (``greedy`` by bytes, or ``round-robin``)."""

    ps: int
    workers: int
    strategy: str | None = None
    ps_placement: str = "greedy"

    def __post_init__(self) -> None:
        for name in ("ps", "workers"):
            n = getattr(self, name)
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise TfcError(f"cluster: {name}={n!r} must be a whole number >= 0")
        if self.workers < 1:
            raise TfcError(f"cluster: workers={self.workers}: a cluster needs at least one "
                           f"worker task")
        strategy = self.strategy or ("allreduce" if self.ps == 0 else "ps-sync")
        if strategy not in STRATEGIES:
            raise TfcError(f"unknown strategy {strategy!r}: expected one of "
                           f"{', '.join(STRATEGIES)}")
        if strategy in ("ps-sync", "ps-async") and self.ps == 0:
            raise TfcError(f"strategy {strategy} keeps the variables on parameter servers, but "
                           "the cluster has ps=0: give ps=1 or more, or use --strategy "
                           "allreduce")
        if self.ps_placement not in PS_PLACEMENTS:
            raise TfcError(f"unknown PS placement {self.ps_placement!r}: expected one of "
                           f"{', '.join(PS_PLACEMENTS)}")
        object.__setattr__(self, "strategy", strategy)

    @classmethod
    def parse(cls, text: str, strategy: str | None = None,
              ps_placement: str = "greedy") -> "ClusterSpec":
        """``"ps=2,workers=4"`` (the ``--cluster`` option of ``tfc compile``)."""
        counts: dict[str, int] = {}
        for item in text.split(","):
            key, eq, value = (s.strip() for s in item.partition("="))
            if key not in ("ps", "workers") or not eq:
                raise TfcError(f"--cluster {text!r}: expected ps=P,workers=W")
            if key in counts:
                raise TfcError(f"--cluster {text!r}: {key} is given twice")
            if not value.isdigit():
                raise TfcError(f"--cluster {text!r}: {key}={value!r} must be a whole number "
                               f">= 0")
            counts[key] = int(value)
        if "workers" not in counts:
            raise TfcError(f"--cluster {text!r}: give the number of worker tasks "
                           f"(ps=P,workers=W)")
        return cls(counts.get("ps", 0), counts["workers"], strategy, ps_placement)

    @property
    def ps_devices(self) -> list[str]:
        return [ps_device(j) for j in range(self.ps)]

    @property
    def worker_devices(self) -> list[str]:
        return [worker_device(i) for i in range(self.workers)]

    @property
    def devices(self) -> list[str]:
        """The devices of the compiled module: the PS tasks (``ps-sync``; ``allreduce``
        keeps nothing there), then the workers."""
        ps = self.ps_devices if self.strategy in ("ps-sync", "ps-async") else []
        return ps + self.worker_devices

    def __str__(self) -> str:
        rule = f", {self.ps_placement}" if self.strategy in ("ps-sync", "ps-async") else ""
        return f"ps={self.ps},workers={self.workers} ({self.strategy}{rule})"


# ---- markers ------------------------------------------------------------------------------

def strip_gradient_markers(graph: Graph) -> int:
    """Replace every ``optimizer.grad`` marker of ``graph`` (and of its regions) by its
    inputs; returns how many were removed. Lowering does this first (the ``fusion`` pass;
    the reference interpreter runs a marker as the identity), so markers cost nothing."""
    removed = 0
    for op in graph.ops:
        for r in op.regions:
            removed += strip_gradient_markers(r)
    subst: dict[Value, Value] = {}
    kept = []
    for op in graph.ops:
        if op.kind == GRAD_MARKER:
            subst.update(zip(op.results, op.inputs))
            removed += 1
        else:
            kept.append(op)
    if subst:
        graph.ops = kept
        apply_substitution(graph, subst)
    return removed


def strip_module_markers(module: Module) -> int:
    """``strip_gradient_markers`` over every graph of ``module`` (dropping the memory plans
    of the graphs it changed)."""
    removed = 0
    for name, graph in module.graphs.items():
        n = strip_gradient_markers(graph)
        if n:
            module.memory_plans.pop(name, None)
        removed += n
    return removed


def training_entries(module: Module) -> list[str]:
    """The entries with gradient markers: the training steps."""
    return [name for name, g in module.entries.items()
            if any(op.kind == GRAD_MARKER for op in g.ops)]


# ---- variable placement -------------------------------------------------------------------

def _groups(variables: Mapping[str, VariableDecl]) -> list[list[str]]:
    """The variables in creation order, each trainable one with its optimizer slots
    (non-trainable variables named ``<it>/...``, as ``Optimizer._slot`` names them):
    what must live on one PS, as TensorFlow colocates a slot with its variable."""
    trainable = [n for n, d in variables.items() if d.trainable]
    owner: dict[str, str] = {}
    for n, d in variables.items():
        if d.trainable:
            continue
        prefixes = [t for t in trainable if n.startswith(t + "/")]
        if prefixes:
            owner[n] = max(prefixes, key=len)
    groups: dict[str, list[str]] = {}
    for n in variables:
        groups.setdefault(owner.get(n, n), []).append(n)
    return list(groups.values())


_TASK_PIN = re.compile(r"^/job:(?P<job>[a-z_][a-z0-9_]*)(?:/task:(?P<task>\d+))?")


def ps_pin(device: str | None, spec: ClusterSpec, what: str, loc: Any = None) -> str | None:
    """The PS device a user's ``tfc.device("/job:ps/task:J")`` (a full or partial name)
    asks for, or None when ``device`` names no PS task (``/job:ps`` alone: any PS). A
    ``TfcError`` for a PS task the cluster does not have."""
    m = _TASK_PIN.match(normalize_device(device) or "")
    if m is None or m.group("job") != "ps" or m.group("task") is None:
        return None
    task = int(m.group("task"))
    if task >= spec.ps:
        raise TfcError(f"{what} is placed on {device}, but the cluster has {spec.ps} PS "
                       f"task(s)", loc)
    return ps_device(task)


def place_variables(variables: Mapping[str, VariableDecl], spec: ClusterSpec
                    ) -> dict[str, str]:
    """Each variable's PS device under ``spec.ps_placement`` (see the module docstring);
    a user's ``/job:ps/task:J`` pin wins and counts towards that PS's load."""
    load = [0] * spec.ps
    out: dict[str, str] = {}
    rr = 0
    for group in _groups(variables):
        decl = variables[group[0]]
        nbytes = sum(variables[n].type.nbytes(1) for n in group)
        device = ps_pin(decl.device, spec, f"variable '{decl.name}'", decl.loc)
        if device is None:
            if spec.ps_placement == "greedy":
                task = min(range(spec.ps), key=lambda j: (load[j], j))
            else:
                task, rr = rr % spec.ps, rr + 1
            device = ps_device(task)
        load[parse_device(device).task or 0] += nbytes
        for n in group:
            out[n] = device
    return out


def mirror_name(var: str, worker: int) -> str:
    """Worker ``worker``'s copy of ``var`` under ``allreduce`` (``tfc.train.data_parallel``
    names them so): worker 0 keeps the variable itself."""
    return var if worker == 0 else f"{var}/replica_{worker}"


def mirrored_variable(name: str) -> str | None:
    """``VAR`` for a mirrored copy's name (``VAR/replica_I``, ``mirror_name``), else None."""
    m = re.fullmatch(r"(.+)/replica_[1-9][0-9]*", name)
    return m.group(1) if m else None


# ---- the rewrite --------------------------------------------------------------------------

def _closure(roots: Iterable[Value], stop: Callable[[Op], bool] = lambda op: False
             ) -> set[Op]:
    """The ops ``roots`` are computed from (not going past an op where ``stop`` holds,
    which is itself included)."""
    seen: set[Op] = set()
    todo = [v.op for v in roots if v.op is not None]
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        if not stop(op):
            todo.extend(v.op for v in op.inputs if v.op is not None)
    return seen


def _batch_dependent(graph: Graph) -> set[Value]:
    """Values computed from an argument of rank >= 1 (the batch), not through a marker
    (a marker's result is the workers' mean: the same on every worker)."""
    dep = {a for a in graph.args if a.type.rank >= 1}
    for op in graph.ops:
        if op.kind != GRAD_MARKER and any(x in dep for x in op.inputs):
            dep.update(op.results)
    return dep


def _check_updates(graph: Graph, dep: set[Value]) -> None:
    for op in graph.ops:
        if writes_variable(op) and any(x in dep for x in op.inputs):
            raise TfcError(f"cannot replicate @{graph.name}: the update of variable "
                           f"'{op.attrs['var']}' ({op.kind}) depends on the batch other than "
                           f"through an optimizer's gradients, so the workers would disagree "
                           f"on it", op.loc)


class _Builder:
    """The new graph of one entry, op by op, with the placed copies of old values."""

    def __init__(self, old: Graph) -> None:
        self.graph = Graph(old.name)
        self.args = {a: self.graph.add_arg(a.type, a.name) for a in old.args}

    def add(self, kind: str, inputs: Sequence[Value], attrs: Mapping[str, Any], device: str,
            loc: Any, names: Sequence[str | None] = ()) -> Op:
        return self.graph.append(make_op(kind, list(inputs), dict(attrs), device=device,
                                         loc=loc, names=names))

    def copy(self, op: Op, inputs: Sequence[Value], device: str,
             attrs: Mapping[str, Any] | None = None) -> Op:
        """``op`` on ``inputs`` (a worker's shards: its result types are inferred again)
        on ``device``, with ``attrs`` instead of its own when given."""
        return self.graph.append(make_op(
            op.kind, list(inputs), dict(op.attrs if attrs is None else attrs), device=device,
            loc=op.loc, regions=[r.clone() for r in op.regions],
            names=[r.name for r in op.results], result_types=[r.type for r in op.results]))

    def mean(self, values: Sequence[Value], device: str, loc: Any) -> Value:
        """The sum of ``values`` in order, divided by their number, on ``device``."""
        acc = values[0]
        for v in values[1:]:
            acc = self.add("add", [acc, v], {}, device, loc).result
        if len(values) > 1:
            n = self.add("constant", [], {"value": np.asarray(len(values), acc.dtype.np)},
                         device, loc).result
            acc = self.add("div", [acc, n], {}, device, loc).result
        return acc

    def scaled(self, value: Value, n: int, device: str, loc: Any) -> Value:
        if n == 1:
            return value
        c = self.add("constant", [], {"value": np.asarray(n, value.dtype.np)}, device,
                     loc).result
        return self.add("div", [value, c], {}, device, loc).result

    def concat(self, values: Sequence[Value], device: str, loc: Any) -> Value:
        if len(values) == 1:
            return values[0]
        return self.add("concat", values, {"axis": 0}, device, loc).result


class _Step:
    """One training step's rewrite (see the module docstring)."""

    def __init__(self, graph: Graph, spec: ClusterSpec) -> None:
        self.W = spec.workers
        self.workers = spec.worker_devices
        self.b = _Builder(graph)
        self.markers = [op for op in graph.ops if op.kind == GRAD_MARKER]
        self.dep = _batch_dependent(graph)
        _check_updates(graph, self.dep)
        self.batch_dims = {a.type.shape[0] for a in graph.args if a.type.rank >= 1}
        roots = [v for m in self.markers for v in m.inputs]
        roots += [v for v in graph.results if v in self.dep]
        self.worker_ops = _closure(roots)
        bad = next((op for op in self.worker_ops if op.kind == GRAD_MARKER), None)
        if bad is not None:
            raise TfcError(f"cannot replicate @{graph.name}: a gradient or a fetch is computed "
                           f"from the gradient applied to '{bad.attrs['var']}'", bad.loc)
        # each worker's copy of each old value
        self.local: list[dict[Value, Value]] = [{} for _ in range(self.W)]
        self.shards: list[dict[Value, Value]] = [{} for _ in range(self.W)]
        # ps-sync: each variable's PS, where a worker's gather of it runs (ps_gather_device)
        self.var_device: Mapping[str, str] = {}

    def shard(self, arg: Value, i: int) -> Value:
        """Worker ``i``'s shard of argument ``arg`` (split on that worker)."""
        new = self.b.args[arg]
        if arg.type.rank == 0 or self.W == 1:
            return new
        if arg not in self.shards[i]:
            op = self.b.add("split", [new], {"axis": 0, "num": self.W}, self.workers[i], None)
            self.shards[i][arg] = op.results[i]
        return self.shards[i][arg]

    def on_worker(self, v: Value, i: int) -> Value:
        if v.op is None:
            return self.shard(v, i)
        return self.local[i][v]

    def fetch(self, v: Value, per_worker: Sequence[Value], loc: Any) -> Value:
        """A batch-dependent fetch from the workers' values (see the module docstring)."""
        w0 = self.workers[0]
        if v.type.rank == 0 and v.dtype.is_float:
            return self.b.mean(per_worker, w0, loc)
        if v.type.rank >= 1 and v.type.shape[0] in self.batch_dims:
            return self.b.concat(per_worker, w0, loc)
        return per_worker[0]

    def clone_workers(self, ops: Sequence[Op], rename: bool) -> None:
        """Worker ``i``'s copy of each op of ``ops`` (in order) on its device; with
        ``rename`` its variable ops use its mirrored copies."""
        for i in range(self.W):
            for op in ops:
                attrs = None
                if rename and lookup(op.kind).names_variable():
                    attrs = {**op.attrs, "var": mirror_name(op.attrs["var"], i)}
                device = ps_gather_device(op, self.var_device) or self.workers[i]
                new = self.b.copy(op, [self.on_worker(x, i) for x in op.inputs], device, attrs)
                self.local[i].update(zip(op.results, new.results))

    def sparse_rows(self, m: Op) -> list[tuple[Value, ...]]:
        """Each worker's rows of sparse marker ``m``: its indices, its values divided by W
        (on the worker), and a shard's owned weights as they are, for a gather."""
        rows = []
        for i in range(self.W):
            idx, vals, *owned = (self.on_worker(x, i) for x in m.inputs)
            rows.append((idx, self.b.scaled(vals, self.W, self.workers[i], m.loc), *owned))
        return rows


def ps_gather_device(op: Op, var_device: Mapping[str, str]) -> str | None:
    """The PS where a worker's ``gather`` of a PS variable runs, or None (run it on the
    worker). Rows are gathered where the table lives: the worker sends its ids and gets
    back their rows, so a step moves bytes in proportion to the batch's ids, not to the
    table (an embedding; each shard of a partitioned variable, ``tfc.api.partitioned``)."""
    if op.kind != "gather" or op.attrs.get("axis", 0) != 0:
        return None
    source = op.inputs[0].op
    if source is None or source.kind != "var.read":
        return None
    return var_device.get(source.attrs["var"])


def _ps_sync_step(graph: Graph, spec: ClusterSpec, var_device: Mapping[str, str]) -> Graph:
    s = _Step(graph, spec)
    s.var_device = var_device
    b = s.b
    marker_set = set(s.markers)
    # the update: what the writes and the batch-free fetches need, up to the markers
    writes = [op for op in graph.ops if writes_variable(op)]
    update_ops = _closure([v for op in writes for v in op.inputs]
                          + [v for v in graph.results if v not in s.dep],
                          stop=lambda op: op in marker_set) | set(writes)
    reads = [op for op in graph.ops if op.kind == "var.read"
             and (op in update_ops or op in s.worker_ops)]
    # where each update op runs: with the variable it writes or reads, or with its users
    device: dict[Op, str] = {}
    users: dict[Op, list[Op]] = {}
    for op in graph.ops:
        for x in op.inputs:
            if x.op is not None:
                users.setdefault(x.op, []).append(op)
    for op in reversed(graph.ops):
        if op not in update_ops and op not in marker_set and op.kind != "var.read":
            continue
        pinned = ps_pin(op.device, spec, op.kind, op.loc)
        if lookup(op.kind).names_variable() or op.kind == GRAD_MARKER:
            device[op] = var_device[op.attrs["var"]]
        elif pinned is not None:
            device[op] = pinned
        elif (table := ps_gather_device(op, var_device)) is not None:
            device[op] = table  # an update's gather of a PS variable's rows: on that PS
        else:
            placed = [device[u] for u in users.get(op, ()) if u in device and u in update_ops]
            device[op] = (max(sorted(set(placed)), key=placed.count) if placed
                          else s.workers[0])
    shared: dict[Value, Value] = {}
    for op in reads:  # each variable read once, on its PS
        new = b.copy(op, [], device[op])
        shared.update(zip(op.results, new.results))
    for i in range(s.W):
        s.local[i].update(shared)
    s.clone_workers([op for op in graph.ops if op in s.worker_ops and op.kind != "var.read"],
                    rename=False)
    update: dict[Value, Value] = dict(shared)
    for m in s.markers:  # the mean of the workers' gradients, on the variable's PS
        d = device[m]
        if len(m.inputs) == 1:
            update[m.result] = b.mean([s.on_worker(m.inputs[0], i) for i in range(s.W)], d,
                                      m.loc)
        else:
            rows = s.sparse_rows(m)
            for k, res in enumerate(m.results):
                update[res] = b.concat([r[k] for r in rows], d, m.loc)
    for op in graph.ops:
        if op in update_ops and op.kind != "var.read" and op not in marker_set:
            inputs = [b.args[x] if x.op is None else update[x] for x in op.inputs]
            new = b.copy(op, inputs, device[op])
            update.update(zip(op.results, new.results))
    results = []
    for v in graph.results:
        if v in s.dep:
            results.append(s.fetch(v, [s.on_worker(v, i) for i in range(s.W)], None))
        else:
            results.append(b.args[v] if v.op is None else update[v])
    b.graph.set_results(results, list(graph.result_names))
    return b.graph


def _allreduce_step(graph: Graph, spec: ClusterSpec) -> Graph:
    s = _Step(graph, spec)
    b = s.b
    marker_set = set(s.markers)
    s.clone_workers([op for op in graph.ops if op in s.worker_ops], rename=True)
    # one fused all_reduce per dtype of the dense gradients
    dense = [m for m in s.markers if len(m.inputs) == 1]
    by_dtype: dict[Any, list[Op]] = {}
    for m in dense:
        by_dtype.setdefault(m.inputs[0].dtype, []).append(m)
    for ms in by_dtype.values():
        flats = []
        for i in range(s.W):
            d = s.workers[i]
            parts = [b.add("reshape", [s.on_worker(m.inputs[0], i)], {"shape": [-1]}, d,
                           m.loc).result for m in ms]
            flats.append(b.concat(parts, d, ms[0].loc))
        if s.W > 1:
            reduced = b.add("all_reduce", flats, {"reduction": "mean"}, s.workers[0],
                            ms[0].loc).results
        else:
            reduced = flats
        sizes = [m.inputs[0].type.nbytes(1) // m.inputs[0].dtype.itemsize for m in ms]
        for i in range(s.W):
            d = s.workers[i]
            pieces = (b.add("split", [reduced[i]], {"axis": 0, "sizes": sizes}, d,
                            ms[0].loc).results if len(ms) > 1 else [reduced[i]])
            for m, piece in zip(ms, pieces):
                shape = list(m.inputs[0].type.shape)
                s.local[i][m.result] = b.add("reshape", [piece], {"shape": shape}, d,
                                             m.loc).result
    for m in s.markers:  # sparse: every worker gathers every worker's rows
        if len(m.inputs) >= 2:
            rows = s.sparse_rows(m)
            for i in range(s.W):
                for k, res in enumerate(m.results):
                    s.local[i][res] = b.concat([r[k] for r in rows], s.workers[i], m.loc)
    rest = [op for op in graph.ops if op not in s.worker_ops and op not in marker_set]
    s.clone_workers(rest, rename=True)
    results = []
    for v in graph.results:
        per_worker = [s.on_worker(v, i) for i in range(s.W)]
        results.append(s.fetch(v, per_worker, None) if v in s.dep else per_worker[0])
    b.graph.set_results(results, list(graph.result_names))
    return b.graph


def _serving_entry(graph: Graph, spec: ClusterSpec, var_device: Mapping[str, str]) -> Graph:
    """An entry without markers: on worker 0, each variable op where its variable lives,
    and under ``ps-sync`` a gather of a PS variable on its PS (``ps_gather_device``: a
    sharded embedding's predict sends ids and gets rows, not the shards; ``allreduce``:
    an assign is applied to every copy, from worker 0's value)."""
    b = _Builder(graph)
    new_of: dict[Value, Value] = dict(b.args)
    w0 = worker_device(0)
    for op in graph.ops:
        inputs = [new_of[x] for x in op.inputs]
        named = lookup(op.kind).names_variable()
        if named:
            device = var_device[op.attrs["var"]]
        else:
            pinned = (ps_pin(op.device, spec, op.kind, op.loc)
                      if spec.strategy == "ps-sync" else None)
            # an embedding lookup runs where its table lives, as in a training step
            near = ps_gather_device(op, var_device) if spec.strategy == "ps-sync" else None
            device = pinned or near or w0
        new = b.copy(op, inputs, device)
        new_of.update(zip(op.results, new.results))
        if spec.strategy == "allreduce" and writes_variable(op):
            for i in range(1, spec.workers):
                b.copy(op, inputs, worker_device(i),
                       {**op.attrs, "var": mirror_name(op.attrs["var"], i)})
    b.graph.set_results([new_of[v] for v in graph.results], list(graph.result_names))
    return b.graph


def _mirror_variables(module: Module, spec: ClusterSpec) -> None:
    """``allreduce``: worker I's copy of every variable, on its device, given the same
    initial value by ``__init__`` (an assign of the same value right after the
    original's)."""
    variables: dict[str, VariableDecl] = {}
    for name, decl in module.variables.items():
        decl.device = worker_device(0)
        variables[name] = decl
    for i in range(1, spec.workers):
        for name, decl in module.variables.items():
            copy = mirror_name(name, i)
            if copy in module.variables:
                raise TfcError(f"cannot mirror variable '{name}': the model already has a "
                               f"variable named '{copy}'", decl.loc)
            variables[copy] = VariableDecl(copy, decl.type, worker_device(i), decl.trainable,
                                           decl.loc)
    module.variables = variables
    init = module.graphs.get(INIT_GRAPH)
    if init is None:
        return
    ops: list[Op] = []
    for op in init.ops:
        ops.append(op)
        if writes_variable(op):
            for i in range(1, spec.workers):
                ops.append(Op(op.kind, list(op.inputs),
                              {**op.attrs, "var": mirror_name(op.attrs["var"], i)},
                              [r.type for r in op.results], device=op.device, loc=op.loc))
    init.ops = ops


@dataclass
class ReplicationReport:
    """What ``replicate_module`` did (the compile report's cluster part completes it with
    the transfers, once the module is partitioned: ``cluster_report``)."""

    spec: ClusterSpec
    training: list[str] = field(default_factory=list)   # the replicated entries
    variables: dict[str, str] = field(default_factory=dict)  # name -> device


def replicate_module(module: Module, spec: ClusterSpec) -> ReplicationReport:
    """Rewrite ``module`` (in place) for the cluster ``spec`` (see the module docstring):
    its training entries replicated per worker, its other entries on worker 0, its
    variables on the PS tasks (``ps-sync``) or mirrored per worker (``allreduce``), and
    ``module.devices`` the tasks' devices. A ``TfcError`` when no entry trains."""
    training = training_entries(module)
    if not training:
        raise TfcError(f"--strategy {spec.strategy} replicates a training step, but no entry "
                       f"applies an optimizer (tfc.train ...Optimizer.minimize or "
                       f"apply_gradients); compile without --cluster, or train the model "
                       f"with an optimizer (a compiled .tfc has lost its optimizer marks: "
                       f"compile the model's source)")
    if module.partitions:
        raise TfcError("cannot replicate a module that is already partitioned")
    if spec.strategy == "ps-async":  # its step is two programs, not one placed module
        raise TfcError("--strategy ps-async runs the training step as two programs (the "
                       "workers' gradients, the PS tasks' updates), not as one placed "
                       "module: tfc compile stores it uncut for tfc run, or train it from "
                       "Python with tfc.distributed.AsyncPSTrainer")
    if spec.strategy == "allreduce":  # what elastic training replicates again (N-1)
        module.replicated_from = replication_source(module)
    if spec.strategy == "ps-sync":
        var_device = place_variables(module.variables, spec)
        for name, decl in module.variables.items():
            decl.device = var_device[name]
    else:
        _mirror_variables(module, spec)
        var_device = {name: d.device or worker_device(0) for name, d in module.variables.items()}
    for name, graph in list(module.entries.items()):
        if name in training:
            new = (_ps_sync_step(graph, spec, var_device) if spec.strategy == "ps-sync"
                   else _allreduce_step(graph, spec))
        else:
            new = _serving_entry(graph, spec, var_device)
        module.graphs[name] = new
        module.memory_plans.pop(name, None)
        module.placement_reports.pop(name, None)
    strip_module_markers(module)
    module.devices = spec.devices
    return ReplicationReport(spec, training, dict(var_device))


def replication_source(module: Module) -> bytes:
    """``module`` (not yet replicated) as bytecode, its entries and variables only (the
    initial values are not needed to replicate it again): ``Module.replicated_from``."""
    from tfc.ir.bytecode import module_to_bytes
    entries = {name: g for name, g in module.graphs.items() if name != INIT_GRAPH}
    return module_to_bytes(Module(entries, dict(module.variables)))


def task_label(device: str) -> str | None:
    """``"worker:1"`` for ``/job:worker/task:1/cpu:0`` (how reports and ``tfc ir --task``
    name ``tfc.devices.task_of``'s task); None for a local device."""
    task = task_of(device)
    return None if task is None else task[len("/job:"):].replace("/task:", ":")


@dataclass
class ClusterReport:
    """What a cluster compilation did: the strategy and tasks, the variables and bytes
    each task holds, and per entry the tensors and bytes that cross tasks per step
    (symbolic dims counted as ``SYMBOL_SIZE``; fp16-compressed transfers at half) and the
    cost model's predicted step (``TaskPrediction``)."""

    spec: ClusterSpec
    tasks: list[str]
    variables: dict[str, list[str]]          # task -> the variables it holds
    variable_bytes: dict[str, int]           # task -> their bytes
    transfers: dict[str, tuple[int, int]]    # entry -> (tensors, bytes) across tasks
    predicted: dict[str, "TaskPrediction"] = field(default_factory=dict)  # entry -> step

    def lines(self) -> list[str]:
        from tfc.units import format_bytes
        spec = self.spec
        rule = (f", variables by {spec.ps_placement} placement" if spec.strategy == "ps-sync"
                else ", variables mirrored on every worker")
        out = [f"cluster: {spec.ps} ps, {spec.workers} workers, strategy {spec.strategy}{rule}"]
        for task in self.tasks:
            names = self.variables.get(task, [])
            shown = ", ".join(names[:6]) + (f" ... {len(names) - 6} more" if len(names) > 6
                                            else "")
            out.append(f"  {task}: {len(names)} variables, "
                       f"{format_bytes(self.variable_bytes.get(task, 0))}"
                       + (f" ({shown})" if names else ""))
        for entry, (n, nbytes) in self.transfers.items():
            out.append(f"  @{entry}: {n} transfers across tasks per step, "
                       f"{format_bytes(nbytes)} (batch dims at {SYMBOL_SIZE})")
        for entry, prediction in self.predicted.items():
            out.append(f"  @{entry}: {prediction.summary()}")
        if self.predicted:
            out.append(f"  (predicted: {next(iter(self.predicted.values())).assumptions})")
        return out


@dataclass
class TaskPrediction:
    """The cost model's step of one entry of a cluster module: for each task, the time
    from the step's start to its last stage's end, and the whole step (the placer's
    ``Simulation`` of the graph as replicated: ``tfc.passes.placement.simulate_placed``).
    ``assumptions`` says on what: batch dims, cores per task, the link between tasks."""

    tasks: dict[str, float]   # task -> predicted seconds
    step_s: float
    assumptions: str
    cpu_s: float = 0.0  # the CPU time of a step summed over its processes (0: not modelled)

    def summary(self) -> str:
        per_task = ", ".join(f"{t} {_ms(s)}" for t, s in self.tasks.items())
        return f"predicted step {_ms(self.step_s)} ({per_task})"


def predict_tasks(module: Module, entry: str, symbol_size: int = SYMBOL_SIZE,
                  profile: DeviceProfile | None = None) -> TaskPrediction:
    """The cost model's step of ``entry`` of the cluster module ``module``, per task,
    with symbolic (batch) dims at ``symbol_size`` (a worker's shard of the batch is
    symbolic too, so ``symbol_size`` is the rows each worker computes). It assumes every
    task on this host (the profile's), sharing its cores as the runtime shares them
    (``cores // tasks`` threads each, ``threads_per_device``).

    Between tasks: with a profile that measured a cluster (``tfc calibrate --cluster``),
    the way the runtime runs a step (``tfc.distributed.runtime``): the driver writes a
    launch frame to each task in turn (``cluster_call_s`` each, plus its feeds' bytes
    over the measured ``cluster_link``: a worker's shard of the batch), which also
    carries every value between tasks; a task's time runs from its launch, so it waits
    for the values of tasks launched later, and the whole step is the last task's end
    after its launch plus the driver's round trip (``cluster_round_s``). With more
    processes (the tasks and the driver) than cores, they take turns on them: the step
    is at least its CPU time summed over them (``cpu_s``: the kernels, each task's
    executor step, and ``cluster_hop_cpu_s`` for every frame: a launch and its reply per
    task, a transfer between tasks) over the cores, and each task's span stretches with
    it. Without a measured cluster, values cross over the profile's link between hosts
    (``DeviceProfile.link``) and the tasks start together."""
    from tfc.passes.compress import transfer_policy
    from tfc.passes.placement import simulate_placed
    profile = profile or load_profile()
    graph = module.graphs[entry]
    compressed = (transfer_policy([graph], module.variables) if module.fp16_transfers
                  else set())
    calibrated = profile.cluster_link is not None
    starts: dict[str, float] = {}  # task -> when its work can start, from the step's launch
    waits: dict[str, float] = {}  # task -> its wait for its feeds, after its own launch
    sim_profile = profile
    if calibrated:
        starts, waits = _task_starts(module, graph, symbol_size, profile)
        sim_profile = _launch_skewed(profile, module.devices, starts)
    sim = simulate_placed(graph, module.devices, symbol_size, sim_profile, compressed)
    tasks: dict[str, float] = {}
    for device, seconds in sim.device_finish().items():
        task = task_label(device) or device
        tasks[task] = max(tasks.get(task, 0.0), seconds + waits.get(task, 0.0))
    order = {task_label(d): i for i, d in enumerate(module.devices)}
    tasks = dict(sorted(tasks.items(), key=lambda kv: order.get(kv[0], len(order))))
    threads = sorted(set(sim.threads.values())) or [1]
    shared = (f"all {len(tasks)} tasks on this host, {profile.cores} cores // {len(tasks)} = "
              f"{'/'.join(map(str, threads))} threads each")
    if calibrated:
        link = profile.cluster_link
        assert link is not None
        launched = {t: s - waits.get(t, 0.0) for t, s in starts.items()}
        step_s = (max((launched.get(t, 0.0) + s for t, s in tasks.items()), default=0.0)
                  + profile.cluster_round_s)
        # every process's CPU: the kernels, each task's executor step, every frame
        frames = 2 * len(tasks) + sim.transfers
        cpu_s = (sum(sim.busy.values()) + len(tasks) * profile.executor_step_s
                 + frames * profile.cluster_hop_cpu_s)
        crowded = len(tasks) + 1 > profile.cores and profile.cluster_hop_cpu_s > 0
        if crowded and cpu_s / profile.cores > step_s > 0:
            # taking turns on the cores stretches every task's span as much as the step
            stretch = cpu_s / profile.cores / step_s
            tasks = {t: s * stretch for t, s in tasks.items()}
            step_s *= stretch
        assumptions = (f"batch dims at {symbol_size}, a worker's shard too; {shared}; the "
                       f"measured cluster: launches {profile.cluster_call_s * 1e6:.0f} us "
                       f"a task apart, a round trip {profile.cluster_round_s * 1e6:.0f} us, "
                       f"between tasks {link.latency_s * 1e6:.0f} us + "
                       f"{link.bytes_per_s / 1e9:.2f} GB/s"
                       + (f"; {len(tasks) + 1} processes on {profile.cores} cores: the step "
                          f"at least its {cpu_s * 1e3:.2f} ms of CPU ({frames} frames of "
                          f"{profile.cluster_hop_cpu_s * 1e6:.0f} us) over them"
                          if crowded else "") + f"; {profile.describe()}")
        return TaskPrediction(tasks, step_s, assumptions, cpu_s)
    link = profile.default_link
    custom = " (or its links entry)" if profile.links else ""
    assumptions = (f"batch dims at {symbol_size}, a worker's shard too; {shared}; between "
                   f"tasks the profile's default link{custom}, {link.bytes_per_s / 1e9:g} "
                   f"GB/s + {link.latency_s * 1e6:g} us (no cluster measured: `tfc "
                   f"calibrate --cluster`); {profile.describe()}")
    return TaskPrediction(tasks, sim.makespan, assumptions)


def _task_starts(module: Module, graph: Graph, symbol_size: int, profile: DeviceProfile
                 ) -> tuple[dict[str, float], dict[str, float]]:
    """For each task of ``graph`` in the runtime's launch order: when its work can start,
    from the step's launch, and how long after its own launch it waits for its feeds
    (none: they come in its launch frame). The driver writes one launch frame per task,
    back to back (``tfc.distributed.runtime``): each costs ``cluster_call_s`` and its
    feeds' bytes over the measured link, a worker's shard of the global batch only where
    the worker splits a feed on axis 0."""
    link = profile.cluster_link
    assert link is not None
    order = list(dict.fromkeys(t for t in (task_label(op.device) for op in graph.walk()
                                           if op.device) if t is not None))
    rank = {task_label(d): i for i, d in enumerate(module.devices)}
    order.sort(key=lambda t: rank.get(t, len(rank)))
    feeds: dict[str, float] = {}  # task -> bytes of the feeds in its launch frame
    batch = symbol_size * max(1, sum(1 for d in module.devices
                                     if (task_label(d) or "").startswith("worker:")))
    for arg in graph.args:
        users: dict[str, list[Op]] = {}
        for op in graph.walk():
            task = task_label(op.device) if op.device else None
            if task is not None and arg in op.inputs:
                users.setdefault(task, []).append(op)
        nbytes = arg.type.nbytes(batch)
        for task, ops in users.items():
            blocks = {op.attrs.get("num") if op.kind == "split" and op.attrs.get("axis") == 0
                      else None for op in ops}
            n = blocks.pop() if len(blocks) == 1 else None
            feeds[task] = feeds.get(task, 0.0) + (nbytes / n if isinstance(n, int) and n > 0
                                                  else nbytes)
    starts, waits = {}, {}
    written = 0.0
    for task in order:
        written += profile.cluster_call_s + feeds.get(task, 0.0) / link.bytes_per_s
        starts[task] = written
        waits[task] = 0.0
    return starts, waits


def _launch_skewed(profile: DeviceProfile, devices: Sequence[str], starts: Mapping[str, float]
                   ) -> DeviceProfile:
    """``profile`` with a link between every two task devices: the measured cluster link,
    its latency plus the sender's start less the receiver's (each task's time counts from
    its own start), at least 0 (a value sent before its receiver started is there); each
    end of a transfer costs its thread a frame's work (``cluster_call_s``, measured as the
    driver's write of a launch frame; ``tfc.distributed.calibrate``)."""
    from dataclasses import replace

    from tfc.devices import LinkRates
    link = profile.cluster_link
    assert link is not None
    links = dict(profile.links)
    for src in devices:
        for dst in devices:
            a, b = task_label(src), task_label(dst)
            if a is None or b is None or a == b:
                continue
            skew = starts.get(a, 0.0) - starts.get(b, 0.0)
            links[f"{src}->{dst}"] = LinkRates(link.bytes_per_s,
                                               max(0.0, link.latency_s + skew))
    return replace(profile, links=links, default_link=link,
                   transfer_s=max(profile.transfer_s, 2 * profile.cluster_call_s))


def cluster_report(module: Module, spec: ClusterSpec) -> ClusterReport:
    """The ``ClusterReport`` of ``module``, replicated for ``spec`` and partitioned."""
    from tfc.passes.partition import source_value
    tasks = [t for t in (task_label(d) for d in spec.devices) if t is not None]
    variables: dict[str, list[str]] = {}
    nbytes: dict[str, int] = {}
    for name, decl in module.variables.items():
        task = task_label(decl.device) if decl.device else None
        if task is not None:
            variables.setdefault(task, []).append(name)
            nbytes[task] = nbytes.get(task, 0) + decl.type.nbytes(1)
    transfers: dict[str, tuple[int, int]] = {}
    for entry, table in module.partitions.items():
        n = total = 0
        for device, _, send in table.sends():
            if task_label(device) == task_label(send.receiver):
                continue
            # what is sent: an f16 cast's result for a compressed transfer
            n += 1
            total += source_value(module, table, device, send.value).type.nbytes(SYMBOL_SIZE)
        transfers[entry] = (n, total)
    predicted = {entry: predict_tasks(module, entry) for entry in module.partitions}
    return ClusterReport(spec, tasks, variables, nbytes, transfers, predicted)


def _int_option(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a whole number >= 0")
    return int(text)


@register_pass("replicate", options={"ps": _int_option, "workers": _int_option,
                                     "strategy": str, "placement": str})
def replicate(module: Module, ps: int = 0, workers: int = 1, strategy: str | None = None,
              placement: str = "greedy") -> Module:
    """The pass: ``replicate{ps=2,workers=4,strategy=ps-sync,placement=greedy}``."""
    replicate_module(module, ClusterSpec(ps, workers, strategy, placement))
    return module
