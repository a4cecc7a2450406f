"""The CUDA backend: the same fusion regions and memory plan as the LLVM backend, run as
generated CUDA C kernels, cuBLAS and array-module ops on a GPU (or on the CPU emulator).

``CUDABackend.compile(module, entry)`` needs no GPU:

1. The module must be lowered for it (``pipeline = "fusion,memory"``, as llvm): the
   entry's graph is final and ``module.memory_plans`` holds its schedule and arena.
2. Every op is classified: a ``fusion`` gets a kernel (``codegen.fusion_kernel``),
   so does a random op (``codegen_random.random_kernel``: one Philox launch), views alias, variable ops and constants are the executable's own, the rest run
   through ``library`` (array-module ops, per-binding values, host ops). One op that
   none of these handles (control flow, ``send``/``recv``, a fusion the generator cannot
   compile) sends the whole graph to the reference backend, named in ``fallback_ops``,
   the report and a warning, as the LLVM backend does.
3. The kernels' text (``kernel.module_source``) is compiled to PTX once by NVRTC
   (``nvrtc``) when NVRTC is present, which checks it; otherwise the PTX is made when the
   executable first runs on a GPU (where cupy brings NVRTC).

``export`` stores the members ``kernels.cu`` (the source), ``kernels.ptx`` and ``arch``
(the PTX and its virtual architecture) and ``tables.json`` (each kernel's op position,
name, source, parameters and launch rule); ``load`` rebuilds the executable from them with
no code generation and no NVRTC (on a GPU older than the PTX's architecture the stored
source is compiled again for it).
"""

from __future__ import annotations

import json
import time
import warnings
from typing import Any, Mapping

from tfc.backends.base import planned
from tfc.backends.cuda import library
from tfc.backends.cuda.executable import CompileReport, CUDAExecutable
from tfc.backends.cuda.kernel import Kernel, Launch, Param, Unsupported, module_source
from tfc.errors import ArtifactError
from tfc.ir.core import Graph, Module
from tfc.ir.registry import VIEW, lookup

SOURCE_MEMBER, PTX_MEMBER, ARCH_MEMBER, TABLES_MEMBER = (
    "kernels.cu", "kernels.ptx", "arch", "tables.json")
BUILTIN_OPS = frozenset({"var.read", "constant"})


def kernel_name(entry: str, index: int) -> str:
    """The C name of the kernel of op ``index`` (entry names need not be C names)."""
    return f"tfc_k{index}"


def how_to_run(kind: str) -> str | None:
    """How the executable runs an op of ``kind`` outside fusions: ``"builtin"``
    (variables, constants), ``"view"`` (aliases its input) or ``library.how_to_run``'s
    answer (None: nothing runs it, the graph falls back)."""
    if kind in BUILTIN_OPS or kind.startswith("var."):
        return "builtin"
    if lookup(kind).has(VIEW):
        return "view"
    return library.how_to_run(kind)


def classify(graph: Graph, *, generate: bool = True
             ) -> tuple[dict[int, Kernel], list[str], list[str]]:
    """The kernels of the graph's fusions (by op position; none unless ``generate``),
    the ops nothing runs (``kind`` or ``fusion (why)``) and the ops run on the host."""
    from tfc.backends.cuda.codegen import fusion_kernel
    from tfc.backends.cuda.codegen_random import KINDS as RANDOM_KINDS, random_kernel
    kernels: dict[int, Kernel] = {}
    failed: list[str] = []
    host: list[str] = []
    for i, op in enumerate(graph.ops):
        if op.kind == "fusion":
            if generate:
                try:
                    kernels[i] = fusion_kernel(op, kernel_name(graph.name, i))
                except Unsupported as e:
                    failed.append(f"fusion ({e})")
            continue
        how = how_to_run(op.kind)
        if generate and op.kind in RANDOM_KINDS:
            try:  # one Philox kernel (else the registry's sampler with the array module)
                kernels[i] = random_kernel(op, kernel_name(graph.name, i))
            except Unsupported:
                pass
        if how is None:
            failed.append(op.kind)
        elif how == "host" and op.kind not in host:
            host.append(op.kind)
    return kernels, sorted(set(failed)), host


