"""examples/embedding_bow.py on a small vocabulary: the partitioned embedding's shards go
to the two PS tasks, and the classifier trains across tasks (loss falls, accuracy well
above chance)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tfc

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "embedding_bow.py"


@pytest.fixture(scope="module")
def bow():
    spec = importlib.util.spec_from_file_location("embedding_bow_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    with tfc.Graph().as_default():  # the file builds its 1,000,000-row model at import
        spec.loader.exec_module(module)
    return module


def test_small_vocabulary_trains_on_two_ps_tasks(bow):
    vocab = 20_000
    program = bow.cluster_program(vocab=vocab)
    devices = {program.module.variables[f"E/part_{i}"].device for i in (0, 1)}
    assert devices == {"/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0"}
    losses = []
    for step in range(300):
        x, y = bow.generate(256, seed=step)
        losses.append(float(program.run("train", ids=x % vocab, y=y)["loss"]))
    test_x, test_y = bow.generate(400, seed=999)
    logits = program.run("predict", ids=test_x % vocab)["logits"]
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10])
    assert np.mean(logits.argmax(axis=1) == test_y) > 0.6  # chance: 0.25
