"""The ``tfc`` command: compile models, inspect and transform IR, run artifacts.

    tfc compile model.py|model.tfm -o model.tfc [--passes canonicalize,cse,dce]
    tfc run model.tfc --entry predict --feed x=x.npy [--out out.npz] [--steps N] [--save]
        [--force] [--recompile | --no-recompile]
    tfc run model.tfc --entry train_step --steps N --checkpoint-dir DIR [--checkpoint-every K]
        [--resume] [--logdir runs/x]
    tfc ir model.py [--after cse | --passes cse,dce | --raw] [--print-after fusion] [--full]
    tfc opt in.tfir --passes cse,dce [-o out.tfir]
    tfc compile model.py --devices cpu:0,cpu:1 [--fp16-transfers] [--profile-runs N]
    tfc ir model.tfc --device cpu:1
    tfc compile model.py --cluster ps=2,workers=4 [--strategy ps-sync|allreduce]
        [--ps-placement greedy|round-robin] [--fp16-transfers] -o model.tfc
    tfc compile model.py --cluster ps=2,workers=4 --strategy ps-async -o m.tfc
    tfc run m.tfc --cluster local --steps N [--backup-workers B] [--straggler SPEC]
    tfc ir model.tfc --task worker:1
    tfc calibrate | tfc bench model.tfc --trace trace.json | tfc viz model.tfc -o graph.html
    tfc devices                 # this machine's CPUs and GPUs; can CUDA compile, run?

Errors the user can fix (``TfcError``, missing files, running out of memory, Ctrl-C)
print one ``error: ...`` line and exit 1; usage errors exit 2. Anything else is a bug in tfc: it prints
``internal error: ...`` and exits 70, or shows the traceback when ``TFC_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import traceback
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tfc.errors import TfcError
from tfc.units import format_ms

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE


# ---- output helpers ------------------------------------------------------------------

def _console(stderr: bool = False) -> Any:
    try:
        from rich.console import Console
    except ImportError:
        return None
    stream = sys.stderr if stderr else sys.stdout
    # a terminal folds a table to its width; a pipe or a file gets whole rows (rich would
    # fold them to 80 columns, splitting device names like /job:ps/task:0/cpu:0)
    width = None if stream.isatty() else 1000
    return Console(file=stream, highlight=False, soft_wrap=True, width=width)


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a small table: with rich when it is installed, as plain columns otherwise."""
    console = _console()
    if console is not None:
        from rich.table import Table
        table = Table(title=title, title_justify="left", box=None, pad_edge=False,
                      header_style="bold")
        for c in columns:
            table.add_column(c, overflow="fold")
        for r in rows:
            table.add_row(*r)
        console.print(table)
        return
    widths = [max(len(str(x)) for x in col) for col in zip(columns, *rows)]
    print(title)
    for r in (columns, *rows):
        print("  " + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip())


def _ms(seconds: float) -> str:
    return format_ms(seconds, digits=1)


def check_output_path(path: str | None, flag: str) -> None:
    """Fail at once, before any work, when ``path`` (the value of ``flag``) cannot be
    written: a benchmark or a training run must not end in "no such directory"."""
    if path is None:
        return
    p = Path(path)
    if not path or p.is_dir():
        raise TfcError(f"{flag} {path} is a directory, not a file name" if path else
                       f"{flag} needs a file name")
    parent = p.parent
    if not parent.exists():
        raise TfcError(f"{flag} {path}: no such directory: {parent}")
    if not parent.is_dir():
        raise TfcError(f"{flag} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TfcError(f"{flag} {path}: cannot write in directory {parent}")


def load_artifact_arg(path: str, backend: str | None, **options: Any) -> Any:
    """The program of the ``ARTIFACT`` argument (``options``: ``tfc.runtime.load``'s);
    a model file given instead is told to be compiled first rather than called a broken
    zip."""
    from tfc.runtime import load
    if Path(path).suffix in (".py", ".tfm", ".tfir") and Path(path).is_file():
        out = Path(path).with_suffix(".tfc")
        raise TfcError(f"{path} is a model, not a compiled artifact: compile it first "
                       f"(tfc compile {path} -o {out})")
    return load(path, backend=backend, **options)


def check_at_least(flag: str, value: int | None, minimum: int) -> None:
    """A numeric option's value, checked before any work (``--batch -5``)."""
    if value is not None and value < minimum:
        raise TfcError(f"{flag} must be at least {minimum}, not {value}")


def _write_text(path: str, text: str) -> None:
    from tfc.atomic import atomic_write
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def _print_module(module: Any, out: str | None, footer: str = "",
                  elide_above: int | None = None) -> None:
    from tfc.ir.printer import print_module
    text = print_module(module, elide_above=elide_above)
    if not text.endswith("\n"):
        text += "\n"
    text += footer
    if out:
        _write_text(out, text)
    else:
        sys.stdout.write(text)


# ---- clusters ------------------------------------------------------------------------

def _cluster_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", metavar="ps=P,workers=W",
                   help="compile for a cluster: the training steps replicated on W worker "
                        "tasks, the variables on P parameter-server tasks (ps-sync) or "
                        "mirrored on the workers (allreduce)")
    p.add_argument("--strategy", choices=["ps-sync", "allreduce", "ps-async"], default=None,
                   help="with --cluster: how gradients combine (default: allreduce when "
                        "ps=0, else ps-sync)")
    p.add_argument("--ps-placement", choices=["greedy", "round-robin"], default=None,
                   help="with --cluster and ps-sync: variables on the PS tasks greedily by "
                        "bytes (default) or round robin")


