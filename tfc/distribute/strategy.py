"""``tfc.distribute``'s strategies: where a model's ``fit`` runs its training step.

As in TensorFlow, a strategy is chosen by compiling the model in its ``scope()``::

    strategy = tfc.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = tfc.Sequential([...])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(dataset)  # data-parallel: strategy.num_replicas_in_sync replicas

``fit`` then cuts each global batch into ``num_replicas_in_sync`` equal shards, one per
replica, and applies the mean of the replicas' gradients: the results are those of one
device on the same global batch (``tfc.distribute.fit``). What runs is the replication of
``tfc.passes.replicate`` (the ``--cluster`` compilation of ``tfc compile``):

- ``MirroredStrategy(devices)``: ``allreduce`` over devices of this process (logical CPUs
  ``/cpu:N``, or GPUs ``/gpu:N``), each replica one partition of the multi-device
  executor (a thread), every variable mirrored on every device;
- ``MultiWorkerMirroredStrategy(cluster)``: the same ``allreduce`` over worker tasks of a
  Ray cluster (``tfc.distributed``), one process per task;
- ``ParameterServerStrategy(cluster)``: ``ps-sync`` (``SyncReplicasOptimizer``'s
  semantics): the variables on parameter-server tasks, the gradients summed there;
- ``OneDeviceStrategy(device)`` and the default strategy (no scope): one replica (on
  ``/cpu:0`` the model's session runs it, as without a strategy).

``get_strategy()`` is the strategy of the innermost ``scope()`` of this thread, or the
default one. ``strategy.run(fn, args)`` / ``strategy.reduce(op, value, axis)`` serve custom
training loops: ``fn`` is traced once into a graph step, which is replicated as ``fit``'s
(``tfc.distribute.run``).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Sequence

from tfc.devices import gpu_count, parse_device, parse_devices
from tfc.errors import TfcError
from tfc.passes.replicate import ClusterSpec


class Strategy:
    """Where ``fit`` runs its training step: ``devices`` hold the replicas (``cluster``
    names the replication of ``tfc.passes.replicate`` that runs them; ``address`` the Ray
    cluster its tasks run on, or ``"inprocess"`` for threads of this process)."""

    def __init__(self, devices: Sequence[str], cluster: ClusterSpec | None = None,
                 address: str = "inprocess") -> None:
        self._devices = tuple(devices)
        self._cluster = cluster
        self._address = address
        self._runs: dict[tuple, Any] = {}  # run's traced steps (tfc.distribute.run)

    @property
    def num_replicas_in_sync(self) -> int:
        """How many replicas each global batch is split over (its size must divide by it
        for a data-parallel step: see ``tfc.distribute.fit``)."""
        return self._cluster.workers if self._cluster is not None else len(self._devices)

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices of the replicas (a cluster's: its tasks', parameter servers
        first)."""
        return self._devices

    @property
    def cluster_spec(self) -> ClusterSpec | None:
        """The replication ``fit`` compiles the training step with, or ``None`` for one
        replica on ``/cpu:0`` (the step runs in the model's session, unchanged)."""
        return self._cluster

    @property
    def address(self) -> str:
        """Where the replicas run: ``"inprocess"`` (threads of this process), ``"local"``
        (an embedded Ray), ``"auto"`` or a Ray cluster's ``"HOST:PORT"``."""
        return self._address

    @contextlib.contextmanager
    def scope(self) -> Iterator["Strategy"]:
        """Within it, ``get_strategy()`` is this strategy, and a model compiled there
        trains with it."""
        current = _stack()
        if current and current[-1] is not self:
            raise TfcError(f"cannot enter the scope of {self!r} inside the scope of "
                           f"{current[-1]!r}: mixing strategies is not supported")
        current.append(self)
        try:
            yield self
        finally:
            current.pop()

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None) -> Any:
        """``fn`` (a step built of graph ops: forward, loss, ``optimizer.minimize``) on
        each replica's shard of the global batch ``args``; each returned tensor becomes a
        ``PerReplica`` of the replicas' values (``tfc.distribute.run``)."""
        from tfc.distribute.run import run
        return run(self, fn, args, kwargs)

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """``value`` (a ``PerReplica``) combined over the replicas: ``"SUM"`` or
        ``"MEAN"``, element by element or also along ``axis`` (``tfc.distribute.run``)."""
        from tfc.distribute.run import reduce
        return reduce(self, reduce_op, value, axis)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._devices)})"


class OneDeviceStrategy(Strategy):
    """One replica on ``device`` (``"/cpu:0"``, ``"/gpu:0"``)."""

    def __init__(self, device: str) -> None:
        name = str(parse_device(device))
        if parse_device(name).job is not None:
            raise TfcError(f"OneDeviceStrategy runs in this process, but {name} names a "
                           f"cluster task")
        super().__init__([name], _in_process(1) if name != HOME_DEVICE else None)


