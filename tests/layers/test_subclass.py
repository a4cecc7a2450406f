"""Subclassed models: ``class M(tfc.Model)`` with ``call``, traced on placeholders shaped
like the first data; tracked layers and variables; ``training`` switching dropout; several
inputs and outputs; errors."""

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError
from tests.layers.gradcheck import assert_model_gradients_match_finite_differences

L = tfc.keras.layers


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


class MLP(tfc.Model):
    def __init__(self, rate: float = 0.5) -> None:
        super().__init__()
        self.hidden = L.Dense(16, activation="relu")
        self.drop = L.Dropout(rate, seed=3)
        self.out = L.Dense(3, activation="softmax")

    def call(self, x, training=False):
        return self.out(self.drop(self.hidden(x), training=training))


def blobs(n: int = 96, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 3.0], [3.0, -2.0], [-3.0, -2.0]])
    y = rng.integers(0, 3, size=n)
    return (centers[y] + 0.5 * rng.normal(size=(n, 2))).astype(np.float32), y.astype(np.int32)


def test_a_subclass_trains_and_training_switches_dropout():
    model = MLP()
    model.compile(tfc.train.AdamOptimizer(0.05), "sparse_categorical_crossentropy",
                  ["accuracy"])
    x, y = blobs()
    history = model.fit(x, y, epochs=8, batch_size=16, verbose=0)
    assert history["accuracy"][-1] > 0.95 and history["loss"][-1] < history["loss"][0]
    assert model.name == "mlp" and str(model.input.type) == "f32[B,2]"
    assert [v.name for v in model.trainable_variables] == [
        "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]
    assert model.layers == [model.hidden, model.drop, model.out]
    assert model.count_params() == 2 * 16 + 16 + 16 * 3 + 3
    # dropout in the training step only: inference is deterministic
    np.testing.assert_array_equal(model.predict(x), model.predict(x))
    assert [op.kind for op in model.training_graph().ops].count("random.uniform_like") == 1
    evaluate = model.graph.ir  # the inference outputs have no dropout behind them
    from tfc.api.extract import extract
    predict = extract(evaluate, "p", [("x", model.inputs[0].value)],
                      [("y", model.outputs[0].value)], [], what="test")
    assert "random.uniform_like" not in [op.kind for op in predict.ops]


def test_training_reaches_raw_ops_and_a_call_that_ignores_it_builds_one_graph():
    class Raw(tfc.Model):
        def __init__(self):
            super().__init__()
            self.dense = L.Dense(2)

        def call(self, x, training=False):
            h = self.dense(x)
            return tfc.nn.dropout(h, 0.5, seed=1) if training else h

    class Ignores(tfc.Model):
        def __init__(self):
            super().__init__()
            self.dense = L.Dense(2)

        def call(self, x, training=False):
            return self.dense(x)

    x = np.ones((8, 3), np.float32)
    counts = {}
    for cls in (Raw, Ignores):
        with tfc.Graph().as_default():
            model = cls()
            model.compile("sgd", "mse")
            model.fit(x, np.zeros((8, 2), np.float32), epochs=1, verbose=0)
            kinds = [op.kind for op in model.training_graph().ops]
            counts[cls.__name__] = (kinds.count("random.uniform_like"), kinds.count("matmul"))
            if cls is Ignores:  # the training loss is the inference graph's loss
                assert model._training.loss is model._training.eval_loss
    assert counts["Raw"][0] == 1 and counts["Ignores"][0] == 0
    assert counts["Raw"][1] == counts["Ignores"][1]  # one forward pass (and its gradients)


def test_tracking_lists_nested_models_and_variables_and_a_layer_used_twice():
    class Tower(tfc.Model):
        def __init__(self):
            super().__init__()
            self.blocks = [L.Dense(4, activation="relu"), L.Dense(4, activation="relu")]
            self.encoder = tfc.Sequential([L.Dense(4)])
            self.scale = tfc.Variable(np.float32(2.0), name="scale")
            self.frozen = tfc.Variable(np.float32(1.0), name="frozen", trainable=False)
            self.alias = self.blocks[0]  # the same layer twice: tracked once

        def call(self, x):  # no training argument: traced once
            for block in self.blocks:
                x = block(x)
            x = self.blocks[1](x)  # called again: the same weights
            return self.encoder(x) * self.scale + self.frozen

    model = Tower()
    model.build((4,))
    assert [v.name for v in model.variables] == [
        "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias", "dense_2/kernel",
        "dense_2/bias", "scale", "frozen"]
    assert "frozen" not in [v.name for v in model.trainable_variables]
    assert model.count_params() == 3 * 20 + 2
    assert not model.uses_training
    model.compile(tfc.train.GradientDescentOptimizer(0.01), "mse")
    x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    before = model.get_weights()
    model.fit(x, x, epochs=2, verbose=0)
    after = model.get_weights()
    changed = [not np.array_equal(a, b) for a, b in zip(before, after)]
    assert changed == [True] * 7 + [False]


def test_dict_inputs_and_outputs():
    class TwoHeads(tfc.Model):
        def __init__(self):
            super().__init__()
            self.a, self.b = L.Dense(4, activation="tanh"), L.Dense(4, activation="tanh")
            self.join = L.Concatenate()
            self.cls, self.reg = L.Dense(2, activation="softmax"), L.Dense(1)

        def call(self, inputs, training=False):
            h = self.join([self.a(inputs["left"]), self.b(inputs["right"])])
            return {"cls": self.cls(h), "reg": self.reg(h)}

    rng = np.random.default_rng(0)
    x = {"left": rng.normal(size=(32, 3)).astype(np.float32),
         "right": rng.normal(size=(32, 5)).astype(np.float32)}
    y = {"cls": (x["left"][:, 0] > 0).astype(np.int32), "reg": x["right"][:, 0]}
    model = TwoHeads()
    model.compile(tfc.train.AdamOptimizer(0.05),
                  {"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                  metrics={"cls": "accuracy"})
    history = model.fit(x, y, epochs=20, batch_size=8, verbose=0)
    assert model.input_names == ["left", "right"] and model.output_names == ["cls", "reg"]
    assert set(history) == {"loss", "cls_loss", "reg_loss", "cls_accuracy"}
    assert history["loss"][-1] < history["loss"][0] / 2
    out = model.predict(x)
    assert out["cls"].shape == (32, 2) and out["reg"].shape == (32, 1)


def test_summary_and_errors(capsys):
    model = MLP()
    with pytest.raises(TfcError, match="does not know its input shape"):
        model.export()
    model.build((2,))
    model.summary()
    out = capsys.readouterr().out
    assert "dense (Dense)" in out and "dropout (Dropout)" in out and "Total params: 99" in out

    class Early(tfc.Model):
        def __init__(self):
            self.dense = L.Dense(2)
            super().__init__()

        def call(self, x):
            return self.dense(x)

    with pytest.raises(TfcError, match=r"test_subclass.py:\d+: Early: call super\(\).__init__\(\) "
                                       r"before assigning layers"):
        Early()

    class NoCall(tfc.Model):
        pass

    with pytest.raises(TfcError, match="subclass it and define call"):
        NoCall()
    with pytest.raises(TfcError, match="must be compiled first"):
        MLP().fit(*blobs(8), verbose=0)


# ---- Keras's build(input_shape) and add_weight ----------------------------------------------

class Linear(L.Layer):
    """A Keras-style custom layer: weights made in ``build(input_shape)`` with
    ``add_weight``, ``call(inputs)`` without ``training``, a tracked sublayer."""

    def __init__(self, units: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.builds: list[tuple] = []
        self.gate = L.Dense(units, activation="sigmoid")  # tracked: its weights are ours

    def build(self, input_shape):
        self.builds.append(tuple(input_shape))
        self.w = self.add_weight(name="w", shape=(input_shape[-1], self.units),
                                 initializer="random_normal", trainable=True)
        self.b = self.add_weight(name="b", shape=(self.units,), initializer="zeros")
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones",
                                     trainable=False)

    def call(self, inputs):
        return (tfc.matmul(inputs, self.w) + self.b) * self.scale * self.gate(inputs)


class Scaled(tfc.Model):
    """A subclassed model with its own ``build`` and ``add_weight`` (called once, though
    ``call`` is traced twice: inference and training)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = Linear(3)
        self.drop = L.Dropout(0.25, seed=1)
        self.builds: list = []

    def build(self, input_shape):
        self.builds.append(tuple(input_shape))
        self.gain = self.add_weight("gain", (3,), "ones")
        self.offset = self.add_weight("offset", (3,), "zeros", trainable=False)

    def call(self, x, training=False):
        h = self.drop(self.linear(x), training=training)
        return tfc.nn.softmax(h * self.gain + self.offset)


def test_build_and_add_weight_as_in_keras_train_and_are_called_once():
    model = Scaled()
    model.compile(tfc.train.AdamOptimizer(0.05), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    x, y = blobs()
    history = model.fit(x, y, epochs=15, batch_size=32, verbose=0)
    assert model.builds == [(None, 2)] and model.linear.builds == [(None, 2)]
    names = sorted(v.name for v in model.trainable_variables)
    assert names == ["linear/b", "linear/dense/bias", "linear/dense/kernel", "linear/w",
                     "scaled/gain"]
    assert {v.name for v in model.variables} - set(names) == {"linear/scale", "scaled/offset"}
    assert model.count_params() == 3 * 2 + 3 + 1 + (2 * 3 + 3) + 3 + 3
    assert history["loss"][-1] < 0.5 * history["loss"][0] and history["accuracy"][-1] > 0.9
    weights = dict(zip([v.name for v in model.variables], model.get_weights()))
    assert weights["linear/scale"] == 1.0 and not weights["scaled/offset"].any()  # untrained
    assert not np.allclose(weights["scaled/gain"], 1.0)  # trained


def test_gradients_of_custom_weights_match_finite_differences():
    """f64: the gradient of the loss with respect to every weight that build and
    add_weight made (and the tracked sublayer's) is the central difference's."""
    model = Scaled()
    model.build((2,), "float64")
    model.compile("sgd", "sparse_categorical_crossentropy")
    x, y = blobs(12, seed=4)
    tr = model._require_training()
    assert len(model.trainable_variables) == 5
    feeds = model._feed_dict(model._prepare_x(x.astype(np.float64)), model._prepare_y(y))
    # the eval loss: no dropout, a deterministic loss
    assert_model_gradients_match_finite_differences(model, tr.eval_loss, feeds)


def test_a_layer_that_refers_back_to_its_model_counts_each_variable_once():
    class Back(L.Layer):
        def __init__(self, owner):
            super().__init__()
            self.owner, self.inner = owner, L.Dense(2)

        def call(self, x):
            return self.inner(x)

    class Owner(tfc.Model):
        def __init__(self):
            super().__init__()
            self.back = Back(self)

        def call(self, x):
            return self.back(x)

    model = Owner()
    model.build((3,))
    assert [v.name for v in model.variables] == ["back/dense/kernel", "back/dense/bias"]
    assert model.count_params() == 8 and len(model.back.trainable_variables) == 2
