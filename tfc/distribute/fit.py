"""``fit``'s training step under a strategy: the model's step, replicated and run as a
program beside the model's session.

``ReplicatedStep`` cuts the request ``fit`` runs (the optimizer's step, the loss and the
metrics, fed the model's inputs and labels: one each for a Sequential, any number for a
Functional or subclassed model) out of the model's graph as an entry ``train_step``, runs
the optimization passes, then ``tfc.passes.replicate`` with the strategy's
``ClusterSpec``: every worker clone takes an equal shard of the global batch (every feed
split on axis 0 the same way, so a replica's examples keep their inputs and labels
together), and the update applies the mean of their gradients (so the result is one
device's on the same global batch, up to rounding; a 0-d loss or metric fetched is the
mean of the replicas').
For a ``MirroredStrategy`` the workers' devices are renamed to the strategy's
(``/cpu:0``, ``/cpu:1``), and the multi-device executor runs one partition per device,
concurrently; a cluster strategy's program runs its tasks on Ray
(``tfc.runtime.Program(cluster=address)``).

The model's session stays the owner of the variables: ``evaluate``, ``predict``,
callbacks and checkpoints use it. Before each step, every session array that is not the
very one the program last gave back (``set_weights``, ``load_weights``, a learning rate
set by a callback, a step the session ran itself) is written into the program, into
every mirrored copy; after each step the program's values come back into the session
(the arrays themselves, no copy) in this process; from a cluster's tasks only at the end
of each epoch (``finish_epoch``: reading every variable back from the tasks each step
would cost more than the step). The session's step counter and the program's move
together (random ops are seeded with it).

A global batch whose size does not divide by the replicas (an epoch's last, smaller
batch) runs as one step of the session on one device: the same result, not split.
Random ops in the step (dropout) draw per replica with the same seed, so a replica's
mask is not the one device's there (``tfc.passes.replicate`` says the same).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Callable, Sequence

from tfc.api.extract import extract
from tfc.api.graph import Operation, Tensor
from tfc.api.session import Session
from tfc.distribute.strategy import Strategy
from tfc.errors import TfcError
from tfc.ir import core as ir
from tfc.passes.replicate import (mirror_name, rename_devices, replicate_module,
                                  worker_device)
from tfc.pipeline import run_pipeline

ENTRY = "train_step"
OneDeviceRun = Callable[[Any, Any], Sequence[Any]]


def feed_names(inputs: int, labels: int) -> list[str]:
    """The entry's argument names: ``x`` and ``y`` for one input and one label (a
    Sequential's), else ``x0``, ``x1`` ... and ``y0``, ``y1`` ..."""
    def names(prefix: str, count: int) -> list[str]:
        return [prefix] if count == 1 else [f"{prefix}{i}" for i in range(count)]
    return [*names("x", inputs), *names("y", labels)]


def replicated_module(session: Session, inputs: Sequence[Tensor], labels: Sequence[Tensor],
                      fetches: Sequence[Tensor], train_op: Operation, strategy: Strategy,
                      what: str) -> ir.Module:
    """The module of one training step ``train_step(x.., y..) -> fetch0..`` replicated
    for ``strategy`` (its workers on the strategy's devices when it runs in this
    process)."""
    spec = strategy.cluster_spec
    assert spec is not None
    feeds = [*inputs, *labels]
    graph = extract(session.graph.ir, ENTRY,
                    list(zip(feed_names(len(inputs), len(labels)),
                             (t.value for t in feeds))),
                    [(f"fetch{i}", t.value) for i, t in enumerate(fetches)],
                    train_op.ir_ops(), what=what)
    module = ir.Module()
    for name, var in session.graph.variables.items():  # copies: replicate places them
        module.variables[name] = dataclasses.replace(var.decl)
    module.add_graph(graph)
    run_pipeline(module, session.pipeline, verify=False)  # the markers survive these
    replicate_module(module, spec)
    if strategy.address == "inprocess" and spec.ps == 0:
        rename_devices(module, {worker_device(i): d for i, d in enumerate(strategy.devices)})
    return module


