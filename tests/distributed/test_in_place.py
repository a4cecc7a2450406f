"""A cluster's PS tasks update a sharded embedding in place (``in_place_stages``): the
numbers of one process."""

import numpy as np
import pytest

from tfc.runtime import Program

from tests.runtime.test_executor_in_place import SPEC, batch, embedding_graph


@pytest.mark.distributed
def test_a_sharded_embedding_trains_on_the_tasks_as_in_one_process(loopback_cluster):
    """Each PS task updates its shard in place (the task keeps the update's own array, so
    the next step may again): the losses and variables of the reference backend in one
    process."""
    from tfc.pipeline import Target, lower
    graph = embedding_graph()
    module = lower(graph.as_module(), Target("llvm", tuple(SPEC.devices), False, SPEC))
    one = Program(graph.as_module(), backend="reference")
    with Program(module, backend="llvm", cluster=loopback_cluster.address,
                 cluster_timeout_s=60) as p:
        for i in range(5):
            np.testing.assert_allclose(p.run("train", **batch(i))["loss"],
                                       one.run("train", **batch(i))["loss"], rtol=1e-5)
        for name, value in one.variables.items():
            np.testing.assert_allclose(p.variables[name], value, rtol=1e-5, atol=1e-6)
