"""The variables a user wrote, over the variables a module stores: a partitioned variable
(``tfc.Variable(..., partitioner=...)``, TF1's ``PartitionedVariable``) is stored as row
blocks ``NAME/part_0`` ... ``NAME/part_{k-1}``, and is read and set whole by its name,
as TF reads one (``as_tensor``: the blocks concatenated) and as its checkpoints
(``tfc.train.Saver``) save it.

A module records no more than the blocks' names and types, so the blocks are recognized
by them: every ``NAME/part_i`` for i in 0..k-1, no variable ``NAME`` itself, one dtype,
one row shape, and row counts as ``row_blocks`` splits them. Anything else (an optimizer
slot ``NAME/part_0/Adagrad``, a gap in the parts) stays a variable of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from tfc.ir.core import VariableDecl
from tfc.ir.types import TensorType

_SHARD = re.compile(r"^(?P<name>.+)/part_(?P<index>0|[1-9][0-9]*)$")


def row_blocks(rows: int, num_shards: int) -> list[int]:
    """The rows of each block: TensorFlow's split, the first ``rows % k`` one longer."""
    base, extra = divmod(rows, num_shards)
    return [base + (1 if i < extra else 0) for i in range(num_shards)]


@dataclass(frozen=True)
class LogicalVariable:
    """One partitioned variable: its name, its blocks' names in row order, whole type."""

    name: str
    shards: tuple[str, ...]
    type: TensorType

    @property
    def decl(self) -> VariableDecl:
        return VariableDecl(self.name, self.type)

    def split(self, value: np.ndarray) -> dict[str, np.ndarray]:
        """Each block's rows of the whole ``value`` (already checked against ``type``)."""
        out, start = {}, 0
        for name, rows in zip(self.shards, row_blocks(int(self.type.shape[0]),
                                                      len(self.shards))):
            out[name] = value[start:start + rows]
            start += rows
        return out


def partitioned_variables(decls: Mapping[str, VariableDecl]) -> dict[str, LogicalVariable]:
    """The partitioned variables among ``decls`` (see the module docstring), by name."""
    groups: dict[str, dict[int, VariableDecl]] = {}
    for name, decl in decls.items():
        m = _SHARD.match(name)
        if m is not None:
            groups.setdefault(m["name"], {})[int(m["index"])] = decl
    out: dict[str, LogicalVariable] = {}
    for name, parts in groups.items():
        if name in decls or sorted(parts) != list(range(len(parts))):
            continue
        blocks = [parts[i].type for i in range(len(parts))]
        first = blocks[0]
        if any(not t.is_static or t.rank == 0 or t.dtype != first.dtype
               or t.shape[1:] != first.shape[1:] for t in blocks):
            continue
        rows = sum(int(t.shape[0]) for t in blocks)
        if [t.shape[0] for t in blocks] != row_blocks(rows, len(blocks)):
            continue
        out[name] = LogicalVariable(name, tuple(parts[i].name for i in range(len(parts))),
                                    TensorType(first.dtype, (rows, *first.shape[1:])))
    return out