def _cluster_spec(args: argparse.Namespace) -> Any:
    """The ``ClusterSpec`` of ``--cluster`` (None without it; --strategy or
    --ps-placement without it are errors)."""
    from tfc.passes.replicate import ClusterSpec
    if args.cluster is None:
        for flag, value in (("--strategy", args.strategy),
                            ("--ps-placement", args.ps_placement)):
            if value is not None:
                raise TfcError(f"{flag} applies to a cluster: give --cluster ps=P,workers=W")
        return None
    return ClusterSpec.parse(args.cluster, args.strategy, args.ps_placement or "greedy")


def _task_text(module: Any, task: str, elide_above: int | None) -> str:
    """``tfc ir --task worker:1``: the partitions of every device of that task."""
    from tfc.cli_devices import partitions_text
    from tfc.passes.replicate import task_label
    job, colon, index = task.partition(":")
    if not colon or not index.isdigit() or not job:
        raise TfcError(f"--task {task!r}: expected JOB:N (worker:1, ps:0)")
    name = f"{job}:{int(index)}"
    devices = [d for d in module.devices if task_label(d) == name]
    if not devices:
        tasks = sorted({t for t in map(task_label, module.devices) if t is not None})
        raise TfcError(f"the module has no task {name}"
                       + (f" (its tasks: {', '.join(tasks)})" if tasks
                          else ": it was not compiled for a cluster (tfc compile --cluster)"))
    return "".join(partitions_text(module, d, elide_above=elide_above) for d in devices)


# ---- tfc ir --------------------------------------------------------------------------

def _cmd_ir(args: argparse.Namespace) -> int:
    from tfc.compiler.driver import compile_target, load_source
    from tfc.passes.manager import get_pass, parse_pipeline
    from tfc.pipeline import lower, run_pipeline, target_pipeline

    check_output_path(args.output, "-o")
    target = compile_target(args.devices, backend=args.backend, cluster=_cluster_spec(args))
    module = load_source(args.model)
    shown = dict(print_after=args.print_after, print_after_all=args.print_after_all,
                 stream=sys.stderr)
    if args.after is None and args.passes is None and not args.raw \
            and Path(args.model).suffix != ".tfc":
        module = lower(module, target, **shown)  # what tfc compile stores
    else:
        if args.raw or Path(args.model).suffix == ".tfc":
            passes = []  # an artifact's IR is already compiled
        elif args.passes is not None:
            passes = parse_pipeline(args.passes)
        else:
            get_pass(args.after)  # unknown names get a suggestion
            pipeline = target_pipeline(target)
            names = [p.name for p in pipeline]
            if args.after not in names:
                raise TfcError(f"pass '{args.after}' is not in the compile pipeline "
                               f"({', '.join(names)}); use --passes to choose passes")
            passes = pipeline[:names.index(args.after) + 1]
        if target.devices and target.cluster is None:
            module.devices = list(target.devices)
            if "placement" not in [p.name for p in passes]:
                passes = [*passes, *parse_pipeline("placement")]
        module = run_pipeline(module, passes, **shown)
    # IR shown on stdout elides large tensors (a weight is one 10 KB line otherwise);
    # IR written to a file (-o) or asked for in full (--full) keeps every element
    from tfc.ir.printer import ELIDE_ELEMENTS
    elide = None if args.output or args.full else ELIDE_ELEMENTS
    if args.device is not None or args.task is not None:
        from tfc.cli_devices import partitions_text
        text = (partitions_text(module, args.device, elide_above=elide)
                if args.device is not None else _task_text(module, args.task, elide))
        if args.output:
            _write_text(args.output, text)
        else:
            sys.stdout.write(text)
        return 0
    from tfc.ir.printer import print_memory_plans, print_partitions
    _print_module(module, args.output, print_partitions(module) + print_memory_plans(module),
                  elide_above=elide)
    return 0


# ---- tfc opt -------------------------------------------------------------------------

def _cmd_opt(args: argparse.Namespace) -> int:
    from tfc.compiler.frontend import read_source
    from tfc.ir.parser import parse_module
    from tfc.pipeline import run_pipeline

    check_output_path(args.output, "-o")
    if args.input == "-":
        text, name = sys.stdin.read(), "<stdin>"
    else:
        if Path(args.input).suffix in (".py", ".tfm", ".tfc"):
            raise TfcError(f"tfc opt reads textual IR (.tfir), not {args.input}; print its "
                           f"IR first: tfc ir {args.input} -o "
                           f"{Path(args.input).with_suffix('.tfir')}")
        text, name = read_source(args.input), args.input
    module = parse_module(text, filename=name)
    if not module.graphs and not module.variables:  # /dev/null, a typo'd path, comments
        raise TfcError(f"{name}: empty input (no variables or graphs)")
    module = run_pipeline(module, args.passes or [], print_after=args.print_after,
                          print_after_all=args.print_after_all, stream=sys.stderr)
    _print_module(module, args.output)
    return 0


