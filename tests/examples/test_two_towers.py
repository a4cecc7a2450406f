"""examples/two_towers.py: the towers pinned one per device exchange only their losses
(what lets them run concurrently), and two devices train exactly as one does."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tfc
from tfc.backends.base import default_backend_name
from tfc.pipeline import Target, lower
from tfc.runtime import Program

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two_towers.py"
TWO = ("/cpu:0", "/cpu:1")


@pytest.fixture(scope="module")
def towers():
    spec = importlib.util.spec_from_file_location("two_towers_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    with tfc.Graph().as_default():  # the file builds its unpinned model at import
        spec.loader.exec_module(module)
    return module


def program(towers, scopes, devices):
    graph = tfc.Graph()
    with graph.as_default():
        towers.build(scopes)
    return Program(lower(graph.as_module(), Target(default_backend_name(), devices)))


def feeds(towers, batch=16):
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((batch, towers.LENGTH, towers.FEATURES)).astype(np.float32),
            "y": rng.integers(0, towers.CLASSES, batch).astype(np.int32)}


def test_pinned_towers_exchange_only_the_losses(towers):
    p = program(towers, TWO, TWO)
    table = p.module.partitions["train_step"]
    # each device's first stage is its whole tower (forward, backward and update); the
    # only value that crosses is one tower's loss, a 4-byte scalar, into the fetched sum
    sizes = {d.device: [sum(1 for _ in p.module.graphs[s.graph].walk()) for s in d.stages]
             for d in table.devices}
    assert all(stages[0] > 100 for stages in sizes.values()), sizes
    assert sum(len(stages) for stages in sizes.values()) <= 3, sizes
    p.run("train_step", feeds(towers))
    sent = p._executable("train_step").last_rendezvous.bytes_sent
    assert sent <= 8


def test_two_devices_train_as_one_does(towers):
    one, two = program(towers, (None, None), ()), program(towers, TWO, TWO)
    f = feeds(towers)
    for _ in range(3):
        np.testing.assert_allclose(two.run("train_step", f)["loss"],
                                   one.run("train_step", f)["loss"], rtol=1e-5)
    np.testing.assert_allclose(two.run("predict", x=f["x"])["probs"],
                               one.run("predict", x=f["x"])["probs"], rtol=1e-5, atol=1e-6)
