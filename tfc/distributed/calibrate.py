"""``tfc calibrate --cluster ADDRESS``: what a cluster step costs besides its kernels.

The cost model (``tfc.passes.replicate.predict_tasks``) predicts a cluster step from the
host's rates and three costs of the cluster itself, measured here on the cluster named
(``local``, ``auto`` or ``HOST:PORT``, as ``tfc run --cluster`` takes it) with two probe
actors on distinct nodes where there are two:

- ``cluster_link``: a value between two task processes, as the tasks send them (TCP,
  ``tfc.distributed.wire``): the latency is half a ping-pong of a scalar, the bytes/s
  from a ping-pong of ``LINK_BYTES`` less the scalar's;
- ``cluster_call_s``: the driver's launch of a step on one more task (writing a launch
  frame, as ``ClusterRuntime`` does, to the task's listener; the runtime writes one per
  task, back to back);
- ``cluster_round_s``: the rest of the driver's round trip with the last task launched
  (from its frame written: the task's listener waking to it, the reply, the driver
  waking to that), the step's fixed cost;
- ``cluster_hop_cpu_s``: the CPU time of one frame in all, from those launches: the
  driver's thread and both probe processes over ``CPU_ROUNDS`` launches, per frame (a
  launch and its reply are two). On a host with fewer cores than a step's processes,
  their CPU summed, not the path through them, bounds the step (6 processes on 2 cores
  at 4 workers: ``predict_tasks``).

A task's send of a value costs its thread what the driver's write of a launch frame
costs (the same frame), and the receiver's listener about as much to take it in: the
prediction charges ``cluster_call_s`` to each end of every transfer between tasks.

Each is the median of ``repeats`` runs (after warm-up runs): the host may be shared.
"""

from __future__ import annotations

import queue
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tfc.devices import DeviceProfile, LinkRates
from tfc.errors import TfcError

LINK_BYTES = 4 << 20
WARMUP = 5
CPU_ROUNDS = 200


