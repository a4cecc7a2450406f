"""The training examples reach their accuracies (fixed seeds), and an artifact trains.

Each example is a model file; it is run here as ``tfc compile`` runs it (in a fresh
graph, not as ``__main__``), then its ``train()`` fits it from Python.
"""

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

import tfc

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
pytest.importorskip("sklearn")
from data import digits_split  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    """The reference backend multiplies small matrices, which OpenBLAS's threads only slow
    down (many times over on a loaded machine)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def load_example(name: str) -> dict:
    """The example's globals after running it as a model file in a fresh graph."""
    with tfc.Graph().as_default():
        return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__tfc_model__")


@pytest.mark.parametrize("name, threshold", [
    ("softmax_train_digits", 0.92),
    ("mlp_digits", 0.96),
    ("cnn_digits", 0.97),
    ("lstm_sequence", 0.95),  # counting the ones among 10 bits, on unseen sequences
])
def test_example_reaches_its_test_accuracy(name, threshold):
    example = load_example(name)
    accuracy = example["train"](verbose=0)
    assert accuracy >= threshold, f"{name}: test accuracy {accuracy:.4f} < {threshold}"


def test_examples_declare_their_entries():
    from tfc.compiler.frontend import load_model
    for name, feed_shape in [("mlp_digits", "[B,64]"), ("cnn_digits", "[B,8,8,1]"),
                             ("softmax_train_digits", "[B,64]"),
                             ("lstm_sequence", "[B,10,1]")]:
        module = load_model(EXAMPLES / f"{name}.py")
        assert {"predict", "train_step"} <= set(module.entries), name
        step = module.entries["train_step"]
        assert step.arg_names == ["x", "y"]
        assert str(step.args[0].type) == f"f32{feed_shape}" and str(step.args[1].type) == "i32[B]"
        assert "loss" in step.result_names


def test_mlp_artifact_trains_with_minibatches(tmp_path):
    """Compile the model file, train the program with ``train_step`` on minibatches, save
    it as an artifact, load it back and keep training: the loss goes down throughout."""
    from tfc.compiler.driver import compile_to_artifact
    import tfc.runtime
    x_train, x_test, y_train, y_test = digits_split()
    program = compile_to_artifact(EXAMPLES / "mlp_digits.py", tmp_path / "mlp.tfc")
    before = program.run("predict", x=x_test)["classes"]
    rng = np.random.default_rng(0)

    def train(p: "tfc.runtime.Program", steps: int) -> list[float]:
        losses = []
        for _ in range(steps):
            batch = rng.choice(len(x_train), 64, replace=False)
            out = p.run("train_step", x=x_train[batch], y=y_train[batch])
            losses.append(float(out["loss"]))
        return losses

    first = train(program, 30)
    program.save(tmp_path / "mlp.tfc")
    loaded = tfc.runtime.load(tmp_path / "mlp.tfc")
    assert loaded.step == program.step
    for name, value in program.variables.items():
        np.testing.assert_array_equal(loaded.variables[name], value)
    second = train(loaded, 30)
    assert np.mean(first[:5]) > 1.5 > np.mean(first[-5:]) > np.mean(second[-5:])
    after = loaded.run("predict", x=x_test)["classes"]
    assert (after == y_test).mean() > 0.9 > (before == y_test).mean()
    evaluated = loaded.run("evaluate", x=x_test, y=y_test)
    np.testing.assert_allclose(evaluated["accuracy"], (after == y_test).mean(), rtol=1e-6)


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_mlp_adam_on_two_devices_trains_as_well_with_fp16_transfers(backend, tmp_path,
                                                                     monkeypatch):
    """``tfc compile examples/mlp_digits.py --devices cpu:0,cpu:1 [--fp16-transfers]``,
    then full-batch ``train_step`` (Adam): with the flag, activations and gradients cross
    as f16 but optimizer state stays f32, so the test accuracy is that of the f32 run
    within 0.01 (compressing Adam's slots made every step NaN: accuracy 0.10). Placed
    under a profile that splits the model (the default one keeps it on one device)."""
    from tfc.compiler.driver import compile_with_report
    from tfc.devices import PROFILE_ENV, save_profile
    from tfc.runtime import Program
    from tfc.testing import splitting_profile
    monkeypatch.setenv(PROFILE_ENV, str(save_profile(splitting_profile(),
                                                     tmp_path / "devices.json")))
    x_train, x_test, y_train, y_test = digits_split()
    accuracy, state = {}, {}
    for fp16 in (False, True):
        module, _ = compile_with_report(EXAMPLES / "mlp_digits.py", devices="cpu:0,cpu:1",
                                        fp16_transfers=fp16)
        program = Program(module, backend=backend)
        for _ in range(150):
            loss = float(program.run("train_step", x=x_train, y=y_train)["loss"])
        assert np.isfinite(loss)
        accuracy[fp16] = float(program.run("evaluate", x=x_test, y=y_test)["accuracy"])
        state[fp16] = program.variables
    assert accuracy[False] > 0.96
    assert abs(accuracy[True] - accuracy[False]) <= 0.01, accuracy
    # scalar state never travels as f16: 0.9**150 exactly as f32 computes it
    assert state[True]["beta1_power"] == state[False]["beta1_power"]
    executable = program._executable("train_step")
    assert 0 < executable.compression.compressed < executable.compression.transfers


def test_cnn_digits_trains_from_its_dataset_pipeline():
    """``examples/cnn_digits.py --dataset``: fit fed by a shuffled, batched, mapped (the
    compiled map fn makes the images) and prefetched ``tfc.data`` pipeline."""
    example = load_example("cnn_digits")
    ds = example["pipeline"](*digits_split()[::2], batch_size=32)
    first_x, first_y = next(iter(ds))
    assert first_x.shape == (32, 8, 8, 1) and first_y.shape == (32,)
    assert example["train"](epochs=4, verbose=0, dataset=True) >= 0.95
