"""The command line of parameter-server training with a trainer of its own (issue #18):
``tfc compile --strategy ps-async`` and ``tfc run`` of what it compiled.

    tfc compile model.py --cluster ps=2,workers=4 --strategy ps-async -o m.tfc
    tfc run m.tfc --cluster local --steps 400 --feed x=x.npy --feed y=y.npy --batch 32
        [--straggler lognormal:sigma=0.5,seed=1 | --straggler worker:2=50ms]
    tfc run m.tfc --cluster local --steps 400 ... --backup-workers 2

The artifact holds the training step uncut (``tfc.compiler.ps_training``). ``tfc run``
trains it on the cluster asynchronously (``tfc.distributed.AsyncPSTrainer``: each worker
reads, computes and sends on its own; the progress shows each update's staleness), or,
with ``--backup-workers B``, synchronously on W + B workers of which each step takes the
first W gradients (``tfc.distributed.BackupTrainer``; B = 0 is plain synchronous
training; the progress shows the gradients dropped). Step k's batch is the k-th
``--batch`` mini-batch of the feeds (each worker of a synchronous step its own), or the
whole feeds every step. ``--straggler`` delays workers by a seeded distribution
(``tfc.distributed.StragglerSpec``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tfc.api.partitioned import DEFAULT_MIN_SLICE_SIZE
from tfc.errors import TfcError

# what a PS training run does not do (yet): the flags of single-program runs it refuses
_UNSUPPORTED = (("--checkpoint-dir", "checkpoint_dir"), ("--resume", "resume"),
                ("--logdir", "logdir"))


@dataclass
class PSRun:
    """What a PS training run ends with: the last step's fetches, its summary lines and
    every variable's value on the PS tasks."""

    fetches: dict[str, np.ndarray]
    lines: list[str]
    variables: dict[str, np.ndarray]


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """``tfc run``'s flags for PS training (the END of its parser: ``plan13``)."""
    p.add_argument("--backup-workers", type=int, metavar="B",
                   help="with an artifact compiled with --strategy ps-async: train "
                        "synchronously on W+B workers, each step taking the first W "
                        "gradients and dropping the rest (0: plain synchronous)")
    p.add_argument("--straggler", metavar="SPEC",
                   help="with a ps-async artifact: delay workers by a seeded distribution, "
                        "lognormal:sigma=0.5[,median=10ms][,seed=1] or worker:2=50ms")


def add_compile_arguments(p: argparse.ArgumentParser) -> None:
    """``tfc compile``'s flag of the automatic row split over PS tasks."""
    p.add_argument("--min-slice-size", type=slice_size, default=None, metavar="SIZE",
                   help="with --cluster ps=P (P >= 2): split a model's large trainable "
                        "variables by rows over the PS tasks in blocks of at least SIZE "
                        "(TF's min_slice_size; default 256KiB; e.g. 1MiB, 65536, off)")


def slice_size(text: str) -> int:
    """``--min-slice-size``: bytes (``65536``, ``256KiB``, ``1MiB``, ``1GiB``), or 0 for
    ``off`` (``min_slice_size`` says what a compilation takes)."""
    t = text.strip()
    if t.lower() in ("off", "none"):
        return 0
    units = {"": 1, "b": 1, "kib": 1 << 10, "kb": 1000, "mib": 1 << 20, "mb": 10 ** 6,
             "gib": 1 << 30, "gb": 10 ** 9}
    number = t.rstrip("KkMmGgIiBb")
    unit = t[len(number):].strip().lower()
    try:
        value = float(number) * units[unit]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 256KiB, 1MiB, "
                                         f"65536, off)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a slice needs at least one byte (or "
                                         f"off)")
    return int(value)


