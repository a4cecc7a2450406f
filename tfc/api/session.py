"""``tfc.Session``: run pieces of the graph with feeds and fetches, as in TensorFlow 1.

Each distinct (feeds, fetches, targets) request is cut out of the graph, optimized with
the default pass pipeline and compiled once by the backend; later runs with the same
request reuse it. A request whose graph was lowered before (the same model in another
session or process) skips the passes (``tfc.api.lowered_cache``), and where the backend
keeps the code for it (the llvm entry cache) even reading the lowered module back, and
copying the request out of the graph: a view of it is the key. Variables live in
the session: they are initialized on first use
(``global_variables_initializer`` re-initializes them), persist across runs, and a run's
assigns land together at the end of its step. On a backend that can keep them on its
device (cuda: ``tfc.runtime.held``) a run's updates stay there: ``Session.variables``
copies a value to the host only when it is read (a fetch of it by another request,
``variable_values``, a ``Saver``), and a value written into it is uploaded by the next
run that reads it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from tfc import background
from tfc.api.extract import copy_view, extract
from tfc.api.graph import Graph, Operation, Tensor, Variable, get_default_graph
from tfc.api.tensor import convert_to_tensor
from tfc.backends.base import Executable, StepOwner, get_backend
from tfc.errors import FeedError, TfcError
from tfc.ir import core as ir
from tfc.runtime.held import VariableStore, defers


@dataclass
class SplitStep:
    """A train op whose step runs as two native calls with Python between them, for a
    collective that cannot run inside compiled code (``tfc.distributed``'s
    ``DistributedOptimizer``): ``Session.run`` of an ``Operation`` carrying one as its
    ``split_step`` computes ``gradients`` (with the run's feeds and other fetches), passes
    their values through ``between`` (the all-reduce), then runs the op fed with the
    results at ``placeholders`` (and the run's feeds). This is the one such hook."""

    gradients: list[Any]  # Tensors
    placeholders: list[Any]  # Tensors, one per gradient
    between: Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass
class _Compiled:
    # the lowered graph, or what stands for it (a view of the request: ``_compile``);
    # only its signature is read here (the feeds' names and types, the fetches' names)
    graph: ir.Graph
    executable: Executable
    feed_names: list[str]
    defers: bool = False  # its updates stay on its device (``tfc.runtime.held.defers``)


class CompositeFetch:
    """A fetch made of several tensors and returned as one value (``tfc.summary``'s
    summaries): ``run`` fetches ``fetch_tensors()`` in the same step as the rest and
    returns ``from_values(their values)``. Subclasses hash by identity."""

    def fetch_tensors(self) -> list[Tensor]:
        raise NotImplementedError

    def from_values(self, values: list[Any]) -> Any:
        raise NotImplementedError


def _flatten(fetches: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """Leaves of a nested fetch structure and a function that rebuilds it from values."""
    if isinstance(fetches, CompositeFetch):
        return list(fetches.fetch_tensors()), fetches.from_values
    if isinstance(fetches, (list, tuple)):
        parts = [_flatten(f) for f in fetches]
        leaves = [x for p, _ in parts for x in p]

        def rebuild(vals: list[Any]) -> Any:
            out, i = [], 0
            for p, r in parts:
                out.append(r(vals[i:i + len(p)]))
                i += len(p)
            return type(fetches)(out) if not hasattr(fetches, "_fields") else type(fetches)(*out)
        return leaves, rebuild
    if isinstance(fetches, Mapping):
        keys = list(fetches)
        sub = _flatten([fetches[k] for k in keys])
        return sub[0], lambda vals: dict(zip(keys, sub[1](vals)))
    return [fetches], lambda vals: vals[0]


MAX_CACHED_RUNS = 256  # distinct run requests a session keeps (oldest dropped first)


def _request_key(fetches: Any) -> Any:
    """A hashable key of a fetch structure: its shape, and its leaves themselves (tensors
    hash and compare by identity, as in TensorFlow 1; the key keeps them alive, so no
    other object can take their place). Raises TypeError for an unhashable leaf."""
    if isinstance(fetches, (list, tuple)):
        return (type(fetches), tuple(_request_key(f) for f in fetches))
    if isinstance(fetches, Mapping):
        return (type(fetches), tuple((k, _request_key(v)) for k, v in fetches.items()))
    hash(fetches)
    return fetches


def _fetch_request(fetches: Any) -> tuple[list[Any], Callable[[list[Any]], Any],
                                          list[Tensor], list[Operation]]:
    """The leaves of ``fetches``, how to rebuild its structure, and the tensors to fetch
    and operations to run among the leaves."""
    leaves, rebuild = _flatten(fetches)
    tensors: list[Tensor] = []
    targets: list[Operation] = []
    for leaf in leaves:
        if isinstance(leaf, Operation):
            targets.append(leaf)
        elif isinstance(leaf, (Tensor, Variable)):
            tensors.append(convert_to_tensor(leaf))
        else:
            raise TfcError(f"cannot fetch {leaf!r}: expected a tensor, variable or operation")
    return leaves, rebuild, tensors, targets


class Session:
    """Runs the default graph (or ``graph``) through a backend (``$TFC_BACKEND``, else
    ``llvm``). ``pipeline`` is the optimization passes (default ``DEFAULT_PIPELINE``;
    ``""``: none); each run's graph is then lowered for the backend (``tfc.pipeline``)."""

    def __init__(self, graph: Graph | None = None, backend: str | None = None,
                 pipeline: str | None = None) -> None:
        from tfc.pipeline import DEFAULT_PIPELINE
        self.graph = graph or get_default_graph()
        self.backend = get_backend(backend)
        self.pipeline = DEFAULT_PIPELINE if pipeline is None else pipeline
        # name -> value; values a device holds are read back when read (``VariableStore``)
        self.variables = VariableStore()
        # the store's host dict itself: what the llvm backend's native steps read and write
        self._host_variables = self.variables.host
        self.step = 0
        self._cache: dict[tuple, _Compiled] = {}
        self._runs: dict[tuple, Callable[..., Any]] = {}  # run's requests: make_callable's
        # how many of the graph's variables were last seen all holding values here
        self._checked_variables = -1
        self._closed_word = ctypes.c_int64(0)  # 1 once closed (native callables read it)

    # ---- context manager -----------------------------------------------------------------

    def __enter__(self) -> "Session":
        self._default = self.graph._session
        self.graph._session = self
        return self

    def __exit__(self, *exc: Any) -> None:
        self.graph._session = self._default
        self.close()

    def close(self) -> None:
        self._closed_word.value = 1
        self._cache.clear()
        self._runs.clear()

    # ---- running -------------------------------------------------------------------------

    def run(self, fetches: Any, feed_dict: Mapping[Any, Any] | None = None) -> Any:
        """Values of ``fetches`` (a tensor, operation, variable, summary (``tfc.summary``),
        or a nested list / tuple / dict of them) given ``feed_dict`` (tensor or
        placeholder name -> value).

        A request is ``make_callable(fetches, list(feed_dict))``, kept by the structure of
        its fetches and its feed keys: a training loop that runs the same request every
        step pays for resolving it once (on the llvm backend each later step is then one
        native call, ``pystep``)."""
        if self._closed_word.value:
            raise TfcError("this session is closed")
        feed_dict = feed_dict or {}
        try:
            key = (_request_key(fetches), tuple(feed_dict))
            step = self._runs.get(key)
        except TypeError:  # an unhashable fetch or feed: make_callable says what is wrong
            key, step = None, None
        if step is None:
            # a new request: the caches' writes for the next process (the lowered module,
            # the native code with the first step's binding) wait until its first step
            # has run, then go to a worker thread (tfc.background)
            held = background.Held()
            try:
                with background.deferred(held):
                    step = self.make_callable(fetches, list(feed_dict))
                    if key is not None:
                        if len(self._runs) >= MAX_CACHED_RUNS:
                            del self._runs[next(iter(self._runs))]
                        self._runs[key] = step
                    return step(*feed_dict.values())
            finally:
                held.release()
        return step(*feed_dict.values())

    def make_callable(self, fetches: Any, feed_list: Any = None) -> Callable[..., Any]:
        """A function running ``run(fetches, feed_dict)`` with the feeds given
        positionally, in the order of ``feed_list`` (tensors or placeholder names), as
        TensorFlow's ``Session.make_callable``: the request is cut out and compiled once,
        here, so each call only checks its feeds and runs one step."""
        if self._closed_word.value:
            raise TfcError("this session is closed")
        leaves, rebuild, tensors, targets = _fetch_request(fetches)
        from tfc.api.host import host_callable  # queues: host work around the step
        hosted = host_callable(self, leaves, rebuild, tensors, targets, list(feed_list or []))
        if hosted is not None:
            return hosted
        split = [t for t in targets if getattr(t, "split_step", None) is not None]
        if split:
            return self._split_callable(fetches, feed_list, leaves, rebuild, split)
        fed = [t for t, _ in self._resolve_feeds({k: None for k in (feed_list or [])})]
        if len(set(fed)) != len(fed):
            raise FeedError("make_callable: a tensor is listed twice in feed_list")
        self._initialize_missing(targets)
        compiled = self._compile(tensors, targets, fed)
        is_op = [isinstance(x, Operation) for x in leaves]
        n = len(fed)
        single = leaves == [fetches] and not is_op[0]  # one tensor: no structure to build

        def values_of(*values: Any) -> Any:
            """The step in Python: the fetched values, flat (the one value if single)."""
            if self._closed_word.value:
                raise TfcError("this session is closed")
            if len(values) != n:
                raise FeedError(f"this callable takes {n} feed{'s' if n != 1 else ''}, "
                                f"got {len(values)}")
            self._initialize_missing(targets)
            out = self._execute(compiled, list(values))
            return out[0] if single else out

        run = self._native(compiled, values_of, len(tensors), single) or values_of
        if single:
            return run

        def call(*values: Any) -> Any:
            it = iter(run(*values))
            return rebuild([None if op else next(it) for op in is_op])

        return call

    def _split_callable(self, fetches: Any, feed_list: Any, leaves: list[Any],
                        rebuild: Callable[[list[Any]], Any], split: list[Operation]
                        ) -> Callable[..., Any]:
        """``make_callable`` of a request holding a ``SplitStep`` op: the first call
        computes the other fetches and the gradients, the second applies ``between``'s
        results. The two calls count as one step (random ops see the same step number as
        in an unsplit run)."""
        if len(split) > 1:
            raise TfcError("Session.run: one run can hold one DistributedOptimizer train op, "
                           f"not {len(split)}")
        spec: SplitStep = split[0].split_step  # type: ignore[attr-defined]
        feeds = list(feed_list or [])
        is_split = [any(x is s for s in split) for x in leaves]
        plain = [x for x, s in zip(leaves, is_split) if not s]
        first = self.make_callable([plain, list(spec.gradients)], feeds)
        second = self.make_callable(split[0].control_inputs, list(spec.placeholders) + feeds)

        def call(*values: Any) -> Any:
            plain_values, gradients = first(*values)
            results = spec.between([np.asarray(g) for g in gradients])
            second(*results, *values)
            self.step -= 1  # (each call counted one step)
            it = iter(plain_values)
            return rebuild([None if s else next(it) for s in is_split])

        return call

    def _native(self, compiled: _Compiled, values_of: Callable[..., Any], count: int,
                single: bool) -> Callable[..., Any] | None:
        """``values_of`` with its usual path in native code, where the backend offers that
        (the llvm backend: ``native_callable``) and the compiled graph takes the feeds
        and gives the fetches under the names ``_compile`` chose; else ``None``."""
        make = getattr(compiled.executable, "native_callable", None)
        graph, names = compiled.graph, compiled.feed_names
        wanted = [f"fetch{i}" for i in range(count)]
        if (make is None or sorted(graph.arg_names) != sorted(names)
                or not set(wanted) <= set(graph.result_names)):
            return None
        order = [names.index(a) for a in graph.arg_names]
        index = [graph.result_names.index(w) for w in wanted]
        owner = StepOwner(self, "_host_variables", "step", freeze_updates=False,
                          closed=self._closed_word)
        return make(owner, values_of, order, index, single)

    def _resolve_feeds(self, feed_dict: Mapping[Any, Any]) -> list[tuple[Tensor, Any]]:
        by_name: dict[str, Tensor] | None = None  # built only when a key is a name
        out: list[tuple[Tensor, Any]] = []
        for key, value in feed_dict.items():
            if isinstance(key, str):
                if by_name is None:
                    by_name = {p.name: p for p in self.graph.placeholders
                               if p.name is not None}  # (placeholders all have names)
                name = key[:-2] if key.endswith(":0") else key
                if name not in by_name:
                    from tfc.ir.registry import nearest_hint
                    raise FeedError(f"no placeholder named '{name}'"
                                    f"{nearest_hint(name, list(by_name))}")
                key = by_name[name]
            elif isinstance(key, Variable):
                key = key.value()
            if not isinstance(key, Tensor):
                raise FeedError(f"feed_dict keys must be tensors or placeholder names, "
                                f"got {key!r}")
            if key.graph is not self.graph:
                raise FeedError(f"feed {key} is from another graph")
            out.append((key, value))
        return out

    def _compile(self, tensors: list[Tensor], targets: list[Operation],
                 fed: list[Tensor]) -> _Compiled:
        tops = [op for t in targets for op in t.ir_ops()]
        key = (tuple(t.value for t in tensors), tuple(tops), tuple(t.value for t in fed))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        # the caches' writes for the next process (the lowered module, the native code)
        # on a worker thread once compiled (or, from ``run``, once its first step has
        # run), off the compile's path (tfc.background)
        with background.deferred():
            compiled = self._compile_new(tensors, tops, fed)
        self._cache[key] = compiled
        return compiled

    def _compile_new(self, tensors: list[Tensor], tops: list[ir.Op],
                     fed: list[Tensor]) -> _Compiled:
        from tfc.pipeline import Target, lower
        feed_names = [t.value.name or f"feed{i}" for i, t in enumerate(fed)]
        fetch_names = [f"fetch{i}" for i in range(len(tensors))]
        request = (self.graph.ir, "run", list(zip(feed_names, [t.value for t in fed])),
                   list(zip(fetch_names, [t.value for t in tensors])), tops)

        # the passes' result for this content, when met before (tfc.api.lowered_cache),
        # known by the request's content: a view of it (``extract(borrow=True)``) is
        # enough for the key, and for the feeds' checks where the backend has the code
        from tfc.api import lowered_cache
        target = Target(self.backend.name)
        view = extract(*request, what="Session.run", borrow=True)
        keyed = self._module(view)

        def source() -> ir.Module:  # the request cut out: a graph of its own to lower
            module = ir.Module(variables=dict(keyed.variables))  # (those the key saw)
            module.add_graph(copy_view(view, feed_names))  # (the view's ops: those keyed)
            return module
        found = lowered_cache.find(keyed, "run", target, self.pipeline,
                                   lambda m: lower(m, target, passes=self.pipeline,
                                                   verify=False), source)
        exe = self._stored(found)
        graph = view
        if exe is None:
            module = found.module()
            graph = module.graphs["run"]
            exe = self.backend.compile(module, "run")
        return _Compiled(graph, exe, feed_names, defers(exe))

    def _stored(self, found: Any) -> Executable | None:
        """The executable the backend keeps for the lowered module ``found``
        (a ``lowered_cache.Lowering``) stands for, made without decoding that module
        (``LLVMBackend.compile_stored``, which says why that is no laxer), where the
        backend offers that and a lowered module is stored with this one's signature
        (its graph then stands for the lowered one's in the feeds' checks); else None."""
        compile_stored = getattr(self.backend, "compile_stored", None)
        if compile_stored is None or found.key is None:
            return None
        stand_in = found.stand_in()
        if stand_in is None:
            return None
        exe: Executable | None = compile_stored(found.key, stand_in, "run", found.module)
        return exe

    def _module(self, graph: ir.Graph) -> ir.Module:
        module = ir.Module()
        for name, var in self.graph.variables.items():
            module.variables[name] = var.decl
        module.add_graph(graph)
        return module

    def _execute(self, compiled: _Compiled, values: list[Any]) -> list[np.ndarray]:
        from tfc.runtime.feeds import check_feeds
        arrays = check_feeds(compiled.graph, dict(zip(compiled.feed_names, values)),
                             where="Session.run")
        exe = compiled.executable
        if compiled.defers:  # its updates stay on its device
            fetches = self.variables.deferred_step(exe, arrays, self.step)
        else:
            host = self.variables.sync()
            stored = getattr(exe, "stored_step", None)  # the updates go to host, below:
            # where nothing else holds a variable's array, an update may be made in it
            result = (exe(arrays, host, self.step) if stored is None
                      else stored(arrays, host, self.step))
            del host
            self.variables.update(result.updates)
            fetches = result.fetches
        self.step += 1
        return fetches

    def _initialize_missing(self, targets: list[Operation]) -> None:
        """Initialize variables this session has not seen, once, unless the run itself is
        an initializer (then it decides)."""
        if self._checked_variables == len(self.graph.variables):
            return  # graphs only gain variables, and sessions never drop values
        missing = [v for n, v in self.graph.variables.items() if n not in self.variables]
        if not missing:
            self._checked_variables = len(self.graph.variables)
            return
        init_ops = {v.initializer.op for v in self.graph.variables.values()}
        if any(op in init_ops for t in targets for op in t.ir_ops()):
            return
        graph = extract(self.graph.ir, ir.INIT_GRAPH, [], [],
                        [op for v in missing for op in v.initializer.ir_ops()],
                        what="variable initializers")
        from tfc.pipeline import Target, lower
        module = lower(self._module(graph), Target(self.backend.name), passes="", verify=False)
        result = self.backend.compile(module, ir.INIT_GRAPH)([], self.variables.sync(), 0)
        self.variables.update(result.updates)

    # ---- variables -------------------------------------------------------------------------

    def variable_values(self) -> dict[str, np.ndarray]:
        """Every variable's value on the host (those a device holds read back, one copy
        per executable that holds any)."""
        self._initialize_missing([])
        return dict(self.variables.sync())


def default_session(graph: Graph | None = None) -> Session:
    """The session ``Tensor.eval`` and traced functions use: the innermost ``with Session``
    of the graph, or one the graph keeps for itself."""
    g = graph or get_default_graph()
    if g._session is None:
        g._session = Session(g)
    return g._session


def global_variables_initializer(graph: Graph | None = None) -> Operation:
    g = graph or get_default_graph()
    return Operation(g, None, [v.initializer for v in g.variables.values()],
                     name="init")


def variables_initializer(var_list: list[Variable]) -> Operation:
    g = var_list[0].graph if var_list else get_default_graph()
    return Operation(g, None, [v.initializer for v in var_list], name="init")


def group(*ops: Operation, name: str | None = None) -> Operation:
    """One operation that runs all of ``ops`` (``tf.group``)."""
    from tfc.api.tensor import as_operation
    flat = [as_operation(o) for o in ops]
    g = flat[0].graph if flat else get_default_graph()
    return Operation(g, None, flat, name=name or "group")
