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
- ``native/<backend>/<entry>/<member>``: what the backend's ``export`` keeps of each
  compiled entry (``tfc.backends.base.Backend``), e.g. for llvm ``object.o`` (object
  code), ``host`` (the CPU it was built for), ``tables.json`` and ``const/NNNN.npy``
  (run-time tables); nothing for the reference backend. The manifest's
  ``"native_code": {"backend": NAME, "entries": {entry: {"folder": "native/llvm/predict/",
  "members": [...]}}}`` lists them. Loading with that backend hands them to its ``load``
  (llvm: links the code without running LLVM on the CPU it was built for); elsewhere the
  entries are compiled again on first use. Artifacts written before this layout carry
  llvm's object code as ``native/0000.o`` with ``"native": {"host", "entries",
  "tables"}`` in the manifest: still read (``_legacy_native_section``); an older tfc
  ignores ``native_code`` and compiles the entries from the IR, so the format version
  stays as it was.
- ``plans.json`` (named by the manifest's optional ``"memory_plans"``): the memory pass's
  plan of each graph that had one (``MemoryPlan.to_json``: values by position in the
  graph, which the text and the bytecode keep), so the loaded module compiles as it was
  planned, without running a pass. Modules never planned have none; older tfc ignores it.
- A module compiled for several devices also has the manifest field ``"partitions":
  {entry: PartitionTable JSON}`` (``tfc.ir.core.PartitionTable``): how each entry's step
  runs across the devices. Its stage graphs are graphs of ``module.tfir``, not entries;
  loading restores the tables, so nothing is partitioned again.
- ``variables/0000.npy`` ...: one ``.npy`` per variable, by declaration order. Variable
  names may hold ``/`` (name scopes), so files are numbered and the manifest maps names
  to files. A variable whose value is still its initializer's, when that is one op
  computed from attrs alone (``zeros``, ``fill``, seeded ``random.normal`` ...:
  ``tfc.runtime.initializers``), has ``"initializer": true`` and no file: ``__init__``
  assigns it that op and the program computes it when first needed, so a ``param W:
  f32[65536, 65536] = zeros`` costs one line, not 16 GiB. Such artifacts have format
  version 2 (older tfc says to upgrade); all others are still written as version 1.

The manifest's ``"sha256"`` maps every other member to its SHA-256, plus
``"manifest.json#native_code"`` for its own ``"native_code"`` section
(``tfc.runtime.digests``).
Artifacts written before digests lack the field and still load (format version 1 both),
but their object code is not linked: nothing says it is what the compiler wrote.

No pickle anywhere: arrays are written and read with ``allow_pickle=False``, so loading
an artifact's data never runs code; its object code is code, linked and run only once
its digest matches (which guards against corruption, not against an attacker: README.md,
"Trust"). Writing is atomic (``tfc.atomic``): a crash mid-write leaves the
previous artifact intact. Loading checks everything it reads (digests, the IR verifier,
the manifest's signatures against the IR's) and turns each problem into one
``ArtifactError`` sentence naming the file, except corrupt object code, which is
compiled again from the IR with a ``CorruptArtifactWarning`` (see ``load_artifact``).
"""

from __future__ import annotations

import io
import json
import os
import re
import warnings
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Collection, Iterator, Mapping
from urllib.parse import quote

import numpy as np

from tfc.atomic import atomic_write
from tfc.distributed.runtime import ClusterError
from tfc.backends.base import BACKENDS, Backend, Executable, ForeignNativeCode, get_backend
from tfc.errors import ArtifactError, TfcError
from tfc.ir.core import INIT_GRAPH, Module, Op
from tfc.ir.types import DType, TensorType, format_shape
from tfc.pipeline import Target
from tfc.runtime.digests import FIELD as DIGESTS
from tfc.runtime.digests import (CorruptMember, bytes_digest, check_member, json_digest,
                                 npy_digest, read_digests)
from tfc.runtime.program import EntrySignature, Program, lowered_module
from tfc.version import __version__

FORMAT = "tfc"
VERSION = 2  # 2: variables may be stored as initializer ops, or stage graphs (written only then)
MANIFEST = "manifest.json"
IR_MEMBER = "module.tfir"
BYTECODE_MEMBER = "module.tfcb"
PLANS_MEMBER = "plans.json"  # the module's memory plans (manifest field "memory_plans")
# an allreduce module's unreplicated step (``Module.replicated_from``; manifest field
# "replicated_from"): what elastic training replicates again for fewer workers
SOURCE_MEMBER = "replicated_from.tfcb"
NATIVE_FIELD = "native_code"  # the manifest's section naming each entry's native members
NATIVE_DIGEST = "manifest.json#native_code"  # the digest of that section
NATIVE_FOLDER = "native/"


def tfc_version() -> str:
    """The running tfc's version, for ``created_by``."""
    return __version__


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
    # version 2 only where a version-1 reader would fail: variables without files, or
    # stage graphs it would take for entries
    version = VERSION if initialized or module.partitions else 1
    manifest = {"format": FORMAT, "version": version, "created_by": f"tfc {tfc_version()}",
            "entries": entries, "variables": variables, "step": int(step), "ir": IR_MEMBER,
            "ir_bytecode": BYTECODE_MEMBER, "backend": backend, "devices": list(module.devices),
            "fp16_transfers": bool(module.fp16_transfers),
            "lowered_for": getattr(module.lowered_for, "backend", None)}
    if module.partitions:
        manifest["partitions"] = {e: t.to_json() for e, t in module.partitions.items()}
    return manifest


def save_artifact(path: str | os.PathLike[str], module: Module,
                  variables: Mapping[str, np.ndarray], step: int = 0,
                  backend: str = "reference",
                  native: Mapping[str, Mapping[str, bytes]] | None = None,
                  before_replace: Callable[[], None] | None = None,
                  initializers: Mapping[str, Op] | None = None) -> os.stat_result:
    """Write ``module``, the values of all its variables and (``native``: entry -> the
    members ``backend``'s ``export`` made for it) native code to the artifact ``path``,
    the members under ``native/<backend>/<entry>/``; loading hands them back to that
    backend's ``load``. The manifest records every other member's SHA-256.
    ``before_replace`` is ``atomic_write``'s: a last check, under a lock, that ``path``
    may be replaced. Returns the written file's ``os.stat_result``.

    The variables of ``initializers`` (name -> an op that computes the value from its
    attrs alone, ``tfc.runtime.initializers``) are stored as that op, in the stored
    module's ``__init__`` graph, not as data: ``variables`` need not hold them."""
    write = _artifact_writer(path, module, variables, step, backend, native, initializers)
    return atomic_write(path, write, before_replace)


def artifact_bytes(module: Module, variables: Mapping[str, np.ndarray], step: int = 0,
                   backend: str = "reference",
                   native: Mapping[str, Mapping[str, bytes]] | None = None) -> bytes:
    """The artifact ``save_artifact`` would write, as bytes in memory: what a cluster's
    task processes receive (``tfc.distributed.runtime``), the file format and its
    checks and nothing else (no pickled Python); ``read_task_artifact`` reads it."""
    buffer = io.BytesIO()
    _artifact_writer("<in-memory artifact>", module, variables, step, backend, native,
                     None)(buffer)
    return buffer.getvalue()


def _artifact_writer(path: Any, module: Module, variables: Mapping[str, np.ndarray],
                     step: int, backend: str,
                     native: Mapping[str, Mapping[str, bytes]] | None,
                     initializers: Mapping[str, Op] | None) -> Callable[[IO[bytes]], None]:
    """What writes the artifact of ``save_artifact``'s arguments to an open binary file."""
    from tfc.ir.bytecode import module_to_bytes
    from tfc.ir.printer import print_module
    from tfc.runtime.initializers import recipes_graph

    initializers = {n: op for n, op in (initializers or {}).items() if n in module.variables}
    manifest = build_manifest(module, step, backend, initialized=initializers)
    objects = _native_members(manifest, backend, native or {})
    missing = [n for n in module.variables if n not in variables and n not in initializers]
    if missing:
        raise TfcError(f"cannot save {path}: variable @{missing[0]} has no value")
    graphs = {k: g for k, g in module.graphs.items() if k != INIT_GRAPH}
    if initializers:
        graphs = {INIT_GRAPH: recipes_graph(initializers, module.variables), **graphs}
    stored = Module(graphs, module.variables, devices=list(module.devices),
                    fp16_transfers=module.fp16_transfers)
    ir_text = print_module(stored).encode("utf-8")
    ir_bytes = module_to_bytes(stored)
    # the plans of the graphs stored as planned (not of an __init__ replaced above)
    plans = {name: plan.to_json(stored.graphs[name])
             for name, plan in module.memory_plans.items()
             if name in stored.graphs and stored.graphs[name] is module.graphs.get(name)}
    if module.replicated_from is not None:
        manifest["replicated_from"] = SOURCE_MEMBER
        objects[SOURCE_MEMBER] = module.replicated_from
    if plans:
        manifest["memory_plans"] = PLANS_MEMBER
        objects[PLANS_MEMBER] = json.dumps(plans, separators=(",", ":")).encode("utf-8")
    values = {info["file"]: np.asarray(variables[name])
              for name, info in manifest["variables"].items() if name not in initializers}
    digests = {IR_MEMBER: bytes_digest(ir_text), BYTECODE_MEMBER: bytes_digest(ir_bytes)}
    digests.update({member: bytes_digest(data) for member, data in objects.items()})
    digests.update({member: npy_digest(arr) for member, arr in values.items()})
    if NATIVE_FIELD in manifest:  # which members are whose: checked alike
        digests[NATIVE_DIGEST] = json_digest(manifest[NATIVE_FIELD])
    manifest[DIGESTS] = digests

    def write(f: IO[bytes]) -> None:
        with zipfile.ZipFile(f, "w") as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=2) + "\n",
                        compress_type=zipfile.ZIP_DEFLATED)
            zf.writestr(IR_MEMBER, ir_text, compress_type=zipfile.ZIP_DEFLATED)
            zf.writestr(BYTECODE_MEMBER, ir_bytes, compress_type=zipfile.ZIP_DEFLATED)
            for member, data in objects.items():  # arrays compress poorly: stored
                zf.writestr(member, data, compress_type=zipfile.ZIP_STORED
                            if member.endswith(".npy") else zipfile.ZIP_DEFLATED)
            for member, arr in values.items():
                with zf.open(member, "w", force_zip64=True) as fh:
                    np.save(fh, arr, allow_pickle=False)

    return write


