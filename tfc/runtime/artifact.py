"""The ``.tfc`` artifact: one zip file holding a compiled module and its variable values.

Members:

- ``manifest.json``: ``{"format": "tfc", "version": 1, "created_by": "tfc 0.1.0",
  "entries": {name: {"feeds": [{"name", "dtype", "shape"}], "fetches": [...]}},
  "variables": {name: {"dtype", "shape", "file", "trainable", "device"}},
  "step": N, "ir": "module.tfir", "ir_bytecode": "module.tfcb", "backend": "reference"}``
- ``module.tfir``: the printed module. Its ``__init__`` graph, when there is one, only
  assigns the variables stored as initializers (below); the values of the others are
  stored as ``.npy``: initial values printed as text would make the IR (and its parsing
  at load time) as large as the weights. It is for people
  (``unzip -p model.tfc module.tfir``) and for artifacts without bytecode.
- ``module.tfcb`` (named by the manifest's optional ``"ir_bytecode"``): the same module
  as IR bytecode (``tfc.ir.bytecode``), which loading decodes instead of parsing the
  text: no lark import, no lexing. Older artifacts lack it and load from the text; an
  older tfc ignores it, so the format version stays 1. When both are present the
  bytecode is what runs.
- ``native/0000.o`` ...: for artifacts made with the llvm backend, each entry's object
  code; the manifest's ``"native": {"host": KEY, "entries": {entry: file}}`` says for
  which CPU (name and features). Loading on that CPU with the llvm backend links it
  without running LLVM; elsewhere the entries are compiled again on first use.
- ``variables/0000.npy`` ...: one ``.npy`` per variable, by declaration order. Variable
  names may hold ``/`` (name scopes), so files are numbered and the manifest maps names
  to files. A variable whose value is still its initializer's, when that is one op
  computed from attrs alone (``zeros``, ``fill``, seeded ``random.normal`` ...:
  ``tfc.runtime.initializers``), has ``"initializer": true`` and no file: ``__init__``
  assigns it that op and the program computes it when first needed, so a ``param W:
  f32[65536, 65536] = zeros`` costs one line, not 16 GiB. Such artifacts have format
  version 2 (older tfc says to upgrade); all others are still written as version 1.

No pickle anywhere: arrays are written and read with ``allow_pickle=False``, so loading
an artifact never runs code. Writing is atomic (a temp file in the same directory,
fsync, ``os.replace``): a crash mid-write leaves the previous artifact intact. Loading
checks everything it reads and turns each problem into one ``ArtifactError`` sentence
naming the file.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any, Collection, Iterator, Mapping

import numpy as np

from tfc.errors import ArtifactError, TfcError
from tfc.ir.core import INIT_GRAPH, Module, Op
from tfc.ir.types import DType, TensorType, format_shape
from tfc.runtime.program import EntrySignature, Program

FORMAT = "tfc"
VERSION = 2  # 2: variables may be stored as initializer ops (written only then)
MANIFEST = "manifest.json"
IR_MEMBER = "module.tfir"
BYTECODE_MEMBER = "module.tfcb"


def tfc_version() -> str:
    """The running tfc's version, for ``created_by``."""
    try:
        from tfc import __version__  # type: ignore[attr-defined]
        return str(__version__)
    except ImportError:
        pass
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("tfc")
    except (ImportError, PackageNotFoundError):
        return "0.1.0"


# ---- writing ------------------------------------------------------------------------

def build_manifest(module: Module, step: int = 0, backend: str = "reference",
                   initialized: Collection[str] = ()) -> dict[str, Any]:
    """The manifest of an artifact of ``module`` (variable files by declaration order;
    the variables ``initialized`` by their ``__init__`` op have ``"initializer": true``
    and no file)."""
    entries = {name: EntrySignature.of(g).to_json() for name, g in module.entries.items()}
    variables: dict[str, Any] = {}
    for i, (name, decl) in enumerate(module.variables.items()):
        variables[name] = {"dtype": decl.type.dtype.value, "shape": list(decl.type.shape),
                           "file": f"variables/{i:04d}.npy", "trainable": decl.trainable,
                           "device": decl.device}
        if name in initialized:
            del variables[name]["file"]
            variables[name]["initializer"] = True
    # version 2 only where a version-1 reader would fail: variables without files
    version = VERSION if initialized else 1
    return {"format": FORMAT, "version": version, "created_by": f"tfc {tfc_version()}",
            "entries": entries, "variables": variables, "step": int(step), "ir": IR_MEMBER,
            "ir_bytecode": BYTECODE_MEMBER, "backend": backend, "devices": list(module.devices),
            "fp16_transfers": bool(module.fp16_transfers)}


