"""Cluster benchmark (issue #17): tfc's tasks on a real multi-node Ray on 127.0.0.1.

Two measurements, each printed as a table, on a ``LoopbackCluster`` that this tool starts
(``--nodes``, default 3: a head and two more ``ray start`` nodes, each its own raylet and
object store) or on a running cluster (``--cluster HOST:PORT``):

(a) The TensorFlow paper's null-step microbenchmark (OSDI'16 §6.2): a worker fetches the
    variables from the PS tasks, does trivial work and sends updates. Median step time for
    1, 2, 4, 8 workers on 1 and 2 PS tasks, with scalar variables (one per PS task) and with
    ``--big-mb`` (default 100) MB of f32 variables in all (four of a quarter each, placed
    on the PS tasks by the compiler). Two rows per configuration:

    - ``tfc``: a model whose ``train_step`` reads every variable (``reduce_sum``: the
      trivial work) and applies plain SGD, compiled with ``ClusterSpec(ps=P, workers=W,
      strategy="ps-sync")`` and run with ``Program(module, cluster=ADDRESS)`` (one actor
      per task), a global batch of W rows (one per worker). ``sent`` is the bytes moved
      between tasks in a step (the runtime's ``last_transfer_stats``).
    - ``ray floor``: the same step written directly on Ray actors (no tfc): the driver
      starts the step on every worker; each worker ``ray.get``s the variables from every
      PS actor and pushes an update of the same shapes; each PS applies once all workers
      of the step have pushed (synchronous, as ``ps-sync``). What Ray itself costs on this
      machine: a tfc step cannot be cheaper.

    The paper saw 1.8 ms (1 worker) to 8.8 ms (100 workers) for scalars over a real
    network; the issue's goal on loopback: <= 2 ms median at 4 workers.

(b) MLP 784-512-512-10 (ReLU, sparse softmax cross-entropy, SGD), global batch 512, on 2
    workers with the ring all-reduce (``ClusterSpec(ps=0, workers=2,
    strategy="allreduce")``), against PyTorch DDP (gloo backend, CPU, the same loopback, the
    same model, 2 processes via ``torch.multiprocessing``, each its half of the batch) in
    the same run; and tfc in one process on the whole batch for reference. Bytes moved per
    step per worker are compared with the ring's minimum, ``2(N-1)/N x`` the gradient
    bytes: for tfc from ``last_transfer_stats`` (between tasks, divided by the workers),
    for DDP from each process's ``wchar`` (``/proc/self/io``: bytes written, sockets
    included). Goals: step time <= 1.0x DDP's, bytes <= 1.1x the minimum.

For each tfc row a last table sets each task's predicted step (the compile report's cost
model, ``tfc.passes.replicate.predict_tasks``, batch dims at the worker's shard) against its
measured time in the last step (``last_transfer_stats.task_seconds``), and their ratio.
The predictions use calibrated rates: ``--profile PATH``, else the stored profile of
``tfc calibrate``, else a quick calibration of this host at the start (5-25 s); and
the cluster's own costs measured on it (``tfc.distributed.calibrate``). ``--no-calibrate``
predicts with the default rates instead.

Every process (tfc's tasks, the one-process tfc, each DDP rank) runs on ``--threads``
threads (default 1: two workers take the two cores of a small machine on either side).
Step times are medians over ``--steps`` timed steps (after warm-up steps), taken on a host
that other jobs may share: the header gives the CPU, its cores and the load average before
and after. ``--quick`` is a smoke run (fewer configurations and steps, 4 MB instead of
100). The tfc rows need the cluster compile (``tfc.passes.replicate.ClusterSpec``) and the
cluster runtime (``Program(..., cluster=)``); where this checkout lacks them the rows say
so and the rest still runs.

    python tools/bench_cluster.py                       # everything (several minutes)
    python tools/bench_cluster.py --quick               # a smoke run
    python tools/bench_cluster.py --parts mlp --steps 30
    python tools/bench_cluster.py --parts null --workers 1,4 --ps 1 --big-mb 0
    python tools/bench_cluster.py --json out.json       # also the raw numbers
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_timing import machine_info  # noqa: E402  (a sibling tool module)

from tfc.distributed.cluster import LoopbackCluster, RayCluster, require_ray  # noqa: E402
from tfc.units import format_bytes  # noqa: E402

MLP_SIZES = (784, 512, 512, 10)
MLP_BATCH = 512
BIG_VARIABLES = 4  # the big case's variables: four of a quarter of the total each
# tfc's kernels' pool, its OpenBLAS, and torch's OpenMP: the threads of one process
THREAD_VARIABLES = ("TFC_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


@dataclass
class Row:
    part: str
    system: str
    config: str
    median_s: float | None = None
    steps: int = 0
    bytes_per_step: int | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def p90(samples: list[float]) -> float:
    return float(np.percentile(samples, 90))


def timed_steps(step: Callable[[], Any], steps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


# ---- what the tfc side needs from the other branches -------------------------------------

def tfc_cluster_api() -> tuple[Any, Any, Any] | str:
    """(ClusterSpec, compile_model, Program) when this checkout compiles and runs for a
    cluster, else why not."""
    try:
        from tfc.compiler.driver import compile_model
        from tfc.passes.replicate import ClusterSpec
        from tfc.runtime.program import Program
    except ImportError as e:
        return f"this checkout has no cluster compile ({e})"
    if "cluster" not in inspect.signature(compile_model).parameters:
        return "this checkout's compile_model takes no cluster="
    if "cluster" not in inspect.signature(Program).parameters:
        return "this checkout's Program takes no cluster= (no cluster runtime)"
    return ClusterSpec, compile_model, Program


def last_stats(program: Any) -> Any:
    """The cluster runtime's ``last_transfer_stats`` (what the latest step moved between
    tasks, and each task's time in it), when the runtime counts them."""
    return getattr(getattr(program, "_cluster", None), "last_transfer_stats", None)


