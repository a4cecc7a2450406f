"""A compiled module with its state: what ``tfc.runtime.load`` returns and users run.

A ``Program`` owns the variable values between steps. Each ``run`` checks the feeds,
runs one step of an entry on the backend (which sees the variables as they were at the
start of the step) and then applies the step's variable updates all at once, so a step
that fails leaves the variables and the step counter exactly as they were.
``save_checkpoint``/``restore_checkpoint`` keep both in ``tfc.runtime.checkpoint`` files.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence,
                    cast)

import numpy as np

from tfc.backends.base import Backend, Executable, get_backend
from tfc.devices import device_backend, program_backend
from tfc.errors import ExecutionError, FeedError, TfcError
from tfc.ir.core import INIT_GRAPH, Graph, Module, Op, VariableDecl
from tfc.ir.registry import writes_variable
from tfc.ir.types import DType, TensorType, format_shape
from tfc.runtime.feeds import check_feeds, expected_feeds
from tfc.runtime.held import read_back_held
from tfc.runtime.initializers import materialize, recipes, warn_if_large, without_recipes
from tfc.runtime.logical import partitioned_variables
from tfc.runtime.runner import EntryRunner

if TYPE_CHECKING:
    from tfc.runtime.artifact import ArtifactOrigin


@dataclass(frozen=True)
class TensorSpec:
    """One named feed or fetch of an entry and its type."""

    name: str
    type: TensorType

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.type.dtype.value, "shape": list(self.type.shape)}

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


@dataclass(frozen=True)
class EntrySignature:
    """The feeds and fetches of one entry point, as the artifact's manifest records them."""

    name: str
    feeds: tuple[TensorSpec, ...]
    fetches: tuple[TensorSpec, ...]

    @staticmethod
    def of(graph: Graph) -> "EntrySignature":
        feeds = tuple(TensorSpec(n, a.type) for n, a in zip(graph.arg_names, graph.args))
        fetches = tuple(TensorSpec(n, v.type) for n, v in zip(graph.result_names, graph.results))
        return EntrySignature(graph.name, feeds, fetches)

    def to_json(self) -> dict[str, Any]:
        return {"feeds": [f.to_json() for f in self.feeds],
                "fetches": [f.to_json() for f in self.fetches]}

    def __str__(self) -> str:
        ins = ", ".join(str(f) for f in self.feeds)
        outs = ", ".join(str(f) for f in self.fetches)
        return f"{self.name}({ins}) -> ({outs})"


def check_variable_value(decl: VariableDecl, value: Any) -> np.ndarray | str:
    """``value`` as an array of ``decl``'s type, or a sentence saying why it is not one."""
    arr = np.asarray(value)
    t = decl.type
    if arr.dtype != t.dtype.np:
        try:
            shown = DType.from_numpy(arr.dtype).value
        except TfcError:
            shown = str(arr.dtype)
        return f"variable @{decl.name} has dtype {shown}, expected {t}"
    if arr.ndim != t.rank or any(isinstance(d, int) and d != s for d, s in zip(t.shape, arr.shape)):
        return f"variable @{decl.name} has shape {format_shape(arr.shape)}, expected {t}"
    return arr


def _frozen(arr: np.ndarray, copy: bool) -> np.ndarray:
    """A read-only C-contiguous array: stored values can never be changed behind our back."""
    if copy or not arr.flags.c_contiguous:
        arr = np.array(arr, order="C", copy=True)
    arr.flags.writeable = False
    return arr


def lowered_module(module: Module, entry: str, backend: Backend) -> Module:
    """The module ``backend`` compiles (or loads native code of) ``entry`` from:
    ``module`` as it is when it was lowered for this backend (``tfc.pipeline.lower``, as
    ``tfc compile`` does), else a module of that entry alone lowered now, so that only
    the entries that run are lowered, on first use — verified, also for a backend with
    no lowering passes: nothing runs a module that did not verify. ``module`` is never
    changed."""
    from tfc.ir.verifier import verify_module
    from tfc.pipeline import Target, lower_entry, usable_as_lowered
    target = Target(backend.name, tuple(module.devices), module.fp16_transfers)
    if usable_as_lowered(module, target):
        return module
    if backend.pipeline:
        return lower_entry(module, entry, backend.name)  # verifies as it lowers
    verify_module(module)
    return module