# ---- tfc compile ---------------------------------------------------------------------

def _cmd_compile(args: argparse.Namespace) -> int:
    from tfc.compiler.driver import compile_with_report, make_program
    from tfc.pipeline import DEFAULT_PIPELINE

    out = args.output or str(Path(args.model).with_suffix(".tfc"))
    if Path(out).resolve() == Path(args.model).resolve():
        raise TfcError(f"the output {out} would overwrite the input; choose another -o")
    check_output_path(out, "-o")
    spec = _cluster_spec(args)
    from tfc.cli_ps import compile_command, min_slice_size
    stored_uncut = compile_command(args, spec)  # --strategy ps-async: the step for trainers
    if stored_uncut is not None:
        return stored_uncut
    module, report = compile_with_report(
        args.model, args.passes if args.passes is not None else DEFAULT_PIPELINE,
        verify=True, print_after=args.print_after, print_after_all=args.print_after_all,
        stream=sys.stderr, devices=args.devices, fp16_transfers=args.fp16_transfers,
        backend=args.backend, profile_runs=args.profile_runs, profile_batch=args.profile_batch,
        progress=None if args.quiet else lambda m: print(m, file=sys.stderr),
        cluster=spec, min_slice_size=min_slice_size(args, spec))
    start = time.perf_counter()
    program = make_program(module, args.model, backend=args.backend)
    init_seconds = time.perf_counter() - start
    start = time.perf_counter()
    program.save(out)
    save_seconds = time.perf_counter() - start
    if not args.quiet:
        _compile_report(program, report, out, init_seconds, save_seconds)
    return 0


def _stored_as(op: Any) -> str:
    """How the artifact stores a variable: its initializer op's kind, or ``data``."""
    if op is None:
        return "data"
    return "splat constant" if op.kind == "constant" else op.kind


def _compile_report(program: Any, report: Any, out: str, init_s: float, save_s: float) -> None:
    print(f"compiled {report.source} -> {out} (backend: {program.backend.name})")
    print()
    _table("Entries", ["entry", "feeds", "fetches"],
           [[name, ", ".join(map(str, sig.feeds)) or "-", ", ".join(map(str, sig.fetches)) or "-"]
            for name, sig in program.entries.items()])
    print()
    delta = report.ops_after - report.ops_before
    print(f"ops: {report.ops_before} before passes, {report.ops_after} after ({delta:+d})")
    from tfc.units import format_bytes
    # sizes from the declared types: the report must not materialize initializers
    decls = program.module.variables
    inits = program.initializers
    total = sum(d.type.nbytes() for d in decls.values())
    stored = sum(decls[n].type.nbytes() for n in inits)
    print(f"variables: {len(decls)}, {format_bytes(total)} in all"
          + (f" ({format_bytes(stored)} stored as initializer ops)" if inits else ""))
    if decls:
        print()
        rows = [[f"@{name}", str(d.type), format_bytes(d.type.nbytes()),
                 _stored_as(inits.get(name)),
                 d.device or "-", "yes" if d.trainable else "no"]
                for name, d in list(decls.items())[:20]]
        if len(decls) > 20:
            rows.append([f"... {len(decls) - 20} more", "", "", "", "", ""])
        _table("Variables", ["variable", "type", "bytes", "stored as", "device", "trainable"],
               rows)
    print()
    timing = [["load", _ms(report.load_seconds)]]
    timing += [[f"pass {name}", _ms(s)] for name, s in report.pass_seconds]
    timing += [["init", _ms(init_s)], ["save", _ms(save_s)]]
    _table("Time", ["stage", "time"], timing)
    placement = program.module.placement_reports
    if len(program.module.devices) > 1 and placement:
        print()
        for rep in placement.values():
            print(f"placement {rep.summary()}")
    if report.cluster is not None:
        print()
        print("\n".join(report.cluster.lines()))
        from tfc.cli_ps import split_lines
        for line in split_lines(program.module, report.min_slice_size):
            print(line)
    profile = report.profile
    if profile is not None:
        print()
        print("\n".join(profile.header()))
        print()
        _table(f"Placements (per step at batch {profile.batch}: estimated by the model, "
               f"by the model with the measured costs, and measured)", profile.columns(),
               profile.rows())
        print(profile.verdict())


# ---- tfc run -------------------------------------------------------------------------

def _load_npy(name: str, path: str, what: str) -> Any:
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e):
            raise TfcError(f"feed '{name}': {what} holds pickled objects, which tfc never "
                           f"loads") from None
        raise TfcError(f"feed '{name}': cannot read {what}: {e}") from None
    except (EOFError, zipfile.BadZipFile) as e:
        raise TfcError(f"feed '{name}': cannot read {what}: {e or 'file is truncated'}") from None