def transfer_bytes(program: Any) -> int | None:
    stats = last_stats(program)
    return None if stats is None else int(stats.bytes)


def transfer_note(program: Any) -> str:
    """``N tensors; worker:0 12.3 ms, ...``: the latest step's transfers and task times."""
    stats = last_stats(program)
    if stats is None:
        return ""
    tasks = ", ".join(f"{t} {ms(s)} ms" for t, s in sorted(
        getattr(stats, "task_seconds", {}).items()))
    return f"{getattr(stats, 'tensors', '?')} tensors between tasks" + (
        f"; last step per task: {tasks}" if tasks else "")


def stepped_phases(program: Any, step: Callable[[], Any]) -> tuple[Callable[[], Any],
                                                                  list[dict[str, float]]]:
    """``step`` wrapped to record each step's breakdown (the runtime's
    ``last_transfer_stats``: the driver's phases, and each task's as ``task/phase``), and
    the list it records into."""
    records: list[dict[str, float]] = []

    def timed() -> None:
        step()
        stats = last_stats(program)
        if stats is None:
            return
        record = {f"driver/{k}": v for k, v in getattr(stats, "driver_phases", {}).items()}
        for task, phases in getattr(stats, "task_phases", {}).items():
            short = task.replace("/job:", "").replace("/task", "")
            record.update({f"{short}/{k}": v for k, v in phases.items()})
            record[f"{short}/total"] = stats.task_seconds.get(task, 0.0)
        records.append(record)
    return timed, records