def _native_members(manifest: dict[str, Any], backend: str,
                    native: Mapping[str, Mapping[str, bytes]]) -> dict[str, bytes]:
    """The zip members of the entries' ``native`` members, under
    ``native/<backend>/<entry>/``, listed in the manifest's ``native_code`` section."""
    objects: dict[str, bytes] = {}
    entries: dict[str, Any] = {}
    for entry, members in sorted(native.items()):
        if not members:
            continue
        bad = [n for n in members if not _safe_member_name(n)]
        if bad:
            raise TfcError(f"backend {backend}: bad member name {bad[0]!r} for entry "
                           f"'{entry}' (relative names of letters, digits, '.', '_', '-')")
        folder = f"{NATIVE_FOLDER}{_folder_name(backend)}/{_folder_name(entry)}/"
        entries[entry] = {"folder": folder, "members": sorted(members)}
        objects.update((folder + name, bytes(members[name])) for name in sorted(members))
    if entries:
        manifest[NATIVE_FIELD] = {"backend": backend, "entries": entries}
    return objects


_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


def _safe_member_name(name: str) -> bool:
    """Whether ``name`` is a relative member name: ``/``-separated parts of letters,
    digits, ``.``, ``_``, ``-``, none starting with a dot or a dash."""
    return all(_SAFE_NAME.fullmatch(part) for part in name.split("/"))


