"""Stand-in for ``tfc.distributed.cluster`` (helper ray17's) until it lands: same shape,
single-node local Ray only. Deleted when the real module is merged."""

from __future__ import annotations

import os
import types
from typing import Any

from tfc.errors import TfcError


def require_ray() -> types.ModuleType:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise TfcError("running on a cluster needs Ray, but ray is not installed: "
                       "pip install -e '.[distributed]'") from None
    return ray


class RayCluster:
    def __init__(self, ray: Any, started: bool) -> None:
        self._ray, self._started, self._actors = ray, started, []
        self.nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]

    @classmethod
    def connect(cls, address: str, *, timeout_s: float = 30.0) -> "RayCluster":
        ray = require_ray()
        if address != "local" and not ray.is_initialized():
            raise TfcError(f"cluster {address}: the interim cluster module runs local only")
        started = not ray.is_initialized()
        if started:
            ray.init(address="local", num_cpus=2, include_dashboard=False,
                     _node_ip_address="127.0.0.1", log_to_driver=False,
                     _temp_dir=f"/tmp/ray-cluster17-{os.getpid()}")
        return cls(ray, started)

    def spread(self, n: int) -> list[str]:
        return [self.nodes[i % len(self.nodes)] for i in range(n)]

    def start_actor(self, cls: type, *args: Any, node_id: str, name: str,
                    max_concurrency: int = 4, timeout_s: float = 60.0, **kwargs: Any) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        ray = self._ray
        actor = ray.remote(cls).options(
            num_cpus=0, max_concurrency=max_concurrency, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(*args, **kwargs)
        self._actors.append(actor)
        try:
            ray.get(actor.ready.remote(), timeout=timeout_s)
        except Exception as e:
            raise TfcError(f"{name} did not start on node {node_id[:8]}: {e}") from None
        return actor

    def close(self) -> None:
        for a in self._actors:
            try:
                self._ray.kill(a)
            except Exception:
                pass
        self._actors = []
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False