def parse_feed(spec: str) -> tuple[str, Any]:
    """``x=x.npy``, ``y=data.npz:key``, ``lr=0.1`` or ``ids=[1,2]`` -> (name, value)."""
    name, sep, source = spec.partition("=")
    if not sep or not name:
        raise TfcError(f"--feed {spec!r}: expected NAME=FILE.npy, NAME=FILE.npz[:KEY] "
                       f"or NAME=VALUE")
    if source.endswith(".npy"):
        return name, _load_npy(name, source, source)
    head, colon, key = source.rpartition(":")
    if source.endswith(".npz") or (colon and head.endswith(".npz")):
        path, key = (source, "") if source.endswith(".npz") else (head, key)
        npz = _load_npy(name, path, path)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise TfcError(f"feed '{name}': {path} is a .npy file, not a .npz archive")
        with npz:
            keys = list(npz.keys())
            if not key:
                if name in keys:
                    key = name
                elif len(keys) == 1:
                    key = keys[0]
                else:
                    raise TfcError(f"feed '{name}': {path} holds {len(keys)} arrays "
                                   f"({', '.join(keys)}); pick one with {path}:KEY")
            if key not in keys:
                raise TfcError(f"feed '{name}': {path} has no array '{key}' "
                               f"(it holds: {', '.join(keys) or 'none'})")
            try:
                return name, npz[key]
            except ValueError as e:
                raise TfcError(f"feed '{name}': cannot read {path}:{key}: {e}") from None
    try:
        value = json.loads(source)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, (int, float, bool, list)):
        return name, value
    raise TfcError(f"feed '{name}': {source!r} is neither a .npy/.npz file nor a number "
                   f"or JSON list")


def parse_feeds(specs: Sequence[str]) -> dict[str, Any]:
    """Every ``--feed`` by name (``parse_feed``); a name given twice is an error."""
    feeds: dict[str, Any] = {}
    for spec in specs:
        name, value = parse_feed(spec)
        if name in feeds:
            raise TfcError(f"feed '{name}' is given twice")
        feeds[name] = value
    return feeds


def _format_fetch(name: str, value: np.ndarray) -> str:
    from tfc.ir.types import DType, TensorType
    try:
        t = str(TensorType(DType.from_numpy(value.dtype), value.shape))
    except TfcError:
        t = f"{value.dtype}{list(value.shape)}"
    with np.printoptions(threshold=200, edgeitems=3, linewidth=100):
        body = np.array2string(value, separator=", ") if value.ndim else repr(value.item())
    return f"{name}: {t}\n{body}"


def report_fetches(out: str | None, fetches: dict[str, np.ndarray]) -> None:
    """A run's fetches: saved to ``--out`` when given, else printed."""
    if out:
        _save_fetches(out, fetches)
        print(f"saved {', '.join(fetches) or 'no fetches'} to {out}")
    else:
        for name, value in fetches.items():
            print(_format_fetch(name, value))


def _save_fetches(path: str, fetches: dict[str, np.ndarray]) -> None:
    from tfc.atomic import atomic_write

    suffix = Path(path).suffix
    if suffix == ".npy":
        if len(fetches) != 1:
            raise TfcError(f"--out {path}: a .npy file holds one array but the entry has "
                           f"{len(fetches)} fetches; use a .npz file")
        (value,) = fetches.values()
        atomic_write(path, lambda f: np.save(f, value, allow_pickle=False))
    elif suffix == ".npz":
        def write(f: Any) -> None:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
                for name, value in fetches.items():
                    with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                        np.save(member, value, allow_pickle=False)
        atomic_write(path, write)
    else:
        raise TfcError(f"--out {path}: expected a .npz or .npy file name")


def _scalars(fetches: dict[str, np.ndarray]) -> str:
    """``loss=0.4142 acc=0.91``: the latest value of each numeric scalar fetch."""
    parts = []
    for name, value in fetches.items():
        v = np.asarray(value)
        if v.ndim == 0 and v.dtype.kind in "biuf":
            parts.append(f"{name}={v.item():.4g}" if v.dtype.kind == "f" else
                         f"{name}={v.item()}")
    return " ".join(parts)


def _run_steps(program: Any, entry: str, feeds: dict[str, Any], steps: int,
               after_step: Callable[[], None] | None = None,
               record: Callable[[dict[str, np.ndarray], float], None] | None = None,
               next_feeds: Callable[[], dict[str, Any]] | None = None,
               supervisor: Any = None) -> dict[str, np.ndarray]:
    """Run ``steps`` steps (calling ``after_step`` after each, and ``record`` with the
    step's fetches and seconds); the last step's fetches. ``next_feeds``: each step's
    feeds (mini-batches), instead of ``feeds`` every step.

    For more than one step, a progress bar on stderr shows the step counter, the
    steps per second and the latest value of each scalar fetch (the loss), and for a
    cluster program each task's time in the latest step (``Program.task_states``).
    ``supervisor`` (``tfc.distributed.recovery``): runs each step, recovering from the
    death of a task (its line goes above the progress bar).
    """
    def step() -> dict[str, np.ndarray]:
        start = time.perf_counter()
        out = program.run(entry, feeds if next_feeds is None else next_feeds())
        if record is not None:
            record(out, time.perf_counter() - start)
        if after_step is not None:
            after_step()
        return out

    def one() -> dict[str, np.ndarray]:
        return step() if supervisor is None else supervisor.step(step)

    console = _console(stderr=True) if steps > 1 else None
    if console is None:
        for _ in range(steps):
            out = one()
        return out
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn,
                               TextColumn, TimeElapsedColumn)
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text("- steps/s" if speed is None else f"{speed:.1f} steps/s")

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("step {task.fields[step]}"), RateColumn(),
                  TextColumn("{task.fields[metrics]}"), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task(entry, total=steps, step=program.step, metrics="")
        if supervisor is not None:
            supervisor.report = progress.console.print
        for _ in range(steps):
            out = one()
            states = program.task_states()
            metrics = _scalars(out) + "".join(f"  {t} {s}" for t, s in states.items())
            ring = supervisor.ring() if supervisor is not None else ""
            metrics += f"  ({ring})" if ring else ""
            progress.update(task, advance=1, step=program.step, metrics=metrics)
    return out