class LinkProbe:
    """A probe task process: listens like a task (``wire.Listener``); a frame that arrives
    is echoed back to the peer as a scalar (the peer's ``ping`` times the round trip), and
    a launch (a call) is answered as a task answers a step that did nothing."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.link: Any = None
        self.answers: "queue.Queue[int]" = queue.Queue()
        self.listener: Any = None

    def address(self) -> tuple[str, int]:
        import ray
        from tfc.distributed.wire import Listener
        if self.listener is None:
            self.listener = Listener(ray.util.get_node_ip_address(), self._arrived,
                                     calls=self._called, send_timeout_s=self.timeout_s)
        return self.listener.address

    def cpu(self) -> float:
        """This process's CPU time so far (seconds)."""
        return time.process_time()

    def connect(self, address: tuple[str, int]) -> bool:
        from tfc.distributed.wire import Link
        self.link = Link.open(address, "the peer probe", self.timeout_s)
        return self.link is not None

    def _arrived(self, step: int, items: list[tuple[list[str], np.ndarray]]) -> None:
        if items and items[0][0] == ["ping"]:  # the peer's ping: answer it
            self.link.send(step, [(["pong"], np.zeros((), np.float32))])
        else:
            self.answers.put(step)

    def ping(self, nbytes: int, repeats: int) -> list[float]:
        """Round trips of ``nbytes`` there and a scalar back (after warm-up ones)."""
        value = np.zeros(max(1, nbytes // 4), np.float32)
        times = []
        for i in range(WARMUP + repeats):
            started = time.perf_counter()
            self.link.send(i, [(["ping"], value)])
            self.answers.get(timeout=self.timeout_s)
            times.append(time.perf_counter() - started)
        return times[WARMUP:]

    def _called(self, meta: dict[str, Any], items: list[tuple[list[str], np.ndarray]]
                ) -> tuple[dict[str, Any], list[tuple[list[str], np.ndarray]]]:
        """What a task answers to a step's launch (``TaskActor._called``), doing nothing."""
        from tfc.distributed.task import COUNTERS_KEY, fetch_key, packed_counters
        counters = {"tensors": 0, "bytes": 0, "stale": 0, "seconds": 0.0, "phases": {}}
        return {}, [([COUNTERS_KEY], packed_counters(counters)),
                    ([fetch_key(0)], np.zeros((), np.float32))]


@dataclass
class ClusterCosts:
    """The measured costs (see the module docstring), and where."""

    link: LinkRates
    call_s: float
    round_s: float
    address: str
    distinct_nodes: bool
    hop_cpu_s: float = 0.0

    def apply(self, profile: DeviceProfile) -> None:
        profile.cluster_link = self.link
        profile.cluster_call_s = self.call_s
        profile.cluster_round_s = self.round_s
        profile.cluster_hop_cpu_s = self.hop_cpu_s

    def summary(self) -> str:
        where = "two nodes" if self.distinct_nodes else "one node"
        return (f"cluster {self.address} ({where}): between tasks "
                f"{self.link.latency_s * 1e6:.0f} us + {self.link.bytes_per_s / 1e9:.2f} "
                f"GB/s; a step's launch {self.call_s * 1e6:.0f} us per task, its round trip "
                f"{self.round_s * 1e6:.0f} us; a frame {self.hop_cpu_s * 1e6:.0f} us of CPU")


def calibrate_cluster(address: str, repeats: int = 30, timeout_s: float = 60.0,
                      progress: Callable[[str], None] = lambda m: None) -> ClusterCosts:
    """Measure the cluster at ``address`` (see the module docstring); a one-line
    ``TfcError`` when it cannot be reached or a probe cannot start."""
    from tfc.distributed.cluster import RayCluster, require_ray
    ray = require_ray()
    with RayCluster.connect(address, timeout_s=min(timeout_s, 30.0)) as cluster:
        nodes = cluster.spread(2)
        progress(f"measuring the cluster at {address}: two probes on "
                 f"{'distinct nodes' if nodes[0] != nodes[1] else 'one node'}")
        probes = [cluster.start_actor(LinkProbe, timeout_s, node_id=n, name=f"probe {i}",
                                      max_concurrency=4, timeout_s=timeout_s)
                  for i, n in enumerate(nodes)]
        a, b = ray.get([p.address.remote() for p in probes], timeout=timeout_s)
        linked = ray.get([probes[0].connect.remote(b), probes[1].connect.remote(a)],
                         timeout=timeout_s)
        if not all(linked):
            raise TfcError(f"the probes on the cluster at {address} could not reach each "
                           f"other over TCP (the tasks would send by Ray there)")
        small = statistics.median(ray.get(probes[0].ping.remote(4, repeats),
                                          timeout=timeout_s))
        large = statistics.median(ray.get(probes[0].ping.remote(LINK_BYTES, repeats),
                                          timeout=timeout_s))
        link = LinkRates(LINK_BYTES / max(large - small, 1e-9), small / 2)
        def probes_cpu() -> float:
            return float(sum(ray.get([p.cpu.remote() for p in probes], timeout=timeout_s)))

        call_s, round_s, hop_cpu_s = _launch_costs([a, b], repeats, timeout_s, address,
                                                   probes_cpu)
        return ClusterCosts(link, call_s, round_s, address, nodes[0] != nodes[1], hop_cpu_s)


def _launch_costs(addresses: list[tuple[str, int]], repeats: int, timeout_s: float,
                  where: str, probes_cpu: Callable[[], float] = lambda: 0.0
                  ) -> tuple[float, float, float]:
    """The driver's cost of a launch frame per task, the rest of its round trip after
    the last frame, and the CPU time of one frame (this thread's and ``probes_cpu``'s,
    the probes' processes', over ``CPU_ROUNDS`` more launches), from
    launches of a step (a scalar feed, the outcome of the last step) on the probes at
    ``addresses``, as ``ClusterRuntime`` launches them: frames back to back, then the
    replies."""
    from tfc.distributed.wire import Link
    links = [Link.open(address, f"probe {i}", timeout_s) for i, address in enumerate(addresses)]
    try:
        if not all(links):
            raise TfcError(f"this driver could not reach the probes on the cluster at "
                           f"{where} over TCP (steps would be launched by Ray there)")
        call = {"entry": "train_step", "n_feeds": 1, "settle": True}
        feed = [(["feed:0"], np.zeros(1, np.float32))]
        issue, rounds = [], []
        for i in range(WARMUP + repeats + CPU_ROUNDS):
            if i == WARMUP + repeats:
                cpu_before, probes_before = time.thread_time(), probes_cpu()
            started = time.perf_counter()
            for link in links:
                link.call(i, call, feed, 1)  # type: ignore[union-attr]
            issued = time.perf_counter()
            for link in links:
                if link.receive() is None:  # type: ignore[union-attr]
                    raise TfcError(f"a probe on the cluster at {where} closed its connection")
            if WARMUP <= i < WARMUP + repeats:
                issue.append((issued - started) / len(links))
                rounds.append(time.perf_counter() - issued)
        cpu = time.thread_time() - cpu_before + probes_cpu() - probes_before
    finally:
        for link in links:
            if link is not None:
                link.close()
    return (statistics.median(issue), statistics.median(rounds),
            max(0.0, cpu) / (2 * CPU_ROUNDS * len(links)))
