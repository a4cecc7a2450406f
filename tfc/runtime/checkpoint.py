"""Checkpoints: the values of all variables (optimizer slots included) and the step.

A checkpoint is one zip file, ``ckpt-<step>.tfckpt``, laid out like the artifact:

- ``manifest.json``: ``{"format": "tfc-checkpoint", "version": 1, "step": N,
  "variables": {name: {"dtype", "shape", "file"}}, "sha256": {file: digest}}`` (the
  digests, checked on reading, are absent in checkpoints of older tfc versions)
- ``variables/0000.npy`` ...: one ``.npy`` per variable (``allow_pickle=False``).
- ``extra/0000.npy`` ...: optional named arrays that are not variables, listed under
  ``"extra"`` in the manifest like the variables (the position of an input pipeline:
  ``tfc run --batch`` saves its ``tfc.data`` iterator's state here).

A checkpoint directory holds checkpoint files and an index, ``checkpoint.json``
(``{"latest": "ckpt-120.tfckpt", "all": [oldest, ..., newest]}``). Saving is ordered so
that a crash at any point leaves a loadable state: the checkpoint file is written
atomically (temp file beside it, fsync, ``os.replace``, fsync of the directory), THEN
the index is written the same way, and only THEN are checkpoints beyond ``max_to_keep``
deleted. So the index only ever names complete files, and a file is deleted only once
no index names it. A process killed while saving leaves its temp file behind; the next
save into the directory removes it (``tfc.atomic``). The step is saved because
random ops are seeded with it: a program restored at step k continues exactly as an
uninterrupted run would.

Every problem found while reading is one ``CheckpointError`` sentence naming the file.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Mapping

import numpy as np

from tfc.atomic import atomic_write, remove_stale_temps
from tfc.errors import ArtifactError, TfcError
from tfc.ir.core import VariableDecl
from tfc.runtime.artifact import MANIFEST, open_zip, parse_manifest, read_variables
from tfc.runtime.digests import FIELD as DIGESTS
from tfc.runtime.digests import npy_digest

FORMAT = "tfc-checkpoint"
VERSION = 1
INDEX = "checkpoint.json"
SUFFIX = ".tfckpt"
PREFIX = "ckpt"
DEFAULT_MAX_TO_KEEP = 5

PathLike = str | os.PathLike[str]


class CheckpointError(ArtifactError):
    """A checkpoint or checkpoint index that is missing, corrupt, or does not fit."""


@dataclass(frozen=True)
class Checkpoint:
    """What one checkpoint file holds: the step, each variable's value and the extras."""

    path: Path
    step: int
    values: dict[str, np.ndarray]
    extra: dict[str, np.ndarray] = field(default_factory=dict)


def checkpoint_name(step: int, prefix: str = PREFIX) -> str:
    """``ckpt-120.tfckpt``: the file name of the checkpoint of ``step``."""
    return f"{prefix}-{int(step)}{SUFFIX}"


# ---- writing ------------------------------------------------------------------------

def _write_array(member: IO[bytes], arr: np.ndarray) -> None:
    np.save(member, arr, allow_pickle=False)


