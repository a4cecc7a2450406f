"""Subclassed models: ``class M(tfc.Model)`` with ``call``, traced on placeholders shaped
like the first data; tracked layers and variables; ``training`` switching dropout; several
inputs and outputs; errors."""

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError

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