def _checkpoint_options(args: argparse.Namespace) -> None:
    if args.checkpoint_dir is None:
        for flag, given in (("--resume", args.resume),
                            ("--checkpoint-every", args.checkpoint_every is not None)):
            if given:
                raise TfcError(f"{flag} needs --checkpoint-dir DIR")
    check_at_least("--checkpoint-every", args.checkpoint_every, 1)


def _resume(program: Any, directory: str, batches: Any = None) -> None:
    from tfc.runtime.checkpoint import latest_checkpoint, read_checkpoint
    if not Path(directory).is_dir() or latest_checkpoint(directory) is None:
        raise TfcError(f"--resume: no checkpoint in {directory} to resume from")
    path = program.restore_checkpoint(directory)
    if batches is not None:  # the input position: the batch an unbroken run takes next
        batches.restore(read_checkpoint(path).extra, str(path))
    print(f"resumed from {path} (step {program.step})", file=sys.stderr)


def _summary_writer(logdir: str | None, program: Any, entry: str) -> Any:
    """``--logdir``: a ``tfc.summary.FileWriter`` there, the entry's placed graph written
    first (TensorBoard's Graphs dashboard)."""
    if logdir is None:
        return None
    from tfc.summary import FileWriter
    writer = FileWriter(logdir)
    writer.add_graph(program, entry)
    return writer


def _recorder(writer: Any, program: Any) -> Callable[[dict[str, np.ndarray], float], None]:
    """What ``--logdir`` writes after each step, at the program's global step: every
    numeric scalar fetch (the loss), the step's time and the entry's summaries
    (fetches named ``summary/<kind>/<tag>``: ``tfc.summary``)."""
    from tfc.summary import split_fetches

    def record(fetches: dict[str, np.ndarray], seconds: float) -> None:
        plain, summaries = split_fetches(fetches)
        step = program.step
        writer.add_scalars(plain, step)
        writer.add_scalar("step_time_ms", seconds * 1e3, step)
        writer.add_summary(summaries, step)
    return record


def _mini_batches(args: argparse.Namespace, feeds: dict[str, Any]) -> Any:
    """The ``--batch`` pipeline over the feeds (None without ``--batch``)."""
    if args.batch is None:
        for flag, given in (("--epochs", args.epochs is not None), ("--shuffle", args.shuffle),
                            ("--seed", args.seed is not None)):
            if given:
                raise TfcError(f"{flag} needs --batch N")
        return None
    if args.seed is not None and not args.shuffle:
        raise TfcError("--seed needs --shuffle")
    if args.epochs is not None and args.steps is not None:
        raise TfcError("give --steps or --epochs, not both")
    from tfc.data.feeding import MiniBatches
    return MiniBatches(feeds, args.batch, args.shuffle, args.seed or 0)


def _cmd_run(args: argparse.Namespace) -> int:
    _checkpoint_options(args)
    check_at_least("--steps", args.steps, 1)
    if args.logdir is not None and Path(args.logdir).exists() \
            and not Path(args.logdir).is_dir():
        raise TfcError(f"--logdir {args.logdir} is not a directory")
    check_at_least("--batch", args.batch, 1)
    check_at_least("--epochs", args.epochs, 1)
    if args.force and not args.save:
        raise TfcError("--force needs --save (it overwrites an artifact another process "
                       "updated)")
    if args.out is not None:
        check_output_path(args.out, "--out")
        if Path(args.out).suffix not in (".npz", ".npy"):
            raise TfcError(f"--out {args.out}: expected a .npz or .npy file name")
    if args.checkpoint_dir is not None and Path(args.checkpoint_dir).exists() \
            and not Path(args.checkpoint_dir).is_dir():
        raise TfcError(f"--checkpoint-dir {args.checkpoint_dir} is not a directory")
    native = "recompile" if args.recompile else "strict" if args.no_recompile else "use"
    if args.cluster_timeout is not None and args.cluster_timeout <= 0:
        raise TfcError(f"--cluster-timeout must be positive, not {args.cluster_timeout:g}")
    from tfc.cli_ps import run_command
    trained = run_command(args)  # a ps-async artifact: its trainers run it
    if trained is not None:
        return trained
    program = load_artifact_arg(args.artifact, args.backend, native=native,
                                cluster=args.cluster, cluster_timeout_s=args.cluster_timeout)
    try:
        code = _run_program(args, program)
    except BaseException:
        program.close(read_back=False)  # (the error is what the user sees)
        raise
    program.close()  # a cluster's actors (and an embedded Ray) stop here
    return code


