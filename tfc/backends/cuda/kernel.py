"""What a generated CUDA kernel is, shared by its generator, the compilers and the runtime.

A ``Kernel`` is one ``extern "C" __global__`` function as CUDA C text plus what launching
it needs: its parameters in order and a ``Launch`` rule that turns a binding of the
graph's symbols (``{"B": 64}``) into a grid. Kernels are generated once per entry, for
every binding: static dims are literals in the text, symbolic dims are ``long long``
parameters named ``sym_<name>`` (after the pointers, in sorted symbol order), so one PTX
serves every batch size and an artifact can carry it.

The same text is compiled by NVRTC for a GPU (``nvrtc``) and by g++ with a header that
emulates CUDA's execution model on the CPU (``emulator``): a kernel file is
``module_source(kernels)``, the shared ``PRELUDE`` followed by each kernel's text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence


class Unsupported(Exception):
    """The CUDA backend cannot run an op (the graph then runs on the reference backend,
    named in a warning and in ``fallback_ops``, never silently)."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its C name and type (``"const float*"``, ``"float*"``,
    ``"long long"``). Pointers come first (inputs, then outputs), then symbols."""

    name: str
    ctype: str

    @property
    def is_pointer(self) -> bool:
        """Whether the parameter is a pointer (``"const float* __restrict__"`` is)."""
        return "*" in self.ctype


@dataclass(frozen=True)
class Launch:
    """How many threads a kernel runs for a binding.

    ``work`` is the number of independent work items, as a product of dims (ints or
    symbol names): elements for ``loop`` kernels, output rows for ``reduce``/``row``
    kernels. ``per_block`` items are given to a block (one item per thread for element
    kernels, one row per block for row kernels, ...): the generator chooses, the runtime
    only evaluates ``grid``. Kernels loop grid-stride, so ``grid`` may cap the block count
    at ``max_blocks`` without changing results. ``scratch_bytes`` > 0: the kernel takes
    a ``scratch`` pointer after its results (a reduction split across blocks keeps its
    partials and counters there) that the runtime allocates zeroed, once per binding."""

    work: tuple[int | str, ...]
    block: int
    per_block: int
    shared_bytes: int = 0
    # bytes of device memory the kernel's ``scratch`` parameter (after the results) points
    # to: allocated and zeroed once per binding by the runtime, left zeroed by every launch
    scratch_bytes: int = 0

    def items(self, bindings: Mapping[str, int]) -> int:
        return math.prod(d if isinstance(d, int) else bindings[d] for d in self.work)

    def grid(self, bindings: Mapping[str, int], max_blocks: int = 65535) -> int:
        """Blocks to launch: enough for every item, at least one, at most ``max_blocks``."""
        return max(1, min(max_blocks, -(-self.items(bindings) // self.per_block)))


@dataclass(frozen=True)
class Kernel:
    """One generated ``extern "C" __global__`` function: ``source`` is its definition
    (without the prelude), ``params`` its parameters in order."""

    name: str
    source: str
    params: tuple[Param, ...]
    launch: Launch

    @property
    def symbols(self) -> tuple[str, ...]:
        """The graph symbols passed as ``long long sym_<name>`` parameters, in order."""
        return tuple(p.name.removeprefix("sym_") for p in self.params if not p.is_pointer)


def module_source(kernels: Sequence[Kernel]) -> str:
    """The translation unit NVRTC and the emulator compile: the prelude, then each
    kernel. Imported lazily so this module stays free of the toolchain."""
    from tfc.backends.cuda.prelude import PRELUDE
    return PRELUDE + "\n" + "\n\n".join(k.source for k in kernels) + "\n"


__all__ = ["Kernel", "Launch", "Param", "Unsupported", "module_source"]
