"""The pass manager: named passes with options, pipelines, verification, dumps, timing.

A pass is a ``Module -> Module`` callable registered under a name: a function, or a
class whose instances are such callables (instantiated each time a pipeline runs). A
pass may mutate the module in place and return it. A pass declares its options with a
parser for each (text -> value); a pipeline gives them as ``name{key=value,...}``, as
MLIR and xDSL pipelines do, and the pass receives them as keyword arguments:

    @register_pass("memory", options={"budget": parse_bytes})
    def memory(module: Module, budget: int | None = None) -> Module: ...

    run_passes(module, "canonicalize,cse,dce,memory{budget=64MiB}", verify=True)

``tfc.pipeline`` is the one place that runs pipelines; this module is its machinery.
Dumps look like MLIR's (``// -----// IR Dump After cse //----- //`` then the module),
and each pass's wall time is recorded as ``(name, seconds)`` for compile reports.
This module also holds the few graph-rewriting helpers the passes share, and
``paused_gc``, which the compile stages (pipelines here, the backends' lowering) run in.
"""

from __future__ import annotations

import contextlib
import difflib
import gc
import operator
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence, TextIO

from tfc.errors import TfcError, VerifyError
from tfc.ir.core import Graph, Module, Value
from tfc.ir.types import Dim, TensorType

Pass = Callable[..., "Module | None"]
# An option's parser: its text in a pipeline string -> its value (raises ValueError or
# TfcError for a bad one).
OptionParser = Callable[[str], Any]

DEFAULT_PIPELINE = "canonicalize,cse,dce"


@dataclass(frozen=True)
class _Registered:
    factory: Callable[..., Pass]  # options as keywords -> a runnable pass
    options: Mapping[str, OptionParser]


_PASSES: dict[str, _Registered] = {}


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cycle collector off while the block runs (unless it was off already).

    A compile makes hundreds of thousands of small objects (IR ops, llvmlite
    instructions) that live until it ends, so the collector's full passes find nothing
    to free and cost a lot: lowering a 256-layer MLP took 255 ms of CPU with it and
    135 ms without. Whatever cycles the compile leaves are collected after it. Threads:
    a block that found the collector on turns it back on when it ends, so it is never
    left off by overlapping compiles."""
    was_on = gc.isenabled()
    if was_on:
        gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def register_pass(name: str, options: Mapping[str, OptionParser] | None = None) -> Callable:
    """Register a pass function, or a pass class (instantiated per run), under ``name``.

    ``options`` maps each option the pass takes to its parser. A function pass receives
    the options given in the pipeline as keyword arguments after the module; a class
    receives them in its constructor."""

    def deco(obj):
        if name in _PASSES:
            raise TfcError(f"pass '{name}' is registered twice")
        if isinstance(obj, type):
            factory = obj
        else:
            def factory(**kw: Any) -> Pass:
                return (lambda module: obj(module, **kw)) if kw else obj
        _PASSES[name] = _Registered(factory, dict(options or {}))
        return obj

    return deco


def _load() -> None:
    import tfc.passes  # noqa: F401  (registers the built-in passes)


def available_passes() -> list[str]:
    """Names of the registered passes, sorted."""
    _load()
    return sorted(_PASSES)


def _registered(name: str) -> _Registered:
    _load()
    try:
        return _PASSES[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_PASSES), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        known = ", ".join(sorted(_PASSES))
        raise TfcError(f"unknown pass '{name}'{hint}; known passes: {known}") from None


@dataclass(frozen=True)
class PassSpec:
    """One step of a pipeline: a registered pass and the options it runs with (parsed
    values, in the order given). ``str`` gives it back as pipeline text."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        if not self.options:
            return self.name
        return f"{self.name}{{{','.join(f'{k}={v}' for k, v in self.options)}}}"


def get_pass(name: str | PassSpec) -> Pass:
    """A runnable instance of pass ``name`` (with a spec's options); unknown names suggest
    the nearest one."""
    spec = name if isinstance(name, PassSpec) else PassSpec(name)
    return _registered(spec.name).factory(**dict(spec.options))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def parse_pass(text: str) -> PassSpec:
    """``"memory{budget=64MiB}"`` -> the checked ``PassSpec`` (options parsed)."""
    text = text.strip()
    name, brace, rest = text.partition("{")
    name = name.strip()
    if not _NAME.match(name):
        raise TfcError(f"bad pass {text!r} in pipeline: expected NAME or "
                       f"NAME{{key=value,...}}")
    declared = _registered(name).options
    if not brace:
        return PassSpec(name)
    if not rest.endswith("}") or "{" in rest or "}" in rest[:-1]:
        raise TfcError(f"pass '{name}': unbalanced braces in {text!r}")
    options: dict[str, Any] = {}
    for item in (i.strip() for i in rest[:-1].split(",")):
        if not item:
            continue
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not key:
            raise TfcError(f"pass '{name}': option {item!r} should be key=value")
        if key not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise TfcError(f"pass '{name}' has no option '{key}' (its options: {known})")
        if key in options:
            raise TfcError(f"pass '{name}': option '{key}' is given twice")
        try:
            options[key] = declared[key](value)
        except (ValueError, TfcError) as e:
            raise TfcError(f"pass '{name}': bad value {value!r} for option '{key}': "
                           f"{e}") from None
    return PassSpec(name, tuple(options.items()))


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside braces."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


