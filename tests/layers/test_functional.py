"""The Functional API: Input, layers called on tensors, Model(inputs, outputs) with several
inputs and outputs, shared layers, per-output losses and metrics, the same IR as
Sequential and a subclass, gradients, and the errors of a badly wired model."""

import re

import numpy as np
import pytest

import tfc
from tfc.errors import FeedError, TfcError, TypeMismatch
from tfc.ir.printer import print_graph
from tests.layers.gradcheck import assert_model_gradients_match_finite_differences

L = tfc.keras.layers


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def blobs(n: int = 96, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 3.0, 1.0, 0.0], [3.0, -2.0, 0.0, 1.0], [-3.0, -2.0, 1.0, 1.0]])
    y = rng.integers(0, 3, size=n)
    return (centers[y] + 0.5 * rng.normal(size=(n, 4))).astype(np.float32), y.astype(np.int32)


# ---- one network written three ways ----------------------------------------------------------

def mlp_layers() -> list:
    return [L.Dense(16, activation="relu"), L.Dropout(0.25), L.Dense(3, activation="softmax")]


def cnn_layers() -> list:
    return [L.Conv2D(4, 3, activation="relu"), L.MaxPool2D(2), L.Flatten(),
            L.Dense(3, activation="softmax")]


class Stack(tfc.Model):
    """A subclass that applies its layers in order (as the user would write call)."""

    def __init__(self, layers: list) -> None:
        super().__init__()
        self.blocks = layers

    def call(self, x, training=False):
        for layer in self.blocks:
            x = layer(x)  # training comes from the model's call
        return x


def build(kind: str, make_layers, input_shape: tuple) -> tfc.Sequential:
    tfc.set_random_seed(7)
    if kind == "sequential":
        model = tfc.Sequential(make_layers(), input_shape=input_shape)
    elif kind == "functional":
        x = tfc.keras.Input(shape=input_shape)
        h = x
        for layer in make_layers():
            h = layer(h)
        model = tfc.keras.Model(x, h)
    else:
        model = Stack(make_layers())
    model.compile(tfc.train.AdamOptimizer(0.01), "sparse_categorical_crossentropy",
                  ["accuracy"])
    return model


def ir_up_to_names(graph) -> str:
    """The printed IR with locations dropped and every %name / @name numbered by first use."""
    text = re.sub(r"\s*#[^\n]*", "", print_graph(graph))
    names: dict[str, str] = {}
    return re.sub(r"([%@])([\w./\-]+)",
                  lambda m: names.setdefault(m.group(0), f"{m.group(1)}n{len(names)}"), text)


@pytest.mark.parametrize("network", ["mlp", "cnn"])
def test_sequential_functional_and_subclass_compile_to_the_same_ir_and_losses(network):
    if network == "mlp":
        make_layers, shape = mlp_layers, (4,)
        x, y = blobs()
    else:
        make_layers, shape = cnn_layers, (6, 6, 1)
        rng = np.random.default_rng(1)
        x = rng.normal(size=(48, 6, 6, 1)).astype(np.float32)
        y = (x[:, :3].sum(axis=(1, 2, 3)) > 0).astype(np.int32) + (x[:, 0, 0, 0] > 1)
    irs, kinds, histories, predictions = {}, {}, {}, {}
    for kind in ("sequential", "functional", "subclass"):
        with tfc.Graph().as_default():
            model = build(kind, make_layers, shape)
            histories[kind] = model.fit(x, y, epochs=3, batch_size=16, shuffle=False,
                                        verbose=0)
            graph = model.training_graph()
            irs[kind] = ir_up_to_names(graph)
            kinds[kind] = sorted(op.kind for op in graph.ops)
            predictions[kind] = model.predict(x)
    assert kinds["functional"] == kinds["sequential"] == kinds["subclass"]
    assert irs["functional"] == irs["sequential"] == irs["subclass"]
    for kind in ("functional", "subclass"):
        assert histories[kind] == histories["sequential"]
        np.testing.assert_array_equal(predictions[kind], predictions["sequential"])
    assert histories["sequential"]["loss"][-1] < histories["sequential"]["loss"][0]