def _run_program(args: argparse.Namespace, program: Any) -> int:
    entries = list(program.entries)
    entry = args.entry
    if entry is None:
        if len(entries) != 1:
            raise TfcError(f"{args.artifact} has {len(entries)} entries "
                           f"({', '.join(entries) or 'none'}); choose one with --entry")
        entry = entries[0]
    program.entry(entry)  # unknown entries fail before the feeds are read
    feeds = parse_feeds(args.feed)
    batches = _mini_batches(args, feeds)
    if args.resume:
        _resume(program, args.checkpoint_dir, batches)
    steps = args.steps or 1
    if batches is not None and args.steps is None:
        epochs = args.epochs or 1
        steps = batches.steps_to(epochs)
        if steps == 0:
            raise TfcError(f"--epochs {epochs}: the checkpoint is already past epoch "
                           f"{epochs}; nothing to run")

    saved: list[Any] = []  # (path, step) of the latest checkpoint
    # an entry that updates no variable changes nothing to save: no checkpoint, no new
    # step in the artifact (the step counter seeds random ops; in memory it still counts)
    changes = program.writes_variables(entry)

    def checkpoint() -> None:
        extra = batches.extra() if batches is not None else None
        saved[:] = [program.save_checkpoint(args.checkpoint_dir, extra=extra), program.step]

    def every_k() -> None:  # at multiples of K of the global step: stable across resumes
        if program.step % args.checkpoint_every == 0:
            checkpoint()

    after = every_k if changes and args.checkpoint_dir and args.checkpoint_every else None
    writer = _summary_writer(args.logdir, program, entry)
    step_feeds = None if batches is None else _StepFeeds(program, batches)
    supervisor = _supervisor(args, program, step_feeds, checkpoint if changes else None,
                             _batch_sizes(feeds, batches))
    try:
        fetches = _run_steps(program, entry, feeds, steps, after,
                             None if writer is None else _recorder(writer, program),
                             None if step_feeds is None else step_feeds.take, supervisor)
    finally:
        if writer is not None:
            writer.close()
        if supervisor is not None:
            supervisor.close()
    if writer is not None:
        print(f"wrote TensorBoard events to {writer.path}", file=sys.stderr)
    if changes and args.checkpoint_dir and (not saved or saved[1] != program.step):
        checkpoint()
    if saved:
        print(f"saved checkpoint {saved[0]} (step {saved[1]})", file=sys.stderr)
    elif args.checkpoint_dir:
        print(f"no checkpoint saved: entry '{entry}' updates no variables", file=sys.stderr)
    report_fetches(args.out, fetches)
    if args.save and not changes:
        print(f"{args.artifact} not updated: entry '{entry}' updates no variables",
              file=sys.stderr)
    elif args.save:
        program.save(args.artifact, force=args.force)
        print(f"updated {args.artifact} (step {program.step})", file=sys.stderr)
    return 0


def _recovery_arguments(p: argparse.ArgumentParser) -> None:
    """``tfc run``'s fault tolerance flags (``tfc.distributed.recovery``)."""
    p.add_argument("--on-failure", choices=["restart", "elastic", "fail"], default=None,
                   help="when a cluster task dies: restart it, restore every variable from "
                        "the latest checkpoint in --checkpoint-dir and go on (the default "
                        "with --checkpoint-dir); elastic (--strategy allreduce): go on with "
                        "the workers left, the global batch split over them; or fail with "
                        "an error naming it (the default without)")
    p.add_argument("--rejoin", action=argparse.BooleanOptionalAction, default=None,
                   help="with --on-failure elastic: restart a dead worker in the background "
                        "and grow the ring back to all workers when it is ready, at a step "
                        "boundary (the default; --no-rejoin: stay with the workers left)")
    p.add_argument("--inject-failure", metavar="TASK@step=N", action="append", default=[],
                   help="SIGKILL the process of cluster task TASK (e.g. worker:1, ps:0) just "
                        "before step N is launched (repeatable; tests and demos)")


class _StepFeeds:
    """A pipeline's batches by program step: a step tried again (after an elastic
    recovery, which loses no step) gets the batch it was given before, not the next one;
    a checkpoint restored (``restore``, which puts the pipeline back) forgets it."""

    def __init__(self, program: Any, batches: Any) -> None:
        self.program, self.batches = program, batches
        self.held: tuple[int, dict[str, Any]] | None = None

    def take(self) -> dict[str, Any]:
        step = self.program.step
        if self.held is None or self.held[0] != step:
            self.held = (step, self.batches.next_feeds())
        return self.held[1]

    def restore(self, ckpt: Any) -> None:
        self.held = None
        self.batches.restore(ckpt.extra, str(ckpt.path))


def _batch_sizes(feeds: dict[str, Any], batches: Any) -> list[int]:
    """The global batch sizes a run's steps feed: ``--batch``'s and its epoch's last,
    partial one; else the feeds' first dims (elastic recovery's layout depends on them)."""
    if batches is not None:
        last = batches.examples % batches.batch_size
        return [batches.batch_size] + ([last] if last else [])
    return sorted({int(np.shape(v)[0]) for v in feeds.values() if np.ndim(v) >= 1})


