"""``python -m tfc.distributed._node start ...``: ``ray start`` for one node of a cluster on
127.0.0.1 (:class:`tfc.distributed.cluster.LoopbackCluster` runs one per node).

Under ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (what keeps every Ray socket on loopback) plain
``ray start --address=...`` refuses to join a cluster ("Multi-node Ray clusters are not
supported on Windows and OSX"), and with the variable unset Ray advertises the machine's
external address. This wrapper allows the join and makes Ray's address guesses answer
127.0.0.1, then runs Ray's own command line with the arguments given.
"""

from __future__ import annotations

import os
import sys

LOOPBACK = "127.0.0.1"


def main(argv: list[str]) -> None:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray._private import ray_constants, services
    from ray.scripts import scripts

    ray_constants.ENABLE_RAY_CLUSTER = True
    services.resolve_ip_for_localhost = lambda host: host  # keep 127.0.0.1 as given
    services.node_ip_address_from_perspective = lambda address=None: LOOPBACK
    scripts.cli.main(args=argv, prog_name="ray")


if __name__ == "__main__":
    main(sys.argv[1:])
