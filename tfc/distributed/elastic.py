"""Elastic all-reduce: when a worker dies, go on with the N-1 that are left.

``--on-failure elastic`` (``Supervisor(on_failure="elastic")``) for a module compiled with
``--strategy allreduce``. The strict mode (``restart``, the default with a checkpoint
directory, as TensorFlow does) waits for a new task and restores a checkpoint; the
elastic one (Horovod Elastic's idea, but keeping the *global* batch) does not wait:

1. The step in flight was aborted on every task, and a step that failed anywhere
   changes no variable anywhere (``tfc.distributed.task``: updates are pending until
   the driver settles the step, and a failed one is dropped). So every surviving worker
   holds its mirrored copy of the variables as the last completed step left it, bitwise
   equal to the others' (the ring gives every worker the same mean). They are read back
   from one survivor; where that cannot be done (an in-place update of the failed step
   left a variable changed: the task refuses it), the last checkpoint is restored
   instead, when there is one.
2. The training step is replicated again from the step the artifact keeps unreplicated
   (``Module.replicated_from``: the ``replicate`` pass stores it for ``allreduce``), its
   workers placed on the survivors' tasks (each survivor keeps its name: ``worker:0``
   and ``worker:2`` after ``worker:1`` died), and lowered as ``tfc compile`` lowered it
   (same backend, same fp16 transfers); the other entries go to worker 0 as before.
3. N-1 new task actors start on the survivors' nodes, all at once (the dead worker's
   node may be what failed), form the new ring, and the old actors are killed (each was
   compiled for N workers). The program's module, its variables (the mirrors of the new
   ring) and its executables are replaced in place: the caller's ``Program`` goes on, at
   the same step.

Afterwards the dead worker is restarted in the background and the ring grows back to N
when it is ready (``tfc.distributed.rejoin``, unless ``rejoin=False``).

The global batch stays the same, so the step computes the same mean gradient and the run
ends with the variables of an uninterrupted one. Two layouts, both exact:

- ``even`` (when every global batch seen so far, and every one the caller says will come,
  e.g. ``tfc run --batch``'s last partial batch of an epoch, splits into N-1 equal
  shards): the step replicated for N-1 workers, each on 1/(N-1) of the batch (to
  rounding: the mean of N-1 shard means instead of N);
- ``shards`` (otherwise): the N-way split kept, the dead worker's shard computed by a
  survivor (a second device of its task, ``/job:worker/task:S/cpu:1``, with its own
  mirrored copy): every batch the N-worker job accepted is accepted, and the ring sums
  the same N shard gradients, but that survivor does two shards' work.

Uneven shards (TF/Horovod Elastic re-split a *local* batch per worker, which changes the
global batch; an uneven split of the same global batch would need each shard's gradient
weighted by its rows, which the ring's plain mean does not do) and padding (which changes
the mean unless masked) are not used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tfc.errors import ExecutionError, TfcError
from tfc.ir.core import Module


@dataclass
class Shrunk:
    """What one elastic re-ring did: the workers before and after, the nodes of the new
    ring, where the variables came from, and the time of each phase (seconds)."""

    workers_before: int
    workers_after: int
    nodes: list[str]
    source: str  # "worker:0" (read back from that survivor), or a checkpoint's path
    layout: str  # "even" (N-1 shards) or "shards" (the N shards kept, one survivor doing two)
    shards: int  # the batch's shards after (the workers of the replicated step)
    restored_step: int
    recompile_s: float
    ring_s: float  # new actors started, connected, their parts compiled
    read_s: float


def worker_index(task: str) -> int | None:
    """``I`` of ``/job:worker/task:I``; None for another task."""
    prefix = "/job:worker/task:"
    return int(task[len(prefix):]) if task.startswith(prefix) else None


def why_not_elastic(runtime: Any, dead: Sequence[str]) -> str | None:
    """Why the program of ``runtime`` cannot go on without the tasks ``dead`` (None: it
    can): not an allreduce module, a dead task that is no worker, or no worker left."""
    module = runtime.module
    if module.replicated_from is None:
        return "the program was not compiled with --strategy allreduce"
    if any(worker_index(t) is None for t in dead):
        return f"{', '.join(short(t) for t in dead)} is not an allreduce worker"
    if not [t for t in runtime.tasks if t not in set(dead)]:
        return "no worker is left"
    return None


def short(task: str) -> str:
    from tfc.distributed.recovery import short_name
    return short_name(task)


def uneven_batch(runtime: Any, workers: int, batch_sizes: Sequence[int] = ()) -> str | None:
    """A global batch that does not split into ``workers`` equal shards: one the
    training entries of ``runtime`` ran (``@train's global batch of 9``) or of
    ``batch_sizes`` (those the caller says will come); None when all do."""
    for size in batch_sizes:
        if size % workers:
            return f"a global batch of {size} rows"
    module = runtime.module
    for entry in _training_entries(module):
        exe = runtime._executables.get(entry)
        for shapes in sorted(getattr(exe, "_shapes_seen", ())):
            for shape in shapes:
                if len(shape) >= 1 and shape[0] % workers:
                    return f"@{entry}'s global batch of {shape[0]}"
    return None


def _training_entries(module: Module) -> list[str]:
    """The entries of ``module`` that the replicate pass replicated (their steps split
    the batch): those of its unreplicated source that apply an optimizer."""
    from tfc.ir.bytecode import module_from_bytes
    from tfc.passes.replicate import training_entries
    assert module.replicated_from is not None
    return training_entries(module_from_bytes(module.replicated_from))


def worker_roles(module: Module) -> list[str]:
    """The device of each worker of ``module``'s replicated step (its shard of the batch),
    by worker index: where its mirrored copy of the variables lives (worker ``k``'s own
    device, or a survivor's further CPU after an elastic recovery kept the shards)."""
    from tfc.passes.replicate import mirror_name, mirrored_variable
    first = next(n for n in module.variables if mirrored_variable(n) is None)
    roles: list[str] = []
    while mirror_name(first, len(roles)) in module.variables:
        device = module.variables[mirror_name(first, len(roles))].device
        assert device is not None
        roles.append(device)
    return roles


def replicated_for(module: Module, workers: int, moved: dict[int, str], backend: str
                   ) -> Module:
    """``module``'s unreplicated step (``replicated_from``) replicated for ``workers``
    allreduce workers, worker ``k`` of ``moved`` placed on device ``moved[k]`` instead of
    its own (a survivor's task: its CPU 0 in the ``even`` layout, a further CPU in the
    ``shards`` one), then lowered for ``backend`` as ``module`` was (its fp16 transfers
    where there is more than one device)."""
    from tfc.ir.bytecode import module_from_bytes
    from tfc.passes.replicate import (ClusterSpec, rename_devices, replicate_module,
                                      worker_device)
    from tfc.pipeline import Target, lower
    if module.replicated_from is None:
        raise TfcError("elastic training needs a module compiled with --strategy allreduce")
    source = module_from_bytes(module.replicated_from)
    replicate_module(source, ClusterSpec(0, workers, "allreduce"))
    rename_devices(source, {worker_device(k): device for k, device in moved.items()})
    placed = tuple(source.devices)
    target = Target(backend, placed, module.fp16_transfers and len(placed) > 1)
    return lower(source, target, passes="", place=False)


def shrink(program: Any, dead: Sequence[str], checkpoint_dir: Any = None,
           batch_sizes: Sequence[int] = ()) -> Shrunk:
    """Go on without the dead workers ``dead`` (full task names) of ``program``, a
    program on a Ray cluster compiled for allreduce (see the module docstring), in the
    ``even`` layout unless a global batch seen or among ``batch_sizes`` does not split
    into the workers left. The program's step is that of the last completed step, or
    the checkpoint's."""
    from tfc.distributed.recovery import short_name
    from tfc.distributed.runtime import ClusterRuntime
    from tfc.passes.replicate import worker_device
    from tfc.pipeline import lower_for_devices
    old = program._cluster
    gone = set(dead)
    survivors = [t for t in old.tasks if t not in gone]
    before = len(old.tasks)
    started = time.monotonic()
    if uneven_batch(old, len(survivors), batch_sizes) is None:
        # worker j of the new ring is the j-th survivor (its task keeps its name)
        layout, workers = "even", len(survivors)
        moved = {j: f"{t}/cpu:0" for j, t in enumerate(survivors)}
    else:  # each dead task's shards to the survivors, in turn, each on a further CPU
        roles = worker_roles(old.module)
        layout, workers = "shards", len(roles)
        cpus = {t: [int(d.rsplit(":", 1)[1]) for d in old.tasks[t]] for t in survivors}
        moved, reassigned = {}, 0
        for k, device in enumerate(roles):
            task = device.rsplit("/", 1)[0]
            if task in gone:
                host = survivors[reassigned % len(survivors)]
                reassigned += 1
                cpus[host].append(max(cpus[host]) + 1)
                moved[k] = f"{host}/cpu:{cpus[host][-1]}"
            else:
                moved[k] = device
    moved = {k: d for k, d in moved.items() if d != worker_device(k)}
    module = replicated_for(old.module, workers, moved, old.backend)
    module = lower_for_devices(module, old.backend)
    compiled = time.monotonic()
    source = survivors[0]
    step = program.step
    try:  # the survivor's copy, as the last completed step left it
        values = read_copy(old, source)
        where = short_name(source)
    except ExecutionError:
        if checkpoint_dir is None:
            raise
        from tfc.runtime.checkpoint import read_checkpoint
        ckpt = read_checkpoint(checkpoint_dir)
        values = {n: np.array(ckpt.values[n]) for n in unmirrored(old.module)}
        step, where = ckpt.step, str(ckpt.path)
    read = time.monotonic()
    mirrored = mirrored_values(module, values)
    nodes = [old.where[t]["node_id"] for t in survivors]  # (the new tasks, in order)
    runtime = ClusterRuntime(module, mirrored, step, old.backend, old.cluster.address,
                             old.timeout_s, nodes=nodes)
    swap_ring(program, old, runtime, mirrored, step)
    ringed = time.monotonic()
    return Shrunk(before, len(survivors), nodes, where, layout, workers, step,
                  compiled - started, ringed - read, read - compiled)


def unmirrored(module: Module) -> list[str]:
    """The variables of allreduce ``module`` as the user wrote them (worker 0's copies:
    every other worker's is ``VAR/replica_K``)."""
    from tfc.passes.replicate import mirrored_variable
    return [n for n in module.variables if mirrored_variable(n) is None]


def read_copy(runtime: Any, task: str) -> dict[str, np.ndarray]:
    """The variables of ``runtime``'s allreduce program as worker task ``task`` holds
    them (its own mirrored copy, settled: the last completed step's), by unmirrored
    name. Every worker's copy is bitwise the same (the ring gives each the same mean).
    The copy is the one of the first shard ``task`` computes in ``runtime``'s module,
    whichever ring position that is (after an elastic recovery ``worker:2`` may be the
    ring's worker 1, or also compute a dead worker's shard)."""
    from tfc.passes.replicate import mirror_name
    roles = worker_roles(runtime.module)
    k = next(k for k, device in enumerate(roles) if device.rsplit("/", 1)[0] == task)
    names = unmirrored(runtime.module)
    return dict(zip(names, (np.array(v) for v in
                            runtime.read([mirror_name(n, k) for n in names]))))


def mirrored_values(module: Module, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every variable of allreduce ``module`` (each worker's copy) from ``values`` (by
    unmirrored name)."""
    from tfc.passes.replicate import mirrored_variable
    return {n: values[mirrored_variable(n) or n] for n in module.variables}


def swap_ring(program: Any, old: Any, runtime: Any, values: dict[str, np.ndarray],
              step: int) -> None:
    """``program`` goes on on ``runtime`` (a new ring's, for its own module) with
    ``values`` (its module's variables) at ``step``; ``old``'s actors are closed (each
    was compiled for the old ring). The global batch sizes the old ring's steps ran are
    kept (``uneven_batch`` looks at them at the next recovery)."""
    for entry, exe in runtime._executables.items():
        before = old._executables.get(entry)
        if before is not None:
            exe._shapes_seen.update(before._shapes_seen)
    old.close()
    _replace(program, runtime.module, values, step, runtime)


def _replace(program: Any, module: Module, values: dict[str, np.ndarray], step: int,
             runtime: Any) -> None:
    """``program`` now runs ``module`` on ``runtime``, with ``values``, at ``step``: what
    its constructor would have set up for them (nothing it held of the old module stays)."""
    from tfc.runtime.logical import partitioned_variables
    program.module = module
    program._logical = partitioned_variables(module.variables)
    program._executables = {}
    program._runners = {}
    program._lowered = {}
    program._held = {}
    program._pending = {}
    program._recipes = {}
    program._variables.clear()  # (the same dict: ``variables``' views of it stay valid)
    for name, value in values.items():
        value.flags.writeable = False
        program._variables[name] = value
    program._step = step
    program._cluster = runtime
