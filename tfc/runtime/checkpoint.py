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

A cluster program's checkpoint is *sharded*: one checkpoint file per task holding the
variables that task owns (``ckpt-120.shard.ps-0.tfckpt``, ``ckpt-120.shard.worker-1.tfckpt``;
the driver's extras in ``ckpt-120.shard.driver.tfckpt``), every one of the same step, and
a shard list, ``ckpt-120.tfshards`` (``{"format": "tfc-checkpoint-shards", "step": 120,
"shards": {name: {"file", "sha256", "bytes"}}}``), which is what the index names.
``save_sharded_checkpoint`` writes every shard durably (atomic, fsynced) first, THEN the
shard list, THEN the index: a process killed in the middle leaves shards that no list
names, the previous checkpoint still the latest and loadable, and the next save removes
those orphans with the temp files. Reading a shard list checks each shard's digest and
step, so a checkpoint mixing shards of two steps cannot load.

Every problem found while reading is one ``CheckpointError`` sentence naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
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
SHARDS_SUFFIX = ".tfshards"  # a sharded checkpoint's shard list
SHARDS_FORMAT = "tfc-checkpoint-shards"
DRIVER_SHARD = "driver"  # the shard of the extras (and of variables no task owns)
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
    remove_stale_temps(directory, _is_checkpoint_target)
    path = write_checkpoint(directory / name, variables, step, extra)
    _record(directory, name, max_to_keep)
    return path


def _is_checkpoint_target(target: str) -> bool:
    return target == INDEX or target.endswith((SUFFIX, SHARDS_SUFFIX))


def _record(directory: Path, name: str, max_to_keep: int | None) -> None:
    """Name the complete checkpoint ``name`` last in the index, then delete the oldest
    beyond ``max_to_keep`` (only once no index names them)."""
    names = [n for n in _read_index_or_empty(directory)
             if n != name and (directory / n).is_file()] + [name]
    keep = names if not max_to_keep else names[-max_to_keep:]
    write_index(directory, keep)
    for old in names[:len(names) - len(keep)]:
        _delete_checkpoint(directory, old)


def _delete_checkpoint(directory: Path, name: str) -> None:
    """Delete checkpoint ``name`` (no index names it): a shard list first, then its shards
    (a crash between leaves orphans, which the next sharded save removes)."""
    path = directory / name
    shards = _shard_files(path) if name.endswith(SHARDS_SUFFIX) else []
    path.unlink(missing_ok=True)
    for shard in shards:
        (directory / shard).unlink(missing_ok=True)


# ---- sharded checkpoints ----------------------------------------------------------------

def shard_file_name(step: int, shard: str, prefix: str = PREFIX) -> str:
    """``ckpt-120.shard.ps-0.tfckpt``: the file of shard ``shard`` (a task, ``/job:ps/task:0`` or
    ``ps:0``, or ``driver``) of the checkpoint of ``step``."""
    slug = re.sub(r"[^A-Za-z0-9_]+", "-", shard.replace("/job:", "").replace("/task:", "-"))
    return f"{prefix}-{int(step)}.shard.{slug.strip('-') or 'none'}{SUFFIX}"


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_sharded_checkpoint(directory: PathLike, shards: Mapping[str, Mapping[str, Any]],
                            step: int, *, max_to_keep: int | None = DEFAULT_MAX_TO_KEEP,
                            prefix: str = PREFIX, extra: Mapping[str, Any] | None = None
                            ) -> Path:
    """Save a consistent sharded checkpoint of ``step`` into ``directory``: one checkpoint
    file per shard (``shards``: shard name -> its variables; ``extra`` goes into the
    ``driver`` shard), each written atomically and fsynced; then the shard list naming
    them with their digests; then the index; then the oldest beyond ``max_to_keep`` are
    deleted. Returns the shard list's path (what ``read_checkpoint`` and
    ``Program.restore_checkpoint`` take).

    What earlier saves killed mid-way left (temp files, shards no list names) is removed
    first, so a directory never accumulates them."""
    if max_to_keep is not None and max_to_keep < 0:
        raise TfcError(f"max_to_keep must be None or at least 0, not {max_to_keep}")
    step = int(step)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(directory, _is_checkpoint_target)
    remove_orphan_shards(directory, prefix)
    parts = {name: dict(values) for name, values in shards.items()}
    if extra:
        parts.setdefault(DRIVER_SHARD, {})
    files: dict[str, dict[str, Any]] = {}
    for shard, values in parts.items():
        path = directory / shard_file_name(step, shard, prefix)
        if any(info["file"] == path.name for info in files.values()):
            raise CheckpointError(f"cannot save {directory}: shards {shard!r} and another "
                                  f"share the file name {path.name}")
        write_checkpoint(path, values, step, extra if shard == DRIVER_SHARD else None)
        files[shard] = {"file": path.name, "sha256": _file_digest(path),
                        "bytes": path.stat().st_size}
    manifest = {"format": SHARDS_FORMAT, "version": VERSION, "step": step, "shards": files}
    data = (json.dumps(manifest, indent=2) + "\n").encode("utf-8")
    name = f"{prefix}-{step}{SHARDS_SUFFIX}"
    atomic_write(directory / name, lambda f: f.write(data))  # only now: all shards durable
    _record(directory, name, max_to_keep)
    return directory / name


def _read_shard_list(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"no such checkpoint: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is corrupt (not a readable shard list: {e})") from None
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or manifest.get("format") != SHARDS_FORMAT \
            or not isinstance(manifest.get("step"), int) or not isinstance(shards, dict) \
            or not all(isinstance(i, dict) and isinstance(i.get("file"), str)
                       and Path(i["file"]).name == i["file"] for i in shards.values()):
        raise CheckpointError(f"{path} is not a tfc shard list (format {SHARDS_FORMAT!r} "
                              f"with a step and shards by name)")
    if manifest.get("version") != VERSION:
        raise CheckpointError(f"{path} is a shard list of version {manifest.get('version')}; "
                              f"this tfc reads version {VERSION}")
    return manifest


def _shard_files(path: Path) -> list[str]:
    try:
        return [info["file"] for info in _read_shard_list(path)["shards"].values()]
    except CheckpointError:
        return []


def remove_orphan_shards(directory: PathLike, prefix: str = PREFIX) -> list[Path]:
    """Remove the shard files in ``directory`` that no shard list names (a save killed
    before its list was written); returns them. Best effort, like the temps' clean-up."""
    directory = Path(directory)
    shard = re.compile(rf"^{re.escape(prefix)}-\d+\.shard\.[A-Za-z0-9_-]+{re.escape(SUFFIX)}$")
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    named = {f for n in names if n.endswith(SHARDS_SUFFIX)
             for f in _shard_files(directory / n)} | set(_read_index_or_empty(directory))
    removed = []
    for n in names:
        if shard.match(n) and n not in named:
            with contextlib.suppress(OSError):
                (directory / n).unlink()
                removed.append(directory / n)
    return removed


def _read_sharded(path: Path) -> Checkpoint:
    """A shard list's checkpoint: every shard read (its digest checked, its step the
    list's), the variables and extras merged."""
    manifest = _read_shard_list(path)
    step = manifest["step"]
    values: dict[str, np.ndarray] = {}
    extras: dict[str, np.ndarray] = {}
    for shard, info in manifest["shards"].items():
        file = path.parent / info["file"]
        if not file.is_file():
            raise CheckpointError(f"{path} names shard {shard!r} in {info['file']}, which "
                                  f"does not exist")
        if "sha256" in info and _file_digest(file) != info["sha256"]:
            raise CheckpointError(f"{file} (shard {shard!r} of {path.name}) is corrupt: its "
                                  f"digest is not the one its shard list recorded")
        part = read_checkpoint(file)
        if part.step != step:
            raise CheckpointError(f"{file} holds step {part.step}, but its shard list "
                                  f"{path.name} is of step {step}: the shards are not "
                                  f"from one step")
        for name in part.values:
            if name in values:
                raise CheckpointError(f"{path}: variable @{name} is in two shards")
        values.update(part.values)
        extras.update(part.extra)
    return Checkpoint(path, step, values, extras)


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
        for suffix in (SUFFIX, SHARDS_SUFFIX):  # a TF1-style prefix: model.ckpt-10
            if p.suffix != suffix and p.with_name(p.name + suffix).is_file():
                return p.with_name(p.name + suffix)
        raise CheckpointError(f"no such checkpoint: {p}")
    return p


# ---- reading ------------------------------------------------------------------------

def read_checkpoint(path_or_dir: PathLike) -> Checkpoint:
    """The step and values of a checkpoint file (or of a directory's latest), checked."""
    path = resolve_checkpoint(path_or_dir)
    if path.suffix == SHARDS_SUFFIX:
        return _read_sharded(path)
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
    except OSError as e:  # a bad offset in the zip's directory: a seek fails
        raise CheckpointError(f"{path}: {MANIFEST} cannot be read, the file is corrupt "
                              f"({e})") from None
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
    or (unless ``allow_extra``) a variable the declarations do not have (mirrored
    copies excepted: see below)."""
    from tfc.passes.replicate import mirrored_variable
    from tfc.runtime.program import check_variable_value

    # An allreduce worker's mirrored copy (``VAR/replica_I``) equals ``VAR`` by
    # construction: a checkpoint of a job on another number of workers (an elastic one
    # that went on with fewer, or one process) restores as well. Missing copies take
    # their variable's value, and copies the program does not have are left out.
    values = dict(ckpt.values)
    for name in decls:
        base = mirrored_variable(name)
        if name not in values and base is not None and base in values:
            values[name] = values[base]
    for name in [n for n in values if n not in decls]:
        base = mirrored_variable(name)
        if base is not None and base in decls:
            del values[name]
    ckpt = dataclasses.replace(ckpt, values=values)
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