def _supervisor(args: argparse.Namespace, program: Any, step_feeds: _StepFeeds | None,
                checkpoint: Callable[[], None] | None, batch_sizes: Sequence[int] = ()
                ) -> Any:
    """The ``Supervisor`` that recovers from a dead task (None when nothing asks for one:
    no Ray cluster, or --on-failure fail without --inject-failure)."""
    from tfc.distributed.recovery import InjectedFailure
    injected = [InjectedFailure.parse(spec) for spec in args.inject_failure]
    if args.rejoin is not None and args.on_failure != "elastic":
        flag = "--rejoin" if args.rejoin else "--no-rejoin"
        raise TfcError(f"{flag} needs --on-failure elastic (only an elastic ring shrinks "
                       f"and grows back)")
    on_ray = program.cluster not in (None, "inprocess")
    if not on_ray:
        for flag, given in (("--on-failure", args.on_failure), ("--inject-failure", injected)):
            if given:
                raise TfcError(f"{flag} needs a program on a Ray cluster (--cluster local, "
                               f"auto or HOST:PORT)")
        return None
    on_failure = args.on_failure or ("restart" if args.checkpoint_dir else "fail")
    if on_failure == "restart" and not args.checkpoint_dir:
        raise TfcError("--on-failure restart needs --checkpoint-dir DIR (the checkpoint "
                       "every task is restored from)")
    if on_failure in ("restart", "elastic") and checkpoint is None:
        on_failure = "fail"  # an entry that updates no variable: nothing to restore
    if on_failure == "fail" and not injected:
        return None
    from tfc.distributed.recovery import Supervisor
    return Supervisor(program, args.checkpoint_dir, on_failure, injected,
                      restore_input=None if step_feeds is None else step_feeds.restore,
                      save_initial=checkpoint, batch_sizes=batch_sizes,
                      rejoin=args.rejoin is not False)


# ---- the parser and main -------------------------------------------------------------