def median_phases(records: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the recorded steps (the warm-up steps left out)."""
    keys = dict.fromkeys(k for r in records for k in r)
    return {k: median([r[k] for r in records if k in r]) for k in keys}


def print_breakdowns(rows: list[Row]) -> None:
    """Where each tfc row's step goes: medians of the driver's and each task's phases."""
    table = [r for r in rows if r.extra.get("breakdown")]
    if not table:
        return
    print("\nwhere a step goes (medians, ms): driver launch (a frame with its feeds to each "
          "task, or a Ray call each where a task's port cannot be reached) / wait "
          "(until every task answered) / gather; per task: feeds (waiting for the driver's), "
          "run (the stages, with send: putting values on the wire, and recv_wait: waiting "
          "for peers' values), acks (waiting for Ray deliveries), total (in the task)")
    for r in table:
        print(f"  {r.part} {r.config}: step {ms(r.median_s)} ms")
        phases = r.extra["breakdown"]
        for who in dict.fromkeys(k.split("/")[0] for k in phases):
            parts = ", ".join(f"{k.split('/', 1)[1]} {ms(v)}" for k, v in phases.items()
                              if k.split("/")[0] == who)
            print(f"    {who:9} {parts}")


PROFILE: Any = None  # the cost model's profile, with the cluster's costs when measured


def task_predictions(module: Any, records: list[dict[str, float]], entry: str, shard: int,
                     step_s: float) -> dict[str, tuple[float, float | None]]:
    """Each task's predicted step of ``entry`` (the compile report's cost model,
    ``tfc.passes.replicate.predict_tasks`` on ``PROFILE``, batch dims at the per-worker
    ``shard``) and its measured median time in the step (``task_seconds``, None when not
    counted), and the whole step's (``step``) against ``step_s``; empty where this
    checkout predicts nothing."""
    try:
        from tfc.passes.replicate import predict_tasks
    except ImportError:
        return {}
    # (the records name tasks as task_label does: worker:1)
    measured = {k.split("/")[0]: v for k, v in median_phases(records).items()
                if k.endswith("/total")}
    prediction = predict_tasks(module, entry, shard, PROFILE)
    out = {t: (p, measured.get(t)) for t, p in prediction.tasks.items()}
    out["step"] = (prediction.step_s, step_s)
    return out


def print_predictions(rows: list[Row]) -> None:
    """Predicted against measured per task, for every tfc row that has them."""
    table = [(r, t, p, m) for r in rows for t, (p, m) in r.extra.get("tasks", {}).items()]
    if not table:
        return
    print(f"\npredicted (cost model, compile report) vs measured (medians) per task and for "
          f"the whole step; {getattr(PROFILE, 'describe', lambda: 'default profile')()}")
    print(f"  {'part':4} {'configuration':28} {'task':9} {'predicted':>10} {'measured':>10}"
          f" {'measured/predicted':>18}")
    for r, task, p, m in table:
        ratio = "-" if m is None or p <= 0 else f"{m / p:.2f}x"
        print(f"  {r.part:4} {r.config:28} {task:9} {ms(p):>7} ms {ms(m):>7} ms {ratio:>18}")


RAY_ROOTS: list[int] = []  # the loopback cluster's node processes (their trees are Ray's)


def cpu_ns(pid: int) -> tuple[int, int]:
    """CPU time that process ``pid``'s live threads have run, in ns (``schedstat``: exact,
    where ``/proc/PID/stat`` counts 10 ms ticks), and how many times they were put on a
    core (its wake-ups, roughly); zeros when it is gone."""
    total = runs = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    fields = f.read().split()
                total += int(fields[0])
                runs += int(fields[2])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return total, runs


def descendants(roots: list[int]) -> list[int]:
    """``roots`` and every process below them (from ``/proc/*/stat``'s parent ids)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(name))
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


class CpuMeter:
    """CPU time per step of each process of a cluster program: the driver (this process),
    each task's, and the rest of Ray's (raylets, GCS, ...: ``ray``). On a host with fewer
    cores than processes their sum, not the wall time, bounds the step: it does not
    depend on what else the host runs."""

    def __init__(self, program: Any) -> None:
        where = getattr(getattr(program, "_cluster", None), "where", {})
        self.pids = {task_label(t): int(w["pid"]) for t, w in where.items()}
        self.pids["driver"] = os.getpid()
        tasks = set(self.pids.values())
        self.ray = [p for p in descendants(RAY_ROOTS) if p not in tasks]
        self.start = self.read()

    def read(self) -> dict[str, tuple[int, int]]:
        out = {who: cpu_ns(pid) for who, pid in self.pids.items()}
        ray = [cpu_ns(p) for p in self.ray]
        out["ray"] = (sum(c for c, _ in ray), sum(r for _, r in ray))
        return out

    def per_step_ms(self, steps: int) -> dict[str, float]:
        """CPU ms per step by process, their ``sum``, and ``runs``: how many times a
        thread of the driver or of a task was put on a core per step (Ray's left out)."""
        end = self.read()
        per = {who: (end[who][0] - self.start[who][0]) / 1e6 / steps for who in end}
        per["sum"] = sum(per.values())
        per["runs"] = sum(end[w][1] - self.start[w][1] for w in end if w != "ray") / steps
        return per


TRACE = False  # --trace: each tfc null row prints its step's timeline


def short_event(event: str) -> str:
    """``rx train_step:4:/job:worker/task:0/cpu:0->/job:ps/task:0/cpu:0`` as
    ``rx worker:0->ps:0``."""
    event = re.sub(r"/job:(\w+)/task:(\d+)(/cpu:\d+)?", r"\1:\2", event)
    return re.sub(r"\b\w+:\d+:(?=\w+:\d+->)", "", event).replace("task ", "")


def step_timeline(events: dict[str, list[Any]], first_step: int) -> list[tuple[float, str]]:
    """The median time of each (process, thread, event) after the driver's launch of a
    step, over the steps from ``first_step`` on: the step's timeline. Threads are
    numbered per process in the order they first recorded (t0, t1, ...)."""
    launches = {s: ns for ns, _, s, e, _ in events.get("driver", []) if e == "launch"}
    offsets: dict[str, list[float]] = {}
    for who, evs in events.items():
        threads: dict[int, int] = {}
        seen: dict[tuple[int, str], int] = {}
        for ns, tid, step, event, _ in evs:
            thread = threads.setdefault(tid, len(threads))
            if step < first_step or step not in launches:
                continue
            n = seen[(step, event)] = seen.get((step, event), 0) + 1
            label = f"{who}/t{thread} {short_event(event)}" + (f" #{n}" if n > 1 else "")
            offsets.setdefault(label, []).append((ns - launches[step]) / 1e3)
    return sorted((median(v), k) for k, v in offsets.items())


def segment_cpu(events: dict[str, list[Any]], first_step: int) -> list[tuple[float, str]]:
    """The median CPU time (us) each thread spent between two of its consecutive events
    (``a -> b``), over the steps from ``first_step`` on, largest first: where the CPU of a
    step goes, hop by hop."""
    spans: dict[str, list[float]] = {}
    for who, evs in events.items():
        last: dict[int, tuple[str, int]] = {}
        threads: dict[int, int] = {}
        for _, tid, step, event, cpu in evs:
            thread = threads.setdefault(tid, len(threads))
            if tid in last and step >= first_step:
                before, at = last[tid]
                label = f"{who}/t{thread} {short_event(before)} -> {short_event(event)}"
                spans.setdefault(label, []).append((cpu - at) / 1e3)
            last[tid] = (event, cpu)
    return sorted(((median(v), k) for k, v in spans.items()), reverse=True)


def print_timelines(rows: list[Row]) -> None:
    for r in rows:
        timeline = r.extra.get("timeline")
        if timeline:
            print(f"\ntimeline of a step (median us after the driver's launch; process/thread "
                  f"event): {r.config}")
            for at, label in timeline:
                print(f"  {at:8.0f}  {label}")
            print(f"CPU between a thread's consecutive events (median us; the largest 80): "
                  f"{r.config}")
            for cpu, label in r.extra.get("segments", [])[:80]:
                print(f"  {cpu:8.1f}  {label}")


def task_label(task: str) -> str:
    return task.replace("/job:", "").replace("/task", "")


def close_program(program: Any) -> None:
    close = getattr(program, "close", None)
    if close is not None:
        close(read_back=False)


# ---- (a) the null step --------------------------------------------------------------------

def null_shapes(ps: int, big_bytes: int) -> list[tuple[int, ...]]:
    """The variables' shapes: one scalar per PS task, or ``big_bytes`` of f32 in four."""
    if big_bytes == 0:
        return [()] * ps
    return [(big_bytes // 4 // BIG_VARIABLES,)] * BIG_VARIABLES


NULL_MODEL = """\
import numpy as np
import tfc

SHAPES = {shapes!r}
x = tfc.placeholder(tfc.float32, [None, 1], name="x")
variables = [tfc.Variable(tfc.zeros(list(shape)), name=f"v{{i}}")
             for i, shape in enumerate(SHAPES)]
# the trivial work: read every variable once
loss = tfc.reduce_mean(x) + tfc.add_n([tfc.reduce_sum(v) for v in variables]) * 1e-9
train_op = tfc.train.GradientDescentOptimizer(1.0).minimize(loss)
tfc.entry("train_step", feeds={{"x": x}}, fetches={{"loss": loss}}, targets=[train_op])
"""


class FloorPs:
    """A PS task on bare Ray: holds its variables, hands them out, and applies the sum of
    one step's updates once every worker has sent its own."""

    def __init__(self, shapes: list[tuple[int, ...]], workers: int) -> None:
        self.values = [np.zeros(s, np.float32) for s in shapes]
        self.sums = [np.zeros(s, np.float32) for s in shapes]
        self.workers, self.arrived, self.step = workers, 0, 0

    def fetch(self) -> list[np.ndarray]:
        return self.values

    def push(self, step: int, updates: list[np.ndarray]) -> None:
        if step != self.step:
            raise ValueError(f"stale update of step {step} at step {self.step}")
        for total, update in zip(self.sums, updates):
            total += update
        self.arrived += 1
        if self.arrived == self.workers:
            for value, total in zip(self.values, self.sums):
                value -= total * 1e-9
                total[...] = 0
            self.arrived, self.step = 0, self.step + 1


class FloorWorker:
    """A worker task on bare Ray: fetch every PS's variables, trivial work, push."""

    def __init__(self, ps: list[Any], shapes: list[list[tuple[int, ...]]]) -> None:
        self.ps = ps
        self.updates = [[np.ones(s, np.float32) for s in mine] for mine in shapes]

    def step(self, step: int) -> float:
        import ray
        values = ray.get([p.fetch.remote() for p in self.ps], timeout=120)
        work = float(sum(float(v.sum()) for vs in values for v in vs))  # the trivial work
        ray.get([p.push.remote(step, u) for p, u in zip(self.ps, self.updates)], timeout=120)
        return work


def null_floor(cluster: RayCluster, ps: int, workers: int, big_bytes: int, steps: int,
               warmup: int) -> Row:
    ray = require_ray()
    shapes = null_shapes(ps, big_bytes)
    mine = [shapes[j::ps] for j in range(ps)]  # round robin over the PS tasks
    nodes = cluster.spread(ps + workers)
    ps_actors = [cluster.start_actor(FloorPs, mine[j], workers, node_id=nodes[j],
                                     name=f"ps:{j}") for j in range(ps)]
    worker_actors = [cluster.start_actor(FloorWorker, ps_actors, mine, node_id=nodes[ps + i],
                                         name=f"worker:{i}") for i in range(workers)]
    counter = iter(range(1 << 30))

    def step() -> None:
        s = next(counter)
        ray.get([w.step.remote(s) for w in worker_actors], timeout=300)

    times = timed_steps(step, steps, warmup)
    for handle in ps_actors + worker_actors:
        ray.kill(handle)
    moved = 2 * workers * sum(int(np.prod(s)) * 4 for s in shapes)
    return Row("null", "ray floor", null_config(ps, workers, big_bytes), median(times), steps,
               moved, "bytes: fetch + update, counted", {"p90_s": p90(times)})


def null_config(ps: int, workers: int, big_bytes: int) -> str:
    size = "scalar" if big_bytes == 0 else f"{big_bytes / 1e6:g} MB"
    return f"ps={ps} workers={workers} {size}"


def null_tfc(api: Any, address: str, work: Path, ps: int, workers: int, big_bytes: int,
             steps: int, warmup: int) -> Row:
    cluster_spec, compile_model, program_cls = api
    config = null_config(ps, workers, big_bytes)
    model = work / f"null_{ps}_{workers}_{big_bytes}.py"
    model.write_text(NULL_MODEL.format(shapes=null_shapes(ps, big_bytes)))
    module = compile_model(model, cluster=cluster_spec(ps=ps, workers=workers,
                                                      strategy="ps-sync"))
    started = time.perf_counter()
    program = program_cls(module, cluster=address)
    try:
        start_s = time.perf_counter() - started
        x = np.ones((workers, 1), np.float32)
        step, records = stepped_phases(program, lambda: program.run("train_step", x=x))
        timed_steps(step, 0, warmup)
        runtime = getattr(program, "_cluster", None)
        if TRACE and runtime is not None:
            runtime.trace_events()  # (the warm-up's, dropped)
        meter = CpuMeter(program)
        first = getattr(runtime, "_launches", 0) + 1
        times = timed_steps(step, steps, 0)
        cpu = meter.per_step_ms(steps)
        traced = runtime.trace_events() if TRACE and runtime is not None else {}
        timeline = step_timeline(traced, first) if traced else []
        segments = segment_cpu(traced, first) if traced else []
        moved, note = transfer_bytes(program), transfer_note(program)
        tasks = task_predictions(module, records[warmup:], "train_step", 1, median(times))
    finally:
        close_program(program)
    return Row("null", "tfc", config, median(times), steps, moved,
               f"program start {start_s:.1f} s; {note}",
               {"tasks": tasks, "breakdown": median_phases(records[warmup:]),
                "p90_s": p90(times), "cpu_ms": cpu, "load": load_average(),
                "timeline": timeline, "segments": segments})


# ---- (b) the MLP against PyTorch DDP ----------------------------------------------------

MLP_MODEL = """\
import numpy as np
import tfc

SIZES = {sizes!r}
rng = np.random.default_rng(0)
x = tfc.placeholder(tfc.float32, [None, SIZES[0]], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")
h = x
for i, (n_in, n_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
    w = tfc.Variable(rng.normal(0, np.sqrt(2.0 / n_in), (n_in, n_out)).astype(np.float32),
                     name=f"l{{i}}/w")
    b = tfc.Variable(np.zeros(n_out, np.float32), name=f"l{{i}}/b")
    h = tfc.matmul(h, w) + b
    if i < len(SIZES) - 2:
        h = tfc.nn.relu(h)
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
train_op = tfc.train.GradientDescentOptimizer(0.01).minimize(loss)
tfc.entry("train_step", feeds={{"x": x, "y": y}}, fetches={{"loss": loss}}, targets=[train_op])
"""


def mlp_gradient_bytes() -> int:
    return 4 * sum(a * b + b for a, b in zip(MLP_SIZES[:-1], MLP_SIZES[1:]))


def ring_minimum(workers: int) -> int:
    """Bytes each worker must send per step in a ring all-reduce of the gradients."""
    return int(2 * (workers - 1) / workers * mlp_gradient_bytes())


def mlp_batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((MLP_BATCH, MLP_SIZES[0])).astype(np.float32),
            rng.integers(0, MLP_SIZES[-1], MLP_BATCH).astype(np.int32))


def _wchar() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def _ddp_worker(rank: int, world: int, port: int, steps: int, warmup: int, threads: int,
                results: Any) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    layers: list[Any] = []
    for i, (n_in, n_out) in enumerate(zip(MLP_SIZES[:-1], MLP_SIZES[1:])):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(MLP_SIZES) - 2:
            layers.append(torch.nn.ReLU())
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x_all, y_all = mlp_batch()
    share = MLP_BATCH // world
    x = torch.from_numpy(x_all[rank * share:(rank + 1) * share])
    y = torch.from_numpy(y_all[rank * share:(rank + 1) * share].astype(np.int64))

    def step() -> None:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    times = []
    written = _wchar()
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    written = _wchar() - written
    results.put((rank, times, written))
    dist.barrier()
    dist.destroy_process_group()


def mlp_ddp(workers: int, steps: int, warmup: int, threads: int) -> Row:
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        return Row("mlp", "torch DDP (gloo)", f"workers={workers}",
                   note=f"skipped: torch is not installed ({e}): pip install torch==2.13.0")
    from tfc.distributed.cluster import free_port

    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    port = free_port()
    processes = [context.Process(target=_ddp_worker,
                                 args=(rank, workers, port, steps, warmup, threads, results))
                 for rank in range(workers)]
    for p in processes:
        p.start()
    got = [results.get() for _ in processes]
    for p in processes:
        p.join(60)
    got.sort()
    # each step ends with the all-reduce: a step's time is the slowest rank's
    per_step = [max(ts) for ts in zip(*(t for _, t, _ in got))]
    sent = int(statistics.mean(w for _, _, w in got) / steps)
    return Row("mlp", "torch DDP (gloo)", f"workers={workers} batch={MLP_BATCH}",
               median(per_step), steps, sent, f"torch {torch.__version__}, "
               f"{threads} thread(s)/process, bytes: wchar per worker")


def mlp_tfc(api: Any, address: str | None, work: Path, workers: int, steps: int,
            warmup: int) -> Row:
    cluster_spec, compile_model, program_cls = api
    model = work / "mlp.py"
    model.write_text(MLP_MODEL.format(sizes=MLP_SIZES))
    x, y = mlp_batch()
    if address is None:  # one process, the whole batch: the reference
        from tfc.compiler.driver import compile_model as plain_compile
        program = program_cls(plain_compile(model))
        times = timed_steps(lambda: program.run("train_step", x=x, y=y), steps, warmup)
        return Row("mlp", "tfc, 1 process", f"workers=1 batch={MLP_BATCH}", median(times),
                   steps)
    module = compile_model(model, cluster=cluster_spec(ps=0, workers=workers,
                                                      strategy="allreduce"))
    program = program_cls(module, cluster=address)
    try:
        step, records = stepped_phases(program, lambda: program.run("train_step", x=x, y=y))
        times = timed_steps(step, steps, warmup)
        moved, note = transfer_bytes(program), transfer_note(program)
        tasks = task_predictions(module, records[warmup:], "train_step",
                                 MLP_BATCH // workers, median(times))
    finally:
        close_program(program)
    per_worker = None if moved is None else moved // workers
    return Row("mlp", "tfc allreduce", f"workers={workers} batch={MLP_BATCH}", median(times),
               steps, per_worker, f"bytes: between tasks per worker; {note}",
               {"tasks": tasks, "breakdown": median_phases(records[warmup:]),
                "p90_s": p90(times)})


# ---- the run ------------------------------------------------------------------------------

def run_row(rows: list[Row], make: Callable[[], Row], part: str, system: str,
            config: str) -> None:
    """One row, or the row's error: a failure is reported and the run goes on."""
    try:
        row = make()
    except Exception as e:  # report it and go on with the other rows
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        row = Row(part, system, config, note=f"error: {type(e).__name__}: {first}")
    rows.append(row)
    extra = f"  [{format_bytes(row.bytes_per_step)}]" if row.bytes_per_step is not None else ""
    print(f"  {row.part:4} {row.system:18} {row.config:28} {ms(row.median_s):>9} ms{extra}"
          f"  {row.note}", flush=True)


def print_tables(rows: list[Row], workers: int) -> None:
    null = [r for r in rows if r.part == "null"]
    if null:
        print("\n(a) null step (OSDI'16 §6.2): median step time")
        print(f"  {'configuration':28} {'system':12} {'median':>10} {'p90':>10} "
              f"{'moved/step':>12}  note")
        for r in null:
            moved = "-" if r.bytes_per_step is None else format_bytes(r.bytes_per_step)
            print(f"  {r.config:28} {r.system:12} {ms(r.median_s):>7} ms "
                  f"{ms(r.extra.get('p90_s')):>7} ms {moved:>12}  {r.note}")
        cpu = [r for r in null if r.extra.get("cpu_ms")]
        if cpu:
            print("\n  CPU ms per step by process (schedstat; on 2 cores their sum bounds "
                  "the step): driver, each task, the rest of Ray (ray), the sum")
            for r in cpu:
                parts = ", ".join(f"{k} {v:.3f}" if k != "runs" else f"{k} {v:.1f}"
                                  for k, v in r.extra["cpu_ms"].items())
                print(f"  {r.config:28} load {r.extra.get('load', '?')}: {parts}")
        goal = [r for r in null if r.system == "tfc" and r.config.endswith("scalar")
                and "workers=4" in r.config and r.median_s is not None]
        for r in goal:
            verdict = "meets" if r.median_s <= 2e-3 else "misses"
            print(f"  goal <= 2 ms at 4 workers, scalars: {r.config}: {ms(r.median_s)} ms "
                  f"({verdict})")
    mlp = [r for r in rows if r.part == "mlp"]
    if mlp:
        minimum = ring_minimum(workers)
        print(f"\n(b) MLP {'-'.join(map(str, MLP_SIZES))}, batch {MLP_BATCH} global, "
              f"{workers} workers; gradients {format_bytes(mlp_gradient_bytes())}, ring "
              f"minimum {format_bytes(minimum)} per worker per step")
        ddp = next((r for r in mlp if r.system.startswith("torch") and r.median_s), None)
        print(f"  {'system':18} {'median':>10} {'vs DDP':>7} {'sent/worker':>12} "
              f"{'vs ring min':>11}  note")
        for r in mlp:
            ratio = (f"{r.median_s / ddp.median_s:.2f}x" if ddp and r.median_s else "-")
            sent = "-" if r.bytes_per_step is None else format_bytes(r.bytes_per_step)
            vs_min = ("-" if r.bytes_per_step is None or r.system.startswith("tfc, 1")
                      else f"{r.bytes_per_step / minimum:.2f}x")
            print(f"  {r.system:18} {ms(r.median_s):>7} ms {ratio:>7} {sent:>12} {vs_min:>11}"
                  f"  {r.note}")
        print("  goals: tfc allreduce <= 1.0x DDP's step, <= 1.1x the ring minimum")


def prediction_profile(path: str | None, measure: bool) -> tuple[Any, str]:
    """The device profile the predictions use, and where it came from: ``path``'s, else
    the stored one when it is calibrated, else this host measured now (a quick
    calibration: 3 runs of each kernel, one pass, on the threads each process gets;
    ``measure``), else the default rates with this host's cores (the tasks and the
    driver share them). Uncalibrated GEMM rates put the MLP's prediction off by 2x."""
    from tfc.devices import default_profile_path, load_profile
    if path is not None:
        return load_profile(path), f"read from {path}"
    stored = load_profile()
    if stored.calibrated:
        return stored, f"the stored profile ({default_profile_path()})"
    if not measure:
        stored.cores = os.cpu_count() or stored.cores
        return stored, "the default rates (--no-calibrate), this host's cores"
    from tfc.runtime.calibrate import calibrate
    started = time.perf_counter()
    measured = calibrate(["/cpu:0"], repeats=3, passes=1).profile
    return measured, (f"this host measured now, in {time.perf_counter() - started:.0f} s "
                      f"(no stored profile: `tfc calibrate` stores one)")


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def parse_ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="null,mlp", help="null, mlp or both")
    parser.add_argument("--workers", default="1,2,4,8", help="null step: worker counts")
    parser.add_argument("--ps", default="1,2", help="null step: PS task counts")
    parser.add_argument("--big-mb", type=float, default=100.0,
                        help="null step: the big case's MB of variables in all (0: none)")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per row")
    parser.add_argument("--big-steps", type=int, default=5, help="timed steps, big case")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--mlp-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per process, tfc's and torch's alike")
    parser.add_argument("--nodes", type=int, default=3, help="loopback cluster's nodes")
    parser.add_argument("--cluster", default=None,
                        help="HOST:PORT of a running Ray cluster (default: a loopback one)")
    parser.add_argument("--no-floor", action="store_true", help="skip the bare-Ray rows")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="predict without measuring anything first: neither this host's "
                             "rates (where no profile is stored) nor the cluster's costs "
                             "(tfc.distributed.calibrate)")
    parser.add_argument("--profile", default=None,
                        help="the device profile to predict with (`tfc calibrate -o PATH`); "
                             "default: the stored one (`tfc calibrate`'s), else this host "
                             "measured now (a quick calibration: 5-25 s)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: workers 1,4, ps 1, 4 MB, 10 steps")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--trace", action="store_true",
                        help="print each tfc null row's step timeline (TFC_STEP_TRACE=1: "
                             "timestamps at every frame and wait in every process)")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.ps, args.big_mb = "1,4", "1", min(args.big_mb, 4.0)
        args.steps, args.big_steps = min(args.steps, 10), min(args.big_steps, 3)
    parts = {p.strip() for p in args.parts.split(",")}

    # Every process of both systems on --threads threads (set before tfc loads OpenBLAS and
    # before the cluster's nodes start: its actors inherit it), so that N processes take N x
    # threads cores on each side.
    for variable in THREAD_VARIABLES:
        os.environ[variable] = str(args.threads)
    if args.trace:  # (before the cluster starts: its task processes inherit it)
        global TRACE
        TRACE = True
        os.environ["TFC_STEP_TRACE"] = "1"
        from tfc.distributed import steptrace
        steptrace.ENABLED = True
    info = machine_info()
    ray = require_ray()
    print(f"bench_cluster: CPU {info['cpu']}, {info['cores']} cores, "
          f"{info['memory_gib']} GiB; Python {info['python']}; Ray {ray.__version__}; "
          f"{args.threads} thread(s) per process")
    print(f"load average before: {load_average()}")
    api = tfc_cluster_api()
    if isinstance(api, str):
        print(f"tfc rows: unavailable: {api}")

    global PROFILE
    PROFILE, source = prediction_profile(args.profile, not args.no_calibrate)
    print(f"predictions: {PROFILE.describe()}: {source}")
    rows: list[Row] = []
    loopback = None
    started = time.perf_counter()
    if args.cluster is None:
        loopback = LoopbackCluster(args.nodes).start()
        address = loopback.address
        RAY_ROOTS[:] = loopback.pids
        print(f"loopback Ray cluster: {args.nodes} nodes at {address}, up in "
              f"{time.perf_counter() - started:.1f} s")
    else:
        address = args.cluster
    try:
        if not args.no_calibrate:
            from tfc.distributed.calibrate import calibrate_cluster
            costs = calibrate_cluster(address)
            costs.apply(PROFILE)
            print(costs.summary())
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
            work = Path(tmp)
            if "null" in parts:
                sizes = [0] + ([int(args.big_mb * 1e6)] if args.big_mb > 0 else [])
                for big in sizes:
                    steps = args.steps if big == 0 else args.big_steps
                    for ps in parse_ints(args.ps):
                        for w in parse_ints(args.workers):
                            config = null_config(ps, w, big)
                            if not isinstance(api, str):
                                run_row(rows, lambda: null_tfc(api, address, work, ps, w, big,
                                                               steps, args.warmup),
                                        "null", "tfc", config)
                            if not args.no_floor:
                                def floor() -> Row:
                                    with RayCluster.connect(address) as cluster:
                                        return null_floor(cluster, ps, w, big, steps,
                                                          args.warmup)
                                run_row(rows, floor, "null", "ray floor", config)
            if "mlp" in parts:
                n = args.mlp_workers
                config = f"workers={n} batch={MLP_BATCH}"
                run_row(rows, lambda: mlp_ddp(n, args.steps, args.warmup, args.threads),
                        "mlp", "torch DDP (gloo)", config)
                if not isinstance(api, str):
                    run_row(rows, lambda: mlp_tfc(api, address, work, n, args.steps,
                                                  args.warmup), "mlp", "tfc allreduce", config)
                    run_row(rows, lambda: mlp_tfc(api, None, work, 1, args.steps, args.warmup),
                            "mlp", "tfc, 1 process", f"workers=1 batch={MLP_BATCH}")
    finally:
        if loopback is not None:
            stopping = time.perf_counter()
            loopback.stop()
            print(f"loopback cluster stopped in {time.perf_counter() - stopping:.1f} s")
    print(f"load average after: {load_average()}")
    print_tables(rows, args.mlp_workers)
    print_predictions(rows)
    print_breakdowns(rows)
    print_timelines(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": info, "rows": [asdict(r) for r in rows]}, indent=2))
    return 1 if any(r.note.startswith("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