def min_slice_size(args: argparse.Namespace, spec: Any) -> int | None:
    """The automatic split's ``min_slice_size`` of ``tfc compile``'s flags: the default
    unless given, None for ``off``; an error without PS tasks to split over, or for a
    compiled artifact (it is not split: its stored values keep their variables)."""
    given = args.min_slice_size
    if given is not None and (spec is None or spec.strategy == "allreduce"):
        raise TfcError("--min-slice-size splits variables over PS tasks: give --cluster "
                       "ps=P,workers=W (P >= 2) with --strategy ps-sync or ps-async")
    if given is not None and Path(args.model).suffix == ".tfc":
        raise TfcError(f"--min-slice-size splits a model's variables as it is loaded: give "
                       f"the model's source (.py, .tfm or .tfir), not the compiled "
                       f"{args.model}, whose variables and values are stored as they are")
    if given is None:
        return DEFAULT_MIN_SLICE_SIZE
    return given or None


def split_lines(module: Any, min_slice_size: int | None) -> list[str]:
    """The compile report's lines on variables split by rows (a ``partitioner``, or the
    automatic split): each one's type and its blocks' tasks."""
    from tfc.passes.replicate import task_label
    from tfc.runtime.logical import partitioned_variables
    split = partitioned_variables(module.variables)
    if not split:
        return []
    rule = ("off" if min_slice_size is None else
            f"blocks of at least {min_slice_size:,} bytes (--min-slice-size)")
    out = [f"variables split by rows (a partitioner, or automatically: {rule}):"]
    for name, var in split.items():
        where = ", ".join(f"{s} on {task_label(module.variables[s].device or '') or '-'}"
                          for s in var.shards)
        out.append(f"  {name} {var.type} -> {where}")
    return out


def compile_command(args: argparse.Namespace, spec: Any) -> int | None:
    """``tfc compile`` for ``--strategy ps-async`` (None for any other strategy)."""
    if spec is None or spec.strategy != "ps-async":
        return None
    from tfc.compiler.ps_training import compile_ps_training
    from tfc.pipeline import DEFAULT_PIPELINE
    for flag, given in (("--devices", args.devices), ("--profile-runs", args.profile_runs),
                        ("--fp16-transfers", args.fp16_transfers)):
        if given:
            raise TfcError(f"{flag} does not apply to --strategy ps-async (its tasks exchange "
                           f"whole gradients and variables, each on its own)")
    out = args.output or str(Path(args.model).with_suffix(".tfc"))
    if Path(out).resolve() == Path(args.model).resolve():
        raise TfcError(f"the output {out} would overwrite the input; choose another -o")
    report = compile_ps_training(
        args.model, out, spec, pipeline=args.passes if args.passes is not None
        else DEFAULT_PIPELINE, backend=args.backend, print_after=args.print_after,
        print_after_all=args.print_after_all, stream=sys.stderr,
        min_slice_size=min_slice_size(args, spec))
    if not args.quiet:
        print(f"compiled {args.model} -> {out} ({report.seconds * 1e3:.0f} ms)")
        print("\n".join(report.lines()).replace("OUT.tfc", out))
        for line in split_lines(report.module, min_slice_size(args, spec)):
            print(line)
    return 0


def run_command(args: argparse.Namespace) -> int | None:
    """``tfc run`` of an artifact of ``compile_ps_training`` (None for any other: then
    ``--backup-workers`` and ``--straggler`` are errors)."""
    from tfc.compiler.ps_training import ps_training_spec, unplaced
    from tfc.runtime.artifact import read_artifact
    spec = None
    if _may_hold_a_ps_step(args.artifact):
        module, values, manifest = read_artifact(args.artifact)
        spec = ps_training_spec(module)
    if spec is None:
        for flag, given in (("--backup-workers", args.backup_workers is not None),
                            ("--straggler", args.straggler is not None)):
            if given:
                raise TfcError(f"{flag} trains a parameter-server step on workers of its "
                               f"own, but {args.artifact} holds no such step: compile the "
                               f"model with --cluster ps=P,workers=W --strategy ps-async")
        return None
    return _train(args, spec, unplaced(module), values, manifest)


