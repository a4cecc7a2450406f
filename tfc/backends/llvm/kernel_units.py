"""Identical kernels compiled once, each distinct kernel in an LLVM module of its own.

A model's layers lower to the same kernels over and over (an L-layer MLP: the same GEMM,
bias-and-ReLU and update kernels L times), and LLVM's O3 and code generation cost grows
with the code it is given. So the lowered module is reshaped before LLVM sees it:

1. ``dedup_kernels`` (after lowering, before the entry is built): kernels whose LLVM
   functions print the same up to their own name are one kernel. Same text means the same
   code on the same arguments: run-time sizes and arena offsets reach a kernel through
   its pointer arguments and the params array (slots named in the text), error codes and
   constants are in the text, so two kernels that differ in any of these stay two. Every
   call site then calls the first; the others are deleted.
2. ``split_module`` (after the step table's draft): one *unit* per distinct kernel, a
   module with the kernel (internal), its whole-range wrapper and its thread-pool
   trampoline (both exported), the helpers they call (copied, internal) and declarations
   of what they use from elsewhere (``tfc_error_detail``, BLAS). A unit's exported
   symbols are named after the hash of its text with its own names replaced by
   placeholders (``tfck_<hash>``), so the same kernel in another layer, entry, model or
   process is the same text, the same key in the object-code cache
   (``native.cache_key``: with the host CPU, its features, the LLVM build and the
   backend's sources) and the same object. There is no per-entry glue: the schedule is a
   table (``step_table``) that one fixed loop walks, calling the units' exports through
   the addresses the table is given when the code is loaded.

The objects are linked when loaded (``native.load_object``: one MCJIT engine; the global
variables first, then the units, then the runner: see ``Split``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llvmlite.ir as ir

if TYPE_CHECKING:
    from tfc.backends.llvm.entry import GraphCompiler

_REF = re.compile(r'@"([^"]+)"')
_MD = re.compile(r'!(\d+)\b')
WHOLE_SUFFIX, TASK_SUFFIX = "_whole", "_task"
_PLACEHOLDER = "__tfc_kernel__"


def _refs(text: str) -> set[str]:
    return set(_REF.findall(text))


def _renamed(text: str, names: dict[str, str]) -> str:
    return _REF.sub(lambda m: f'@"{names.get(m[1], m[1])}"', text)


def _metadata_defs(module: ir.Module) -> dict[str, str]:
    """The module's numbered metadata (loop IDs and their properties): number -> text."""
    out = {}
    for md in module.metadata:
        text = str(md)
        out[text[1:text.index(" ")]] = text
    return out


def _numbered_metadata(body: str, defs: dict[str, str]) -> str:
    """``body`` with the metadata it refers to renumbered from 0 in order of first use,
    followed by those definitions (and the ones they refer to): a kernel's text then
    does not depend on how many loops were lowered before it."""
    order: dict[str, str] = {}
    pending = [body]
    for text in pending:
        for n in _MD.findall(text):
            if n not in order:
                order[n] = str(len(order))
                pending.append(defs[n])
    if not order:
        return body

    def renumber(text: str) -> str:
        return _MD.sub(lambda m: "!" + order[m[1]], text)

    return renumber(body) + "\n" + "\n".join(renumber(defs[n]) for n in order) + "\n"


def dedup_kernels(graph_compiler: GraphCompiler) -> int:
    """Make every call site of identical kernels call one function; returns the number of
    distinct kernels. Kernels that another function calls (the steps of a control-flow
    kernel's regions) are left alone."""
    module = graph_compiler.comp.module
    kernels = graph_compiler.calls
    texts = graph_compiler.function_texts  # printed once: split_module reuses them
    texts.clear()
    for fn in module.functions:
        if fn.blocks:
            texts[fn.name] = str(fn)
    called: set[str] = set()
    for name, text in texts.items():
        called |= _refs(text) - {name}
    defs = _metadata_defs(module)
    first_of: dict[str, ir.Function] = {}
    # per function met: (it, the function its call sites call: itself when kept), by id
    # (a kernel reused by many call sites is one function, decided once)
    done: dict[int, tuple[ir.Function, ir.Function]] = {}
    for kernel in kernels:
        fn = kernel.fn
        hit = done.get(id(fn))
        if hit is not None:
            kernel.fn = hit[1]
            continue
        name = fn.name
        if name in called:
            done[id(fn)] = (fn, fn)
            continue
        own = f'@"{name}"'
        canonical = _numbered_metadata(
            texts[name].replace(own, f'@"{_PLACEHOLDER}"', 1), defs)
        first = first_of.setdefault(canonical, fn)
        done[id(fn)] = (fn, first)
        if first is not fn:
            kernel.fn = first
            del module.globals[name]
            del texts[name]
    return len({first.name for _, first in done.values()})  # (what the kernels call)


