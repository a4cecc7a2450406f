"""The pass manager: named passes, pipelines, verification, IR dumps and timing.

A pass is a ``Module -> Module`` callable registered under a name: a function, or a
class whose instances are such callables (instantiated with no arguments each time a
pipeline runs). A pass may mutate the module in place and return it.

    @register_pass("cse")
    def cse(module: Module) -> Module: ...

    run_passes(module, "canonicalize,cse,dce", verify=True, print_after="cse")

Dumps look like MLIR's (``// -----// IR Dump After cse //----- //`` then the module),
and each pass's wall time is recorded as ``(name, seconds)`` for compile reports.
This module also holds the few graph-rewriting helpers the passes share.
"""

from __future__ import annotations

import difflib
import sys
import time
from typing import Callable, Iterator, Sequence, TextIO

from tfc.errors import TfcError, VerifyError
from tfc.ir.core import Graph, Module, Value

Pass = Callable[[Module], "Module | None"]

DEFAULT_PIPELINE = "canonicalize,cse,dce"
# What native backends run before code generation: fuse kernels, then plan the arena.
NATIVE_PIPELINE = DEFAULT_PIPELINE + ",fusion,memory"

_PASSES: dict[str, Callable[[], Pass]] = {}


def register_pass(name: str) -> Callable:
    """Register a pass function, or a pass class (instantiated per run), under ``name``."""

    def deco(obj):
        if name in _PASSES:
            raise TfcError(f"pass '{name}' is registered twice")
        if isinstance(obj, type):
            _PASSES[name] = obj
        else:
            _PASSES[name] = lambda: obj
        return obj

    return deco


def _load() -> None:
    import tfc.passes  # noqa: F401  (registers the built-in passes)


def available_passes() -> list[str]:
    """Names of the registered passes, sorted."""
    _load()
    return sorted(_PASSES)


def get_pass(name: str) -> Pass:
    """A runnable instance of pass ``name``; unknown names suggest the nearest one."""
    _load()
    try:
        factory = _PASSES[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_PASSES), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        known = ", ".join(sorted(_PASSES))
        raise TfcError(f"unknown pass '{name}'{hint}; known passes: {known}") from None
    return factory()


def parse_pipeline(passes: str | Sequence[str]) -> list[str]:
    """``"canonicalize, cse,dce"`` (or a list of names) -> checked list of pass names."""
    if isinstance(passes, str):
        names = [p.strip() for p in passes.split(",")]
    else:
        names = [p.strip() for p in passes]
    names = [p for p in names if p]
    for n in names:
        get_pass(n)  # raises with a suggestion for unknown names
    return names


class PassManager:
    """Runs a pipeline over a module, verifying and dumping IR as asked.

    ``timings`` collects ``(pass name, seconds)`` for every pass run by this manager.
    With ``verify``, the input module is verified first (so a broken input is not blamed
    on the first pass) and again after every pass.
    """

    def __init__(self, passes: str | Sequence[str], *, verify: bool = False,
                 print_after: str | Sequence[str] | None = None,
                 print_after_all: bool = False, stream: TextIO | None = None) -> None:
        self.passes = parse_pipeline(passes)
        self.verify = verify
        self.print_after = set(parse_pipeline(print_after)) if print_after else set()
        self.print_after_all = print_after_all
        self.stream = stream
        self.timings: list[tuple[str, float]] = []

    def run(self, module: Module) -> Module:
        from tfc.ir.verifier import verify_module

        if self.verify:
            verify_module(module)
        for name in self.passes:
            p = get_pass(name)
            start = time.perf_counter()
            out = p(module)
            self.timings.append((name, time.perf_counter() - start))
            if out is not None:
                module = out
            if self.verify:
                try:
                    verify_module(module)
                except VerifyError as e:
                    raise VerifyError(f"after pass '{name}': {e.message}", e.loc) from e
            if self.print_after_all or name in self.print_after:
                self.dump(name, module)
        return module

    def dump(self, name: str, module: Module) -> None:
        from tfc.ir.printer import print_module

        stream = self.stream if self.stream is not None else sys.stderr
        text = print_module(module)
        stream.write(f"// -----// IR Dump After {name} //----- //\n{text}")
        if not text.endswith("\n"):
            stream.write("\n")
        stream.write("\n")


def run_passes(module: Module, passes: str | Sequence[str], *, verify: bool = False,
               print_after: str | Sequence[str] | None = None, print_after_all: bool = False,
               stream: TextIO | None = None,
               timings: list[tuple[str, float]] | None = None) -> Module:
    """Run a pipeline (``"canonicalize,cse,dce"`` or a list of names) over ``module``.

    ``stream`` defaults to ``sys.stderr`` as it is when the dump is written. Pass a list
    as ``timings`` to receive ``(pass name, seconds)`` for each pass run.
    """
    pm = PassManager(passes, verify=verify, print_after=print_after,
                     print_after_all=print_after_all, stream=stream)
    try:
        return pm.run(module)
    finally:
        if timings is not None:
            timings.extend(pm.timings)


# ---- helpers shared by passes --------------------------------------------------------

def graphs_postorder(graph: Graph) -> Iterator[Graph]:
    """``graph`` and every region graph under it, regions before the graphs owning them."""
    for op in graph.ops:
        for r in op.regions:
            yield from graphs_postorder(r)
    yield graph


def module_graphs(module: Module) -> Iterator[Graph]:
    """Every graph of a module, regions included (regions first)."""
    for g in list(module.graphs.values()):
        yield from graphs_postorder(g)


def for_each_graph(module: Module, rewrite: Callable[[Graph], object]) -> Module:
    """Apply a one-graph rewrite to every graph of ``module``, regions first; the shape
    of the passes that treat each graph on its own (regions are isolated from above)."""
    for g in module_graphs(module):
        rewrite(g)
    return module


def resolve(subst: dict[Value, Value], v: Value) -> Value:
    """``v`` after the replacements recorded in ``subst`` (followed transitively)."""
    while v in subst:
        v = subst[v]
    return v


def apply_substitution(graph: Graph, subst: dict[Value, Value]) -> None:
    """Replace every use of a value in ``subst`` by its replacement: op inputs and
    graph results (regions are isolated from above, so never need it)."""
    if not subst:
        return
    for op in graph.ops:
        if any(v in subst for v in op.inputs):
            op.inputs = [resolve(subst, v) for v in op.inputs]
    graph.results = [resolve(subst, v) for v in graph.results]


def replace_all_uses(graph: Graph, old: Value, new: Value) -> None:
    """Make every op of ``graph`` and its results use ``new`` instead of ``old``."""
    apply_substitution(graph, {old: new})