# ---- several inputs and outputs -------------------------------------------------------------

def two_towers(dtype: str = "float32") -> tfc.keras.Model:
    """Two inputs, each through its own tower, joined; two heads: a class and a score."""
    inputs, outputs = tower_tensors(dtype)
    return tfc.keras.Model(inputs=inputs, outputs=outputs)


def tower_tensors(dtype: str) -> tuple[dict, dict]:
    """The inputs and outputs of ``two_towers``."""
    a = tfc.keras.Input(shape=(4,), name="user", dtype=dtype)
    b = tfc.keras.Input(shape=(3,), name="item", dtype=dtype)
    ta = L.Dense(6, activation="tanh", name="user_tower")(a)
    tb = L.Dense(6, activation="tanh", name="item_tower")(b)
    joined = L.Concatenate()([ta, tb])
    cls = L.Dense(3, activation="softmax", name="cls")(joined)
    score = L.Dense(1, name="score")(joined + 0.5)  # an op between layers
    return {"user": a, "item": b}, {"cls": cls, "score": score}


def tower_data(n: int = 64, seed: int = 0) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    user = rng.normal(size=(n, 4)).astype(np.float32)
    item = rng.normal(size=(n, 3)).astype(np.float32)
    cls = (user[:, 0] > 0).astype(np.int32) + (item[:, 0] > 0).astype(np.int32)
    score = (user[:, 1] - item[:, 1]).astype(np.float32)
    return {"user": user, "item": item}, {"cls": cls, "score": score}


def test_two_inputs_two_outputs_fit_evaluate_predict_with_dicts_lists_and_a_dataset():
    model = two_towers()
    assert model.input_names == ["user", "item"] and model.output_names == ["cls", "score"]
    model.compile(tfc.train.AdamOptimizer(0.05),
                  loss={"cls": "sparse_categorical_crossentropy", "score": "mse"},
                  loss_weights={"cls": 1.0, "score": 0.5},
                  metrics={"cls": ["accuracy"], "score": ["mae"]})
    x, y = tower_data()
    history = model.fit(x, y, epochs=30, batch_size=16, verbose=0)
    assert set(history) == {"loss", "cls_loss", "score_loss", "cls_accuracy", "score_mae"}
    # the total is the weighted sum of the parts (per batch, so also averaged)
    np.testing.assert_allclose(history["loss"][-1], history["cls_loss"][-1] +
                               0.5 * history["score_loss"][-1], rtol=1e-5)
    assert history["loss"][-1] < history["loss"][0] / 3
    result = model.evaluate(x, y)
    out = model.predict(x)
    assert set(out) == {"cls", "score"} and out["cls"].shape == (64, 3)
    assert out["score"].shape == (64, 1)
    np.testing.assert_allclose(result["score_loss"],
                               ((out["score"][:, 0] - y["score"]) ** 2).mean(), rtol=1e-4)
    ce = -np.log(out["cls"][np.arange(64), y["cls"]]).mean()
    np.testing.assert_allclose(result["cls_loss"], ce, rtol=1e-4)
    # lists in input / output order give the same as dicts
    listed = model.evaluate([x["user"], x["item"]], [y["cls"], y["score"]])
    assert listed == result
    # a dataset of (x_dict, y_dict) batches
    ds = tfc.data.Dataset.from_tensor_slices((x, y)).batch(16)
    assert model.evaluate(ds) == pytest.approx(result, rel=1e-5)
    model.fit(ds, epochs=1, verbose=0)