class MirroredStrategy(Strategy):
    """Data-parallel replicas on devices of this process, variables mirrored on each and
    gradients averaged by an all-reduce every step. ``devices`` default to the GPUs
    cupy sees, all of them, as TensorFlow's; without a GPU to ``/cpu:0`` alone (one
    replica: give ``["/cpu:0", "/cpu:1"]`` for two logical CPUs, which share the host's
    cores)."""

    def __init__(self, devices: Sequence[str] | str | None = None) -> None:
        if devices is None:
            names = default_mirrored_devices()
        else:
            names = parse_devices(devices)
        for name in names:
            if parse_device(name).job is not None:
                raise TfcError(f"MirroredStrategy runs its replicas in this process, but "
                               f"{name} names a cluster task: use "
                               f"MultiWorkerMirroredStrategy(cluster=...) for a cluster")
        super().__init__(names, _in_process(len(names)) if names != [HOME_DEVICE] else None)


# The device a model's session runs on: a strategy of that device alone leaves fit as it is.
HOME_DEVICE = "/cpu:0"


def _in_process(replicas: int) -> ClusterSpec:
    """The replication of ``replicas`` replicas in this process: ``allreduce`` (its
    worker devices are then renamed to the strategy's: ``tfc.distribute.fit``)."""
    return ClusterSpec(0, replicas, "allreduce")


def default_mirrored_devices() -> list[str]:
    """``MirroredStrategy()``'s devices: every GPU here, else ``/cpu:0``."""
    gpus = gpu_count()
    return [f"/gpu:{i}" for i in range(gpus)] if gpus else ["/cpu:0"]


def _cluster_spec(cluster: ClusterSpec | str | int, strategy: str, what: str
                  ) -> ClusterSpec:
    if isinstance(cluster, ClusterSpec):
        spec = cluster
    elif isinstance(cluster, str):
        spec = ClusterSpec.parse(cluster, strategy)
    elif isinstance(cluster, int) and not isinstance(cluster, bool) and strategy == "allreduce":
        spec = ClusterSpec(0, cluster, strategy)
    else:
        raise TfcError(f"{what}: cluster={cluster!r} must be a ClusterSpec or a text "
                       f"'ps=P,workers=W'")
    if spec.strategy != strategy:
        raise TfcError(f"{what} replicates with --strategy {strategy}, but cluster {spec} "
                       f"asks for {spec.strategy}")
    return spec


class MultiWorkerMirroredStrategy(Strategy):
    """Data-parallel replicas on the worker tasks of a cluster (``"workers=W"``, a
    ``ClusterSpec`` or a number of workers), variables mirrored on each, gradients
    averaged by a ring all-reduce between the tasks (``--strategy allreduce``).
    ``address``: where the tasks run (``"local"``: an embedded single-node Ray;
    ``"auto"``, ``"HOST:PORT"``; ``"inprocess"``: threads of this process)."""

    def __init__(self, cluster: ClusterSpec | str | int = "workers=2",
                 address: str = "local") -> None:
        spec = _cluster_spec(cluster, "allreduce", "MultiWorkerMirroredStrategy")
        if spec.ps:
            raise TfcError(f"MultiWorkerMirroredStrategy keeps every variable on every "
                           f"worker: cluster {spec} has parameter servers it would not use "
                           f"(give workers=W, or use ParameterServerStrategy)")
        super().__init__(spec.devices, spec, _checked_address(address))


class ParameterServerStrategy(Strategy):
    """Data-parallel replicas on the worker tasks of a cluster (``"ps=P,workers=W"`` or a
    ``ClusterSpec``), the variables on its parameter-server tasks, each gradient summed
    on its variable's task and applied there once per step (``--strategy ps-sync``).
    ``address`` as for ``MultiWorkerMirroredStrategy``."""

    def __init__(self, cluster: ClusterSpec | str = "ps=1,workers=2",
                 address: str = "local") -> None:
        spec = _cluster_spec(cluster, "ps-sync", "ParameterServerStrategy")
        super().__init__(spec.devices, spec, _checked_address(address))


def _checked_address(address: str) -> str:
    from tfc.distributed.runtime import check_cluster_argument
    return check_cluster_argument(address)


class _DefaultStrategy(Strategy):
    """The strategy outside every scope: one replica, the model's own session."""

    def __init__(self) -> None:
        super().__init__([HOME_DEVICE])

    def __repr__(self) -> str:
        return "DefaultStrategy()"


_DEFAULT = _DefaultStrategy()
_local = threading.local()


def _stack() -> list[Strategy]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def get_strategy() -> Strategy:
    """The strategy of the innermost ``scope()`` of this thread, else the default one
    (one replica)."""
    stack = _stack()
    return stack[-1] if stack else _DEFAULT


def has_strategy() -> bool:
    """Whether this thread is in a strategy's ``scope()``."""
    return bool(_stack())


def in_scope_strategy() -> Strategy | None:
    """The strategy a model compiled now trains with: the innermost scope's, or ``None``
    outside every scope."""
    stack = _stack()
    return stack[-1] if stack else None


def distributed(strategy: Strategy | None) -> bool:
    """Whether ``strategy`` replicates the training step (more than one replica, or a
    cluster's tasks)."""
    return strategy is not None and strategy.cluster_spec is not None


__all__ = ["Strategy", "OneDeviceStrategy", "MirroredStrategy", "MultiWorkerMirroredStrategy",
           "ParameterServerStrategy", "get_strategy", "has_strategy"]