class Program:
    """A module, its variable values, a step counter, and a backend to run entries on.

    ``variables=None`` runs the module's ``__init__`` graph (at step 0) and takes the
    values it assigns; otherwise ``variables`` maps every declared variable to its value.
    The program copies the given values unless ``copy=False``, which hands it the arrays
    (the caller must not change them afterwards; the artifact loader does this so that
    loading never holds two copies of the weights). ``backend`` is a backend name
    (``"reference"``) or a backend object; it runs the CPU devices' ops, and a GPU's run
    on the CUDA backend (a module placed on GPUs alone runs on ``cuda``,
    ``tfc.devices.program_backend``). Entries compile on first use and the
    executables are cached; a module not lowered for the backend (``tfc.pipeline``) has
    each entry lowered then, alone. ``step`` is the step counter to start from.

    ``initializers`` (with ``variables``) maps variables that ``variables`` lacks to ops
    that compute their values from attrs alone (``tfc.runtime.initializers``: an
    artifact stores such variables so). Those values, and those of ``__init__`` recipe
    ops when ``variables`` is ``None``, are computed when first needed (a run, a read
    of ``variables``, a checkpoint), never by ``save``: an artifact saved before the
    first run stores the ops, not the values.

    ``cluster`` says where a module whose devices name tasks (``/job:worker/task:1/cpu:0``:
    compiled for a cluster) runs: ``"local"`` (an embedded single-node Ray on 127.0.0.1,
    one process per task), ``"auto"`` (the Ray cluster running here, or ``RAY_ADDRESS``'s),
    ``"HOST:PORT"`` (the Ray cluster at that address): one Ray actor per task, which holds
    the task's variables (``tfc.distributed.runtime``); ``"inprocess"`` runs every task's
    devices as threads of this process (a debugging mode: no processes, no hosts). Such a
    module with ``cluster=None`` is an error, as is a cluster for a module without tasks.
    ``cluster_timeout_s`` bounds every wait for a task. ``close()`` releases the cluster.
    """

    def __init__(self, module: Module, variables: Mapping[str, Any] | None = None,
                 backend: str | Backend | None = None, *, step: int = 0,
                 copy: bool = True, executables: Mapping[str, Executable] | None = None,
                 initializers: Mapping[str, Op] | None = None, cluster: str | None = None,
                 cluster_timeout_s: float | None = None) -> None:
        from tfc.distributed.runtime import check_cluster_argument
        from tfc.distributed.task import cluster_tasks
        tasks = cluster_tasks(module)
        if cluster is None and tasks:
            raise TfcError(f"the module was compiled for a cluster (tasks "
                           f"{', '.join(tasks)}): run it with cluster='local', 'auto' or "
                           f"'HOST:PORT' (tfc run --cluster ...), or cluster='inprocess' "
                           f"for threads of this process")
        if cluster is not None:
            check_cluster_argument(cluster)
            if not tasks and cluster != "inprocess":
                raise TfcError(f"cluster={cluster!r}: the module has no task devices to "
                               f"distribute (its devices: "
                               f"{', '.join(module.devices) or 'none'}); compile it for a "
                               f"cluster (tfc compile --cluster) or run it without one")
        self.cluster = cluster
        self.backend: Backend = (get_backend(backend) if backend is None or isinstance(backend, str)
                                 else backend)
        if program_backend(module.devices, self.backend.name) != self.backend.name:
            self.backend = get_backend(program_backend(module.devices, self.backend.name))
        # the PartitionedExecutable runs the partition tables; an entry whose ops all run
        # on one device has none and runs as a single-device program (``_compile``)
        if len(module.devices) > 1:
            from tfc.pipeline import lower_for_devices
            module = lower_for_devices(module, self.backend.name)
        self.module = module
        # entries compiled ahead of time (an artifact's object code)
        self._executables: dict[str, Executable] = dict(executables or {})
        self._runners: dict[str, EntryRunner] = {}
        # entries of a module not lowered for the backend, each as it was lowered to compile
        self._lowered: dict[str, Module] = {}
        self._step = int(step)
        # Variables whose value is their initializer op's (``tfc.runtime.initializers``):
        # computed when first needed (``_pending``), and saved as the op while no entry
        # that may write them has been made ready to run (``_recipes``).
        self._recipes: dict[str, Op] = {}
        self._pending: dict[str, Op] = {}
        # partitioned variables (their blocks stored as variables of their own), by name
        self._logical = partitioned_variables(module.variables)
        if variables is None:
            values, copy = self._initial_values(), False  # fresh arrays, ours alone
        else:
            values = self._stored_values(variables)
            self._recipes = {n: op for n, op in (initializers or {}).items()
                             if n not in values and n in module.variables}
        self._pending = dict(self._recipes)
        # Variables whose newest value an executable holds on its device (the cuda
        # backend's deferred updates: ``EntryRunner``) -> that executable; the host array
        # in ``_variables`` is then stale until ``_sync_held`` reads the value back. Every
        # reader of ``_variables`` other than the holder's own steps syncs first; every
        # writer drops the name from here.
        self._held: dict[str, Any] = {}
        unknown = [n for n in values if n not in module.variables]
        if unknown:
            raise TfcError(f"unknown variable @{unknown[0]} (the module declares: "
                           f"{', '.join('@' + n for n in module.variables) or 'none'})")
        self._variables: dict[str, np.ndarray] = {}
        for name, decl in module.variables.items():
            if name in self._pending:
                continue
            if name not in values:
                raise TfcError(f"variable @{name} ({decl.type}) has no initial value", decl.loc)
            checked = check_variable_value(decl, values[name])
            if isinstance(checked, str):
                raise TfcError(checked, decl.loc)
            self._variables[name] = _frozen(checked, copy)
        self._view = MappingProxyType(self._variables)  # (the values as stored: see _held)
        self._live = _LiveVariables(self)
        # the artifact file this program was loaded from (``load`` sets it): saving back
        # to it checks that no other process replaced it since
        self.origin: ArtifactOrigin | None = None
        # the tasks' actors of a program run on a Ray cluster (``tfc.distributed.runtime``)
        self._cluster: Any = None
        if cluster is not None and cluster != "inprocess":
            from tfc.distributed.runtime import DEFAULT_TIMEOUT_S, ClusterRuntime
            self._materialize()  # the tasks get every value
            # an artifact's object code runs on the tasks, not here
            native = {e: self.backend.export(exe) for e, exe in self._executables.items()}
            self._executables = {}
            self._cluster = ClusterRuntime(
                module, self._variables, self._step, self.backend.name, cluster,
                DEFAULT_TIMEOUT_S if cluster_timeout_s is None else cluster_timeout_s,
                {e: m for e, m in native.items() if m})

    def close(self, *, read_back: bool = True) -> None:
        """Release what runs the program outside this process: a cluster program's task
        actors (and the embedded Ray of ``cluster="local"``), once its variables are read
        back (they stay readable, and savable, afterwards; ``read_back=False`` skips that,
        after a failure: then they cannot be read). Running it afterwards is an error.
        Nothing to do for other programs."""
        if self._cluster is not None and not self._cluster.closed:
            try:
                if read_back:
                    self._sync_held()
            finally:
                self._cluster.close()

    def task_states(self) -> dict[str, str]:
        """A cluster program's tasks, each with what it did in the latest step (its time
        there, or that it was not part of it); empty for other programs."""
        if self._cluster is None:
            return {}
        return self._cluster.task_states()

    def __enter__(self) -> "Program":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- what the program holds ------------------------------------------------------

    @property
    def step(self) -> int:
        """How many entry steps have run (random ops are seeded with it)."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        """Set the step counter (a driver that counts steps elsewhere too: ``fit`` under
        a ``tfc.distribute`` strategy keeps it equal to its session's)."""
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise TfcError(f"a program's step must be a whole number >= 0, not {value!r}")
        self._step = int(value)

    @property
    def variables(self) -> Mapping[str, np.ndarray]:
        """The current variable values (read-only arrays in a read-only mapping that
        stays current: later steps' values show through it), as the user wrote them: a
        partitioned variable is listed once, by its name, with its whole value (its
        blocks concatenated, as ``tf.train.Saver`` saves it); its blocks
        (``NAME/part_i``) are not listed but can still be read by name, and are all in
        ``stored_variables``."""
        self._materialize()
        return self._live

    @property
    def stored_variables(self) -> Mapping[str, np.ndarray]:
        """The variables as the module stores them: a partitioned variable's blocks, each
        under its own name (``NAME/part_i``), as ``variables`` lists no partitions."""
        self._materialize()
        self._sync_held()
        return self._view

    def _stored_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` by stored variable: a partitioned variable's whole value (under its
        name) split into its blocks, after checking it against the whole type."""
        out = dict(values)
        for name, logical in self._logical.items():
            if name in out:
                checked = check_variable_value(logical.decl, out.pop(name))
                if isinstance(checked, str):
                    raise TfcError(checked)
                out.update(logical.split(checked))
        return out

    @property
    def initializers(self) -> Mapping[str, Op]:
        """The variables whose value is still their initializer op's, with the op: an
        artifact stores these ops instead of the values."""
        return MappingProxyType(self._recipes)

    def set_variable(self, name: str, value: Any) -> None:
        """Replace one variable's value (a copy of ``value``, which must have its type); a
        partitioned variable's whole value sets each of its blocks."""
        if name in self._logical and name not in self.module.variables:
            for shard, rows in self._stored_values({name: value}).items():
                self.set_variable(shard, rows)
            return
        decl = self.module.variables.get(name)
        if decl is None:
            raise TfcError(f"unknown variable @{name}"
                           f"{_hint(name, [*self._logical, *self.module.variables])}")
        checked = check_variable_value(decl, value)
        if isinstance(checked, str):
            raise TfcError(checked)
        self._variables[name] = _frozen(checked, copy=True)
        self._pending.pop(name, None)
        self._recipes.pop(name, None)
        self._held.pop(name, None)

    @property
    def entries(self) -> dict[str, EntrySignature]:
        """Each entry point's name and signature (the ``__init__`` graph is not one)."""
        return {name: EntrySignature.of(g) for name, g in self.module.entries.items()}

    def entry(self, name: str) -> Graph:
        """The graph of entry ``name``; a ``TfcError`` that lists the entries if none."""
        graph = self.module.entries.get(name)
        if graph is None:
            listed = "; ".join(str(s) for s in self.entries.values()) or "none"
            raise TfcError(f"unknown entry '{name}'{_hint(name, self.module.entries)} "
                           f"(entries: {listed})")
        return graph

    # ---- running ---------------------------------------------------------------------

    def run(self, entry: str, feeds: Mapping[str, Any] | None = None, /,
            **kw_feeds: Any) -> dict[str, np.ndarray]:
        """Run one step of ``entry``; returns its fetches by name.

        Feeds come as a mapping (for names that are not Python identifiers) and/or as
        keywords. The step's variable updates apply after it succeeds, all at once.
        For hot loops, ``callable`` does the same with less work per call.
        """
        runner = self._runners.get(entry) or self._runner(entry)
        if feeds:
            merged = dict(feeds)
            for k, v in kw_feeds.items():
                if k in merged:
                    raise FeedError(f"entry '{entry}': feed '{k}' is given twice")
                merged[k] = v
        else:
            merged = kw_feeds
        names = runner.arg_names
        values = None
        if len(merged) == len(names):
            try:
                values = [merged[n] for n in names]
            except KeyError:
                pass
        if values is None:  # an unknown or a missing feed: check_feeds says which
            values = check_feeds(runner.graph, merged, where=runner.where)
        return dict(zip(runner.result_names, runner.step(values)))

    def callable(self, entry: str, feeds: str | Sequence[str] | None = None,
                 fetches: str | Sequence[str] | None = None) -> Callable[..., Any]:
        """A function that runs steps of ``entry`` with less work per call than ``run``
        (TensorFlow's ``Session.make_callable``): it takes the feeds positionally, in
        the order of ``feeds`` (default: the entry's), and returns the fetch named by
        ``fetches`` when that is one name, a list for a list of names, and all fetches
        by name (as ``run``) when it is ``None``. Steps behave exactly as ``run``'s:
        same checks, same errors, variables and step counter updated together."""
        runner = self._runners.get(entry) or self._runner(entry)
        where = runner.where
        names = runner.arg_names
        given = names
        order: list[int] | None = None
        if feeds is not None:
            given = [feeds] if isinstance(feeds, str) else list(feeds)
            for name in given:
                if name not in names:
                    raise FeedError(f"{where}: unknown feed '{name}'{_hint(name, names)}; "
                                    f"expected feeds: {expected_feeds(runner.graph)}")
                if given.count(name) > 1:
                    raise FeedError(f"{where}: feed '{name}' is listed twice")
            missing = [n for n in names if n not in given]
            if missing:
                raise FeedError(f"{where}: the callable must take every feed; missing "
                                f"{', '.join(repr(n) for n in missing)}")
            order = [given.index(n) for n in names]
            if order == list(range(len(names))):
                order = None
        results = runner.result_names
        single = isinstance(fetches, str)
        wanted = [cast(str, fetches)] if single else list(
            results if fetches is None else fetches)
        for name in wanted:
            if name not in results:
                raise TfcError(f"{where}: unknown fetch '{name}'{_hint(name, results)} "
                               f"(fetches: {', '.join(results) or 'none'})")
        index = [results.index(n) for n in wanted]
        step, n = runner.step, len(names)
        shown = ", ".join(names if feeds is None else given)

        def call(*values: Any) -> Any:
            if len(values) != n:
                raise FeedError(f"{where}: the callable takes {n} feed"
                                f"{'s' if n != 1 else ''} ({shown}), got {len(values)}")
            outs = step(values if order is None else [values[k] for k in order])
            if single:
                return outs[index[0]]
            if fetches is None:
                return dict(zip(results, outs))
            return [outs[k] for k in index]

        call.__doc__ = f"One step of {where}: ({shown}) -> {fetches if single else wanted}"
        if fetches is not None:  # one fetch or a list: the backend may run it natively
            return runner.native_callable(call, order, index, single) or call
        return call

    def __call__(self, entry: str, feeds: Mapping[str, Any] | None = None, /,
                 **kw_feeds: Any) -> dict[str, np.ndarray]:
        return self.run(entry, feeds, **kw_feeds)

    def writes_variables(self, entry: str) -> bool:
        """Whether a step of ``entry`` can update a variable (an assign or a scatter, in
        its graph or its regions): a step of an entry that cannot changes nothing worth
        saving."""
        return any(writes_variable(op) for op in self.entry(entry).walk())

    def save(self, path: str | os.PathLike[str], *, force: bool = False) -> None:
        """Write the module, the current variables and the step to an artifact, atomically.

        Saving back to the artifact this program was loaded from refuses (an
        ``ArtifactError``) when another process replaced that file since, as a second
        ``tfc run --save`` of one artifact does: overwriting it would silently lose that
        process's update. ``force=True`` overwrites it anyway.
        """
        from tfc.runtime.artifact import ArtifactOrigin, save_artifact
        native = {}  # what the backend keeps of each entry (llvm: object code, tables)
        for entry in self.module.entries:
            members = self.backend.export(self._executable(entry))
            if members:
                native[entry] = members
        self._sync_held()
        same_file = self.origin is not None and self.origin.is_file(path)
        check = (self.origin.check_unchanged if self.origin is not None and same_file
                 and not force else None)
        written = save_artifact(path, self._stored_module(), self._variables, step=self._step,
                                backend=self.backend.name, native=native,
                                before_replace=check, initializers=self._recipes)
        if same_file or self.origin is None:  # later saves compare with this one
            self.origin = ArtifactOrigin.of(path, written, self._step)

    def save_checkpoint(self, dir_or_path: str | os.PathLike[str], *,
                        max_to_keep: int | None = 5,
                        extra: Mapping[str, Any] | None = None) -> Path:
        """Save every variable and the step to a checkpoint, atomically; returns its path.
        ``extra``: named arrays saved beside them (an input pipeline's position).

        ``dir_or_path`` is a checkpoint directory (the file is ``ckpt-<step>.tfckpt``,
        recorded in the directory's ``checkpoint.json``; the oldest beyond
        ``max_to_keep`` are deleted) or a ``.tfckpt`` file name.

        A program on a Ray cluster saves into a directory a *sharded* checkpoint: one file
        per task with the variables it owns, all of this step, and the shard list written
        only after all are durable (``tfc.runtime.checkpoint.save_sharded_checkpoint``).
        """
        from tfc.runtime.checkpoint import SUFFIX, save_checkpoint, save_sharded_checkpoint
        self._materialize()
        if self._cluster is not None and Path(dir_or_path).suffix != SUFFIX:
            shards: dict[str, dict[str, np.ndarray]] = {}
            for name, value in self._variables.items():
                shards.setdefault(self._cluster.owners.get(name, "driver"), {})[name] = value
            return save_sharded_checkpoint(dir_or_path, shards, self._step,
                                           max_to_keep=max_to_keep, extra=extra)
        return save_checkpoint(dir_or_path, self._variables, self._step,
                               max_to_keep=max_to_keep, extra=extra)

    def restore_checkpoint(self, path_or_dir: str | os.PathLike[str]) -> Path:
        """Set every variable and the step from a checkpoint (a directory means its
        latest); returns the file restored.

        Everything is checked against the declared variables before anything changes,
        so a bad checkpoint leaves the program as it was. The step is restored too:
        random ops are seeded with it, so the next steps are exactly those an
        uninterrupted run would have taken.
        """
        from tfc.runtime.checkpoint import check_values, read_checkpoint
        ckpt = read_checkpoint(path_or_dir)
        values = check_values(ckpt, self.module.variables)
        self._variables.update({n: _frozen(v, copy=False) for n, v in values.items()})
        for name in values:
            self._pending.pop(name, None)
            self._recipes.pop(name, None)
            self._held.pop(name, None)
        self._step = ckpt.step
        return ckpt.path

    def __repr__(self) -> str:
        return (f"<Program entries=[{', '.join(self.module.entries)}] "
                f"variables={len(self.module.variables)} step={self._step} "
                f"backend={self.backend.name}>")

    # ---- internals -------------------------------------------------------------------

    def _runner(self, entry: str) -> EntryRunner:
        runner = self._runners.get(entry)
        if runner is None:
            self._materialize()
            runner = self._runners[entry] = EntryRunner(self, entry)
            # from now on the entry may change what it writes: those values are data
            for op in runner.graph.walk():
                if writes_variable(op):
                    self._recipes.pop(op.attrs["var"], None)
        return runner

    def _materialize(self) -> None:
        """Compute the values of the variables still pending from their initializers."""
        while self._pending:
            name, op = next(iter(self._pending.items()))
            decl = self.module.variables[name]
            checked = check_variable_value(decl, materialize(decl, op))
            if isinstance(checked, str):
                raise TfcError(f"the initializer of variable @{name} is wrong: {checked}",
                               op.loc)
            self._variables[name] = _frozen(checked, copy=False)
            del self._pending[name]
        self._sync_held()

    def _sync_held(self, names: Iterable[str] | None = None) -> None:
        """Bring the values executables hold on their devices (``_held``; all, or those
        of ``names``) into ``_variables``: one ``read_back`` per executable
        (``tfc.runtime.held``)."""
        read_back_held(self._held, self._variables, names)

    def _executable(self, entry: str) -> Executable:
        exe = self._executables.get(entry)
        if exe is None:
            if self._cluster is not None:  # the tasks' actors run it
                exe = self._cluster.executable(entry)
            elif entry in self.module.partitions:  # one partition per device, concurrently
                from tfc.runtime.executor import PartitionedExecutable
                exe = PartitionedExecutable(self.module, entry, self.backend)
            else:
                exe = self._compile(self.module, entry, self._single_device_backend(entry))
            self._executables[entry] = exe
        return exe

    def _single_device_backend(self, entry: str) -> Backend | None:
        """The backend of the one device an entry without a partition table runs on, when
        that is not the program's (``tfc.devices.device_backend``: the entry of a
        ``/cpu:0,/gpu:0`` module placed wholly on the GPU runs on cuda); else None."""
        if len(self.module.devices) < 2:
            return None
        from tfc.passes.partition import single_device
        graph = self.module.graphs.get(entry)
        device = single_device(graph, self.module.devices[0]) if graph is not None else None
        name = device_backend(device, self.backend.name) if device is not None else None
        return get_backend(name) if name is not None and name != self.backend.name else None

    def _compile(self, module: Module, entry: str, backend: Backend | None = None
                 ) -> Executable:
        """``entry`` compiled by ``backend`` (default: the program's), from
        ``lowered_module``'s module."""
        backend = backend or self.backend
        lowered = lowered_module(module, entry, backend)
        if lowered is not module and module is self.module and entry != INIT_GRAPH:
            self._lowered[entry] = lowered
        return backend.compile(lowered, entry)

    def _stored_module(self) -> Module:
        """The module an artifact of this program stores: the final IR that compiled.
        That is the program's module when it was lowered for the backend; else, once every
        entry has been lowered on its own (``save`` compiles them all), those entries
        with their memory plans, so the artifact loads without running a pass."""
        entries = self.module.entries
        if not entries or any(name not in self._lowered for name in entries):
            return self.module
        graphs = {n: g for n, g in self.module.graphs.items() if n not in entries}
        stored = Module({**graphs, **{n: self._lowered[n].graphs[n] for n in entries}},
                        self.module.variables)
        stored.memory_plans = {n: self._lowered[n].memory_plans[n] for n in entries
                               if n in self._lowered[n].memory_plans}
        stored.lowered_for = self._lowered[next(iter(entries))].lowered_for
        return stored

    def _initial_values(self) -> dict[str, np.ndarray]:
        """The values ``__init__`` assigns, but for variables whose initializer is a
        recipe op (``tfc.runtime.initializers``): those are left pending."""
        init = self.module.graphs.get(INIT_GRAPH)
        if init is None:
            return {}
        if init.args:
            raise TfcError(f"the {INIT_GRAPH} graph takes feeds ({init.arg_names}); "
                           f"it must take none")
        self._recipes = recipes(self.module)
        rest = without_recipes(init, set(self._recipes)) if self._recipes else init
        if rest is None:
            return {}
        for op in rest.ops:
            decl = self.module.variables.get(op.attrs.get("var", ""))
            if writes_variable(op) and decl is not None:
                warn_if_large(decl, f"the {INIT_GRAPH} graph")
        module = self.module
        if rest is not init:
            module = Module({INIT_GRAPH: rest}, self.module.variables,
                            devices=list(self.module.devices))
        # the initial values are host arrays: a GPU program computes them on the CPU
        # backend (the same numbers: random ops draw the same Philox streams everywhere),
        # so compiling for a GPU needs none
        host = device_backend("/cpu:0", self.backend.name)
        exe = self._compile(module, INIT_GRAPH,
                            None if host == self.backend.name else get_backend(host))
        return dict(exe([], MappingProxyType({}), 0).updates)

    def _own_fetch(self, f: np.ndarray) -> np.ndarray:
        """Fetches belong to the caller: never a read-only array or a view of our state.

        A writeable array that owns its buffer is this step's own output (the LLVM
        backend's always are): no stored value can live in it, since this step's updates
        that share a handed-out buffer are copied (``_checked_updates``) and a backend
        reuses an earlier step's array only once nothing references it (stored values
        do). Only views need the scan over every variable."""
        if not f.flags.writeable:
            return np.array(f, copy=True)
        if f.base is None:
            return f
        if any(np.may_share_memory(f, v) for v in self._variables.values()):
            return np.array(f, copy=True)
        return f

    def _checked_updates(self, entry: str, updates: Mapping[str, np.ndarray],
                         handed_out: list[np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, value in updates.items():
            decl = self.module.variables.get(name)
            if decl is None:
                raise ExecutionError(f"entry '{entry}' assigned undeclared variable @{name}")
            checked = check_variable_value(decl, value)
            if isinstance(checked, str):
                raise ExecutionError(f"entry '{entry}': {checked}", decl.loc)
            shared = any(np.may_share_memory(checked, a) for a in handed_out)
            out[name] = _frozen(checked, copy=shared)
        return out


class _LiveVariables(Mapping[str, np.ndarray]):
    """``Program.variables``: a read-only view of the program's variables whose reads
    bring in the values executables hold on their devices (``Program._held``)."""

    def __init__(self, program: Program) -> None:
        self._program = program

    def __getitem__(self, name: str) -> np.ndarray:
        prog = self._program
        logical = prog._logical.get(name)
        if logical is not None and name not in prog._variables:
            whole = np.concatenate([self[s] for s in logical.shards], axis=0)
            whole.flags.writeable = False
            return whole
        if name in prog._held:
            prog._sync_held([name])
        return prog._variables[name]

    def __iter__(self) -> Iterator[str]:
        """The stored variables in order, a partitioned variable's name in place of its
        first block and its other blocks left out."""
        prog = self._program
        shard_of = {s: lv for lv in prog._logical.values() for s in lv.shards}
        for name in prog._variables:
            logical = shard_of.get(name)
            if logical is None:
                yield name
            elif logical.shards[0] == name:
                yield logical.name

    def __len__(self) -> int:
        prog = self._program
        return len(prog._variables) - sum(len(lv.shards) - 1 for lv in prog._logical.values())

    def __repr__(self) -> str:
        return f"<variables of {self._program!r}: {', '.join(self)}>"


def _hint(name: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