def test_a_list_of_outputs_and_one_loss_for_all_and_export():
    from tfc.runtime import Program
    a = tfc.keras.Input(shape=(2,), name="a")
    h = L.Dense(4, activation="relu")(a)
    out1, out2 = L.Dense(1, name="p")(h), L.Dense(1, name="q")(h)
    model = tfc.keras.Model(a, [out1, out2])
    model.compile("sgd", "mse", metrics=["mae"])
    x = np.random.default_rng(0).normal(size=(32, 2)).astype(np.float32)
    p, q = model.predict(x)  # before training: the exported model starts from the same weights
    assert p.shape == q.shape == (32, 1)
    model.export()
    g = tfc.get_default_graph()
    assert list(g.entries["predict"].feeds) == ["a"]
    assert list(g.entries["predict"].fetches) == ["p", "q"]
    assert list(g.entries["train_step"].feeds) == ["a", "y_p", "y_q"]
    program = Program(g.as_module())
    got = program.run("predict", a=x)
    np.testing.assert_allclose(got["p"], p, rtol=1e-6)
    np.testing.assert_allclose(got["q"], q, rtol=1e-6)
    history = model.fit(x, [x[:, :1], x[:, 1:]], epochs=2, verbose=0)
    assert set(history) == {"loss", "p_loss", "q_loss", "p_mae", "q_mae"}
    step = program.run("train_step", a=x, y_p=x[:, :1], y_q=x[:, 1:])
    assert set(step) == {"loss", "p_loss", "q_loss", "p_mae", "q_mae"}


def test_a_shared_layer_is_one_set_of_weights():
    a, b = tfc.keras.Input(shape=(3,), name="a"), tfc.keras.Input(shape=(3,), name="b")
    shared = L.Dense(2, name="shared")
    out = L.Add()([shared(a), shared(b)])
    model = tfc.keras.Model([a, b], out)
    assert [v.name for v in model.trainable_variables] == ["shared/kernel", "shared/bias"]
    assert model.count_params() == 8
    xa = np.ones((5, 3), np.float32)
    xb = 2 * np.ones((5, 3), np.float32)
    kernel, bias = model.get_weights()
    np.testing.assert_allclose(model.predict([xa, xb]), (xa + xb) @ kernel + 2 * bias,
                               rtol=1e-6)


def test_dropout_on_an_input_and_a_model_called_as_a_layer():
    """Dropout directly on an Input returns it unchanged at inference: the training graph
    still drops (the layer call is recorded, not just its value); a Functional model is
    callable on other tensors, with the same variables."""
    x = tfc.keras.Input(shape=(8,))
    inner = tfc.keras.Model(x, L.Dense(2, name="head")(L.Dropout(0.5, seed=1)(x)))
    assert inner.uses_training
    inner.compile("sgd", "mse")
    ones = np.ones((16, 8), np.float32)
    inner.fit(ones, np.zeros((16, 2), np.float32), epochs=1, verbose=0)
    kinds = [op.kind for op in inner.training_graph().ops]
    assert kinds.count("random.uniform_like") == 1
    z = tfc.keras.Input(shape=(8,), name="z")
    outer = tfc.keras.Model(z, inner(z) * 2.0)
    assert [v.name for v in outer.variables] == ["head/kernel", "head/bias"]
    outer.set_weights(inner.get_weights())  # each model trains in its own session
    np.testing.assert_allclose(outer.predict(ones), 2 * inner.predict(ones), rtol=1e-6)


def random_ops(graph) -> int:
    return [op.kind for op in graph.ops].count("random.uniform_like")


def predict_graph(model):
    from tfc.api.extract import extract
    return extract(model.graph.ir, "p", [(t.name, t.value) for t in model.inputs],
                   [(f"o{i}", t.value) for i, t in enumerate(model.outputs)], [], what="test")