@dataclass
class Unit:
    """One distinct kernel's module: its text and the symbols it exports."""

    text: str
    symbol: str  # tfck_<hash>: the kernel; with WHOLE_SUFFIX / TASK_SUFFIX its exports


@dataclass
class Split:
    """The module texts of one entry, in the order they must be loaded: the global
    variables (``tfc_error_detail``, ``tfc_prof_stamps``), the kernel units (then the
    step table's runner, the same for every entry: ``step_table.runner``); and the
    symbol of each kernel function's unit.

    Each refers only to symbols of the runtime (``llvm.add_symbol``) and of the modules
    before it: MCJIT (llvmlite 0.50) corrupted a kernel's code when an object loaded
    before it referred to a symbol it defines (seen: a glue object loaded first made its
    unit's kernel crash when called directly)."""

    data: str
    units: list[Unit] = field(default_factory=list)
    symbols: dict[str, str] = field(default_factory=dict)


def _header(module: ir.Module) -> str:
    lines = []
    if module.triple:
        lines.append(f'target triple = "{module.triple}"')
    if module.data_layout:
        lines.append(f'target datalayout = "{module.data_layout}"')
    return "\n".join(lines) + "\n"


def _is_local(value: ir.GlobalValue) -> bool:
    return value.linkage in ("internal", "private")


def _declaration(value: ir.GlobalValue, name: str) -> str:
    """An external declaration of ``value`` (a function or a global variable) as ``name``;
    a declared function and an internal global (a constant table) as they are."""
    if isinstance(value, ir.Function) and not value.blocks or \
            not isinstance(value, ir.Function) and _is_local(value):
        return str(value)
    if isinstance(value, ir.Function):
        ft = value.ftype
        return (f'declare {ft.return_type} @"{name}"'
                f'({", ".join(str(a) for a in ft.args)})')
    return f'@"{name}" = external global {value.value_type}'


def split_module(graph_compiler: GraphCompiler) -> Split:
    """The global variables and one unit per distinct kernel (the kernels' callers are the
    step table's loop: ``step_table``)."""
    module = graph_compiler.comp.module
    header = _header(module)
    values = dict(module.globals)
    printed = graph_compiler.function_texts  # the kernels, as dedup_kernels printed them
    texts = {name: printed.get(name) or str(v) for name, v in values.items()
             if isinstance(v, ir.Function) and v.blocks}
    refs = {name: _refs(text) - {name} for name, text in texts.items()}
    defs = _metadata_defs(module)

    def closure(roots: list[str]) -> list[str]:
        """The functions defined here that ``roots`` call, directly or not."""
        seen: list[str] = []
        stack = list(reversed(roots))
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.append(name)
            stack.extend(sorted(r for r in refs.get(name, ()) if r in texts))
        return seen

    kernel_names = list(dict.fromkeys(k.fn.name for k in graph_compiler.calls))
    symbols: dict[str, str] = {}  # a kernel function -> its unit's symbol
    units: dict[str, Unit] = {}
    for name in kernel_names:
        exports = [n for n in (name + WHOLE_SUFFIX, name + TASK_SUFFIX) if n in texts]
        defined = closure([name, *exports])
        local = {n: f"{_PLACEHOLDER}.h{i}" for i, n in enumerate(defined) if n not in exports}
        local[name] = _PLACEHOLDER
        for n in exports:
            local[n] = _PLACEHOLDER + n[len(name):]
        used = sorted(set().union(*(refs[n] for n in defined)) - set(defined))
        body = [_declaration(values[u], u) for u in used]
        body += [texts[n] for n in defined]
        text = _numbered_metadata(_renamed(header + "\n".join(body) + "\n", local), defs)
        symbol = "tfck_" + hashlib.sha256(text.encode()).hexdigest()[:20]
        symbols[name] = symbol
        if symbol not in units:
            units[symbol] = Unit(text.replace(f'@"{_PLACEHOLDER}', f'@"{symbol}'), symbol)
    data_lines = [str(v) for v in values.values()
                  if not isinstance(v, ir.Function) and not _is_local(v)]
    data = header + "\n".join(data_lines) + "\n"
    return Split(data, list(units.values()), symbols)
