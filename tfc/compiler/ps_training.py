"""``tfc compile --cluster ps=P,workers=W --strategy ps-async``: the training step stored
uncut, for the parameter-server trainers to cut and run.

An asynchronous step is no placed module (``tfc.passes.replicate``): each PS applies each
worker's gradients on arrival, so ``tfc.distributed.AsyncPSTrainer`` cuts the step in two
programs when it starts (``tfc.passes.async_split``: the workers' gradients, each PS
task's update) and its tasks compile those. What the artifact holds is therefore the
training module after the optimization passes, *not lowered* (it keeps the optimizer's
gradient markers that the cut needs), with

- each variable pinned to the PS task the cut puts it on (``/job:ps/task:J``), so that
  the run places them as the compile report says, and
- the cluster's devices (the PS tasks', then the workers'), which is how ``tfc run``
  knows it for a PS training step (``ps_training_spec``) and how many workers to start.

The cut is made once here too, so that a model it cannot train (no optimizer, several
training entries, a fetch that does not depend on the batch) fails at compile time.
``tfc run`` trains it asynchronously, or synchronously with backup workers
(``--backup-workers B``: ``tfc.distributed.BackupTrainer``, B = 0 plain synchronous).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Sequence, TextIO

from tfc.api.partitioned import DEFAULT_MIN_SLICE_SIZE
from tfc.compiler.driver import (automatic_split, default_backend_name, initial_state,
                                 load_source)
from tfc.errors import TfcError
from tfc.ir.core import Module
from tfc.passes.async_split import split_async
from tfc.passes.manager import parse_pipeline
from tfc.passes.replicate import ClusterSpec, task_label, training_entries
from tfc.pipeline import DEFAULT_PIPELINE, Pipeline, run_pipeline


@dataclass
class PSTrainingReport:
    """What ``compile_ps_training`` stored: the cluster, the training entry, each PS
    task's variables and their bytes, the worker's gradients, and the time it took."""

    spec: ClusterSpec
    entry: str
    variables: dict[str, list[str]] = field(default_factory=dict)  # PS task -> variables
    variable_bytes: dict[str, int] = field(default_factory=dict)   # PS task -> bytes
    gradients: int = 0
    seconds: float = 0.0
    module: Module | None = None  # what was stored

    def lines(self) -> list[str]:
        from tfc.units import format_bytes
        spec = self.spec
        out = [f"cluster: {spec.ps} ps, {spec.workers} workers, strategy ps-async "
               f"(variables by {spec.ps_placement} placement); @{self.entry} stored uncut: "
               f"tfc run cuts it into the workers' gradients and each PS task's update"]
        for task, names in self.variables.items():
            shown = ", ".join(names[:6]) + (f" ... {len(names) - 6} more" if len(names) > 6
                                            else "")
            out.append(f"  {task}: {len(names)} variables, "
                       f"{format_bytes(self.variable_bytes.get(task, 0))} ({shown})")
        out.append(f"  each worker: reads them, computes {self.gradients} gradients, sends "
                   f"each PS task its own")
        out.append("  run: tfc run OUT.tfc --cluster local --steps N [--batch B] "
                   "[--backup-workers B for synchronous steps] [--straggler SPEC]")
        return out


def compile_ps_training(path: str | os.PathLike[str], out: str | os.PathLike[str],
                        spec: ClusterSpec, *, pipeline: Pipeline = DEFAULT_PIPELINE,
                        backend: str | None = None, verify: bool = True,
                        print_after: str | Sequence[str] | None = None,
                        print_after_all: bool = False, stream: TextIO | None = None,
                        min_slice_size: int | None = DEFAULT_MIN_SLICE_SIZE
                        ) -> PSTrainingReport:
    """Write the artifact ``out`` of the model at ``path`` for ``spec`` (``ps-async``; see
    the module docstring; ``min_slice_size``: ``compile_with_report``'s automatic row
    split); what it stored."""
    from tfc.runtime.artifact import save_artifact
    from tfc.runtime.initializers import recipes
    from tfc.runtime.program import Program
    if spec.strategy != "ps-async":
        raise TfcError(f"internal: compile_ps_training compiles ps-async, not {spec.strategy}")
    parse_pipeline(pipeline)
    started = time.perf_counter()
    module = load_source(path, automatic_split(spec, min_slice_size))
    if module.partitions or module.lowered_for is not None:
        raise TfcError(f"--strategy ps-async cuts the training step as the optimizer marked "
                       f"it: give the model's source (.py, .tfm or .tfir), not the compiled "
                       f"{path}, whose marks are gone")
    module = run_pipeline(module, pipeline, verify=verify, print_after=print_after,
                          print_after_all=print_after_all, stream=stream)
    split = split_async(module, spec)  # what the run will cut: its errors, here and now
    values, step = initial_state(path)
    # the initial values (``__init__``'s; recipe ops stay recipes) of the module as it is
    program = Program(module, values, backend="reference", step=step, copy=False,
                      initializers=recipes(module))
    for name, device in split.var_device.items():
        module.variables[name].device = device
    module.devices = list(spec.devices)
    save_artifact(out, module, program._variables, step=step,
                  backend=backend or default_backend_name(), native={},
                  initializers=program._recipes)
    report = PSTrainingReport(spec, split.entry, gradients=len(split.gradient.graphs[
        split.entry].results) - len(split.fetch_names))
    for name, device in split.var_device.items():
        task = task_label(device) or device
        report.variables.setdefault(task, []).append(name)
        report.variable_bytes[task] = (report.variable_bytes.get(task, 0)
                                       + module.variables[name].type.nbytes(1))
    report.seconds = time.perf_counter() - started
    report.module = module
    return report


def ps_training_spec(module: Module) -> ClusterSpec | None:
    """The cluster ``module`` was stored for by ``compile_ps_training`` (its devices are
    the PS tasks' then the workers', it is not lowered and it has a training entry);
    None for any other module."""
    if module.partitions or module.lowered_for is not None or not module.devices:
        return None
    labels = [task_label(d) for d in module.devices]
    if any(label is None for label in labels):
        return None
    ps = sum(1 for label in labels if label is not None and label.startswith("ps:"))
    workers = len(labels) - ps
    if ps == 0 or workers == 0 or module.devices != ClusterSpec(ps, workers,
                                                                "ps-async").devices:
        return None
    if not training_entries(module):
        return None
    return ClusterSpec(ps, workers, "ps-async")


def unplaced(module: Module) -> Module:
    """``module`` as the trainers take it: a single-device module (its variables keep
    their PS pins)."""
    module.devices = []
    return module


__all__ = ["PSTrainingReport", "compile_ps_training", "ps_training_spec", "unplaced"]