def test_nested_models_are_replayed_as_units():
    """A model called on tensors is one recorded call: a subclass whose call drops only
    when training (raw ops, no Dropout layer), shared by two inputs (siamese), drops in
    the training graph; so does a nested Sequential's Dropout; neither at inference."""
    class Noisy(tfc.Model):
        def __init__(self):
            super().__init__()
            self.dense = L.Dense(4)

        def call(self, x, training=False):
            h = self.dense(x)
            return tfc.nn.dropout(h, 0.5, seed=2) if training else h

    encoder = Noisy()
    a, b = tfc.keras.Input(shape=(3,), name="a"), tfc.keras.Input(shape=(3,), name="b")
    stack = tfc.Sequential([L.Dense(4), L.Dropout(0.5, seed=3)])
    joined = L.Concatenate()([encoder(a), encoder(b), stack(a)])
    model = tfc.keras.Model([a, b], L.Dense(1, name="head")(joined))
    assert model.layers[:2] == [encoder, stack] and model.uses_training
    assert [v.name for v in model.trainable_variables] == [
        "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias", "head/kernel",
        "head/bias"]
    model.compile("sgd", "mse")
    x = [np.ones((8, 3), np.float32)] * 2
    model.fit(x, np.zeros((8, 1), np.float32), epochs=1, verbose=0)
    assert random_ops(model.training_graph()) == 3
    assert random_ops(predict_graph(model)) == 0
    np.testing.assert_array_equal(model.predict(x), model.predict(x))


def test_an_explicit_training_flag_is_kept():
    """``Dropout(...)(h, training=True)`` drops at inference too (Monte Carlo dropout)."""
    x = tfc.keras.Input(shape=(4,))
    model = tfc.keras.Model(x, L.Dense(2)(L.Dropout(0.5, seed=1)(x, training=True)))
    model.compile("sgd", "mse")
    model.fit(np.ones((8, 4), np.float32), np.zeros((8, 2), np.float32), verbose=0)
    assert random_ops(predict_graph(model)) == 1
    assert random_ops(model.training_graph()) == 1


def test_summary_shows_inputs_layers_and_connections(capsys):
    model = two_towers()
    model.summary()
    out = capsys.readouterr().out
    assert "user (InputLayer)" in out and "item (InputLayer)" in out
    assert "concatenate (Concatenate)" in out and "user_tower, item_tower" in out
    assert model.count_params() == 30 + 24 + 39 + 13 and "Total params: 106" in out


# ---- gradients against finite differences ------------------------------------------------------

@pytest.mark.parametrize("kind", ["functional", "subclass"])
def test_gradients_of_a_two_input_two_output_model_match_finite_differences(kind):
    """As a Functional model and as Keras's subclassed Functional (``Towers``)."""
    model = Towers("float64") if kind == "subclass" else two_towers("float64")
    model.compile("sgd", loss=["sparse_categorical_crossentropy", "mse"], loss_weights=[1.0, 0.3])
    x, y = tower_data(12, seed=3)
    x = {k: v.astype(np.float64) for k, v in x.items()}
    y["score"] = y["score"].astype(np.float64)
    tr = model._require_training()
    feeds = model._feed_dict(model._prepare_x(x), model._prepare_y(y))
    assert_model_gradients_match_finite_differences(model, tr.loss, feeds)


# ---- errors ---------------------------------------------------------------------------------

def test_errors_name_the_layer_and_the_users_line():
    x = tfc.keras.Input(shape=(4,))
    dense = L.Dense(3)
    dense(x)
    other = tfc.keras.Input(shape=(5,))
    with pytest.raises(TypeMismatch, match=r"test_functional.py:\d+: layer 'dense' was built "
                                           r"for inputs of type f32\[B,4\], got f32\[B,5\]"):
        dense(other)
    with pytest.raises(TypeMismatch, match=r"test_functional.py:\d+: Conv2D 'conv2d'"):
        L.Conv2D(2, 3)(x)
    with pytest.raises(TypeMismatch, match="layer 'dense' takes one tensor, got a list of 2"):
        L.Dense(2)([x, x])
    assert str(L.Dense(2)([[1.0, 2.0]]).type) == "f32[1,2]"  # numbers: one constant, as before
    with pytest.raises(TypeMismatch, match="layer 'concatenate' takes a list of tensors"):
        L.Concatenate()(x)
    wide = tfc.keras.Input(shape=(2, 3))
    with pytest.raises(TypeMismatch, match=r"test_functional.py:\d+: Concatenate "
                                           r"'concatenate(_\d)?': concat"):
        L.Concatenate()([x, wide])