Pipeline = str | Sequence["str | PassSpec"]


def parse_pipeline(passes: Pipeline) -> list[PassSpec]:
    """``"canonicalize, cse,memory{budget=1GiB}"`` (or a list of such items or specs) ->
    the checked list of ``PassSpec`` (unknown passes and options, bad values: a
    ``TfcError``)."""
    items = _split_top_level(passes) if isinstance(passes, str) else list(passes)
    out = []
    for item in items:
        if isinstance(item, PassSpec):
            _registered(item.name)
            out.append(item)
        elif item.strip():
            out.append(parse_pass(item))
    return out


def pass_names(passes: str | Sequence[str]) -> list[str]:
    """The pass names of a ``--print-after`` style list (checked, no options)."""
    names = [passes] if isinstance(passes, str) else list(passes)
    out = [n.strip() for n in names if n.strip()]
    for n in out:
        _registered(n)
    return out


def parse_bytes(text: str) -> int:
    """A byte count: ``4096``, ``64KiB``, ``64MiB``, ``1GiB`` (also ``KB``/``MB``/``GB``
    as powers of 1000 and a plain ``B``)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]i?B|B)?\s*", text)
    if m is None:
        raise ValueError("expected a byte count such as 4096, 64MiB or 1GiB")
    unit = m.group(2) or "B"
    scale = 1 if unit == "B" else (1024 if "i" in unit else 1000) ** ("KMGT".index(unit[0]) + 1)
    return int(m.group(1)) * scale


def parse_flag(text: str) -> bool:
    """``true`` or ``false`` (any case; ``1``/``0``)."""
    flag = {"true": True, "1": True, "false": False, "0": False}.get(text.strip().lower())
    if flag is None:
        raise ValueError("expected true or false")
    return flag


class PassManager:
    """Runs a pipeline over a module, verifying and dumping IR as asked.

    ``timings`` collects ``(pass name, seconds)`` for every pass run by this manager.
    With ``verify``, the input module is verified first (so a broken input is not blamed
    on the first pass) and again after every pass. ``print_after`` must name passes of
    the pipeline: asking for the IR after a pass that does not run is an error, not
    silence.
    """

    def __init__(self, passes: Pipeline, *, verify: bool = False,
                 print_after: str | Sequence[str] | None = None,
                 print_after_all: bool = False, stream: TextIO | None = None) -> None:
        self.passes = parse_pipeline(passes)
        self.verify = verify
        self.print_after = set(pass_names(print_after)) if print_after else set()
        names = [p.name for p in self.passes]
        missing = sorted(self.print_after - set(names))
        if missing:
            raise TfcError(f"cannot print the IR after pass '{missing[0]}': it is not in the "
                           f"pipeline ({', '.join(names) or 'no passes'})")
        self.print_after_all = print_after_all
        self.stream = stream
        self.timings: list[tuple[str, float]] = []

    def run(self, module: Module) -> Module:
        with paused_gc():
            return self._run(module)

    def _run(self, module: Module) -> Module:
        from tfc.ir.verifier import verify_module

        if self.verify:
            verify_module(module)
        for spec in self.passes:
            name = spec.name
            p = get_pass(spec)
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
        from tfc.ir.printer import print_memory_plans, print_module

        stream = self.stream if self.stream is not None else sys.stderr
        text = print_module(module) + print_memory_plans(module)
        stream.write(f"// -----// IR Dump After {name} //----- //\n{text}")
        if not text.endswith("\n"):
            stream.write("\n")
        stream.write("\n")


def run_passes(module: Module, passes: Pipeline, *, verify: bool = False,
               print_after: str | Sequence[str] | None = None, print_after_all: bool = False,
               stream: TextIO | None = None,
               timings: list[tuple[str, float]] | None = None) -> Module:
    """Run a pipeline (``"canonicalize,cse,dce"`` or a list of items) over ``module``.

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
    for regions in filter(None, map(_REGIONS, graph.ops)):  # (the ops with regions, in C)
        for r in regions:
            yield from graphs_postorder(r)
    yield graph


_REGIONS = operator.attrgetter("regions")


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


def type_key(t: TensorType) -> tuple[str, tuple[Dim, ...]]:
    """A type in a hashed key: its dtype's name and its shape, equal exactly when the
    types are, and hashed without a Python call (a ``TensorType`` hashes in Python, its
    dtype too: twice the time for a key of ten types)."""
    return t.dtype._name_, t.shape


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
    replaced = subst.keys()
    for op in graph.ops:
        if not replaced.isdisjoint(op.inputs):
            op.inputs = [resolve(subst, v) if v in subst else v for v in op.inputs]
    graph.results = [resolve(subst, v) for v in graph.results]


def replace_all_uses(graph: Graph, old: Value, new: Value) -> None:
    """Make every op of ``graph`` and its results use ``new`` instead of ``old``."""
    apply_substitution(graph, {old: new})