def _may_hold_a_ps_step(path: str) -> bool:
    """Whether the manifest of ``path`` says what ``ps_training_spec`` looks for (task
    devices, not lowered, no partitions): cheap, before the module is read. False for
    anything unreadable (loading it then says what is wrong)."""
    from tfc.runtime.artifact import _read_manifest, open_zip
    try:
        with open_zip(path) as zf:
            manifest = _read_manifest(zf, path)
    except (TfcError, OSError):
        return False
    devices = manifest.get("devices")
    return (isinstance(devices, list) and any(str(d).startswith("/job:ps/") for d in devices)
            and manifest.get("lowered_for") is None and not manifest.get("partitions"))


def _train(args: argparse.Namespace, spec: Any, module: Any, values: dict[str, np.ndarray],
           manifest: dict[str, Any]) -> int:
    from tfc.cli import _mini_batches, parse_feeds, report_fetches
    from tfc.distributed.backup import StragglerSpec
    from tfc.passes.replicate import training_entries
    for flag, name in _UNSUPPORTED:
        if getattr(args, name, None):
            raise TfcError(f"{flag} is not supported for a ps-async artifact yet (its "
                           f"variables live on the PS tasks of the run)")
    if args.cluster is None or args.cluster.strip() == "inprocess":
        raise TfcError(f"{args.artifact} trains on a Ray cluster ({spec.ps} PS tasks, "
                       f"{spec.workers} workers, each a process): give --cluster local, auto "
                       f"or HOST:PORT")
    entry = training_entries(module)[0]
    if args.entry is not None and args.entry != entry:
        raise TfcError(f"{args.artifact} trains entry '{entry}' on the cluster; "
                       f"--entry {args.entry} is not it")
    if args.backup_workers is not None and args.backup_workers < 0:
        raise TfcError(f"--backup-workers must be >= 0, not {args.backup_workers}")
    straggler = StragglerSpec.parse(args.straggler) if args.straggler is not None else None
    feeds = parse_feeds(args.feed)
    batches = _mini_batches(args, feeds)
    steps = args.steps or 1
    if batches is not None and args.steps is None:
        steps = batches.steps_to(args.epochs or 1)
    graph = module.graphs[entry]
    missing = [n for n in graph.arg_names if n not in feeds]
    if missing:
        raise TfcError(f"entry '{entry}' needs feed(s) {', '.join(missing)} (--feed NAME=FILE)")

    def next_batch(*_: int) -> dict[str, Any]:
        return dict(feeds) if batches is None else batches.next_feeds()

    variables = _initial_variables(module, values, manifest)
    timeout = args.cluster_timeout if args.cluster_timeout is not None else 120.0
    backend = args.backend or manifest.get("backend") or "llvm"
    if args.backup_workers is None:
        run = _train_async(module, spec, args.cluster, backend, variables, timeout,
                           next_batch, steps, straggler)
    else:
        run = _train_backup(module, spec, args.cluster, backend, variables, timeout,
                            next_batch, steps, straggler, args.backup_workers)
    for line in run.lines:
        print(line, file=sys.stderr)
    report_fetches(args.out, run.fetches)
    if args.save:
        _save(args, module, spec, run.variables, manifest, steps)
    return 0


def _initial_variables(module: Any, values: dict[str, np.ndarray], manifest: dict[str, Any]
                       ) -> dict[str, np.ndarray]:
    """Every variable's value: the stored ones, and those the artifact keeps as
    initializer ops computed."""
    from tfc.runtime.initializers import recipes
    from tfc.runtime.program import Program
    program = Program(module, values, backend="reference", step=int(manifest["step"]),
                      initializers=recipes(module))
    return {n: np.asarray(v) for n, v in program.variables.items()
            if n in module.variables}


def _progress(every: int, line: Callable[[], str]) -> Callable[[int], None]:
    """Print ``line()`` to stderr after every ``every``-th step."""
    done = [0]

    def report(_: int) -> None:
        done[0] += 1
        if done[0] % every == 0:
            print(line(), file=sys.stderr, flush=True)
    return report