class CUDABackend:
    """Compiles entry graphs to CUDA kernels plus library calls (module docstring)."""

    name = "cuda"
    # The same lowering as llvm: fusion regions, then the memory plan's arena.
    pipeline = "fusion,memory"

    def __init__(self, *, arch: str | None = None) -> None:
        from tfc.backends.cuda.nvrtc import DEFAULT_ARCH
        self.arch = arch or DEFAULT_ARCH

    def compile(self, module: Module, entry: str) -> CUDAExecutable:
        graph, _ = planned(module, entry, self.name)
        report = CompileReport(entry, arch=self.arch)
        t0 = time.perf_counter()
        kernels, failed, host = classify(graph)
        report.kernels, report.fallback_ops, report.host_ops = len(kernels), failed, host
        report.seconds["codegen"] = time.perf_counter() - t0
        if failed:
            warnings.warn(f"cuda backend: graph @{entry} runs on the reference backend; "
                          f"ops not supported: {', '.join(failed)}", stacklevel=2)
            return CUDAExecutable(module, graph, {}, None, self.arch, report)
        ptx = None
        if kernels:
            from tfc.backends.cuda import nvrtc
            if nvrtc.available():
                t1 = time.perf_counter()
                ptx = nvrtc.compile_ptx(module_source([kernels[i] for i in sorted(kernels)]),
                                        arch=self.arch)
                report.ptx_bytes = len(ptx)
                report.seconds["nvrtc"] = time.perf_counter() - t1
        return CUDAExecutable(module, graph, kernels, ptx, self.arch, report)

    def export(self, executable: Any) -> dict[str, bytes]:
        """The kernels' source, PTX and tables; nothing for a reference fallback or an
        executable this backend did not make."""
        if not isinstance(executable, CUDAExecutable) or executable.fallback_ops:
            return {}
        kernels = executable.kernels
        table = {"kernels": [_kernel_json(i, k) for i, k in sorted(kernels.items())],
                 "host_ops": executable.report.host_ops}
        members = {SOURCE_MEMBER: module_source([kernels[i] for i in sorted(kernels)])
                   .encode(), ARCH_MEMBER: executable.arch.encode(),
                   TABLES_MEMBER: json.dumps(table).encode()}
        if executable.ptx is not None:
            members[PTX_MEMBER] = executable.ptx.encode()
        return members

    def load(self, module: Module, entry: str, members: Mapping[str, bytes]
             ) -> CUDAExecutable:
        """The executable from ``export``'s members: no code generation, no NVRTC."""
        graph, _ = planned(module, entry, self.name)
        for name in (SOURCE_MEMBER, ARCH_MEMBER, TABLES_MEMBER):
            if name not in members:
                raise ArtifactError(f"the CUDA code of '{entry}' lacks its member {name}")
        unknown = sorted(set(members) - {SOURCE_MEMBER, PTX_MEMBER, ARCH_MEMBER,
                                         TABLES_MEMBER})
        if unknown:
            raise ArtifactError(f"the CUDA code of '{entry}' has members the cuda backend "
                                f"does not know: {', '.join(unknown)}")
        try:
            arch = members[ARCH_MEMBER].decode()
            table = json.loads(members[TABLES_MEMBER].decode())
            kernels = {int(k["op"]): _kernel_from_json(k) for k in table["kernels"]}
            host = [str(h) for h in table["host_ops"]]
            ptx = members[PTX_MEMBER].decode() if PTX_MEMBER in members else None
        except (ValueError, KeyError, TypeError) as e:  # bad JSON or UTF-8 too
            raise ArtifactError(f"invalid CUDA tables for '{entry}': {e}") from None
        from tfc.backends.cuda.codegen_random import KINDS as RANDOM_KINDS
        fusions = {i for i, op in enumerate(graph.ops) if op.kind == "fusion"}
        randoms = {i for i, op in enumerate(graph.ops) if op.kind in RANDOM_KINDS}
        if not fusions <= set(kernels) <= fusions | randoms:
            raise ArtifactError(f"the CUDA tables of @{entry} do not fit its graph "
                                f"({len(kernels)} kernels for {len(fusions)} fusions)")
        _, failed, _ = classify(graph, generate=False)
        if failed:
            raise ArtifactError(f"@{entry} cannot run on the cuda backend (unsupported: "
                                f"{', '.join(failed)})")
        report = CompileReport(entry, kernels=len(kernels), host_ops=host,
                               ptx_bytes=len(ptx or ""), arch=arch)
        return CUDAExecutable(module, graph, kernels, ptx, arch, report)


def _kernel_json(index: int, k: Kernel) -> dict[str, Any]:
    return {"op": index, "name": k.name, "source": k.source,
            "params": [[p.name, p.ctype] for p in k.params],
            "launch": {"work": list(k.launch.work), "block": k.launch.block,
                       "per_block": k.launch.per_block,
                       "shared_bytes": k.launch.shared_bytes,
                       "scratch_bytes": k.launch.scratch_bytes}}


def _kernel_from_json(d: Any) -> Kernel:
    launch = d["launch"]
    work = tuple(w if isinstance(w, int) else str(w) for w in launch["work"])
    return Kernel(str(d["name"]), str(d["source"]),
                  tuple(Param(str(n), str(c)) for n, c in d["params"]),
                  Launch(work, int(launch["block"]), int(launch["per_block"]),
                         int(launch["shared_bytes"]), int(launch.get("scratch_bytes", 0))))
