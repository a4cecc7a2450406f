"""Running one program as many processes on many hosts, on Ray.

Importing this package does not import Ray: ``tfc.distributed.cluster`` imports it when a
cluster is first used (``require_ray``), so a tfc without the ``distributed`` extra works
everywhere but on a cluster, where it says how to install it.

The Horovod-style API for a loop of one's own (``tfc.distributed.horovod``): ``run`` starts
the ranks; ``init``, ``rank``, ``size``, the collectives, ``DistributedOptimizer`` and
``broadcast_variables`` work inside them (and as a group of one in a plain script).
"""

from tfc.distributed.cluster import LoopbackCluster, NodeInfo, RayCluster, require_ray
from tfc.distributed.horovod import (DistributedOptimizer, allgather, allreduce, broadcast,
                                     broadcast_variables, init, local_rank, local_size, rank,
                                     size)
from tfc.distributed.ranks import run

__all__ = ["LoopbackCluster", "NodeInfo", "RayCluster", "require_ray", "run", "init", "rank",
           "size", "local_rank", "local_size", "allreduce", "broadcast", "allgather",
           "DistributedOptimizer", "broadcast_variables"]
