"""``tfc.train.Saver``: TF1's way to save and restore a session's variables.

    saver = tfc.train.Saver(max_to_keep=3)
    path = saver.save(sess, "ckpt_dir/model", global_step=step)   # ckpt_dir/model-100.tfckpt
    saver.restore(sess, tfc.train.latest_checkpoint("ckpt_dir"))

The files are tfc checkpoints (``tfc.runtime.checkpoint``): one atomic ``.tfckpt`` zip per
save and a ``checkpoint.json`` index per directory, so a killed save never damages the
previous checkpoint. A partitioned variable (``tfc.fixed_size_partitioner``) is saved
whole under its own name, so a checkpoint written with k shards restores with k' shards
or into an unpartitioned variable, and back. A checkpoint also holds the session's step counter, which seeds
random ops: a restored session continues exactly as the one that saved it would have.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from tfc.api.graph import Tensor, Variable
from tfc.api.partitioned import logical_value, logical_variables, stored_values
from tfc.errors import TfcError
from tfc.runtime.checkpoint import (DEFAULT_MAX_TO_KEEP, PREFIX, SUFFIX, CheckpointError,
                                    check_values, latest_checkpoint, read_checkpoint,
                                    save_checkpoint)

if TYPE_CHECKING:
    from tfc.api.session import Session

__all__ = ["Saver", "latest_checkpoint"]


class Saver:
    """Saves and restores variables of a ``Session`` (``tf.compat.v1.train.Saver``).

    ``var_list`` is None (every global variable of the session's graph, as it is when
    saving or restoring: not the local ones, ``tfc.metrics``' sums), a list of
    variables, or a dict from names in the checkpoint to variables. ``max_to_keep`` is
    how many checkpoints a directory keeps (None or 0: all); the oldest are deleted once
    the index no longer names them.
    """

    def __init__(self, var_list: Sequence[Variable] | Mapping[str, Variable] | None = None,
                 max_to_keep: int | None = DEFAULT_MAX_TO_KEEP) -> None:
        if max_to_keep is not None and max_to_keep < 0:
            raise TfcError(f"Saver: max_to_keep must be None or at least 0, not {max_to_keep}")
        self._var_list = _named(var_list) if var_list is not None else None
        self.max_to_keep = max_to_keep
        self._last: list[str] = []

    @property
    def last_checkpoints(self) -> list[str]:
        """Checkpoints this saver wrote that still exist, oldest first."""
        self._last = [p for p in self._last if Path(p).exists()]
        return list(self._last)

    def save(self, sess: "Session", save_path: str | os.PathLike[str],
             global_step: int | Tensor | Variable | None = None) -> str:
        """Write the variables and ``sess.step`` to a checkpoint; returns its path.

        ``save_path`` is a prefix (``dir/model`` -> ``dir/model.tfckpt``, or
        ``dir/model-<global_step>.tfckpt`` with ``global_step``) or an existing directory
        (then the prefix is ``dir/ckpt``). ``global_step`` names the file only (an int,
        or a tensor or variable evaluated in ``sess`` without advancing its step); the
        step the checkpoint restores is always ``sess.step``.
        """
        variables = self._variables(sess)
        values = sess.variable_values()
        target = self._target(save_path, global_step, sess)
        path = save_checkpoint(target, {name: logical_value(v, values)
                                        for name, v in variables.items()},
                               sess.step, max_to_keep=self.max_to_keep)
        self._last = [p for p in self._last if p != str(path)] + [str(path)]
        return str(path)

    def restore(self, sess: "Session", save_path: str | os.PathLike[str]) -> None:
        """Set the variables and ``sess.step`` from a checkpoint (a file, the prefix
        ``save`` was given with its step, or a directory: its latest).

        The checkpoint may hold more variables than this saver restores; each one it
        restores must be there with its declared dtype and shape, or nothing changes.
        """
        if save_path is None:
            raise CheckpointError("Saver.restore: the checkpoint path is None (did "
                                  "latest_checkpoint find no checkpoint?)")
        ckpt = read_checkpoint(save_path)
        variables = self._variables(sess)
        values = check_values(ckpt, {name: v.decl for name, v in variables.items()},
                              allow_extra=True)
        for name, v in variables.items():
            sess.variables.update(stored_values(v, values[name]))
        sess.step = ckpt.step

    # ---- internals -------------------------------------------------------------------

    def _variables(self, sess: "Session") -> dict[str, Variable]:
        if self._var_list is not None:
            foreign = [v for v in self._var_list.values() if v.graph is not sess.graph]
            if foreign:
                raise TfcError(f"Saver: variable '{foreign[0].name}' is not in the "
                               f"session's graph")
            return self._var_list
        from tfc.api.graph_collections import is_local_variable
        return {n: v for n, v in logical_variables(sess.graph).items()
                if not is_local_variable(v)}

    def _target(self, save_path: str | os.PathLike[str], global_step: Any,
                sess: "Session") -> Path:
        p = Path(save_path)
        if p.is_dir() or str(save_path).endswith(os.sep):
            p = p / PREFIX
        if global_step is None:
            return p if p.suffix == SUFFIX else p.with_name(p.name + SUFFIX)
        if isinstance(global_step, (Tensor, Variable)):
            global_step = _evaluate(sess, global_step)
        step = np.asarray(global_step)
        if step.shape != () or step.dtype.kind not in "iu":
            raise TfcError(f"Saver.save: global_step must be an integer, not {global_step!r}")
        stem = p.name[:-len(SUFFIX)] if p.suffix == SUFFIX else p.name
        return p.with_name(f"{stem}-{int(step)}{SUFFIX}")


def _evaluate(sess: "Session", t: Tensor | Variable) -> Any:
    """The value of ``t`` in ``sess`` without advancing ``sess.step``: a file name must not
    shift the random numbers of the steps that follow (a variable is read directly)."""
    op = t.value().value.op if isinstance(t, Variable) else t.value.op
    if op is not None and op.kind == "var.read" and op.attrs["var"] in sess.graph.variables:
        return sess.variable_values()[op.attrs["var"]]
    step = sess.step
    try:
        return sess.run(t)
    finally:
        sess.step = step


def _named(var_list: Sequence[Variable] | Mapping[str, Variable]) -> dict[str, Variable]:
    items: list[tuple[Any, Any]]  # checked below: a user's list may hold anything
    if isinstance(var_list, Mapping):
        items = list(var_list.items())
    else:
        items = [(getattr(v, "name", None), v) for v in var_list]
    out: dict[str, Variable] = {}
    for name, v in items:
        if not isinstance(v, Variable):
            raise TfcError(f"Saver: var_list holds {v!r}, which is not a tfc.Variable")
        if name in out:
            raise TfcError(f"Saver: var_list names '{name}' twice")
        out[str(name)] = v
    return out