def atomic_write(path: str | os.PathLike[str], write: Any) -> None:
    """Call ``write(fileobj)`` on a temp file beside ``path``, then move it into place.

    The temp file is flushed and fsynced before ``os.replace``, so ``path`` holds either
    its previous content or the complete new one, whatever happens; on any failure
    (KeyboardInterrupt included) the temp file is removed and the error re-raised.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode honours umask
    except OSError as e:  # name the file the user asked for, not the temp file
        raise type(e)(e.errno, e.strerror, str(path)) from None
    try:
        try:  # a replaced file keeps its permissions
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        except FileNotFoundError:
            pass
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_artifact(path: str | os.PathLike[str], module: Module,
                  variables: Mapping[str, np.ndarray], step: int = 0,
                  backend: str = "reference",
                  native: Mapping[str, tuple[Any, ...]] | None = None,
                  initializers: Mapping[str, Op] | None = None) -> None:
    """Write ``module``, the values of all its variables and (``native``: entry ->
    (object code, host key[, ``NativeMeta``])) compiled code to the artifact ``path``;
    with the tables, loading links the code without lowering the graph again.

    The variables of ``initializers`` (name -> an op that computes the value from its
    attrs alone, ``tfc.runtime.initializers``) are stored as that op, in the stored
    module's ``__init__`` graph, not as data: ``variables`` need not hold them."""
    from tfc.ir.bytecode import module_to_bytes
    from tfc.ir.printer import print_module
    from tfc.runtime.initializers import recipes_graph

    initializers = {n: op for n, op in (initializers or {}).items() if n in module.variables}
    manifest = build_manifest(module, step, backend, initialized=initializers)
    objects: dict[str, bytes] = {}
    arrays: dict[str, np.ndarray] = {}
    if native:
        hosts = {item[1] for item in native.values()}
        manifest["native"] = {"host": hosts.pop() if len(hosts) == 1 else None, "entries": {},
                              "tables": {}}
        for i, (entry, item) in enumerate(sorted(native.items())):
            code, meta = item[0], (item[2] if len(item) > 2 else None)
            member = f"native/{i:04d}.o"
            manifest["native"]["entries"][entry] = member
            objects[member] = code
            if meta is not None:  # run-time tables: loading needs no lowering
                table, constants = meta.to_members(f"native/{i:04d}.const/")
                manifest["native"]["tables"][entry] = table
                arrays.update(constants)
    missing = [n for n in module.variables if n not in variables and n not in initializers]
    if missing:
        raise TfcError(f"cannot save {path}: variable @{missing[0]} has no value")
    graphs = {k: g for k, g in module.graphs.items() if k != INIT_GRAPH}
    if initializers:
        graphs = {INIT_GRAPH: recipes_graph(initializers, module.variables), **graphs}
    stored = Module(graphs, module.variables)
    ir_text = print_module(stored)
    ir_bytes = module_to_bytes(stored)

    def write(f: IO[bytes]) -> None:
        with zipfile.ZipFile(f, "w") as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=2) + "\n",
                        compress_type=zipfile.ZIP_DEFLATED)
            zf.writestr(IR_MEMBER, ir_text, compress_type=zipfile.ZIP_DEFLATED)
            zf.writestr(BYTECODE_MEMBER, ir_bytes, compress_type=zipfile.ZIP_DEFLATED)
            for member, code in objects.items():
                zf.writestr(member, code, compress_type=zipfile.ZIP_DEFLATED)
            for member, arr in arrays.items():
                with zf.open(member, "w", force_zip64=True) as fh:
                    np.save(fh, arr, allow_pickle=False)
            for name, info in manifest["variables"].items():
                if name in initializers:
                    continue
                arr = np.asarray(variables[name])
                with zf.open(info["file"], "w", force_zip64=True) as member:
                    np.save(member, arr, allow_pickle=False)

    atomic_write(path, write)


# ---- reading ------------------------------------------------------------------------

