"""Running one program as many processes on many hosts, on Ray.

Importing this package does not import Ray: ``tfc.distributed.cluster`` imports it when a
cluster is first used (``require_ray``), so a tfc without the ``distributed`` extra works
everywhere but on a cluster, where it says how to install it.
"""

from tfc.distributed.cluster import LoopbackCluster, NodeInfo, RayCluster, require_ray

__all__ = ["LoopbackCluster", "NodeInfo", "RayCluster", "require_ray"]