def _version() -> str:
    from tfc.runtime.artifact import tfc_version
    return f"tfc {tfc_version()}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfc", description="Compile dataflow-graph models and run them.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", help="compile a model into a .tfc artifact")
    p.add_argument("model", metavar="MODEL", help="model file (.py, .tfm or .tfir)")
    p.add_argument("-o", "--output", metavar="OUT.tfc",
                   help="artifact to write (default: MODEL with suffix .tfc)")
    p.add_argument("--passes", metavar="P1,P2",
                   help="optimization passes (default: canonicalize,cse,dce); the backend's "
                        "lowering passes follow")
    p.add_argument("--print-after", metavar="PASS", help="print the IR after PASS to stderr")
    p.add_argument("--print-after-all", action="store_true",
                   help="print the IR after every pass to stderr")
    p.add_argument("--backend", default=None,
                   help="backend to compile for (default: $TFC_BACKEND, else llvm)")
    p.add_argument("--devices", metavar="D1,D2",
                   help="compile for several devices (cpu:0,cpu:1): cost-model placement, "
                        "one partition per device")
    p.add_argument("--fp16-transfers", action="store_true",
                   help="f32 tensors cross devices (with --cluster: tasks) as f16")
    _cluster_arguments(p)
    from tfc.cli_ps import add_compile_arguments
    add_compile_arguments(p)
    p.add_argument("--profile-runs", type=int, metavar="N",
                   help="with --devices: run every entry N steps with kernel timing, place "
                        "again with the measured costs, keep the faster placement by "
                        "measurement (llvm backend)")
    p.add_argument("--profile-batch", type=int, metavar="B",
                   help="batch of the synthetic feeds of --profile-runs (default 64)")
    p.add_argument("-q", "--quiet", action="store_true", help="no compile report")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("run", help="run an entry of a .tfc artifact")
    p.add_argument("artifact", metavar="ARTIFACT", help="a .tfc file")
    p.add_argument("--entry", metavar="NAME", help="entry to run (needed if there are several)")
    p.add_argument("--feed", metavar="NAME=FILE", action="append", default=[],
                   help="a feed: NAME=x.npy, NAME=data.npz[:KEY], NAME=0.5 or NAME=[1,2]")
    p.add_argument("--out", metavar="FILE", help="save the fetches to FILE (.npz, or .npy for one)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="run N steps (default 1)")
    p.add_argument("--save", action="store_true",
                   help="write the updated variables back to ARTIFACT (refused if another "
                        "process updated it since this one loaded it)")
    p.add_argument("--force", action="store_true",
                   help="with --save: overwrite ARTIFACT even if another process updated it")
    code = p.add_mutually_exclusive_group()
    code.add_argument("--recompile", action="store_true",
                      help="compile the entries from the artifact's IR instead of linking "
                           "its stored object code")
    code.add_argument("--no-recompile", action="store_true",
                      help="refuse an artifact whose object code fails its checksum "
                           "(default: warn and compile it again from the IR)")
    p.add_argument("--backend", default=None, help="backend to run on (default: the artifact's)")
    p.add_argument("--cluster", metavar="WHERE",
                   help="run a module compiled for a cluster: local (a Ray started here, one "
                        "process per task), auto (the Ray cluster running here), HOST:PORT "
                        "(the Ray cluster at that address) or inprocess (threads)")
    p.add_argument("--cluster-timeout", type=float, metavar="S",
                   help="seconds to wait for a cluster task before failing (default 120)")
    p.add_argument("--checkpoint-dir", metavar="DIR",
                   help="save a checkpoint (all variables and the step) to DIR at the end")
    p.add_argument("--checkpoint-every", type=int, metavar="K",
                   help="also save one whenever the step is a multiple of K")
    p.add_argument("--resume", action="store_true",
                   help="first restore the latest checkpoint in DIR, then run N more steps")
    p.add_argument("--logdir", metavar="DIR",
                   help="write TensorBoard events to DIR: the entry's graph, and per step "
                        "each scalar fetch, the step time and the entry's summaries")
    p.add_argument("--batch", type=int, metavar="N",
                   help="train on mini-batches of N examples of the --feed arrays (each step "
                        "takes the next batch; scalar feeds are fed whole)")
    p.add_argument("--epochs", type=int, metavar="E",
                   help="with --batch: run until E passes over the examples are done "
                        "(counting those before a --resume; default 1 unless --steps)")
    p.add_argument("--shuffle", action="store_true",
                   help="with --batch: shuffle the examples, anew each epoch")
    p.add_argument("--seed", type=int, metavar="S",
                   help="with --shuffle: the shuffle's seed (default 0)")
    from tfc.cli_ps import add_run_arguments
    add_run_arguments(p)
    _recovery_arguments(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("ir", help="print a model's IR")
    p.add_argument("model", metavar="MODEL", help="a .py, .tfm, .tfir or .tfc file")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--after", metavar="PASS", help="stop after PASS of the target's pipeline (e.g. cse, placement, fusion)")
    mode.add_argument("--passes", metavar="P1,P2", help="run these passes instead")
    mode.add_argument("--raw", action="store_true", help="the IR before any pass")
    p.add_argument("--backend", default=None,
                   help="backend whose compile pipeline runs (default: $TFC_BACKEND, else "
                        "llvm): the IR shown is what tfc compile stores")
    p.add_argument("--print-after", metavar="PASS", help="print the IR after PASS to stderr")
    p.add_argument("--print-after-all", action="store_true",
                   help="print the IR after every pass to stderr")
    p.add_argument("--devices", metavar="D1,D2", help="place on these devices first")
    _cluster_arguments(p)
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--device", metavar="DEV", help="print only the partitions on DEV")
    shown.add_argument("--task", metavar="JOB:N",
                       help="print only the partitions on task JOB:N's devices (worker:1, "
                            "ps:0) of a module compiled with --cluster")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the IR to FILE (in full: it parses back)")
    p.add_argument("--full", action="store_true",
                   help="print every element of large tensors (by default, those of more "
                        "than 64 elements are elided on stdout)")
    p.set_defaults(func=_cmd_ir)

    p = sub.add_parser("opt", help="run passes over textual IR")
    p.add_argument("input", metavar="IN.tfir", help="textual IR ('-' for stdin)")
    p.add_argument("--passes", metavar="P1,P2", default="", help="passes to run (default: none)")
    p.add_argument("--print-after", metavar="PASS", help="print the IR after PASS to stderr")
    p.add_argument("--print-after-all", action="store_true",
                   help="print the IR after every pass to stderr")
    p.add_argument("-o", "--output", metavar="OUT.tfir", help="write the IR to OUT.tfir")
    p.set_defaults(func=_cmd_opt)

    from tfc.cli_devices import add_commands
    add_commands(sub)
    return parser


def _os_error(e: OSError) -> str:
    """``no such file or directory: x.npy`` rather than ``[Errno 2] ...: 'x.npy'``."""
    if not e.strerror:
        return str(e)
    what = e.strerror[0].lower() + e.strerror[1:]
    return f"{what}: {e.filename}" if e.filename else what


def _guarded(func: Callable[[], int]) -> int:
    """Run a command, turning every error into one line and an exit code."""
    try:
        return func()
    except TfcError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `tfc ir model.py | head`: the reader left; not an error
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        return EXIT_ERROR
    except OSError as e:
        print(f"error: {_os_error(e)}", file=sys.stderr)
        return EXIT_ERROR
    except MemoryError as e:  # a batch, a shape or a model too large for this machine
        print(f"error: out of memory: {e or 'an allocation failed'}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # a bug in tfc
        if os.environ.get("TFC_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        else:
            print(f"internal error: {type(e).__name__}: {e} (this is a bug in tfc; "
                  f"set TFC_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def main(argv: Sequence[str] | None = None) -> int:
    """The ``tfc`` command; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # usage errors (2), --help and --version (0)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    saved, warnings.formatwarning = warnings.formatwarning, _format_warning
    try:
        return _guarded(lambda: args.func(args))
    finally:
        warnings.formatwarning = saved


def _format_warning(message: Warning | str, category: type, filename: str, lineno: int,
                    line: str | None = None) -> str:
    """Warnings as one line, like errors (a backend falling back names the ops)."""
    return f"warning: {message}\n"


if __name__ == "__main__":
    sys.exit(main())
