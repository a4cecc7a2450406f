"""The compile driver: model file -> IR module -> lowered module -> artifact.

Every graph of the module, the ``__init__`` graph included, is lowered by the same
pipeline (``tfc.pipeline.lower``: the optimization passes, then the target's), so the
initial values an artifact stores are computed by optimized code just as the entries
are, and the artifact stores the final IR the backend compiled. ``compile_with_report``
also returns what the ``tfc compile`` report shows: op counts before and after, and the
time of each stage and of every pass. With ``profile_runs`` it places by measurement
too (``tfc.runtime.pgo``: run the cost model's placement with kernel timing, place
again with the measured costs, keep the faster by measurement).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TextIO

from tfc.api.partitioned import DEFAULT_MIN_SLICE_SIZE
from tfc.backends.base import default_backend_name
from tfc.errors import TfcError
from tfc.ir.core import Module
from tfc.pipeline import DEFAULT_PIPELINE, Target, lower, target_pipeline
from tfc.passes.manager import parse_pipeline
from tfc.passes.replicate import ClusterReport, ClusterSpec, cluster_report

if TYPE_CHECKING:
    from tfc.runtime.pgo import ProfileReport
    from tfc.runtime.program import Program

Pipeline = str | Sequence[str]


@dataclass
class CompileReport:
    """What one compilation did: source, op counts, and timings in seconds."""

    source: str
    pipeline: list[str]
    ops_before: int = 0
    ops_after: int = 0
    load_seconds: float = 0.0
    pass_seconds: list[tuple[str, float]] = field(default_factory=list)
    profile: ProfileReport | None = None  # with profile_runs
    cluster: ClusterReport | None = None  # with a cluster
    min_slice_size: int | None = None  # the automatic row split's, with PS tasks


def count_ops(module: Module) -> int:
    """Ops in every graph of ``module``, regions included."""
    return sum(1 for g in module.graphs.values() for _ in g.walk())


def load_source(path: str | os.PathLike[str], partitioner: Any = None) -> Module:
    """The module in ``path``: a model (``.py``, ``.tfm``, ``.tfir``) or a compiled ``.tfc``
    artifact (``partitioner``: ``load_model``'s)."""
    if Path(path).suffix == ".tfc":
        from tfc.runtime.artifact import read_module
        return read_module(path)
    from tfc.compiler.frontend import load_model
    return load_model(path, partitioner)


def automatic_split(cluster: ClusterSpec | None, min_slice_size: int | None) -> Any:
    """The partitioner of ``tfc compile --cluster``'s automatic row split
    (``tfc.api.partitioned.automatic_partitioner``: variables of at least two slices of
    ``min_slice_size`` bytes over the PS tasks); None without PS tasks or with
    ``min_slice_size`` None (``--min-slice-size off``)."""
    if cluster is None or cluster.strategy == "allreduce" or cluster.ps < 2 \
            or min_slice_size is None:
        return None
    from tfc.api.partitioned import automatic_partitioner
    return automatic_partitioner(cluster.ps, min_slice_size)


def initial_state(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, int]:
    """Variable values and step a compilation of ``path`` starts from.

    A ``.tfc`` artifact keeps its own (recompiling an artifact must not reset training);
    a model gets ``(None, 0)``: its ``__init__`` graph computes the initial values.
    """
    if Path(path).suffix != ".tfc":
        return None, 0
    from tfc.runtime.artifact import read_artifact
    _, values, manifest = read_artifact(path)
    return values, int(manifest["step"])


def make_program(module: Module, path: str | os.PathLike[str], backend: str | None = None
                 ) -> "Program":
    """The program a compilation of ``path`` produced: ``module`` with its initial state."""
    from tfc.runtime.initializers import recipes
    from tfc.runtime.program import Program
    values, step = initial_state(path)
    if values is not None:
        values = {k: v for k, v in values.items() if k in module.variables}
    # an artifact's variables stored as initializer ops stay so (its __init__ assigns them);
    # a module compiled for a cluster's tasks is not run here: threads are enough
    return Program(module, values, backend=backend, step=step, copy=False,
                   initializers=recipes(module), cluster="inprocess")


def compile_target(devices: str | Sequence[str] | None = None, fp16_transfers: bool = False,
                   backend: str | None = None, cluster: ClusterSpec | None = None) -> Target:
    """The target of a compilation: ``backend`` (default: ``default_backend_name()``) on
    ``devices`` (``"cpu:0,cpu:1"``), f32 transfers as f16 when ``fp16_transfers``. GPUs
    run on the CUDA backend: a target of GPUs alone is a ``cuda`` one
    (``tfc.devices.program_backend``); with CPUs too, ``backend`` runs the CPU part.
    With ``cluster`` the devices are its tasks' (``tfc.passes.replicate``), and f16
    transfers compress what crosses tasks."""
    from tfc.devices import parse_devices, program_backend
    if cluster is not None:
        if devices is not None:
            raise TfcError("--devices and --cluster both say where the model runs; give one "
                           "(a cluster's devices are its tasks')")
        if fp16_transfers and len(cluster.devices) < 2:
            raise TfcError(f"--fp16-transfers compresses transfers between tasks, but "
                           f"cluster {cluster} has one task")
        return Target(backend or default_backend_name(), tuple(cluster.devices),
                      fp16_transfers, cluster)
    parsed = tuple(parse_devices(devices)) if devices is not None else ()
    if fp16_transfers and len(parsed) < 2:
        raise TfcError("--fp16-transfers compresses transfers between devices; "
                       "give two or more with --devices")
    return Target(program_backend(parsed, backend or default_backend_name()), parsed,
                  fp16_transfers)


def compile_with_report(path: str | os.PathLike[str], pipeline: Pipeline = DEFAULT_PIPELINE, *,
                        verify: bool = True, print_after: str | Sequence[str] | None = None,
                        print_after_all: bool = False, stream: TextIO | None = None,
                        devices: str | Sequence[str] | None = None,
                        fp16_transfers: bool = False,
                        backend: str | None = None, profile_runs: int | None = None,
                        profile_batch: int | None = None,
                        progress: Callable[[str], None] | None = None,
                        cluster: ClusterSpec | None = None,
                        min_slice_size: int | None = DEFAULT_MIN_SLICE_SIZE
                        ) -> tuple[Module, CompileReport]:
    """Load the model at ``path`` and lower it for its target after the optimization
    passes ``pipeline``; the lowered module and a report.

    The target is ``backend`` (default: ``$TFC_BACKEND``, else llvm) on ``devices``
    (``"cpu:0,cpu:1"``: placement runs and the runtime executes one partition per
    device); ``fp16_transfers`` sends f32 tensors between devices as f16.
    ``profile_runs`` (several devices, a backend that times kernels) places by
    measurement as well, with synthetic feeds at ``profile_batch`` (default 64): see
    ``tfc.runtime.pgo``; ``report.profile`` says what it measured and kept, and
    ``progress`` hears what it is doing. ``cluster`` (``ClusterSpec(ps=2, workers=4)``)
    replicates the training steps for its tasks (``tfc.passes.replicate``);
    ``report.cluster`` says where the variables went and what crosses tasks per step.
    With PS tasks, a model's trainable variables of two slices of ``min_slice_size``
    bytes or more are split by rows over them (``automatic_split``; None: never)."""
    parse_pipeline(pipeline)  # a bad pipeline fails before the model is loaded
    target = compile_target(devices, fp16_transfers, backend, cluster)
    if cluster is not None and profile_runs is not None:
        raise TfcError("--profile-runs places by measurement on --devices; a --cluster "
                       "compilation places by replication")
    if profile_batch is not None and profile_runs is None:
        raise TfcError("--profile-batch sets the batch of profile runs; give --profile-runs N")
    if profile_runs is not None:
        from tfc.runtime.pgo import DEFAULT_BATCH, check_profile_target
        profile_batch = DEFAULT_BATCH if profile_batch is None else profile_batch
        check_profile_target(target, profile_runs, profile_batch)  # before any work
        if Path(path).suffix == ".tfc":
            raise TfcError(f"--profile-runs places the model again: give the model's source "
                           f"(.py, .tfm or .tfir), not the compiled {path}, whose ops keep "
                           f"their devices")
    start = time.perf_counter()
    module = load_source(path, automatic_split(cluster, min_slice_size))
    report = CompileReport(str(path), [str(p) for p in target_pipeline(target, pipeline)])
    report.load_seconds = time.perf_counter() - start
    report.ops_before = count_ops(module)
    source = None
    if profile_runs is not None:
        from tfc.runtime.pgo import fresh_copy
        source = fresh_copy(module)
    module = lower(module, target, passes=pipeline, verify=verify, print_after=print_after,
                   print_after_all=print_after_all, stream=stream,
                   timings=report.pass_seconds)
    if source is not None:
        from tfc.runtime.pgo import profile_guided_placement
        assert profile_runs is not None and profile_batch is not None
        module, report.profile = profile_guided_placement(
            source, module, target,
            lambda m: lower(m, target, passes=pipeline, verify=verify),
            lambda m: make_program(m, path, backend=target.backend), profile_runs,
            profile_batch, progress)
    report.ops_after = count_ops(module)
    if cluster is not None:
        report.cluster = cluster_report(module, cluster)
        report.min_slice_size = min_slice_size
    return module, report


def compile_model(path: str | os.PathLike[str], pipeline: Pipeline = DEFAULT_PIPELINE, *,
                  verify: bool = True, print_after: str | Sequence[str] | None = None,
                  print_after_all: bool = False, stream: TextIO | None = None,
                  backend: str | None = None, cluster: ClusterSpec | None = None,
                  fp16_transfers: bool = False) -> Module:
    """The module of the model at ``path`` lowered for ``backend`` after ``pipeline``
    (verified after each pass), replicated for ``cluster`` when given."""
    module, _ = compile_with_report(path, pipeline, verify=verify, print_after=print_after,
                                    print_after_all=print_after_all, stream=stream,
                                    backend=backend, cluster=cluster,
                                    fp16_transfers=fp16_transfers)
    return module


def compile_to_artifact(path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                        pipeline: Pipeline = DEFAULT_PIPELINE, *, verify: bool = True,
                        print_after: str | Sequence[str] | None = None,
                        print_after_all: bool = False, stream: TextIO | None = None,
                        backend: str | None = None, cluster: ClusterSpec | None = None,
                        fp16_transfers: bool = False) -> "Program":
    """Compile the model at ``path`` for ``backend``, run its ``__init__`` graph, write
    ``out_path``.

    Returns the ``Program`` that was saved (its variables hold the initial values, or
    the artifact's own values when ``path`` is a ``.tfc`` file).
    """
    module = compile_model(path, pipeline, verify=verify, print_after=print_after,
                           print_after_all=print_after_all, stream=stream, backend=backend,
                           cluster=cluster, fp16_transfers=fp16_transfers)
    program = make_program(module, path, backend)
    program.save(out_path)
    return program