def load_artifact(path: str | os.PathLike[str], backend: str | None = None) -> Program:
    """The ``Program`` stored in the artifact ``path`` (its backend unless ``backend``)."""
    from tfc.runtime.initializers import recipes
    module, values, manifest = read_artifact(path)
    # the caller's choice, else $TFC_BACKEND, else the backend the artifact was made for
    name = backend or os.environ.get("TFC_BACKEND") or manifest.get("backend") or "reference"
    if not isinstance(name, str):
        raise ArtifactError(f"{path}: {MANIFEST} names an invalid backend {name!r}")
    try:
        executables = _native_executables(path, module, manifest) if name == "llvm" else {}
        return Program(module, values, backend=name, step=manifest["step"], copy=False,
                       executables=executables, initializers=recipes(module))
    except ArtifactError:
        raise
    except TfcError as e:
        raise ArtifactError(f"{path}: {e.message}", e.loc) from None


def _native_executables(path: Any, module: Module, manifest: dict[str, Any]) -> dict[str, Any]:
    """The entries whose object code the artifact carries for this CPU, linked without
    LLVM; none when it was built elsewhere (then they compile on first use)."""
    from tfc.backends.llvm import LLVMBackend
    from tfc.backends.llvm.jit import host_key
    native = manifest.get("native")
    if not isinstance(native, dict) or native.get("host") != host_key():
        return {}
    backend = LLVMBackend()
    out = {}
    tables = native.get("tables") or {}
    if not isinstance(tables, dict):
        raise ArtifactError(f"{path}: {MANIFEST} field 'native.tables' should be an object")
    with zipfile.ZipFile(path) as zf:
        for entry, member in dict(native.get("entries") or {}).items():
            if entry not in module.entries:
                raise ArtifactError(f"{path}: {MANIFEST} has native code for an unknown "
                                    f"entry '{entry}'")
            meta = _native_meta(zf, path, entry, tables.get(entry))
            try:
                out[entry] = backend.load(module, entry, _member(zf, path, member),
                                          native["host"], meta=meta)
            except ArtifactError as e:
                raise ArtifactError(f"{path}: {e.message}") from None
    return out


def _native_meta(zf: zipfile.ZipFile, path: Any, entry: str, table: Any) -> Any:
    """The stored run-time tables of ``entry``'s native code (``None`` if there are none:
    then loading lowers the graph again)."""
    from tfc.backends.llvm.backend import NativeMeta
    if table is None:
        return None
    try:
        return NativeMeta.read_zip(zf, table)
    except ValueError as e:
        raise ArtifactError(f"{path}: invalid native tables for '{entry}': {e}") from None


def read_artifact(path: str | os.PathLike[str]
                  ) -> tuple[Module, dict[str, np.ndarray], dict[str, Any]]:
    """The module, variable values and manifest of an artifact, each checked."""
    p = Path(path)
    if not p.exists():
        raise ArtifactError(f"no such artifact: {path}")
    if p.is_dir():
        raise ArtifactError(f"{path} is a directory, not a tfc artifact")
    try:
        with zipfile.ZipFile(p) as zf:
            manifest = _read_manifest(zf, path)
            module = _read_module(zf, path, manifest)
            stored = _check_initializers(path, module, manifest)
            values = dict(read_variables(zf, path, manifest, skip=stored))
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise unreadable_zip(path, e, "tfc artifact") from None
    return module, values, manifest


def unreadable_zip(path: Any, e: Exception, what: str,
                   error: type[ArtifactError] = ArtifactError) -> ArtifactError:
    """The error for a file ``zipfile`` failed on (``e``): truncated, not a zip at all,
    or corrupt. Artifacts and checkpoints say it alike, each with its own error type."""
    if isinstance(e, zipfile.BadZipFile):
        if not zipfile.is_zipfile(path):
            with open(path, "rb") as f:
                if f.read(4) == b"PK\x03\x04":
                    return error(f"{path} is truncated or corrupt (its zip directory "
                                 f"is missing)")
            return error(f"{path} is not a {what} (not a zip file)")
        return error(f"{path} is corrupt ({e})")
    return error(f"{path} is corrupt or truncated ({e})")


def _member(zf: zipfile.ZipFile, path: Any, name: str, why: str = "") -> bytes:
    try:
        return zf.read(name)
    except KeyError:
        raise ArtifactError(f"{path} has no member {name}{why}") from None