def write_checkpoint(path: PathLike, variables: Mapping[str, Any], step: int,
                     extra: Mapping[str, Any] | None = None) -> Path:
    """Write one checkpoint file atomically (no index update); returns its path.
    ``extra``: named arrays saved beside the variables (``Checkpoint.extra``).

    Either the complete new file is at ``path`` afterwards, or whatever was there
    before is left untouched (and no temp file remains unless the process was killed).
    """
    step = int(step)
    if step < 0:
        raise CheckpointError(f"cannot save {path}: the step {step} is negative")
    arrays = {name: np.asarray(v) for name, v in variables.items()}
    manifest: dict[str, Any] = {"format": FORMAT, "version": VERSION, "step": step,
                                "variables": {}}
    for i, (name, arr) in enumerate(arrays.items()):
        if arr.dtype == object:
            raise CheckpointError(f"cannot save {path}: variable '{name}' holds Python "
                                  f"objects, not numbers")
        manifest["variables"][name] = {"dtype": _dtype_name(name, arr, path),
                                       "shape": list(arr.shape),
                                       "file": f"variables/{i:04d}.npy"}
    manifest[DIGESTS] = {info["file"]: npy_digest(arrays[name])
                         for name, info in manifest["variables"].items()}
    extras = {name: np.asarray(v) for name, v in (extra or {}).items()}
    if extras:
        manifest["extra"] = {}
        for i, (name, arr) in enumerate(extras.items()):
            manifest["extra"][name] = {"dtype": _dtype_name(name, arr, path),
                                       "shape": list(arr.shape), "file": f"extra/{i:04d}.npy"}
            manifest[DIGESTS][f"extra/{i:04d}.npy"] = npy_digest(arr)

    def write(f: IO[bytes]) -> None:
        with zipfile.ZipFile(f, "w") as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=2) + "\n",
                        compress_type=zipfile.ZIP_DEFLATED)
            for name, info in manifest["variables"].items():
                with zf.open(info["file"], "w", force_zip64=True) as member:
                    _write_array(member, arrays[name])
            for name, info in manifest.get("extra", {}).items():
                with zf.open(info["file"], "w", force_zip64=True) as member:
                    _write_array(member, extras[name])

    atomic_write(path, write)
    return Path(path)


def _dtype_name(name: str, arr: np.ndarray, path: Any) -> str:
    from tfc.ir.types import DType
    try:
        return DType.from_numpy(arr.dtype).value
    except TfcError:
        raise CheckpointError(f"cannot save {path}: variable '{name}' has dtype {arr.dtype}, "
                              f"which tfc has no type for") from None


def save_checkpoint(target: PathLike, variables: Mapping[str, Any], step: int, *,
                    max_to_keep: int | None = DEFAULT_MAX_TO_KEEP,
                    prefix: str = PREFIX, extra: Mapping[str, Any] | None = None) -> Path:
    """Save a checkpoint into a directory and record it in the directory's index.

    ``target`` is a directory (created if needed; the file is ``<prefix>-<step>.tfckpt``)
    or a file name ending in ``.tfckpt`` (its directory gets the index). After the index
    names the new file, the oldest checkpoints beyond ``max_to_keep`` are deleted
    (``None`` or 0 keeps all). Returns the checkpoint's path.
    """
    if max_to_keep is not None and max_to_keep < 0:
        raise TfcError(f"max_to_keep must be None or at least 0, not {max_to_keep}")
    target = Path(target)
    if target.suffix == SUFFIX and not target.is_dir():
        directory, name = target.parent, target.name
    else:
        directory, name = target, checkpoint_name(step, prefix)
    directory.mkdir(parents=True, exist_ok=True)
    # what a process killed mid-save left: its temps of checkpoint files and the index
    remove_stale_temps(directory, lambda target: target == INDEX or target.endswith(SUFFIX))
    path = write_checkpoint(directory / name, variables, step, extra)
    names = [n for n in _read_index_or_empty(directory)
             if n != name and (directory / n).is_file()] + [name]
    keep = names if not max_to_keep else names[-max_to_keep:]
    write_index(directory, keep)
    for old in names[:len(names) - len(keep)]:  # only once no index names them
        (directory / old).unlink(missing_ok=True)
    return path


def write_index(directory: PathLike, names: list[str]) -> None:
    """Write ``checkpoint.json`` atomically: ``names`` oldest first, the last is latest."""
    index = {"latest": names[-1] if names else None, "all": list(names)}
    data = (json.dumps(index, indent=2) + "\n").encode("utf-8")
    atomic_write(Path(directory) / INDEX, lambda f: f.write(data))


# ---- the index ----------------------------------------------------------------------