def _folder_name(name: str) -> str:
    """``name`` (an entry's: quoted IR names may hold anything) as one folder name: itself
    when it is a plain name, else %-escaped (never equal to a plain name)."""
    if _SAFE_NAME.fullmatch(name):
        return name
    quoted = quote(name, safe="")
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


# ---- reading ------------------------------------------------------------------------

NATIVE_POLICIES = ("use", "recompile", "strict")


class CorruptArtifactWarning(UserWarning):
    """Stored object code failed its check and its entries compile again from the IR."""


@dataclass(frozen=True)
class ArtifactOrigin:
    """The artifact file a program was loaded from, as it was then: saving back to that
    file first checks that no other process replaced it in between (its update would be
    lost)."""

    path: Path
    identity: tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns
    step: int

    @staticmethod
    def of(path: str | os.PathLike[str], st: os.stat_result, step: int) -> "ArtifactOrigin":
        return ArtifactOrigin(Path(path).resolve(), _identity(st), step)

    def is_file(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` names the file this program was loaded from."""
        return Path(path).resolve() == self.path

    def check_unchanged(self) -> None:
        """Raise unless the file is still the one loaded (or is gone: no update to lose)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if _identity(st) == self.identity:
            return
        try:
            with zipfile.ZipFile(self.path) as zf:
                now = f"step {_read_manifest(zf, self.path)['step']}"
        except (TfcError, OSError, zipfile.BadZipFile, zlib.error, EOFError):
            now = "unreadable"  # whatever is there now, it is not what was loaded
        raise ArtifactError(f"{self.path} was changed by another process since this one loaded "
                            f"it at step {self.step} (it is now at {now}); not overwriting "
                            f"that update (use --force, or save(..., force=True), to "
                            f"overwrite it anyway)")


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def load_artifact(path: str | os.PathLike[str], backend: str | None = None, *,
                  native: str = "use", cluster: str | None = None,
                  cluster_timeout_s: float | None = None) -> Program:
    """The ``Program`` stored in the artifact ``path`` (its backend unless ``backend``).

    ``native`` says what to do with the native code (an llvm artifact's object code) the
    artifact carries for the backend it is loaded with: ``"use"`` hands each entry's
    members to the backend's ``load`` once their SHA-256 match the manifest, and
    compiles an entry whose members fail that check (or cannot be checked: artifacts of
    older tfc versions) again from the IR, with a ``CorruptArtifactWarning``;
    ``"recompile"`` never links stored code; ``"strict"`` refuses an artifact whose code
    fails the check. The IR is verified and its signature checked against the manifest
    whatever ``native`` says. ``cluster``, ``cluster_timeout_s``: where a module compiled
    for a cluster runs (``Program``'s).
    """
    if native not in NATIVE_POLICIES:
        raise TfcError(f"native={native!r}: expected one of {', '.join(NATIVE_POLICIES)}")
    with open_zip(path) as zf:
        st = os.fstat(zf.fp.fileno())  # type: ignore[union-attr]  # open: fp is set
        manifest = _read_manifest(zf, path)
        module = _read_module(zf, path, manifest)
        initializers = _check_initializers(path, module, manifest)
        values = dict(read_variables(zf, path, manifest, skip=initializers))
        # the caller's choice, else the backend the artifact was compiled for (what it
        # carries code and lowered stages for), else $TFC_BACKEND (older artifacts)
        name = (backend or manifest.get("backend") or os.environ.get("TFC_BACKEND", "").strip()
                or "reference")
        if not isinstance(name, str):
            raise ArtifactError(f"{path}: {MANIFEST} names an invalid backend {name!r}")
        try:
            runner = get_backend(name)
            executables = _native_executables(zf, path, module, manifest, native, runner)
            program = Program(module, values, backend=runner, step=manifest["step"],
                              copy=False, executables=executables, initializers=initializers,
                              cluster=cluster, cluster_timeout_s=cluster_timeout_s)
        except (ArtifactError, ClusterError):  # (the cluster's: not the file's fault)
            raise
        except TfcError as e:
            raise ArtifactError(f"{path}: {e.message}", e.loc) from None
    program.origin = ArtifactOrigin.of(path, st, manifest["step"])
    return program


def _native_executables(zf: zipfile.ZipFile, path: Any, module: Module,
                        manifest: dict[str, Any], policy: str,
                        backend: Backend) -> dict[str, Executable]:
    """The entries whose native code the artifact carries for ``backend``, each member
    checked against its digest and the whole made an executable by ``backend.load``
    (without LLVM, for llvm's object code); none when it was built elsewhere (then they
    compile on first use). ``policy``: see ``load_artifact``."""
    if policy == "recompile":
        return {}
    if NATIVE_FIELD in manifest:
        made_by, entries = _native_code_section(zf, path, manifest)
    elif LEGACY_NATIVE_FIELD in manifest:
        made_by, entries = _legacy_native_section(zf, path, manifest)
    else:
        return {}
    if made_by != backend.name:
        return {}
    out: dict[str, Executable] = {}
    for entry, members in entries.items():
        if entry not in module.entries:
            raise ArtifactError(f"{path}: {MANIFEST} has native code for an unknown "
                                f"entry '{entry}'")
        try:
            out[entry] = backend.load(lowered_module(module, entry, backend), entry, members)
            members.check_all()  # what the backend did not read must be intact too
        except ForeignNativeCode:  # built for another machine: compiled on first use
            out.pop(entry, None)
        except CorruptMember as e:
            out.pop(entry, None)
            if e.member == MANIFEST:  # the manifest's section: nothing of it can be used
                _corrupt_native(e, "every entry", policy)
                return {}
            _corrupt_native(e, f"entry '{entry}'", policy)
        except ArtifactError as e:
            raise ArtifactError(f"{path}: {e.message}") from None
    return out


class StoredMembers(Mapping[str, bytes]):
    """One entry's native members as its backend's ``load`` sees them (name -> bytes):
    each is read, and checked against the manifest's SHA-256, when first looked at, so
    an entry built for another machine is dropped before its code is even read, and a
    corrupt member raises ``CorruptMember`` (which the backend lets through) before any
    of it is used. ``sources`` maps each name to the function that reads and checks it."""

    def __init__(self, sources: Mapping[str, Callable[[], bytes]]) -> None:
        self._sources = dict(sources)
        self._read: dict[str, bytes] = {}

    def __getitem__(self, name: str) -> bytes:
        data = self._read.get(name)
        if data is None:
            data = self._read[name] = self._sources[name]()
        return data

    def __contains__(self, name: object) -> bool:  # Mapping's would read the member
        return name in self._sources

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)

    def check_all(self) -> None:
        """Read and check every member (``CorruptMember`` for the first bad one)."""
        for name in self._sources:
            self[name]


def _checked_reader(zf: zipfile.ZipFile, path: Any, entry: str, member: str,
                    digests: Mapping[str, str] | None,
                    before: Callable[[], None] = lambda: None) -> Callable[[], bytes]:
    """A function that reads ``member`` and checks it against its digest (after
    ``before``, a check the member depends on); ``CorruptMember`` for one that is
    missing, unreadable or not what was saved."""
    def read() -> bytes:
        before()
        try:
            data = zf.read(member)
        except KeyError:
            raise CorruptMember(f"{path} has no member {member} (native code of entry "
                                f"'{entry}')", member) from None
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
            raise CorruptMember(f"{path}: a member of entry '{entry}' is corrupt ({e})",
                                member) from None
        check_member(zf, path, member, digests, data)
        return data
    return read


def _section_check(path: Any, manifest: dict[str, Any], field: str, digest_key: str,
                   digests: Mapping[str, str] | None) -> CorruptMember | None:
    """Why the manifest's native section ``field`` cannot be trusted (no digests at all,
    or its own does not match), as a ``CorruptMember`` of the manifest; None if it can."""
    if digests is not None and digests.get(digest_key) == json_digest(manifest[field]):
        return None
    if digests is None:
        return CorruptMember(f"{path} records no SHA-256 digests (an older tfc wrote it), so "
                             f"its object code cannot be checked", MANIFEST)
    return CorruptMember(f"{path}: {MANIFEST}'s '{field}' tables do not match their SHA-256",
                         MANIFEST)


def _native_code_section(zf: zipfile.ZipFile, path: Any, manifest: dict[str, Any]
                         ) -> tuple[Any, dict[str, StoredMembers]]:
    """The manifest's ``native_code`` section (the backend that made it; per entry, its
    folder and member names), checked, as each entry's members."""
    section = manifest[NATIVE_FIELD]
    entries = section.get("entries") if isinstance(section, dict) else None
    if not isinstance(entries, dict) or not all(
            isinstance(e, str) and isinstance(info, dict)
            and isinstance(info.get("folder"), str) and isinstance(info.get("members"), list)
            and all(isinstance(n, str) and _safe_member_name(n) for n in info["members"])
            for e, info in entries.items()):
        raise ArtifactError(f"{path}: {MANIFEST} field '{NATIVE_FIELD}.entries' should map "
                            f"entry names to their folder and member names")
    digests = read_digests(path, manifest)
    problem = _section_check(path, manifest, NATIVE_FIELD, NATIVE_DIGEST, digests)

    def section_ok() -> None:
        if problem is not None:
            raise problem

    return section.get("backend"), {
        entry: StoredMembers({name: _checked_reader(zf, path, entry, info["folder"] + name,
                                                    digests, section_ok)
                              for name in info["members"]})
        for entry, info in entries.items()}


# ---- the layout before backends exported their own members -------------------------------
#
# Only the llvm backend stored native code then, in the manifest's "native" section:
# {"host": KEY, "entries": {entry: "native/0000.o"}, "tables": {entry: tables}}, the tables'
# constants as native/0000.const/NNNN.npy, and "manifest.json#native" the digest of that
# section. Such an artifact reads as the members that backend exports today: its object
# code, host key and tables under these names (tests/runtime/test_native_artifact.py
# loads both layouts).
LEGACY_NATIVE_FIELD, LEGACY_NATIVE_DIGEST = "native", "manifest.json#native"
LEGACY_OBJECT, LEGACY_HOST, LEGACY_TABLES = "object.o", "host", "tables.json"


def _legacy_native_section(zf: zipfile.ZipFile, path: Any, manifest: dict[str, Any]
                           ) -> tuple[Any, dict[str, StoredMembers]]:
    """The legacy ``native`` section as each entry's members. The host key is compared
    before anything is checked (code for another CPU is dropped silently, as it always
    was); every other member first needs the section's own digest to match."""
    native = manifest[LEGACY_NATIVE_FIELD]
    entries = native.get("entries") if isinstance(native, dict) else None
    tables = native.get("tables") if isinstance(native, dict) else None
    if not isinstance(entries, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
        raise ArtifactError(f"{path}: {MANIFEST} field 'native.entries' should map entry "
                            f"names to member names")
    if tables is None:
        tables = {}
    if not isinstance(tables, dict):
        raise ArtifactError(f"{path}: {MANIFEST} field 'native.tables' should be an object")
    digests = read_digests(path, manifest)
    problem = _section_check(path, manifest, LEGACY_NATIVE_FIELD, LEGACY_NATIVE_DIGEST,
                             digests)

    def section_ok() -> None:
        if problem is not None:
            raise problem

    host = native.get("host")
    out = {}
    for entry, member in entries.items():
        sources: dict[str, Callable[[], bytes]] = {
            LEGACY_HOST: lambda: str(host).encode("utf-8"),
            LEGACY_OBJECT: _checked_reader(zf, path, entry, member, digests, section_ok)}
        table = tables.get(entry)
        if table is not None:
            def tables_json(table: Any = table) -> bytes:
                section_ok()
                return json.dumps(table).encode("utf-8")
            sources[LEGACY_TABLES] = tables_json
            files = table.get("constant_files") if isinstance(table, dict) else None
            for name in files if isinstance(files, list) else []:
                if isinstance(name, str) and name not in sources:
                    sources[name] = _checked_reader(zf, path, entry, name, digests, section_ok)
        out[entry] = StoredMembers(sources)
    return (manifest.get("backend") if host is not None else None), out


def _corrupt_native(e: CorruptMember, what: str, policy: str) -> None:
    """Refuse (``strict``) or warn that ``what`` compiles again from the IR."""
    if policy == "strict":
        raise ArtifactError(f"{e.message}; refusing to link its object code (load it "
                            f"without --no-recompile to compile it again from the IR)")
    warnings.warn(f"{e.message}; compiling {what} again from the IR instead of linking its "
                  f"object code", CorruptArtifactWarning, stacklevel=4)


@contextmanager
def open_zip(path: str | os.PathLike[str], what: str = "tfc artifact",
              error: type[ArtifactError] = ArtifactError) -> Iterator[zipfile.ZipFile]:
    """The zip ``path``, open; whatever ``zipfile`` fails on while it is read (not a zip,
    truncated, a bad CRC, a member it cannot decompress) is one ``error`` naming it."""
    p = Path(path)
    if not p.exists():
        raise error(f"no such {'artifact' if error is ArtifactError else 'file'}: {path}")
    if p.is_dir():
        raise error(f"{path} is a directory, not a {what}")
    try:
        with zipfile.ZipFile(p) as zf:
            yield zf
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise unreadable_zip(path, e, what, error) from None
    except RuntimeError as e:  # zipfile: an encrypted member
        if "encrypted" not in str(e):
            raise
        raise error(f"{path} is not a {what} (it has encrypted members)") from None


def read_module(path: str | os.PathLike[str]) -> Module:
    """An artifact's module alone, checked (``tfc ir``, ``tfc viz`` of a ``.tfc``): its
    variables' data is not read."""
    with open_zip(path) as zf:
        return _read_module(zf, path, _read_manifest(zf, path))


def read_task_artifact(data: bytes, what: str, backend: Backend
                       ) -> tuple[Module, dict[str, np.ndarray], dict[str, Executable]]:
    """What a cluster task makes of the artifact bytes it receives: the module (verified),
    the variables, and the entries whose object code it carries for ``backend`` made
    executables (``load_artifact``'s ``native="use"``: code built for another CPU, or whose
    digest fails, is left out, and those entries compile from the IR)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            manifest = _read_manifest(zf, what)
            module = _read_module(zf, what, manifest)
            values = dict(read_variables(zf, what, manifest))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CorruptArtifactWarning)
                native = _native_executables(zf, what, module, manifest, "use", backend)
            return module, values, native
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise ArtifactError(f"{what} is not a tfc artifact, or is corrupt ({e})") from None


def read_artifact(path: str | os.PathLike[str]
                  ) -> tuple[Module, dict[str, np.ndarray], dict[str, Any]]:
    """The module, variable values and manifest of an artifact, each checked."""
    with open_zip(path) as zf:
        manifest = _read_manifest(zf, path)
        module = _read_module(zf, path, manifest)
        values = dict(read_variables(zf, path, manifest,
                                     skip=_check_initializers(path, module, manifest)))
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
    except OSError as e:  # zipfile seeks where the zip's directory says: a bad offset
        raise ArtifactError(f"{path}: {name} cannot be read, the file is corrupt ({e})"
                            ) from None


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

    digests = read_digests(path, manifest)
    member = manifest.get("ir_bytecode")
    if member is not None:
        if not isinstance(member, str):
            raise ArtifactError(f"{path}: {MANIFEST} field 'ir_bytecode' should be a str, "
                                f"not {type(member).__name__}")
        module = _decode_module(zf, path, member, digests)
        try:  # the text is not read, but an artifact lacking a member it names is broken
            zf.getinfo(manifest["ir"])
        except KeyError:
            raise ArtifactError(f"{path} has no member {manifest['ir']} (named by "
                                f"{MANIFEST})") from None
    else:
        member = manifest["ir"]
        module = _parse_module(zf, path, member, digests)
    try:  # native code never runs for a module that does not verify
        verify_module(module)
    except TfcError as e:
        raise ArtifactError(f"{path}: {member} is not valid IR: {e}") from None
    module.partitions = _partitions(path, manifest, module)
    _check_signatures(path, member, manifest, module)
    module.devices, module.fp16_transfers = _target(path, manifest)
    module.memory_plans = _read_plans(zf, path, manifest, module, digests)
    module.lowered_for = _lowered_for(path, manifest, module)
    _check_planned(path, module)
    module.replicated_from = _replicated_from(zf, path, manifest, digests)
    return module


def _replicated_from(zf: zipfile.ZipFile, path: Any, manifest: dict[str, Any],
                     digests: Mapping[str, str] | None) -> bytes | None:
    """The unreplicated step stored with an allreduce module (``SOURCE_MEMBER``), its
    digest checked; None when the manifest names none."""
    member = manifest.get("replicated_from")
    if member is None:
        return None
    if not isinstance(member, str):
        raise ArtifactError(f"{path}: {MANIFEST} field 'replicated_from' should be a str, "
                            f"not {type(member).__name__}")
    raw = _member(zf, path, member, f" (named by {MANIFEST})")
    check_member(zf, path, member, digests, raw)
    return raw


def _lowered_for(path: Any, manifest: dict[str, Any], module: Module) -> Target | None:
    """The target the stored module was lowered for (``"lowered_for"``: a backend name),
    so that a program compiles its final IR as it is; None for a module stored before it
    was lowered, and in artifacts of older tfc."""
    name = manifest.get("lowered_for")
    if name is None:
        return None
    if not isinstance(name, str) or name not in BACKENDS:
        raise ArtifactError(f"{path}: {MANIFEST} field 'lowered_for' names no backend "
                            f"({name!r}; backends: {', '.join(BACKENDS)})")
    return Target(name, tuple(module.devices), module.fp16_transfers)


def _check_planned(path: Any, module: Module) -> None:
    """A module lowered for a target whose lowering plans memory has a plan for each
    graph the memory pass plans (all but the partitioned entries; the initializer
    recipes are stored unplanned): else its backend would refuse it at run time, far from
    the file, though it is the manifest's ``"memory_plans"`` that was lost or damaged."""
    from tfc.pipeline import lowering_passes
    target = module.lowered_for
    if target is None or "memory" not in {p.name for p in lowering_passes(target)}:
        return
    for name in module.graphs:
        if name not in module.partitions and name != INIT_GRAPH and name not in module.memory_plans:
            raise ArtifactError(f"{path}: @{name} is lowered for {target.backend} but has no "
                                f"memory plan ({MANIFEST} field 'memory_plans' missing or "
                                f"damaged)")


def _read_plans(zf: zipfile.ZipFile, path: Any, manifest: dict[str, Any], module: Module,
                digests: Mapping[str, str] | None) -> dict[str, Any]:
    """The memory plans stored with the module (``"memory_plans"``: absent in artifacts
    of modules that were never planned, and of older tfc), each checked against its
    graph: the module then compiles as it was planned, with no pass to run."""
    member = manifest.get("memory_plans")
    if member is None:
        return {}
    from tfc.passes.memory import MemoryPlan
    if not isinstance(member, str):
        raise ArtifactError(f"{path}: {MANIFEST} field 'memory_plans' should be a str, "
                            f"not {type(member).__name__}")
    raw = _member(zf, path, member, f" (named by {MANIFEST})")
    check_member(zf, path, member, digests, raw)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{path}: {member} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: {member} should map graph names to memory plans")
    plans = {}
    for name, plan in data.items():
        graph = module.graphs.get(name)
        if graph is None:
            raise ArtifactError(f"{path}: {member} has a memory plan for an unknown graph "
                                f"@{name}")
        try:
            plans[name] = MemoryPlan.from_json(graph, plan)
        except ValueError as e:
            raise ArtifactError(f"{path}: {member}: the memory plan of @{name} is invalid "
                                f"({e})") from None
    return plans


def _partitions(path: Any, manifest: dict[str, Any], module: Module) -> dict[str, Any]:
    """The partition tables of a multi-device module, checked against it."""
    from tfc.ir.core import PartitionTable
    stored = manifest.get("partitions", {})
    if not isinstance(stored, dict):
        raise ArtifactError(f"{path}: {MANIFEST} field 'partitions' should be an object")
    tables = {}
    for entry, obj in stored.items():
        try:
            table = PartitionTable.from_json(obj)
            if table.entry != entry:
                raise TfcError(f"the table of @{entry} is for @{table.entry}")
            table.check(module)
        except TfcError as e:
            raise ArtifactError(f"{path}: {MANIFEST}: {e.message}") from None
        tables[entry] = table
    return tables


def _check_signatures(path: Any, member: str, manifest: dict[str, Any], module: Module) -> None:
    """The manifest's entries (feeds and fetches: names, dtypes, shapes) and variables
    must be exactly the module's: callers read the manifest to learn what to feed, and
    the stored object code was compiled for the manifest's signatures."""
    want, have = set(manifest["entries"]), set(module.entries)
    if want != have:
        raise ArtifactError(f"{path}: {MANIFEST} lists entries {sorted(want)} but {member} "
                            f"defines {sorted(have)}")
    for name, graph in module.entries.items():
        signature = EntrySignature.of(graph)
        if manifest["entries"][name] != signature.to_json():
            raise ArtifactError(f"{path}: {MANIFEST} describes entry '{name}' as "
                                f"{_described(name, manifest['entries'][name])}, but {member} "
                                f"defines {signature}")
    want, have = set(manifest["variables"]), set(module.variables)
    if want != have:
        raise ArtifactError(f"{path}: {MANIFEST} lists variables {sorted(want)} but {member} "
                            f"declares {sorted(have)}")
    for name, decl in module.variables.items():
        t = _manifest_type(path, name, manifest["variables"][name])
        if t != decl.type:
            raise ArtifactError(f"{path}: {MANIFEST} says variable '{name}' is {t}, but "
                                f"{member} declares it {decl.type}")


def _described(name: str, entry: Any) -> str:
    """A manifest's entry as ``name(x: f32[B,3]) -> (y: f32[B])``, as far as it is one."""
    def specs(key: str) -> str:
        items = entry.get(key) if isinstance(entry, dict) else None
        if not isinstance(items, list):
            return "?"
        shown = []
        for item in items:
            try:
                shown.append(f"{item['name']}: "
                             f"{TensorType(DType(item['dtype']), tuple(item['shape']))}")
            except (TypeError, KeyError, ValueError, TfcError):
                shown.append(repr(item))
        return ", ".join(shown)
    return f"{name}({specs('feeds')}) -> ({specs('fetches')})"


def _decode_module(zf: zipfile.ZipFile, path: Any, member: str,
                   digests: Mapping[str, str] | None) -> Module:
    from tfc.ir.bytecode import module_from_bytes

    raw = _member(zf, path, member, f" (named by {MANIFEST})")
    check_member(zf, path, member, digests, raw)
    try:
        return module_from_bytes(raw, filename=f"{path}!{member}")
    except TfcError as e:
        raise ArtifactError(f"{path}: {member} is not valid IR bytecode: {e}") from None


def _parse_module(zf: zipfile.ZipFile, path: Any, member: str,
                  digests: Mapping[str, str] | None) -> Module:
    from tfc.ir.parser import parse_module

    raw = _member(zf, path, member, f" (named by {MANIFEST})")
    check_member(zf, path, member, digests, raw)
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


def _check_initializers(path: Any, module: Module, manifest: dict[str, Any]
                        ) -> dict[str, Op]:
    """The variables the artifact stores as initializer ops (``"initializer": true``),
    with their ops, checked: each is assigned a recipe op (``tfc.runtime.initializers``)
    of its type by the stored ``__init__`` graph, which does nothing else."""
    from tfc.runtime.initializers import is_recipe, recipes
    flagged = {name for name, info in manifest["variables"].items()
               if isinstance(info, dict) and info.get("initializer") is True}
    init = module.graphs.get(INIT_GRAPH)
    if init is None:
        if flagged:
            raise ArtifactError(f"{path}: variable '{sorted(flagged)[0]}' is stored as an "
                                f"initializer, but the module has no {INIT_GRAPH} graph")
        return {}
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
    return {name: found[name] for name in flagged}


def read_variables(zf: zipfile.ZipFile, path: Any, manifest: dict[str, Any],
                   skip: Collection[str] = ()) -> Iterator[tuple[str, np.ndarray]]:
    """Each variable's value (but those of ``skip``), checked against the member's digest
    (where the manifest records digests) and the manifest's dtype and shape."""
    digests = read_digests(path, manifest)
    for name, info in manifest["variables"].items():
        if name in skip:
            continue
        t = _manifest_type(path, name, info)
        member = info.get("file")
        if not isinstance(member, str):
            raise ArtifactError(f"{path}: {MANIFEST} gives no file for variable '{name}'")
        what = f"{path}: {member} (variable '{name}')"
        try:
            check_member(zf, path, member, digests)
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