def test_errors_of_badly_wired_models():
    a = tfc.keras.Input(shape=(4,), name="a")
    b = tfc.keras.Input(shape=(4,), name="b")
    out = L.Dense(2)(a)
    with pytest.raises(TfcError, match=r"test_functional.py:\d+: model 'model': input 'b' is "
                                       r"not used by any output \(a dangling Input\)"):
        tfc.keras.Model([a, b], out)
    with pytest.raises(TfcError, match="depends on the placeholder 'b', which is not among "
                                       "the model's inputs"):
        tfc.keras.Model(a, L.Dense(2)(b) + out)
    with pytest.raises(TfcError, match="is not connected to the model's inputs"):
        tfc.keras.Model(a, [out, tfc.constant(np.ones((1, 2), np.float32))])
    with pytest.raises(TfcError, match="is not a placeholder"):
        tfc.keras.Model(out, out)
    with pytest.raises(TfcError, match="needs inputs and outputs"):
        tfc.keras.Model()
    model = tfc.keras.Model([a, b], L.Add()([out, L.Dense(2)(b)]))
    with pytest.raises(TfcError, match="compile's loss has 2 entries for 1 outputs"):
        model.compile("sgd", ["mse", "mse"])
        model.evaluate([np.ones((2, 4))] * 2, np.ones((2, 2)))
    model.compile("sgd", "mse")
    with pytest.raises(FeedError, match=r"x has the keys \['a', 'c'\], expected \['a', 'b'\]"):
        model.predict({"a": np.ones((2, 4)), "c": np.ones((2, 4))})
    with pytest.raises(FeedError, match=r"takes input 'b' of type f32\[B,4\], got an array of "
                                        r"shape \[2, 3\]"):
        model.predict([np.ones((2, 4)), np.ones((2, 3))])
    with pytest.raises(FeedError, match=r"arrays differ in their number of examples "
                                        r"\(a: 2, b: 3\)"):
        model.predict([np.ones((2, 4)), np.ones((3, 4))])
    # a Functional model is a Model, not a Sequential: no add (as in Keras)
    assert isinstance(model, tfc.Model) and not isinstance(model, tfc.Sequential)
    assert not hasattr(model, "add")


def test_keras_namespace_and_existing_names():
    assert tfc.keras.Sequential is tfc.Sequential is tfc.layers.Sequential
    assert tfc.keras.Model is tfc.Model is tfc.layers.Model
    assert tfc.keras.layers.Dense is tfc.layers.Dense and tfc.keras.Input is tfc.layers.Input
    from tfc.keras.layers import Concatenate  # noqa: F401  (importable as a module)
    assert tfc.keras.losses.SparseCategoricalCrossentropy is \
        tfc.layers.SparseCategoricalCrossentropy


def test_model_is_the_engine_of_sequential_functional_and_subclasses():
    """Keras's layering: ``tfc.Model(inputs, outputs)`` is a ``Functional`` model, a
    ``Model`` and not a ``Sequential``; a Sequential and a subclass are Models too; the
    engine (compile, fit, evaluate, predict, weights, checkpoints) is defined once."""
    from tfc.layers.functional import Functional

    class Net(tfc.Model):
        def __init__(self):
            super().__init__()
            self.dense = L.Dense(2)

        def call(self, x):
            return self.dense(x)

    with tfc.Graph().as_default():
        x = tfc.keras.Input((3,))
        functional = tfc.Model(inputs=x, outputs=L.Dense(2)(x), name="f")
        sequential = tfc.Sequential([L.Dense(2, input_shape=(3,))])
        subclass = Net()
    assert type(functional) is Functional and functional.name == "f"
    assert type(tfc.Model(x, functional.outputs)) is Functional
    for model in (functional, sequential, subclass):
        assert isinstance(model, tfc.Model)
    assert not isinstance(functional, tfc.Sequential) and not isinstance(subclass, tfc.Sequential)
    assert not hasattr(functional, "add") and not hasattr(subclass, "add")
    for method in ("compile", "fit", "evaluate", "predict", "get_weights", "set_weights",
                   "save_weights", "load_weights", "_require_training", "_training_step",
                   "export", "training_graph"):
        defined = [cls.__name__ for cls in (Functional, tfc.Sequential, Net)
                   if method in vars(cls)]
        assert defined == [] and method in vars(tfc.Model), (method, defined)