def read_index(directory: PathLike) -> list[str] | None:
    """The checkpoint names the index of ``directory`` lists, oldest first; None if the
    directory has no index. A malformed index is a ``CheckpointError``."""
    path = Path(directory) / INDEX
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        index = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is corrupt (not valid JSON: {e})") from None
    names = index.get("all") if isinstance(index, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CheckpointError(f"{path} is corrupt (it should hold a list 'all' of "
                              f"checkpoint file names)")
    for n in names:
        if not n or Path(n).name != n or n in (".", ".."):
            raise CheckpointError(f"{path} names {n!r}, which is not a file name in "
                                  f"{directory}")
    latest = index.get("latest")
    if names and latest != names[-1]:
        raise CheckpointError(f"{path} is corrupt (its 'latest' {latest!r} is not the last "
                              f"of 'all')")
    return names


def _read_index_or_empty(directory: Path) -> list[str]:
    """The index's names, or none where there is no usable index: a save never fails
    over an old index (one only a person or another program could have broken)."""
    try:
        return read_index(directory) or []
    except CheckpointError:
        return []


def latest_checkpoint(directory: PathLike) -> str | None:
    """The path of the newest checkpoint in ``directory``, or None if it has none
    (``tf.train.latest_checkpoint``)."""
    names = read_index(directory)
    if not names:
        return None
    return str(Path(directory) / names[-1])


def resolve_checkpoint(path_or_dir: PathLike) -> Path:
    """The checkpoint file ``path_or_dir`` means: itself, or a directory's latest."""
    p = Path(path_or_dir)
    if p.is_dir():
        latest = latest_checkpoint(p)
        if latest is None:
            raise CheckpointError(f"no checkpoint in {p} (it has no {INDEX} naming one)")
        if not Path(latest).is_file():
            raise CheckpointError(f"{p / INDEX} names {Path(latest).name}, which does not "
                                  f"exist")
        return Path(latest)
    if not p.exists():
        if p.suffix != SUFFIX and p.with_name(p.name + SUFFIX).is_file():
            return p.with_name(p.name + SUFFIX)  # a TF1-style prefix: model.ckpt-10
        raise CheckpointError(f"no such checkpoint: {p}")
    return p


# ---- reading ------------------------------------------------------------------------

def read_checkpoint(path_or_dir: PathLike) -> Checkpoint:
    """The step and values of a checkpoint file (or of a directory's latest), checked."""
    path = resolve_checkpoint(path_or_dir)
    try:
        with open_zip(path, "tfc checkpoint", CheckpointError) as zf:
            manifest = _read_manifest(zf, path)
            values = dict(read_variables(zf, path, manifest))
            extra = manifest.get("extra", {})
            if not isinstance(extra, dict):
                raise CheckpointError(f"{path}: {MANIFEST} has an 'extra' that is not an "
                                      f"object")
            extras = dict(read_variables(zf, path, {**manifest, "variables": extra}))
    except CheckpointError:
        raise
    except ArtifactError as e:  # the shared member checks: same sentence, our error type
        raise CheckpointError(e.message) from None
    return Checkpoint(path, manifest["step"], values, extras)


def _read_manifest(zf: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    try:
        raw = zf.read(MANIFEST)
    except KeyError:
        raise CheckpointError(f"{path} has no {MANIFEST} (is it a tfc checkpoint?)") from None
    try:
        if json.loads(raw.decode("utf-8")).get("format") == "tfc":
            raise CheckpointError(f"{path} is a tfc artifact, not a checkpoint (load it "
                                  f"with tfc.runtime.load)")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        pass  # parse_manifest says what is wrong
    return parse_manifest(raw, path, FORMAT, VERSION, "tfc checkpoint",
                          (("step", int), ("variables", dict)), CheckpointError)


def check_values(ckpt: Checkpoint, decls: Mapping[str, VariableDecl], *,
                 allow_extra: bool = False) -> dict[str, np.ndarray]:
    """The checkpoint's value of each declared variable, each checked against its
    declaration; a ``CheckpointError`` for a missing variable, a wrong dtype or shape,
    or (unless ``allow_extra``) a variable the declarations do not have."""
    from tfc.runtime.program import check_variable_value

    missing = [n for n in decls if n not in ckpt.values]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{ckpt.path} has no value for variable @{missing[0]}{more}")
    extra = [n for n in ckpt.values if n not in decls]
    if extra and not allow_extra:
        raise CheckpointError(f"{ckpt.path} holds variable @{extra[0]}, which the program "
                              f"does not declare")
    out: dict[str, np.ndarray] = {}
    for name, decl in decls.items():
        checked = check_variable_value(decl, ckpt.values[name])
        if isinstance(checked, str):
            raise CheckpointError(f"{ckpt.path}: {checked}")
        out[name] = checked
    return out
