"""The Ray cluster the distributed tests share: a real three-node cluster on 127.0.0.1
(a head and two more nodes, each a ``ray start`` process of its own), started once for the
session and stopped at its end. Tests connect with ``RayCluster.connect(cluster.address)``.
Without Ray installed they are skipped, saying how to install it (CI installs it)."""

from __future__ import annotations

import importlib.util
from typing import Iterator

import pytest

from tfc.distributed.cluster import INSTALL_HINT, LoopbackCluster

RAY_MISSING = (None if importlib.util.find_spec("ray") is not None
               else f"ray is not installed ({INSTALL_HINT})")


@pytest.fixture(scope="session")
def loopback_cluster() -> Iterator[LoopbackCluster]:
    if RAY_MISSING:
        pytest.skip(RAY_MISSING)
    cluster = LoopbackCluster(3).start()
    try:
        yield cluster
    finally:
        cluster.stop()