def _read_manifest(zf: zipfile.ZipFile, path: Any) -> dict[str, Any]:
    raw = _member(zf, path, MANIFEST, " (is it a tfc artifact?)")
    return parse_manifest(raw, path, FORMAT, VERSION, "tfc artifact",
                          (("entries", dict), ("variables", dict), ("step", int), ("ir", str)))


def parse_manifest(raw: bytes, path: Any, fmt: str, version: int, what: str,
                   fields: tuple[tuple[str, type], ...],
                   error: type[ArtifactError] = ArtifactError) -> dict[str, Any]:
    """The manifest JSON of a ``what`` zip (artifact or checkpoint), checked: its format
    name, a version this tfc reads, the ``fields`` with their types, a step >= 0."""
    try:
        m = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path}: {MANIFEST} is not valid JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != fmt:
        raise error(f"{path}: {MANIFEST} does not describe a {what} "
                    f"(format is {m.get('format') if isinstance(m, dict) else m!r})")
    found = m.get("version")
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise error(f"{path}: {MANIFEST} has an invalid format version {found!r}")
    if found > version:
        raise error(f"{path} has {what} format version {found}, but this tfc reads "
                    f"version {version} at most; upgrade tfc to load it")
    for key, kind in fields:
        if key not in m:
            raise error(f"{path}: {MANIFEST} lacks the field '{key}'")
        if not isinstance(m[key], kind) or isinstance(m[key], bool):
            raise error(f"{path}: {MANIFEST} field '{key}' should be a "
                        f"{kind.__name__}, not {type(m[key]).__name__}")
    if m.get("step", 0) < 0:
        raise error(f"{path}: {MANIFEST} has a negative step {m['step']}")
    return m


def _read_module(zf: zipfile.ZipFile, path: Any, manifest: dict[str, Any]) -> Module:
    """The stored module: decoded from the bytecode member when the manifest names one
    (no lark), else parsed from the IR text (artifacts written before bytecode); then
    verified and checked against the manifest alike."""
    from tfc.ir.verifier import verify_module

    member = manifest.get("ir_bytecode")
    if member is not None:
        if not isinstance(member, str):
            raise ArtifactError(f"{path}: {MANIFEST} field 'ir_bytecode' should be a str, "
                                f"not {type(member).__name__}")
        module = _decode_module(zf, path, member)
        try:  # the text is not read, but an artifact lacking a member it names is broken
            zf.getinfo(manifest["ir"])
        except KeyError:
            raise ArtifactError(f"{path} has no member {manifest['ir']} (named by "
                                f"{MANIFEST})") from None
    else:
        member = manifest["ir"]
        module = _parse_module(zf, path, member)
    try:
        verify_module(module)
    except TfcError as e:
        raise ArtifactError(f"{path}: {member} is not valid IR: {e}") from None
    want, have = set(manifest["entries"]), set(module.entries)
    if want != have:
        raise ArtifactError(f"{path}: {MANIFEST} lists entries {sorted(want)} but {member} "
                            f"defines {sorted(have)}")
    want, have = set(manifest["variables"]), set(module.variables)
    if want != have:
        raise ArtifactError(f"{path}: {MANIFEST} lists variables {sorted(want)} but {member} "
                            f"declares {sorted(have)}")
    module.devices, module.fp16_transfers = _target(path, manifest)
    return module


def _decode_module(zf: zipfile.ZipFile, path: Any, member: str) -> Module:
    from tfc.ir.bytecode import module_from_bytes

    raw = _member(zf, path, member, f" (named by {MANIFEST})")
    try:
        return module_from_bytes(raw, filename=f"{path}!{member}")
    except TfcError as e:
        raise ArtifactError(f"{path}: {member} is not valid IR bytecode: {e}") from None