class ReplicatedStep:
    """One step of ``fit`` on a global batch under ``strategy`` (see the module
    docstring): called with prepared batches ``x`` and ``y`` (one array, or a list of
    arrays: one per placeholder of ``inputs`` and of ``labels``); ``one_device(x, y)`` is
    the session's own step, for a batch that does not split evenly."""

    def __init__(self, strategy: Strategy, session: Session, inputs: Sequence[Tensor],
                 labels: Sequence[Tensor], fetches: Sequence[Tensor], train_op: Operation,
                 one_device: OneDeviceRun, what: str) -> None:
        from tfc.runtime.program import Program
        spec = strategy.cluster_spec
        assert spec is not None
        self.strategy = strategy
        self.session = session
        self.fetch_key = request_key([*inputs, *labels], fetches, train_op)
        self.replicas = spec.workers
        self.one_device = one_device
        self.feeds = len(inputs) + len(labels)
        module = replicated_module(session, inputs, labels, fetches, train_op, strategy,
                                   what)
        values = session.variable_values()
        # each variable of the session: its copies in the program (mirrored: one per worker)
        self.copies = {name: [mirror_name(name, i) if i else name
                              for i in range(self.replicas)]
                       if mirror_name(name, 1) in module.variables else [name]
                       for name in values}
        start = {copy: value for name, value in values.items() for copy in self.copies[name]}
        self.program = Program(module, start, backend=session.backend.name,
                               step=session.step, cluster=strategy.address)
        # dropped: its tasks are released (the session has had their values since the last
        # epoch's end); not at exit, when Ray may be gone already
        self._finalizer = weakref.finalize(self, self.program.close, read_back=False)
        self._finalizer.atexit = False
        # what the session held when the program last had the same value (by identity)
        self.seen = dict(values)
        self.remote = strategy.address != "inprocess"
        self.ahead = False  # whether the program ran steps the session has not seen
        self.run = self.program.callable(ENTRY, feed_names(len(inputs), len(labels)),
                                         [f"fetch{i}" for i in range(len(fetches))])

    def __call__(self, xb: Any, yb: Any) -> Sequence[Any]:
        arrays = [*_arrays(xb), *_arrays(yb)]
        if len(arrays) != self.feeds:
            raise TfcError(f"a replicated step takes {self.feeds} arrays (inputs and "
                           f"labels), got {len(arrays)}")
        if len(arrays[0]) % self.replicas:
            self.finish_epoch()  # the session's values first
            return self.one_device(xb, yb)
        self._push()
        values = self.run(*arrays)
        self.ahead = True
        if not self.remote:
            self._pull()
        else:
            self.session.step += 1
        return values

    def finish_epoch(self) -> None:
        """Bring the program's values into the session (a cluster's: read back now)."""
        self._pull()

    def _push(self) -> None:
        """Write into the program the session's values it does not have."""
        session, program = self.session, self.program
        for name, value in session.variables.items():
            if self.seen.get(name) is not value:
                for copy in self.copies.get(name, ()):
                    program.set_variable(copy, value)
                self.seen[name] = value
        if program.step != session.step:
            program.step = session.step

    def _pull(self) -> None:
        """Give the session the program's values (if it ran steps since the last pull)."""
        if not self.ahead:
            return
        self.ahead = False
        variables = self.program.variables
        session_vars = self.session.variables
        for name in self.copies:
            value = variables[name]
            session_vars[name] = self.seen[name] = value
        self.session.step = self.program.step

    def close(self) -> None:
        """Read the values back and release what runs the program (a cluster's tasks)."""
        try:
            self._pull()
        finally:
            self._finalizer()


class SessionStep:
    """``fit``'s step without a strategy that replicates: the session's own."""

    def __init__(self, one_device: OneDeviceRun) -> None:
        self.one_device = one_device

    def __call__(self, xb: Any, yb: Any) -> Sequence[Any]:
        return self.one_device(xb, yb)

    def finish_epoch(self) -> None:
        pass

    def close(self) -> None:
        pass


def fit_step(strategy: Strategy | None, session: Session, inputs: Sequence[Tensor],
             labels: Sequence[Tensor], fetches: Sequence[Tensor], train_op: Operation,
             one_device: OneDeviceRun, what: str, previous: Any = None) -> Any:
    """The step ``fit`` runs on each global batch: ``strategy``'s replicated one (reused
    from ``previous`` when that is one for the same request), or the session's.
    ``inputs`` and ``labels`` are the placeholders a batch ``(x, y)`` fills."""
    if strategy is None or strategy.cluster_spec is None:
        return SessionStep(one_device)
    if (isinstance(previous, ReplicatedStep) and previous.strategy is strategy
            and previous.session is session
            and previous.fetch_key == request_key([*inputs, *labels], fetches, train_op)):
        previous.one_device = one_device
        return previous
    if previous is not None:
        previous.close()
    return ReplicatedStep(strategy, session, inputs, labels, fetches, train_op, one_device,
                          what)


def request_key(feeds: Sequence[Tensor], fetches: Sequence[Tensor], train_op: Operation
                ) -> tuple:
    return (tuple(t.value for t in feeds), tuple(t.value for t in fetches),
            tuple(train_op.ir_ops()))


def _arrays(batch: Any) -> list[Any]:
    """The arrays of a prepared batch: one array, or a list of them."""
    return list(batch) if isinstance(batch, list) else [batch]

