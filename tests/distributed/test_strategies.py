"""``tfc.distribute``'s cluster strategies on the shared loopback Ray cluster (here, not in
tests/distribute/, so that they use the cluster the distributed tests start once):
``fit`` in ``ParameterServerStrategy``'s ``scope()`` trains on the cluster's tasks with
the results of one device. (The same strategies on threads of this process:
tests/distribute/test_mirrored_fit.py.)"""

import numpy as np
import pytest

import tfc
from tfc.distribute.fit import ReplicatedStep

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

RNG = np.random.default_rng(5)
X = RNG.normal(size=(40, 4))
Y = RNG.integers(0, 3, 40).astype(np.int32)


def classifier(strategy=None):
    with tfc.Graph().as_default():
        tfc.set_random_seed(0)
        model = tfc.Sequential([tfc.layers.Dense(6, activation="relu", input_shape=(4,)),
                                tfc.layers.Dense(3, activation="softmax")],
                               input_dtype=np.float64)
        if strategy is None:
            model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        else:
            with strategy.scope():
                model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.build()
    return model


def test_parameter_server_strategy_trains_on_the_cluster(loopback_cluster):
    strategy = tfc.distribute.ParameterServerStrategy("ps=1,workers=2",
                                                      address=loopback_cluster.address)
    one, many = classifier(), classifier(strategy)
    data = tfc.data.Dataset.from_tensor_slices((X, Y)).batch(8)
    h1 = one.fit(data, epochs=2, verbose=0)
    try:
        h2 = many.fit(data.prefetch(2), epochs=2, verbose=0)  # (one producer, both epochs)
        step = many._fit_step
        assert isinstance(step, ReplicatedStep) and step.remote
        assert sorted(step.program.task_states()) == ["ps:0", "worker:0", "worker:1"]
    finally:
        if many._fit_step is not None:
            many._fit_step.close()  # the tasks' actors: read back, then stopped
    for key in h1:
        np.testing.assert_allclose(h2[key], h1[key], rtol=1e-10, atol=1e-10, err_msg=key)
    for a, b in zip(one.get_weights(), many.get_weights()):  # read back from the PS task
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)


def test_a_two_input_two_output_model_under_multi_worker_mirrored_on_the_cluster(
        loopback_cluster):
    """A Functional model fed dicts: every input and label split over the workers' tasks
    the same way (the all-reduce over Ray), with the results of one device."""
    from tests.distribute.test_mirrored_fit import (assert_same_two_towers, two_tower_data,
                                                    two_towers)
    strategy = tfc.distribute.MultiWorkerMirroredStrategy("workers=2",
                                                          address=loopback_cluster.address)
    one, many = two_towers(np.float64), two_towers(np.float64, strategy)
    x, y = two_tower_data(np.float64)
    h1 = one.fit(x, y, epochs=2, batch_size=10, seed=1, verbose=0)
    try:
        h2 = many.fit(x, y, epochs=2, batch_size=10, seed=1, verbose=0)
        assert many._fit_step.remote
        assert sorted(many._fit_step.program.task_states()) == ["worker:0", "worker:1"]
    finally:
        if many._fit_step is not None:
            many._fit_step.close()
    assert_same_two_towers(one, many, h1, h2, np.float64)