def _parse_module(zf: zipfile.ZipFile, path: Any, member: str) -> Module:
    from tfc.ir.parser import parse_module

    raw = _member(zf, path, member, f" (named by {MANIFEST})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ArtifactError(f"{path}: {member} is not UTF-8 text") from None
    try:
        return parse_module(text, filename=f"{path}!{member}")
    except TfcError as e:
        raise ArtifactError(f"{path}: {member} is not valid IR: {e}") from None


def _target(path: Any, manifest: dict[str, Any]) -> tuple[list[str], bool]:
    """The devices the module was compiled for (absent in older artifacts: one)."""
    from tfc.devices import parse_devices
    devices = manifest.get("devices") or []
    fp16 = manifest.get("fp16_transfers", False)
    if not isinstance(devices, list) or not isinstance(fp16, bool):
        raise ArtifactError(f"{path}: {MANIFEST} fields 'devices' and 'fp16_transfers' "
                            f"should be a list and a boolean")
    try:
        return (parse_devices(devices) if devices else []), fp16
    except TfcError as e:
        raise ArtifactError(f"{path}: {MANIFEST} names a bad device ({e})") from None


def _manifest_type(path: Any, name: str, info: Any) -> TensorType:
    try:
        return TensorType(DType(info["dtype"]), tuple(info["shape"]))
    except (TypeError, KeyError, ValueError, TfcError):
        raise ArtifactError(f"{path}: {MANIFEST} has an invalid entry for variable "
                            f"'{name}': {info!r}") from None


def _check_initializers(path: Any, module: Module, manifest: dict[str, Any]) -> set[str]:
    """The variables the artifact stores as initializer ops (``"initializer": true``),
    checked: each is assigned a recipe op (``tfc.runtime.initializers``) of its type by
    the stored ``__init__`` graph, which does nothing else."""
    from tfc.runtime.initializers import is_recipe, recipes
    flagged = {name for name, info in manifest["variables"].items()
               if isinstance(info, dict) and info.get("initializer") is True}
    init = module.graphs.get(INIT_GRAPH)
    if init is None:
        if flagged:
            raise ArtifactError(f"{path}: variable '{sorted(flagged)[0]}' is stored as an "
                                f"initializer, but the module has no {INIT_GRAPH} graph")
        return flagged
    found = recipes(module)
    for name in sorted(flagged):
        if name not in found:
            raise ArtifactError(f"{path}: variable '{name}' is stored as an initializer, but "
                                f"the {INIT_GRAPH} graph assigns it no initializer op of "
                                f"its type")
    for op in init.ops:
        if op.kind == "var.assign" and op.attrs["var"] not in flagged:
            raise ArtifactError(f"{path}: the {INIT_GRAPH} graph assigns variable "
                                f"'{op.attrs['var']}', which has a file")
        if op.kind != "var.assign" and not is_recipe(op):
            raise ArtifactError(f"{path}: the {INIT_GRAPH} graph does more than assign "
                                f"initializer ops ({op.kind})")
    return flagged


def read_variables(zf: zipfile.ZipFile, path: Any, manifest: dict[str, Any],
                   skip: Collection[str] = ()) -> Iterator[tuple[str, np.ndarray]]:
    """Each variable's stored value, checked against the manifest (but ``skip``)."""
    for name, info in manifest["variables"].items():
        if name in skip:
            continue
        t = _manifest_type(path, name, info)
        member = info.get("file")
        if not isinstance(member, str):
            raise ArtifactError(f"{path}: {MANIFEST} gives no file for variable '{name}'")
        what = f"{path}: {member} (variable '{name}')"
        try:
            with zf.open(member) as fh:
                arr = np.load(fh, allow_pickle=False)
        except KeyError:
            raise ArtifactError(f"{path} has no member {member} (variable '{name}')") from None
        except ValueError as e:
            if "allow_pickle" in str(e) or "pickled" in str(e):
                raise ArtifactError(f"{what} holds pickled Python objects, which tfc never "
                                    f"loads") from None
            raise ArtifactError(f"{what} is not a valid .npy file ({e})") from None
        except (OSError, EOFError) as e:
            raise ArtifactError(f"{what} is not a valid .npy file ({e})") from None
        if not isinstance(arr, np.ndarray):
            raise ArtifactError(f"{what} is not a single .npy array")
        if arr.dtype != t.dtype.np:
            raise ArtifactError(f"{what} has dtype {arr.dtype}, but {MANIFEST} says {t}")
        if arr.ndim != t.rank or any(isinstance(d, int) and d != s
                                     for d, s in zip(t.shape, arr.shape)):
            raise ArtifactError(f"{what} has shape {format_shape(arr.shape)}, but {MANIFEST} "
                                f"says {t}")
        yield name, arr
