"""Running one program as many processes on many hosts, on Ray.

Importing this package does not import Ray: ``tfc.distributed.cluster`` imports it when a
cluster is first used (``require_ray``), so a tfc without the ``distributed`` extra works
everywhere but on a cluster, where it says how to install it.

The Horovod-style API for a loop of one's own (``tfc.distributed.horovod``): ``run`` starts
the ranks; ``init``, ``rank``, ``size``, the collectives, ``DistributedOptimizer`` and
``broadcast_variables`` work inside them (and as a group of one in a plain script).
"""

from typing import Any

from tfc.distributed.cluster import LoopbackCluster, NodeInfo, RayCluster, require_ray
from tfc.distributed.ranks import run

# The Horovod-style names live in ``tfc.distributed.horovod``, a module of the train layer
# (it wraps tfc.train optimizers and steps a Session). They are loaded on first use, so
# that the runtime's own imports of this package (``tfc.distributed.runtime``, by
# ``tfc.runtime``) never load the API and train layers above it.
_HOROVOD = ("init", "rank", "size", "local_rank", "local_size", "allreduce", "broadcast",
            "allgather", "DistributedOptimizer", "broadcast_variables")


def __getattr__(name: str) -> Any:
    if name in ("AsyncPSTrainer", "AsyncStats"):  # --strategy ps-async (tfc.distributed.async_ps)
        from tfc.distributed import async_ps
        return getattr(async_ps, name)
    if name in ("BackupTrainer", "BackupStats", "StragglerSpec"):  # tfc.distributed.backup
        from tfc.distributed import backup
        return getattr(backup, name)
    if name in _HOROVOD:
        from tfc.distributed import horovod
        return getattr(horovod, name)
    raise AttributeError(f"module 'tfc.distributed' has no attribute {name!r}")


__all__ = ["AsyncPSTrainer", "AsyncStats", "BackupStats", "BackupTrainer", "StragglerSpec",
           "LoopbackCluster", "NodeInfo", "RayCluster", "require_ray", "run", *_HOROVOD]
