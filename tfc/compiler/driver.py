"""The compile driver: model file -> IR module -> passes -> artifact.

Every graph of the module, the ``__init__`` graph included, goes through the same
pipeline, so the initial values an artifact stores are computed by optimized code just
as the entries are. ``compile_with_report`` also returns what the ``tfc compile``
report shows: op counts before and after, and the time of each stage and pass.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TextIO

from tfc.errors import TfcError
from tfc.ir.core import Module
from tfc.passes import DEFAULT_PIPELINE, parse_pipeline, run_passes

if TYPE_CHECKING:
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


def count_ops(module: Module) -> int:
    """Ops in every graph of ``module``, regions included."""
    return sum(1 for g in module.graphs.values() for _ in g.walk())


def load_source(path: str | os.PathLike[str]) -> Module:
    """The module in ``path``: a model (``.py``, ``.tfm``, ``.tfir``) or a compiled ``.tfc``
    artifact."""
    if Path(path).suffix == ".tfc":
        from tfc.runtime.artifact import read_module
        return read_module(path)
    from tfc.compiler.frontend import load_model
    return load_model(path)


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
    # an artifact's variables stored as initializer ops stay so (its __init__ assigns them)
    return Program(module, values, backend=backend, step=step, copy=False,
                   initializers=recipes(module))


def compile_with_report(path: str | os.PathLike[str], pipeline: Pipeline = DEFAULT_PIPELINE, *,
                        verify: bool = True, print_after: str | Sequence[str] | None = None,
                        print_after_all: bool = False, stream: TextIO | None = None,
                        devices: str | Sequence[str] | None = None,
                        fp16_transfers: bool = False) -> tuple[Module, CompileReport]:
    """Load the model at ``path`` and run ``pipeline`` over it; the module and a report.

    ``devices`` (``"cpu:0,cpu:1"``) compiles for several devices: the placement pass
    runs last and the runtime executes one partition per device; ``fp16_transfers``
    sends f32 tensors between them as f16."""
    passes = parse_pipeline(pipeline)
    start = time.perf_counter()
    module = load_source(path)
    if devices is not None:
        from tfc.devices import parse_devices
        module.devices = parse_devices(devices)
        if "placement" not in passes:
            passes = [*passes, "placement"]
    if fp16_transfers:
        if len(module.devices) < 2:
            raise TfcError("--fp16-transfers compresses transfers between devices; "
                           "give two or more with --devices")
        module.fp16_transfers = True
    report = CompileReport(str(path), passes)
    report.load_seconds = time.perf_counter() - start
    report.ops_before = count_ops(module)
    module = run_passes(module, passes, verify=verify, print_after=print_after,
                        print_after_all=print_after_all,
                        stream=stream if stream is not None else sys.stderr,
                        timings=report.pass_seconds)
    report.ops_after = count_ops(module)
    return module, report


def compile_model(path: str | os.PathLike[str], pipeline: Pipeline = DEFAULT_PIPELINE, *,
                  verify: bool = True, print_after: str | Sequence[str] | None = None,
                  print_after_all: bool = False, stream: TextIO | None = None) -> Module:
    """The module of the model at ``path`` after ``pipeline`` (verified after each pass)."""
    module, _ = compile_with_report(path, pipeline, verify=verify, print_after=print_after,
                                    print_after_all=print_after_all, stream=stream)
    return module


def compile_to_artifact(path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                        pipeline: Pipeline = DEFAULT_PIPELINE, *, verify: bool = True,
                        print_after: str | Sequence[str] | None = None,
                        print_after_all: bool = False, stream: TextIO | None = None,
                        backend: str | None = None) -> "Program":
    """Compile the model at ``path``, run its ``__init__`` graph, write ``out_path``.

    Returns the ``Program`` that was saved (its variables hold the initial values, or
    the artifact's own values when ``path`` is a ``.tfc`` file).
    """
    module = compile_model(path, pipeline, verify=verify, print_after=print_after,
                           print_after_all=print_after_all, stream=stream)
    program = make_program(module, path, backend)
    program.save(out_path)
    return program