def _train_async(module: Any, spec: Any, cluster: str, backend: str,
                 variables: dict[str, np.ndarray], timeout: float,
                 next_batch: Callable[..., dict[str, Any]], steps: int, straggler: Any
                 ) -> PSRun:
    from tfc.distributed.async_ps import AsyncPSTrainer, AsyncStats, progress_line
    every = max(1, steps // 10)
    with AsyncPSTrainer(module, spec, cluster, backend=backend, variables=variables,
                        timeout_s=timeout) as trainer:
        current: list[AsyncStats] = []
        report = _progress(every, lambda: progress_line(current[0], steps))

        def progress(k: int, stats: AsyncStats) -> None:
            current[:] = [stats]
            report(k)
        stats = trainer.train(next_batch, steps, progress, straggler)
        final = trainer.variables()
    histogram = ", ".join(f"{s}: {n}" for s, n in stats.histogram().items())
    per_worker = ", ".join(f"{w.split('/')[-2].replace('task:', 'worker:')} {n}"
                           for w, n in stats.worker_steps.items())
    lines = [f"trained {stats.steps} steps asynchronously on {spec.workers} workers and "
             f"{spec.ps} PS tasks in {stats.seconds:.2f} s ({stats.steps_per_s:.1f} steps/s)",
             stats.staleness_line(), f"staleness histogram (updates): {histogram}",
             f"steps per worker: {per_worker}"]
    return PSRun(dict(stats.fetches[-1]) if stats.fetches else {}, lines, final)


def _train_backup(module: Any, spec: Any, cluster: str, backend: str,
                  variables: dict[str, np.ndarray], timeout: float,
                  next_batch: Callable[..., dict[str, Any]], steps: int, straggler: Any,
                  backups: int) -> PSRun:
    from tfc.distributed.backup import BackupStats, BackupTrainer
    from tfc.passes.replicate import ClusterSpec
    sync = ClusterSpec(spec.ps, spec.workers, "ps-sync")
    every = max(1, steps // 10)
    with BackupTrainer(module, sync, cluster, backup_workers=backups, backend=backend,
                       variables=variables, timeout_s=timeout) as trainer:
        current: list[BackupStats] = []
        report = _progress(every, lambda: _backup_line(current[0], steps))

        def progress(k: int, stats: BackupStats) -> None:
            current[:] = [stats]
            report(k)
        stats = trainer.train(next_batch, steps, straggler, progress)
        final = trainer.variables()
    last = max(stats.fetches) if stats.fetches else None
    fetches = _mean_fetches(stats.fetches[last]) if last is not None else {}
    lines = [f"trained {len(stats.step_seconds)} synchronous steps of {spec.workers} "
             f"gradients on {spec.workers} + {backups} workers and {spec.ps} PS tasks: "
             f"step median {stats.median_s() * 1e3:.1f} ms, p90 {stats.p90_s() * 1e3:.1f} ms",
             f"gradients: {stats.taken} taken, {stats.late} dropped (late)"]
    return PSRun(fetches, lines, final)


def _backup_line(stats: Any, steps: int) -> str:
    return (f"step {len(stats.step_seconds)}/{steps}  median {stats.median_s() * 1e3:.1f} ms"
            f"  p90 {stats.p90_s() * 1e3:.1f} ms  dropped {stats.late} gradients")


def _mean_fetches(per_worker: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """A step's fetches from the workers whose gradients it took: a float scalar (the
    loss) as their mean, anything else as the first worker's."""
    out: dict[str, np.ndarray] = {}
    for name, value in per_worker[0].items():
        v = np.asarray(value)
        out[name] = (np.mean([np.asarray(f[name]) for f in per_worker], axis=0).astype(v.dtype)
                     if v.ndim == 0 and v.dtype.kind == "f" else v)
    return out


def _save(args: argparse.Namespace, module: Any, spec: Any, variables: dict[str, np.ndarray],
          manifest: dict[str, Any], steps: int) -> None:
    """``--save``: the trained variables back into the artifact (still a ps-async one)."""
    from tfc.runtime.artifact import save_artifact
    module.devices = list(spec.devices)
    step = int(manifest["step"]) + steps
    save_artifact(args.artifact, module, variables, step=step,
                  backend=manifest.get("backend") or "llvm", native={})
    print(f"updated {args.artifact} (step {step})", file=sys.stderr)
