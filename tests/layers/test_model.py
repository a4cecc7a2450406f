"""Sequential: build, compile, fit / evaluate / predict on tiny problems, export, errors."""

import numpy as np
import pytest

import tfc
from tfc.errors import FeedError, TfcError


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def blobs(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three well separated Gaussian blobs in 2-D: labels 0, 1, 2."""
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 3.0], [3.0, -2.0], [-3.0, -2.0]])
    y = rng.integers(0, 3, size=n)
    return (centers[y] + 0.5 * rng.normal(size=(n, 2))).astype(np.float32), y


def classifier(**compile_args: object) -> tfc.Sequential:
    model = tfc.Sequential([tfc.layers.Dense(8, activation="relu"),
                            tfc.layers.Dense(3, activation="softmax")])
    model.compile(**{"optimizer": tfc.train.AdamOptimizer(0.05),
                     "loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"],
                     **compile_args})
    return model


def test_fit_evaluate_predict_on_a_tiny_problem():
    x, y = blobs()
    model = classifier()
    history = model.fit(x, y, epochs=6, batch_size=16, verbose=0, validation_data=blobs(30, 1))
    assert set(history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history.history is history and history.epoch == list(range(6))
    assert all(len(v) == 6 for v in history.values())
    assert history["loss"][-1] < history["loss"][0] / 3
    assert history["accuracy"][-1] == 1.0 and history["val_accuracy"][-1] == 1.0
    result = model.evaluate(x, y)
    assert set(result) == {"loss", "accuracy"} and result["accuracy"] == 1.0
    probs = model.predict(x, batch_size=50)
    assert probs.shape == (120, 3) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1, rtol=1e-6)
    # evaluate's loss is the mean cross-entropy of predict's probabilities.
    np.testing.assert_allclose(result["loss"], -np.log(probs[np.arange(120), y]).mean(),
                               rtol=1e-4)
    assert str(model.inputs.type) == "f32[B,2]" and str(model.outputs.type) == "f32[B,3]"
    assert [v.name for v in model.trainable_variables] == [
        "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]
    assert model.count_params() == 2 * 8 + 8 + 8 * 3 + 3


def test_fit_is_deterministic_and_the_seed_changes_the_order():
    runs = []
    for seed in (0, 0, 1):
        with tfc.Graph().as_default():
            runs.append(classifier().fit(*blobs(), epochs=2, verbose=0, seed=seed)["loss"])
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_softmax_outputs_train_through_the_fused_cross_entropy():
    model = classifier()
    model.fit(*blobs(20), epochs=1, verbose=0)
    kinds = [op.kind for op in model.graph.ir.ops]
    assert "sparse_softmax_cross_entropy" in kinds and "log" not in kinds


def test_probabilities_without_softmax_and_logits():
    """A loss on probabilities that no softmax op made takes their log; from_logits
    takes the outputs as logits."""
    x, y = blobs()
    for last, loss in [(tfc.layers.Dense(3, activation=lambda t: tfc.nn.softmax(t) * 1.0),
                        "sparse_categorical_crossentropy"),
                       (tfc.layers.Dense(3),
                        tfc.layers.SparseCategoricalCrossentropy(from_logits=True))]:
        with tfc.Graph().as_default():
            model = tfc.Sequential([tfc.layers.Dense(8, activation="relu"), last])
            model.compile(tfc.train.AdamOptimizer(0.05), loss, ["accuracy"])
            history = model.fit(x, y, epochs=5, batch_size=16, verbose=0)
            assert history["accuracy"][-1] == 1.0


def test_regression_with_mse_and_one_output():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3  # [N] targets for a [N, 1] output
    model = tfc.Sequential([tfc.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer=tfc.train.GradientDescentOptimizer(0.1), loss="mse",
                  metrics=["mae"])
    history = model.fit(x, y, epochs=30, batch_size=16, verbose=0)
    # noise-free targets: 30 epochs reach the exact weights (measured error 2.4e-7)
    assert history["loss"][-1] < 1e-10 < 1e-3 < history["loss"][0]
    kernel, bias = model.get_weights()
    np.testing.assert_allclose(kernel[:, 0], [1.0, -2.0, 0.5], atol=1e-5)
    np.testing.assert_allclose(bias, [0.3], atol=1e-5)
    assert model.evaluate(x, y)["mae"] < 1e-5


def test_dropout_only_in_the_training_graph():
    x, y = blobs()
    model = tfc.Sequential([tfc.layers.Dense(16, activation="relu"), tfc.layers.Dropout(0.5),
                            tfc.layers.Dense(3, activation="softmax")])
    model.compile(tfc.train.AdamOptimizer(0.05), "sparse_categorical_crossentropy",
                  ["accuracy"])
    model.fit(x, y, epochs=3, verbose=0)
    a, b = model.predict(x), model.predict(x)
    np.testing.assert_array_equal(a, b)  # inference: no dropout, deterministic
    kinds = [op.kind for op in model.graph.ir.ops]
    assert kinds.count("random.uniform_like") == 1


def test_progress_output(capsys):
    model = classifier()
    model.fit(*blobs(40), epochs=2, batch_size=16, verbose=1)
    out = capsys.readouterr().out
    assert "Epoch 1/2 - loss: " in out and "Epoch 2/2 - loss: " in out and "accuracy: " in out
    model.fit(*blobs(40), epochs=1, verbose=0)
    assert capsys.readouterr().out == ""


def test_export_declares_entries_that_compile_and_train():
    from tfc.runtime import Program
    model = classifier()
    model.build((2,))
    model.export()
    g = tfc.get_default_graph()
    assert set(g.entries) == {"predict", "evaluate", "train_step"}
    assert list(g.entries["train_step"].feeds) == ["x", "y"]
    assert list(g.entries["predict"].fetches) == ["output", "classes"]
    program = Program(g.as_module())
    x, y = blobs()
    losses = [float(program.run("train_step", x=x[i:i + 20], y=y[i:i + 20].astype(np.int32))
                    ["loss"]) for i in range(0, 120, 20) for _ in range(3)]
    assert losses[-1] < losses[0]
    out = program.run("predict", x=x)
    np.testing.assert_array_equal(out["classes"], out["output"].argmax(axis=1))


def test_errors():
    x, y = blobs(10)
    model = tfc.Sequential([tfc.layers.Dense(3)])
    with pytest.raises(TfcError, match="must be compiled first"):
        model.fit(x, y, verbose=0)
    with pytest.raises(TfcError, match="does not know its input shape"):
        tfc.Sequential([tfc.layers.Dense(3)]).export()
    with pytest.raises(TfcError, match="unknown loss 'hinge2'"):
        model.compile("adam", "hinge2")
    with pytest.raises(TfcError, match="unknown optimizer 'adamw'"):
        model.compile("adamw", "mse")
    with pytest.raises(TfcError, match="unknown metric 'f1'"):
        model.compile("sgd", "sparse_categorical_crossentropy", ["f1"])
        model.fit(x, y, verbose=0)
    model = classifier()
    model.fit(x, y, epochs=1, verbose=0)
    with pytest.raises(FeedError, match=r"takes x of type f32\[B,2\], got an array of shape "
                                        r"\[10, 3\]"):
        model.predict(np.zeros((10, 3)))
    with pytest.raises(FeedError, match=r"takes y of type i32\[B\]"):
        model.evaluate(x, np.zeros((10, 3)))
    with pytest.raises(FeedError, match="x has 10 examples but y has 9"):
        model.fit(x, y[:9], verbose=0)
    with pytest.raises(TfcError, match="already built"):
        model.add(tfc.layers.Dense(2))


def test_string_optimizers_and_summary(capsys):
    x, y = blobs(30)
    for name in ("adam", "sgd", "rmsprop", "adagrad", "momentum"):
        with tfc.Graph().as_default():
            model = classifier(optimizer=name)
            history = model.fit(x, y, epochs=2, verbose=0)
            assert np.isfinite(history["loss"]).all()
    model.summary()
    out = capsys.readouterr().out
    assert "dense (Dense)" in out and "f32[B,3]" in out and "Total params: 51" in out


def test_embedding_model_on_integer_tokens_and_nested_models():
    """Integer inputs make an i32 placeholder; the embedding's sparse gradient trains
    through Adam; a Sequential is usable as a layer of another."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6, size=(96, 4)).astype(np.int64)
    labels = (tokens[:, 0] >= 3).astype(np.int32)  # the class is in the first token
    encoder = tfc.Sequential([tfc.layers.Embedding(6, 4), tfc.layers.Flatten()],
                             input_shape=(4,))
    model = tfc.Sequential([encoder, tfc.layers.Dense(2, activation="softmax")])
    assert model.input_shape == (4,)
    model.compile(tfc.train.AdamOptimizer(0.1), "sparse_categorical_crossentropy",
                  ["accuracy"])
    history = model.fit(tokens, labels, epochs=8, batch_size=16, verbose=0)
    assert str(model.inputs.type) == "i32[B,4]" and str(encoder.output_type) == "f32[B,16]"
    assert [v.name for v in model.trainable_variables] == [
        "embedding/embeddings", "dense/kernel", "dense/bias"]
    assert history["accuracy"][-1] == 1.0