# ---- Keras's "subclassed Functional" ---------------------------------------------------------

class Towers(tfc.Model):
    """``two_towers`` as Keras's subclassed Functional: ``__init__`` wires the graph and
    calls ``super().__init__(inputs, outputs)``; a method and attributes of its own."""

    def __init__(self, dtype: str = "float32", scale: float = 2.0) -> None:
        inputs, outputs = tower_tensors(dtype)
        super().__init__(inputs=inputs, outputs=outputs)
        self.scale = scale

    def scaled_scores(self, x: dict) -> np.ndarray:
        return self.scale * self.predict(x)["score"]


def towers_compiled(kind: str, dtype: str = "float32") -> tfc.Model:
    tfc.set_random_seed(3)
    model = Towers(dtype) if kind == "subclass" else two_towers(dtype)
    model.compile(tfc.train.AdamOptimizer(0.05),
                  loss={"cls": "sparse_categorical_crossentropy", "score": "mse"},
                  metrics={"cls": ["accuracy"]})
    return model


def test_a_subclassed_functional_model_trains_saves_and_loads_as_the_functional_one(tmp_path):
    from tfc.layers.functional import Functional
    x, y = tower_data()
    with tfc.Graph().as_default():
        sub = towers_compiled("subclass")
    with tfc.Graph().as_default():
        plain = towers_compiled("functional")
    assert type(sub) is Towers and isinstance(sub, Functional) and sub.name == "towers"
    assert sub.scale == 2.0 and sub.input_names == ["user", "item"]
    assert [layer.name for layer in sub.layers] == [layer.name for layer in plain.layers]
    assert ir_up_to_names(sub.training_graph()) == ir_up_to_names(plain.training_graph())
    hs = sub.fit(x, y, epochs=3, batch_size=16, verbose=0)
    hp = plain.fit(x, y, epochs=3, batch_size=16, verbose=0)
    assert hs == hp
    for ws, wp in zip(sub.get_weights(), plain.get_weights()):
        assert ws.tobytes() == wp.tobytes()
    np.testing.assert_array_equal(sub.scaled_scores(x), 2.0 * plain.predict(x)["score"])
    # saved from the subclass, loaded into a new one and into the plain Functional model
    path = sub.save_weights(tmp_path / "towers")
    with tfc.Graph().as_default():
        again, other = towers_compiled("subclass"), None
        again.load_weights(path)
    with tfc.Graph().as_default():
        other = towers_compiled("functional")
        other.load_weights(path)
    for model in (again, other):
        out = model.predict(x)
        for key, value in sub.predict(x).items():
            assert out[key].tobytes() == value.tobytes(), key
    assert again.evaluate(x, y) == sub.evaluate(x, y)


def test_a_subclassed_functional_model_is_called_as_a_layer_and_keeps_keras_errors():
    inner = Towers()
    user = tfc.keras.Input((4,), name="u")
    item = tfc.keras.Input((3,), name="i")
    outer = tfc.keras.Model([user, item], inner({"user": user, "item": item})["score"])
    x, _ = tower_data(8)
    np.testing.assert_allclose(outer.predict([x["user"], x["item"]]),
                               inner.predict(x)["score"], rtol=1e-6)

    class Unwired(tfc.Model):  # inputs without outputs: Functional's error
        def __init__(self, inputs):
            super().__init__(inputs=inputs)
    with pytest.raises(TfcError, match="needs both inputs and outputs") as caught:
        Unwired(user)
    assert "test_functional.py" in str(caught.value)
