"""tfc's Keras API (``tfc.keras``) against Keras 3 (``tf.keras`` on TensorFlow), model by model.

A Keras user builds the same model in ``tfc.keras`` and in ``tf.keras`` and compares: this
tool does that. For each case the model is built in Keras (its initializers draw the
weights) and in tfc, Keras's initial weights are copied into tfc (``set_weights``: the
initializers do not matter), and then, on the llvm and on the reference backend:

- ``predict``: the forward outputs in inference mode (rtol 1e-5, atol 1e-6 in float32);
- with a loss (``compile``): ``evaluate``'s loss and metrics, and the gradient of the mean
  loss with respect to every trainable weight (Keras: ``tf.GradientTape`` on
  ``model(x, training=True)``; tfc: ``tfc.gradients`` of the training graph's loss);
- with an optimizer: ``fit`` for a few epochs, ``shuffle=False``, the same batch size:
  ``History``'s per-epoch loss and metrics and the final weights;
- ``count_params`` (what ``summary`` prints as the total);
- for a layer that computes differently in training (``BatchNormalization``: the cases with
  ``training_mode``), the forward in training mode (Keras: ``model(x, training=True)``,
  whose moving-statistic updates are undone before ``fit``) and ``evaluate`` after ``fit``
  (with the moving statistics ``fit`` left; ``fit``'s tolerance).

Tolerances (float32): forward, loss and metrics rtol 1e-5 / atol 1e-6 (a sum of at most a
few hundred products); gradients rtol 1e-4 / atol 1e-6 relative to the gradient's largest
element (a backward pass sums per-example terms in another order); ``fit`` rtol 1e-4 /
atol 1e-5 (a few dozen steps, each amplifying the previous roundings; Adam's and RMSprop's
``g / sqrt(v)`` divides by a rounded square root). Everything runs on the CPU with oneDNN
off (``TF_ENABLE_ONEDNN_OPTS=0``) and Keras's XLA off (``jit_compile=False``).

TensorFlow is not tfc's dependency; run this by hand:
``python tools/conformance_keras.py [--backend llvm|reference] [--only NAME]``. Each
difference is marked FIXED (a bug fixed in tfc, with a regression test under
``tests/layers``) or EXPECTED (a deliberate difference, documented in the README's Keras
paragraph) from ``KNOWN`` below; an unlisted difference is NEW and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

FWD = (1e-5, 1e-6)   # rtol, atol: forward outputs, losses, metrics
GRAD = (1e-4, 1e-6)  # rtol, atol (atol scaled by the gradient's largest element)
FIT = (1e-4, 1e-5)   # rtol, atol: History values and final weights after fit


@dataclass
class Case:
    """``build(K)`` makes the model with ``K`` = ``keras`` or ``tfc.keras`` (the same
    spelling in both); ``data(rng)`` gives ``(x, y)``; ``loss(K)`` / ``metrics`` /
    ``optimizer(K)`` make what ``compile`` takes (no loss: forward only)."""

    name: str
    build: Callable[[Any], Any]
    data: Callable[[np.random.Generator], tuple[Any, Any]]
    loss: Callable[[Any], Any] | None = None
    metrics: tuple[str, ...] = ()
    optimizer: Callable[[Any], Any] | None = None
    epochs: int = 3
    batch_size: int = 16
    # a layer that computes differently in training (BatchNormalization): also compare the
    # forward in training mode (Keras: ``model(x, training=True)``) and ``evaluate`` after
    # ``fit`` (the moving statistics fit left)
    training_mode: bool = False
    # per-example weights (uniform in [0, 2)) given to evaluate and fit
    sample_weight: bool = False


@dataclass
class Known:
    verdict: str  # FIXED or EXPECTED
    reason: str


# (case, check) -> verdict. A FIXED one agrees now; the run lists it with its status.
KNOWN: dict[tuple[str, str], Known] = {
    **{(f"fit {name}", "fit"): Known(
        "FIXED", f"compile(optimizer='{name}') was TF1's optimizer under Keras's name: "
        + why + "; tfc.keras.optimizers has Keras 3's (tests/layers/test_keras_optimizers.py)")
       for name, why in [
           ("rmsprop", "its mean square started at 1 (Keras: 0) with epsilon 1e-10 (1e-7), so "
                       "its first steps were ~3x smaller than Keras's"),
           ("adam", "epsilon 1e-8 (Keras 1e-7): seen only where sqrt(v) nears epsilon "
                    "(the unit test's tiny gradients), so this case agreed before too"),
           ("adagrad", "rate 0.01 (Keras 0.001), no epsilon under the square root")]},
    **{(f"loss {name}", check): Known(
        "FIXED", "probabilities that do not sum to 1: tfc took -log p[label] as given, Keras "
        "scales p to sum to 1 first (tests/layers/test_keras_losses.py)")
       for name in ("categorical_crossentropy unnormalized probabilities",
                    "sparse_categorical_crossentropy unnormalized probabilities")
       for check in ("evaluate", "gradients", "fit")},
    **{(f"loss {name}", check): Known(
        "EXPECTED", "Keras takes the input of any sigmoid or softmax activation as logits "
        "(its _keras_logits), so a categorical cross-entropy on sigmoid outputs is "
        "softmax(z) against the labels; tfc reads the sigmoid's probabilities (scaled to "
        "sum to 1), the loss the user wrote")
       for name in ("categorical_crossentropy sigmoid probabilities",
                    "sparse_categorical_crossentropy sigmoid probabilities")
       for check in ("evaluate", "gradients", "fit")},
    **{(f"loss {name}", check): Known(
        "EXPECTED", "'accuracy' with a binary cross-entropy: tfc thresholds every output "
        "(p > 0.5, or logit > 0 with from_logits: Keras 2's rule, the accuracy of each "
        "label); Keras 3 uses argmax-vs-argmax when there are several outputs and 0.5 on "
        "logits too")
       for name in ("binary_crossentropy sigmoid", "binary_crossentropy from_logits",
                    "binary_crossentropy clipped probabilities",
                    "binary_crossentropy one output from_logits",
                    "binary_crossentropy probabilities, not a sigmoid op")
       for check in ("evaluate", "fit")},
    **{("Sequential add(Input) + add", check): Known(
        "EXPECTED", "'accuracy' with a binary cross-entropy on two outputs (as above)")
       for check in ("evaluate", "fit")},
    ("Embedding + Flatten + Dense", "fit"): Known(
        "EXPECTED", "Keras 3 (TensorFlow backend) applies Adam / RMSprop / Adagrad to an "
        "Embedding's IndexedSlices gradient slice by slice, so an id that repeats within a "
        "batch updates differently from the dense gradient's row (tfc's: the sum of the "
        "repeats, as TF1); with no id repeated in a batch the two agree (the 'distinct ids' "
        "cases)"),
    ("Embedding sparse gradient, distinct ids, RMSprop", "fit"): Known(
        "FIXED", "tfc's RMSprop updated only the rows an Embedding's gradient names (TF1's "
        "sparse RMSProp); Keras decays every row's mean square "
        "(tests/layers/test_keras_optimizers.py)"),
    ("init LSTM kernel, recurrent kernel, unit_forget_bias", "initial weights"): Known(
        "FIXED", "LSTM's recurrent kernel started glorot_uniform in tfc (Keras: orthogonal, "
        "which tfc did not offer); tfc.keras.initializers.Orthogonal is the default now "
        "(tests/layers/test_initializers.py)"),
}


# ----------------------------------------------------------------------------- cases

def _seq(K: Any, shape: Sequence[int], layers: list[Any], dtype: str = "float32") -> Any:
    """A Functional model ``Input(shape) -> layers``, spelled the same in both APIs."""
    inp = K.Input(shape=tuple(shape), dtype=dtype)
    out = inp
    for layer in layers:
        out = layer(out)
    return K.Model(inp, out)


def _xy(shape: Sequence[int], classes: int = 0, regress: int = 0, n: int = 48,
        onehot: bool = False, binary: bool = False) -> Callable[..., tuple[Any, Any]]:
    def make(rng: np.random.Generator) -> tuple[Any, Any]:
        x = rng.normal(size=(n, *shape)).astype(np.float32)
        if classes:
            y = rng.integers(0, classes, size=n).astype(np.int32)
            if onehot:
                y = np.eye(classes, dtype=np.float32)[y]
            return x, y
        if binary:
            return x, rng.integers(0, 2, size=(n, regress)).astype(np.float32)
        return x, rng.normal(size=(n, regress)).astype(np.float32) if regress else None
    return make


def _added(K: Any, model: Any, items: list[Any]) -> Any:
    for item in items:
        model.add(item)
    return model


def _tokens(rng: np.random.Generator) -> tuple[Any, Any]:
    x = rng.integers(0, 10, size=(48, 5)).astype(np.int32)
    return x, rng.integers(0, 3, size=48).astype(np.int32)


def _distinct_tokens(rng: np.random.Generator) -> tuple[Any, Any]:
    """Rows of 5 distinct ids (with batch size 1 no id repeats within a batch)."""
    x = np.stack([rng.permutation(10)[:5] for _ in range(12)]).astype(np.int32)
    return x, rng.integers(0, 3, size=12).astype(np.int32)


def _two_towers(K: Any, merge: str) -> Any:
    a, b = K.Input(shape=(6,)), K.Input(shape=(6,))
    ha = K.layers.Dense(5, activation="relu")(a)
    hb = K.layers.Dense(5, activation="tanh")(b)
    joined = (K.layers.Concatenate()([ha, hb]) if merge == "concat"
              else K.layers.Add()([ha, hb]))
    return K.Model([a, b], K.layers.Dense(3, activation="softmax")(joined))


def _towers_data(rng: np.random.Generator) -> tuple[Any, Any]:
    x = [rng.normal(size=(48, 6)).astype(np.float32) for _ in range(2)]
    return x, rng.integers(0, 3, size=48).astype(np.int32)


def build_cases() -> list[Case]:
    cases: list[Case] = []
    L = lambda K: K.layers  # noqa: E731
    for act in ("linear", "relu", "softmax", "sigmoid", "tanh"):  # tfc's "exp": not Keras's
        cases.append(Case(f"Dense {act}", lambda K, a=act: _seq(K, (7,), [
            L(K).Dense(5, activation=a)]), _xy((7,))))
    cases.append(Case("Dense no bias, 3-D input", lambda K: _seq(K, (4, 7), [
        L(K).Dense(5, use_bias=False)]), _xy((4, 7))))
    for pad in ("valid", "same"):
        for strides, dil in ((1, 1), (2, 1), (1, 2), ((2, 1), 1)):
            cases.append(Case(f"Conv2D {pad} strides={strides} dilation={dil}",
                              lambda K, p=pad, s=strides, d=dil: _seq(K, (9, 8, 3), [
                                  L(K).Conv2D(4, (3, 2), strides=s, padding=p,
                                              dilation_rate=d, activation="relu")]),
                              _xy((9, 8, 3), n=8)))
    for pool in ("MaxPooling2D", "AveragePooling2D"):
        for pad in ("valid", "same"):
            for size, strides in ((2, None), (3, 2), ((2, 3), 1)):
                cases.append(Case(f"{pool} {pad} pool={size} strides={strides}",
                                  lambda K, c=pool, p=pad, z=size, s=strides: _seq(
                                      K, (7, 8, 3), [getattr(L(K), c)(z, s, padding=p)]),
                                  _xy((7, 8, 3), n=8)))
    cases.append(Case("Flatten + Dense", lambda K: _seq(K, (3, 4, 2), [
        L(K).Flatten(), L(K).Dense(3)]), _xy((3, 4, 2))))
    cases.append(Case("Dropout (inference) + Dense", lambda K: _seq(K, (6,), [
        L(K).Dropout(0.5), L(K).Dense(3)]), _xy((6,))))
    cases.append(Case("Embedding + Flatten + Dense", lambda K: _seq(K, (5,), [
        L(K).Embedding(10, 4), L(K).Flatten(), L(K).Dense(3, activation="softmax")],
        dtype="int32"), _tokens, lambda K: "sparse_categorical_crossentropy", ("accuracy",),
        lambda K: K.optimizers.Adam(0.05)))
    for name, opt in (("Adam", lambda K: K.optimizers.Adam(0.05)),
                      ("RMSprop", lambda K: K.optimizers.RMSprop(0.01)),
                      ("Adagrad", lambda K: K.optimizers.Adagrad(0.1))):
        cases.append(Case(f"Embedding sparse gradient, distinct ids, {name}", lambda K: _seq(
            K, (5,), [L(K).Embedding(10, 4), L(K).Flatten(), L(K).Dense(3)], dtype="int32"),
            _distinct_tokens, lambda K: K.losses.SparseCategoricalCrossentropy(
                from_logits=True), (), opt, epochs=2, batch_size=1))
    for seqs in (False, True):
        cases.append(Case(f"LSTM return_sequences={seqs}", lambda K, r=seqs: _seq(K, (6, 3), [
            L(K).LSTM(4, return_sequences=r)]), _xy((6, 3), n=8)))
    def lstm_state(K: Any, sequences: bool, head: bool) -> Any:
        inp = K.Input(shape=(6, 3))
        out, h, c = L(K).LSTM(4, return_sequences=sequences, return_state=True)(inp)
        if head:
            return K.Model(inp, L(K).Dense(2)(L(K).Concatenate()([h, c])))
        return K.Model(inp, [out, h, c])
    for seqs in (False, True):
        cases.append(Case(f"LSTM return_state return_sequences={seqs}",
                          lambda K, r=seqs: lstm_state(K, r, False), _xy((6, 3), n=8)))
    cases.append(Case("LSTM return_state: Dense on [h, c] fit",
                      lambda K: lstm_state(K, False, True), _xy((6, 3), regress=2, n=32),
                      lambda K: "mse", ("mae",), lambda K: K.optimizers.Adam(0.01), epochs=2))
    for seqs, after in ((False, True), (True, True), (False, False)):
        cases.append(Case(f"GRU return_sequences={seqs} reset_after={after}",
                          lambda K, r=seqs, a=after: _seq(K, (6, 3), [
                              L(K).GRU(4, return_sequences=r, reset_after=a)]),
                          _xy((6, 3), n=8)))
    # dropout and recurrent_dropout: the inference forward (Keras's random masks differ;
    # tests/layers/test_recurrent.py checks the training masks against Keras's layout)
    for rnn in ("LSTM", "GRU"):
        for rec in (0.0, 0.3):
            cases.append(Case(f"{rnn} dropout=0.2 recurrent_dropout={rec} (inference)",
                              lambda K, c=rnn, r=rec: _seq(K, (6, 3), [getattr(L(K), c)(
                                  4, dropout=0.2, recurrent_dropout=r,
                                  return_sequences=True)]), _xy((6, 3), n=8)))
    cases.append(Case("GRU return_state + Dense fit", lambda K: (lambda inp: K.Model(
        inp, L(K).Dense(2)(L(K).GRU(4, return_state=True)(inp)[1])))(K.Input(shape=(5, 3))),
        _xy((5, 3), regress=2, n=32), lambda K: "mse", ("mae",),
        lambda K: K.optimizers.Adam(0.01), epochs=2))
    cases.append(Case("GRU no bias, reset_after=False + Dense fit", lambda K: _seq(K, (5, 3), [
        L(K).GRU(4, use_bias=False, reset_after=False), L(K).Dense(2)]),
        _xy((5, 3), regress=2, n=32), lambda K: "mse", ("mae",),
        lambda K: K.optimizers.SGD(0.1), epochs=2))
    cases.append(Case("LSTM + Dense fit", lambda K: _seq(K, (5, 3), [
        L(K).LSTM(4), L(K).Dense(2)]), _xy((5, 3), regress=2, n=32), lambda K: "mse",
        ("mae",), lambda K: K.optimizers.SGD(0.1), epochs=2))
    cases.append(Case("Sequential MLP", lambda K: K.Sequential([
        K.Input(shape=(6,)), L(K).Dense(8, activation="relu"),
        L(K).Dense(3, activation="softmax")]), _xy((6,), classes=3),
        lambda K: "sparse_categorical_crossentropy", ("accuracy",),
        lambda K: K.optimizers.SGD(0.1)))
    cases.append(Case("Sequential add(Input) + add", lambda K: _added(K, K.Sequential(), [
        K.Input(shape=(3, 4)), L(K).Flatten(), L(K).Dense(2, activation="sigmoid")]),
        _xy((3, 4), regress=2, binary=True), lambda K: "binary_crossentropy", ("accuracy",),
        lambda K: K.optimizers.RMSprop(0.01)))
    cases.append(Case("CNN Conv2D + MaxPooling2D + Flatten + Dense", lambda K: _seq(
        K, (8, 8, 2), [L(K).Conv2D(3, 3, activation="relu"), L(K).MaxPooling2D(),
                       L(K).Flatten(), L(K).Dense(4, activation="softmax")]),
        _xy((8, 8, 2), classes=4, n=32), lambda K: "sparse_categorical_crossentropy",
        ("accuracy",), lambda K: K.optimizers.Adam(0.01), epochs=2))
    for merge in ("concat", "add"):
        cases.append(Case(f"Functional two towers {merge}", lambda K, m=merge: _two_towers(K, m),
                          _towers_data, lambda K: "sparse_categorical_crossentropy",
                          ("accuracy",), lambda K: K.optimizers.SGD(0.05, momentum=0.9)))
    # normalization and Reshape: forward in both modes, gradients through the batch
    # statistics, fit (the moving statistics among the final weights), evaluate after fit
    norm_cases: list[tuple[str, Callable[[Any], Any], Any, Any, Any]] = [
        ("BatchNormalization after Dense", lambda K: _seq(K, (6,), [
            L(K).Dense(8), L(K).BatchNormalization(), L(K).Dense(3, activation="softmax")]),
         _xy((6,), classes=3), "sparse_categorical_crossentropy",
         lambda K: K.optimizers.SGD(0.1)),
        ("BatchNormalization momentum=0.9 epsilon=0.01 no center/scale", lambda K: _seq(
            K, (6,), [L(K).Dense(5, activation="relu"), L(K).BatchNormalization(
                momentum=0.9, epsilon=0.01, center=False, scale=False), L(K).Dense(2)]),
         _xy((6,), regress=2), "mse", lambda K: K.optimizers.Adam(0.01)),
        # no bias before a BatchNormalization under Adam: the batch mean cancels it, so its
        # gradient is rounding noise that Adam's g / sqrt(v) blows up to +-lr per step
        ("BatchNormalization Conv2D channels", lambda K: _seq(K, (6, 6, 2), [
            L(K).Conv2D(3, 3, use_bias=False), L(K).BatchNormalization(), L(K).MaxPooling2D(),
            L(K).Flatten(), L(K).Dense(4, activation="softmax")]),
         _xy((6, 6, 2), classes=4, n=32), "sparse_categorical_crossentropy",
         lambda K: K.optimizers.Adam(0.01)),
        ("BatchNormalization axis=1", lambda K: _seq(K, (4, 3), [
            L(K).BatchNormalization(axis=1, momentum=0.8), L(K).Flatten(), L(K).Dense(2)]),
         _xy((4, 3), regress=2), "mse", lambda K: K.optimizers.SGD(0.05, momentum=0.9)),
        ("BatchNormalization Sequential momentum=0.5", lambda K: K.Sequential([
            K.Input(shape=(6,)), L(K).Dense(8, activation="tanh"),
            L(K).BatchNormalization(momentum=0.5), L(K).Dense(3, activation="softmax")]),
         _xy((6,), classes=3), "sparse_categorical_crossentropy", lambda K: "rmsprop"),
        ("LayerNormalization after Dense", lambda K: _seq(K, (6,), [
            L(K).Dense(8), L(K).LayerNormalization(), L(K).Dense(3, activation="softmax")]),
         _xy((6,), classes=3), "sparse_categorical_crossentropy",
         lambda K: K.optimizers.SGD(0.1)),
        ("LayerNormalization axis=[1, 2] epsilon=0.1", lambda K: _seq(K, (4, 3), [
            L(K).LayerNormalization(axis=[1, 2], epsilon=0.1), L(K).Flatten(),
            L(K).Dense(2)]), _xy((4, 3), regress=2), "mse", lambda K: K.optimizers.Adam(0.01)),
        ("LayerNormalization no center/scale, 3-D", lambda K: _seq(K, (4, 3), [
            L(K).LayerNormalization(center=False, scale=False), L(K).Flatten(),
            L(K).Dense(2)]), _xy((4, 3), regress=2), "mse", lambda K: K.optimizers.SGD(0.1)),
        ("Reshape -1 + Dense", lambda K: _seq(K, (12,), [
            L(K).Reshape((-1, 4)), L(K).Dense(2), L(K).Reshape((6,))]),
         _xy((12,), regress=6), "mse", lambda K: K.optimizers.SGD(0.1)),
        ("Reshape to image + Conv2D", lambda K: _seq(K, (32,), [
            L(K).Reshape((4, 4, 2)), L(K).Conv2D(2, 3), L(K).Flatten(), L(K).Dense(2)]),
         _xy((32,), regress=2), "mse", lambda K: K.optimizers.Adam(0.01)),
    ]
    def shared_bn(K: Any, first: bool) -> Any:
        """One BatchNormalization called on two branches: its moving statistics take both
        updates in fit's step, the second from the first's result, in the order Keras
        runs the calls (by depth: not the order they were built in); ``first``: on the
        inputs (else after a Dense each: the layers' and weights' order is Keras's)."""
        a, b = K.Input(shape=(6,)), K.Input(shape=(6,))
        bn = L(K).BatchNormalization(momentum=0.8)
        da, db = L(K).Dense(4), L(K).Dense(4, activation="tanh")
        ha, hb = (da(bn(a)), db(bn(b))) if first else (bn(da(a)), bn(db(b)))
        return K.Model([a, b], L(K).Dense(3, activation="softmax")(
            L(K).Concatenate()([ha, hb])))
    for first in (True, False):
        where = "on the inputs" if first else "after Dense"
        norm_cases.append((f"BatchNormalization called twice, {where}",
                           lambda K, f=first: shared_bn(K, f), _towers_data,
                           "sparse_categorical_crossentropy", lambda K: K.optimizers.SGD(0.1)))
    for name, build, data, loss_name, opt in norm_cases:
        metrics = ("accuracy",) if "crossentropy" in loss_name else ("mae",)
        cases.append(Case(name, build, data, lambda K, n=loss_name: n, metrics, opt,
                          training_mode=True))
    # losses (with gradients and a short fit): each loss tfc offers, from_logits both ways
    def mlp(act: str | None, n: int) -> Callable[[Any], Any]:
        """Dense(tanh) -> Dense(n, act); "sigmoid+flatten": probabilities that do not sum
        to 1 and come from no sigmoid op (Keras's losses take a sigmoid's input as logits)."""
        a, flat = (act or "").split("+")[0] or None, (act or "").endswith("+flatten")
        return lambda K: _seq(K, (6,), [L(K).Dense(8, activation="tanh"),
                                        L(K).Dense(n, activation=a),
                                        *([L(K).Flatten()] if flat else [])])
    loss_cases = [
        ("sparse_categorical_crossentropy softmax", "softmax", 4,
         lambda K: K.losses.SparseCategoricalCrossentropy(), _xy((6,), classes=4)),
        ("sparse_categorical_crossentropy from_logits", None, 4,
         lambda K: K.losses.SparseCategoricalCrossentropy(from_logits=True),
         _xy((6,), classes=4)),
        ("categorical_crossentropy softmax", "softmax", 4,
         lambda K: K.losses.CategoricalCrossentropy(), _xy((6,), classes=4, onehot=True)),
        ("categorical_crossentropy from_logits", None, 4,
         lambda K: K.losses.CategoricalCrossentropy(from_logits=True),
         _xy((6,), classes=4, onehot=True)),
        ("categorical_crossentropy sigmoid probabilities", "sigmoid", 4,
         lambda K: K.losses.CategoricalCrossentropy(), _xy((6,), classes=4, onehot=True)),
        ("binary_crossentropy sigmoid", "sigmoid", 2,
         lambda K: K.losses.BinaryCrossentropy(), _xy((6,), regress=2, binary=True)),
        ("binary_crossentropy from_logits", None, 2,
         lambda K: K.losses.BinaryCrossentropy(from_logits=True),
         _xy((6,), regress=2, binary=True)),
        ("binary_crossentropy probabilities, not a sigmoid op", "sigmoid+flatten", 2,
         lambda K: "binary_crossentropy", _xy((6,), regress=2, binary=True)),
        ("binary_crossentropy clipped probabilities", "relu", 2,
         lambda K: "binary_crossentropy", _xy((6,), regress=2, binary=True)),
        ("sparse_categorical_crossentropy sigmoid probabilities", "sigmoid", 4,
         lambda K: K.losses.SparseCategoricalCrossentropy(), _xy((6,), classes=4)),
        ("sparse_categorical_crossentropy unnormalized probabilities", "sigmoid+flatten", 4,
         lambda K: K.losses.SparseCategoricalCrossentropy(), _xy((6,), classes=4)),
        ("categorical_crossentropy unnormalized probabilities", "sigmoid+flatten", 4,
         lambda K: K.losses.CategoricalCrossentropy(), _xy((6,), classes=4, onehot=True)),
        ("categorical_crossentropy clipped probabilities", "relu", 4,
         lambda K: K.losses.CategoricalCrossentropy(), _xy((6,), classes=4, onehot=True)),
        ("sparse_categorical_crossentropy clipped probabilities", "relu", 4,
         lambda K: K.losses.SparseCategoricalCrossentropy(), _xy((6,), classes=4)),
        ("binary_crossentropy one sigmoid output", "sigmoid", 1,
         lambda K: K.losses.BinaryCrossentropy(), _xy((6,), regress=1, binary=True)),
        ("binary_crossentropy one output from_logits", None, 1,
         lambda K: K.losses.BinaryCrossentropy(from_logits=True),
         _xy((6,), regress=1, binary=True)),
        ("mse", None, 3, lambda K: "mse", _xy((6,), regress=3)),
        ("mae", None, 3, lambda K: "mae", _xy((6,), regress=3)),
    ]
    for name, act, n, loss, data in loss_cases:
        metrics = ("accuracy",) if "crossentropy" in name else ("mse", "mae")
        # relu outputs hit the clip at eps, whose zero gradient makes fit chaotic (one
        # rounding flips an element in or out): those are checked without fit
        opt = None if act == "relu" else (lambda K: K.optimizers.SGD(0.1))
        cases.append(Case(f"loss {name}", mlp(act, n), data, loss, metrics, opt, epochs=2))
    # optimizers: compile by name (Keras's defaults) and by object
    opts: list[tuple[str, Callable[[Any], Any]]] = [
        ("sgd", lambda K: "sgd"), ("adam", lambda K: "adam"), ("rmsprop", lambda K: "rmsprop"),
        ("adagrad", lambda K: "adagrad"),
        ("SGD(0.1)", lambda K: K.optimizers.SGD(0.1)),
        ("SGD momentum", lambda K: K.optimizers.SGD(0.05, momentum=0.9)),
        ("SGD nesterov", lambda K: K.optimizers.SGD(0.05, momentum=0.9, nesterov=True)),
        ("Adam(0.01)", lambda K: K.optimizers.Adam(0.01, beta_1=0.8, beta_2=0.99)),
        ("RMSprop(0.01)", lambda K: K.optimizers.RMSprop(0.01)),
        ("RMSprop momentum centered", lambda K: K.optimizers.RMSprop(
            0.01, rho=0.8, momentum=0.5, centered=True)),
        ("Adagrad(0.1)", lambda K: K.optimizers.Adagrad(0.1)),
    ]
    for name, opt in opts:
        cases.append(Case(f"fit {name}", mlp("softmax", 3), _xy((6,), classes=3, n=64),
                          lambda K: "sparse_categorical_crossentropy", ("accuracy",), opt,
                          epochs=3, batch_size=16))
    cases += regularizer_cases(L) + constraint_cases(L) + sample_weight_cases(L, mlp)
    cases += everyday_layer_cases(L)
    cases += conv_more_cases(L)  # conv25
    return cases


def conv_more_cases(L: Callable[[Any], Any]) -> list[Case]:
    """conv25's layers: Conv1D (causal too), Conv2DTranspose (output_padding, dilation),
    DepthwiseConv2D, SeparableConv2D: forward for each configuration, then a model of
    each trained (evaluate, gradients, fit)."""
    cases: list[Case] = []
    for pad, strides, dil in (("valid", 1, 1), ("same", 2, 1), ("causal", 1, 2),
                              ("same", 1, 2)):
        cases.append(Case(f"Conv1D {pad} strides={strides} dilation={dil}",
                          lambda K, p=pad, s=strides, d=dil: _seq(K, (9, 3), [
                              L(K).Conv1D(4, 3, strides=s, padding=p, dilation_rate=d,
                                          activation="relu")]), _xy((9, 3), n=8)))
    for pad, strides, extra in (("valid", 2, {}), ("same", 2, {}), ("valid", 1, {}),
                                ("same", 2, {"output_padding": 1}),
                                ("valid", 1, {"dilation_rate": 2}), ("same", 3, {})):
        cases.append(Case(f"Conv2DTranspose {pad} strides={strides} {extra}",
                          lambda K, p=pad, s=strides, e=extra: _seq(K, (4, 5, 3), [
                              L(K).Conv2DTranspose(2, (3, 2), strides=s, padding=p, **e)]),
                          _xy((4, 5, 3), n=8)))
    for pad, strides, mult, dil in (("valid", 1, 1, 1), ("same", 2, 2, 1),
                                    ("same", 1, 3, 2), ("valid", 1, 1, (1, 2))):
        cases.append(Case(f"DepthwiseConv2D {pad} strides={strides} multiplier={mult} "
                          f"dilation={dil}",
                          lambda K, p=pad, s=strides, m=mult, d=dil: _seq(K, (7, 6, 3), [
                              L(K).DepthwiseConv2D(3, strides=s, padding=p, depth_multiplier=m,
                                                   dilation_rate=d, activation="tanh")]),
                          _xy((7, 6, 3), n=8)))
        cases.append(Case(f"SeparableConv2D {pad} strides={strides} multiplier={mult} "
                          f"dilation={dil}",
                          lambda K, p=pad, s=strides, m=mult, d=dil: _seq(K, (7, 6, 3), [
                              L(K).SeparableConv2D(4, 3, strides=s, padding=p,
                                                   depth_multiplier=m, dilation_rate=d)]),
                          _xy((7, 6, 3), n=8)))
    cases.append(Case("Conv1D causal + Flatten + Dense (fit)", lambda K: _seq(K, (8, 2), [
        L(K).Conv1D(3, 3, padding="causal", activation="relu"), L(K).Flatten(),
        L(K).Dense(2)]), _xy((8, 2), regress=2, n=32), lambda K: "mse", (),
        lambda K: K.optimizers.Adam(0.01), epochs=2))
    cases.append(Case("Depthwise + Separable + Conv2DTranspose decoder (fit)", lambda K: _seq(
        K, (6, 6, 2), [L(K).DepthwiseConv2D(3, padding="same", depth_multiplier=2,
                                            activation="relu"),
                       L(K).SeparableConv2D(3, 3, strides=2, padding="same",
                                            activation="relu"),
                       L(K).Conv2DTranspose(2, 3, strides=2, padding="same"),
                       L(K).Flatten(), L(K).Dense(3, activation="softmax")]),
        _xy((6, 6, 2), classes=3, n=32), lambda K: "sparse_categorical_crossentropy",
        ("accuracy",), lambda K: K.optimizers.SGD(0.05), epochs=2))
    return cases


def everyday_layer_cases(L: Callable[[Any], Any]) -> list[Case]:
    """keraslayers25: the activation, pooling, reshaping, merge, noise, SimpleRNN and
    wrapper layers and the Huber / KLDivergence / CosineSimilarity losses: forward, and
    where there are weights before them, evaluate, gradients and fit."""
    out: list[Case] = []
    sgd = lambda K: K.optimizers.SGD(0.1)  # noqa: E731
    adam = lambda K: K.optimizers.Adam(0.01)  # noqa: E731

    def act(name: str, layer: Callable[[Any], Any], shape: Sequence[int] = (6,)) -> None:
        out.append(Case(name, lambda K: _seq(K, shape, [L(K).Dense(5), layer(K)]),
                        _xy(shape, regress=5), lambda K: "mse", ("mae",), sgd, epochs=2))
    for a in ("elu", "selu", "softsign", "relu6", "leaky_relu", "log_softmax", "silu",
              "swish", "hard_sigmoid", "gelu", "softplus"):
        act(f"Activation('{a}')", lambda K, a=a: L(K).Activation(a))
    for args in ({}, {"max_value": 1.0}, {"negative_slope": 0.1}, {"threshold": 0.3},
                 {"max_value": 6.0}, {"max_value": 2.0, "negative_slope": 0.1,
                                      "threshold": 0.5}):
        act(f"ReLU({args})", lambda K, a=args: L(K).ReLU(**a))
    act("LeakyReLU()", lambda K: L(K).LeakyReLU())
    act("LeakyReLU(negative_slope=0.05)", lambda K: L(K).LeakyReLU(negative_slope=0.05))
    act("ELU()", lambda K: L(K).ELU())
    act("ELU(alpha=0.5)", lambda K: L(K).ELU(alpha=0.5))
    act("Softmax()", lambda K: L(K).Softmax())
    out.append(Case("Softmax(axis=1) + Flatten", lambda K: _seq(K, (4, 3), [
        L(K).Dense(5), L(K).Softmax(axis=1), L(K).Flatten()]), _xy((4, 3), regress=20),
        lambda K: "mse", (), sgd, epochs=2))
    img = _xy((6, 7, 2), classes=3, n=16)
    for pool, keep in (("GlobalAveragePooling2D", False), ("GlobalMaxPooling2D", False),
                       ("GlobalAveragePooling2D", True)):
        out.append(Case(f"Conv2D + {pool}(keepdims={keep}) + Dense", lambda K, p=pool, k=keep:
                        _seq(K, (6, 7, 2), [L(K).Conv2D(4, 3, activation="relu"),
                                            getattr(L(K), p)(keepdims=k), L(K).Flatten(),
                                            L(K).Dense(3)]), img,
                        lambda K: K.losses.SparseCategoricalCrossentropy(from_logits=True),
                        ("accuracy",), adam, epochs=2))
    seq = _xy((8, 3), regress=2, n=16)
    for pool in ("GlobalAveragePooling1D", "GlobalMaxPooling1D"):
        out.append(Case(f"Dense + {pool} + Dense", lambda K, p=pool: _seq(K, (8, 3), [
            L(K).Dense(4, activation="tanh"), getattr(L(K), p)(), L(K).Dense(2)]), seq,
            lambda K: "mse", ("mae",), sgd, epochs=2))
    for pool in ("MaxPooling1D", "AveragePooling1D"):
        for size, strides, pad in ((2, None, "valid"), (3, 2, "same"), (3, 1, "valid")):
            out.append(Case(f"Dense + {pool}({size}, {strides}, {pad}) + Flatten + Dense",
                            lambda K, p=pool, z=size, st=strides, pd=pad: _seq(K, (8, 3), [
                                L(K).Dense(4, activation="tanh"),
                                getattr(L(K), p)(z, st, padding=pd), L(K).Flatten(),
                                L(K).Dense(2)]), seq, lambda K: "mse", ("mae",), sgd,
                            epochs=2))
    reshapes: list[tuple[str, Callable[[Any], Any]]] = [
        ("ZeroPadding2D(1)", lambda K: L(K).ZeroPadding2D(1)),
        ("ZeroPadding2D(((1, 0), (2, 1)))", lambda K: L(K).ZeroPadding2D(((1, 0), (2, 1)))),
        ("UpSampling2D()", lambda K: L(K).UpSampling2D()),
        ("UpSampling2D((1, 3))", lambda K: L(K).UpSampling2D((1, 3))),
        ("Cropping2D(1)", lambda K: L(K).Cropping2D(1)),
        ("Cropping2D(((0, 2), (1, 0)))", lambda K: L(K).Cropping2D(((0, 2), (1, 0)))),
    ]
    for name, layer in reshapes:
        out.append(Case(f"Conv2D + {name} + Conv2D", lambda K, f=layer: _seq(K, (6, 7, 2), [
            L(K).Conv2D(3, 2, activation="tanh"), f(K), L(K).Conv2D(2, 2), L(K).Flatten(),
            L(K).Dense(3)]), img, lambda K: K.losses.SparseCategoricalCrossentropy(
                from_logits=True), ("accuracy",), sgd, epochs=2))
    for name, layer in (("ZeroPadding1D((2, 1))", lambda K: L(K).ZeroPadding1D((2, 1))),
                        ("Cropping1D((1, 2))", lambda K: L(K).Cropping1D((1, 2))),
                        ("UpSampling1D(3)", lambda K: L(K).UpSampling1D(3)),
                        ("Permute((2, 1))", lambda K: L(K).Permute((2, 1)))):
        out.append(Case(f"Dense + {name} + Flatten + Dense", lambda K, f=layer: _seq(
            K, (8, 3), [L(K).Dense(4, activation="tanh"), f(K), L(K).Flatten(),
                        L(K).Dense(2)]), seq, lambda K: "mse", ("mae",), sgd, epochs=2))
    out.append(Case("Dense + RepeatVector + LSTM", lambda K: _seq(K, (5,), [
        L(K).Dense(4, activation="tanh"), L(K).RepeatVector(3),
        L(K).LSTM(3, return_sequences=True), L(K).Flatten()]), _xy((5,), regress=9, n=16),
        lambda K: "mse", ("mae",), sgd, epochs=2))

    def merged(K: Any, merge: str) -> Any:
        a, b, c = K.Input(shape=(6,)), K.Input(shape=(6,)), K.Input(shape=(6,))
        ha = L(K).Dense(5, activation="relu")(a)
        hb = L(K).Dense(5, activation="tanh")(b)
        hc = L(K).Dense(5)(c)
        parts = [ha, L(K).Add()([hb, hc])] if merge == "Subtract" else [ha, hb, hc]
        return K.Model([a, b, c], L(K).Dense(3)(getattr(L(K), merge)()(parts)))

    def three(rng: np.random.Generator) -> tuple[Any, Any]:
        x = [rng.normal(size=(32, 6)).astype(np.float32) for _ in range(3)]
        return x, rng.integers(0, 3, size=32).astype(np.int32)
    for merge in ("Multiply", "Subtract", "Average", "Maximum", "Minimum"):
        out.append(Case(f"Functional merge {merge}", lambda K, m=merge: merged(K, m), three,
                        lambda K: K.losses.SparseCategoricalCrossentropy(from_logits=True),
                        ("accuracy",), lambda K: K.optimizers.SGD(0.05, momentum=0.9)))
    rnn_data = _xy((6, 3), regress=2, n=16)
    for seqs, back in ((False, False), (True, False), (False, True), (True, True)):
        out.append(Case(f"SimpleRNN return_sequences={seqs} go_backwards={back} + Dense",
                        lambda K, r=seqs, g=back: _seq(K, (6, 3), [
                            L(K).SimpleRNN(4, return_sequences=r, go_backwards=g),
                            L(K).Flatten(), L(K).Dense(2)]), rnn_data, lambda K: "mse",
                        ("mae",), sgd, epochs=2))
    out.append(Case("SimpleRNN relu no bias, return_state", lambda K: (lambda inp: K.Model(
        inp, L(K).SimpleRNN(4, activation="relu", use_bias=False, return_state=True)(inp)))(
            K.Input(shape=(6, 3))), _xy((6, 3), n=8)))
    out.append(Case("SimpleRNN dropout=0.2 recurrent_dropout=0.3 (inference)", lambda K: _seq(
        K, (6, 3), [L(K).SimpleRNN(4, dropout=0.2, recurrent_dropout=0.3,
                                   return_sequences=True)]), _xy((6, 3), n=8)))
    for rnn in ("LSTM", "GRU"):
        out.append(Case(f"{rnn} go_backwards return_sequences + Dense", lambda K, c=rnn: _seq(
            K, (6, 3), [getattr(L(K), c)(4, return_sequences=True, go_backwards=True),
                        L(K).Flatten(), L(K).Dense(2)]), rnn_data, lambda K: "mse",
            ("mae",), sgd, epochs=2))
    for rnn in ("LSTM", "GRU", "SimpleRNN"):
        for mode in ("concat", "sum", "ave", "mul"):
            for seqs in (False, True):
                out.append(Case(f"Bidirectional({rnn}, {mode}) return_sequences={seqs} + "
                                f"Dense", lambda K, c=rnn, m=mode, r=seqs: _seq(K, (6, 3), [
                                    L(K).Bidirectional(getattr(L(K), c)(
                                        3, return_sequences=r), merge_mode=m),
                                    L(K).Flatten(), L(K).Dense(2)]), rnn_data,
                                lambda K: "mse", ("mae",), adam, epochs=2))
    out.append(Case("Bidirectional(LSTM) return_state", lambda K: (lambda inp: K.Model(
        inp, L(K).Bidirectional(L(K).LSTM(3, return_state=True))(inp)))(
            K.Input(shape=(6, 3))), _xy((6, 3), n=8)))
    out.append(Case("Bidirectional(GRU, None) return_sequences", lambda K: (lambda inp: K.Model(
        inp, L(K).Bidirectional(L(K).GRU(3, return_sequences=True), merge_mode=None)(inp)))(
            K.Input(shape=(6, 3))), _xy((6, 3), n=8)))
    out.append(Case("stacked Bidirectional LSTM + TimeDistributed(Dense)", lambda K: _seq(
        K, (6, 3), [L(K).Bidirectional(L(K).LSTM(3, return_sequences=True)),
                    L(K).TimeDistributed(L(K).Dense(2, activation="tanh")), L(K).Flatten()]),
        _xy((6, 3), regress=12, n=16), lambda K: "mse", ("mae",), adam, epochs=2))
    out.append(Case("TimeDistributed(Dense) on 4-D", lambda K: _seq(K, (3, 4, 2), [
        L(K).TimeDistributed(L(K).Dense(5, activation="relu")), L(K).Flatten(),
        L(K).Dense(2)]), _xy((3, 4, 2), regress=2, n=16), lambda K: "mse", ("mae",), sgd,
        epochs=2))
    out.append(Case("Lambda(t * 2 + 1) + Dense", lambda K: _seq(K, (6,), [
        L(K).Dense(4), L(K).Lambda(lambda t: t * 2.0 + 1.0), L(K).Dense(2)]),
        _xy((6,), regress=2), lambda K: "mse", ("mae",), sgd, epochs=2))
    out.append(Case("Lambda on a list", lambda K: (lambda a, b: K.Model([a, b], L(K).Dense(2)(
        L(K).Lambda(lambda ts: ts[0] * ts[1] - ts[0])([L(K).Dense(3)(a), L(K).Dense(3)(b)]))))(
            K.Input(shape=(6,)), K.Input(shape=(6,))),
        lambda rng: ([rng.normal(size=(32, 6)).astype(np.float32) for _ in range(2)],
                     rng.normal(size=(32, 2)).astype(np.float32)), lambda K: "mse", ("mae",),
        sgd, epochs=2))
    out.append(Case("SpatialDropout2D + GaussianNoise (inference) + Dense", lambda K: _seq(
        K, (4, 4, 3), [L(K).SpatialDropout2D(0.4), L(K).Flatten(), L(K).GaussianNoise(0.5),
                       L(K).Dense(2)]), _xy((4, 4, 3), n=8)))
    for name, loss, data, a in (
            ("Huber()", lambda K: K.losses.Huber(), _xy((6,), regress=3), None),
            ("Huber(delta=0.3)", lambda K: K.losses.Huber(delta=0.3), _xy((6,), regress=3),
             None),
            ("'huber'", lambda K: "huber", _xy((6,), regress=3), None),
            ("KLDivergence()", lambda K: K.losses.KLDivergence(),
             _xy((6,), classes=3, onehot=True), "softmax"),
            ("'kl_divergence'", lambda K: "kl_divergence", _xy((6,), classes=3, onehot=True),
             "softmax"),
            ("CosineSimilarity()", lambda K: K.losses.CosineSimilarity(),
             _xy((6,), regress=3), None),
            ("BinaryFocalCrossentropy() sigmoid", lambda K: K.losses.BinaryFocalCrossentropy(),
             _xy((6,), regress=3, binary=True), "sigmoid"),
            ("BinaryFocalCrossentropy(balanced, gamma=1.5, smoothing, from_logits)",
             lambda K: K.losses.BinaryFocalCrossentropy(
                 apply_class_balancing=True, alpha=0.3, gamma=1.5, from_logits=True,
                 label_smoothing=0.1), _xy((6,), regress=3, binary=True), None),
            ("'binary_focal_crossentropy' clipped probabilities",
             lambda K: "binary_focal_crossentropy", _xy((6,), regress=3, binary=True),
             "hard_sigmoid"),
            ("CosineSimilarity(axis=1) 3-D", None, None, None)):
        if loss is None:
            out.append(Case(f"loss {name}", lambda K: _seq(K, (4, 3), [
                L(K).Dense(5, activation="tanh"), L(K).Dense(2)]), lambda rng: (
                    rng.normal(size=(32, 4, 3)).astype(np.float32),
                    rng.normal(size=(32, 4, 2)).astype(np.float32)),
                lambda K: K.losses.CosineSimilarity(axis=1), (), sgd, epochs=2))
            continue
        out.append(Case(f"loss {name}", lambda K, a=a: _seq(K, (6,), [
            L(K).Dense(8, activation="tanh"), L(K).Dense(3, activation=a)]), data, loss,
            ("mae",), sgd, epochs=2))
    return out


def regularizer_cases(L: Callable[[Any], Any]) -> list[Case]:
    """Weight and activity regularizers: evaluate's loss (with the penalties), gradients
    (Keras: of the loss plus ``model.losses``), fit."""
    R = lambda K: K.regularizers  # noqa: E731
    specs: list[tuple[str, Callable[[Any], Any], Any, Any, Any]] = [
        ("Dense kernel L2, bias L1", lambda K: _seq(K, (6,), [
            L(K).Dense(8, activation="tanh", kernel_regularizer=R(K).L2(0.05),
                       bias_regularizer=R(K).L1(0.02)), L(K).Dense(3, activation="softmax")]),
         _xy((6,), classes=3), "sparse_categorical_crossentropy",
         lambda K: K.optimizers.SGD(0.1)),
        ("Dense 'l2' and 'l1' strings, L1L2", lambda K: _seq(K, (6,), [
            L(K).Dense(8, activation="relu", kernel_regularizer="l2", bias_regularizer="l1"),
            L(K).Dense(2, kernel_regularizer=R(K).L1L2(l1=0.01, l2=0.03))]),
         _xy((6,), regress=2), "mse", lambda K: K.optimizers.Adam(0.01)),
        ("activity_regularizer L1 on Dense, L2 on a second", lambda K: _seq(K, (6,), [
            L(K).Dense(8, activation="tanh", activity_regularizer=R(K).L1(0.01)),
            L(K).Dense(3, activity_regularizer="l2")]),
         _xy((6,), regress=3), "mse", lambda K: K.optimizers.SGD(0.05)),
        ("activity_regularizer after Dropout (training graph differs)", lambda K: _seq(K, (6,), [
            L(K).Dense(8, activation="tanh"), L(K).Dropout(0.0),
            L(K).Dense(3, activity_regularizer=R(K).L2(0.02),
                       kernel_regularizer=R(K).L2(0.01))]),
         _xy((6,), regress=3), "mse", lambda K: K.optimizers.SGD(0.05)),
        ("Conv2D kernel L1L2 + Dense", lambda K: _seq(K, (6, 6, 2), [
            L(K).Conv2D(3, 3, activation="relu",
                        kernel_regularizer=R(K).L1L2(l1=0.001, l2=0.01)),
            L(K).Flatten(), L(K).Dense(4, activation="softmax")]),
         _xy((6, 6, 2), classes=4, n=32), "sparse_categorical_crossentropy",
         lambda K: K.optimizers.SGD(0.05)),
        ("LSTM kernel, recurrent, bias L2 + Dense", lambda K: _seq(K, (5, 3), [
            L(K).LSTM(4, kernel_regularizer=R(K).L2(0.01), recurrent_regularizer=R(K).L2(0.02),
                      bias_regularizer=R(K).L1(0.01)), L(K).Dense(2)]),
         _xy((5, 3), regress=2, n=32), "mse", lambda K: K.optimizers.SGD(0.1)),
        ("GRU recurrent L1 + Dense", lambda K: _seq(K, (5, 3), [
            L(K).GRU(4, recurrent_regularizer=R(K).L1(0.01)), L(K).Dense(2)]),
         _xy((5, 3), regress=2, n=32), "mse", lambda K: K.optimizers.Adam(0.01)),
        ("Sequential Dense L2", lambda K: K.Sequential([
            K.Input(shape=(6,)), L(K).Dense(8, activation="relu",
                                            kernel_regularizer=R(K).L2(0.1)),
            L(K).Dense(3, activation="softmax", bias_regularizer=R(K).L2(0.1))]),
         _xy((6,), classes=3), "sparse_categorical_crossentropy",
         lambda K: K.optimizers.RMSprop(0.01)),
    ]
    return [Case(f"regularizer {name}", build, data, lambda K, n=loss: n,
                 ("accuracy",) if "crossentropy" in loss else ("mae",), opt, epochs=2)
            for name, build, data, loss, opt in specs]


def constraint_cases(L: Callable[[Any], Any]) -> list[Case]:
    """Constraints applied after each optimizer update: fit's History and final weights."""
    C = lambda K: K.constraints  # noqa: E731
    specs: list[tuple[str, Callable[[Any], Any], Any, Any, Any]] = [
        ("Dense MaxNorm(0.5) kernel, NonNeg bias", lambda K: _seq(K, (6,), [
            L(K).Dense(8, activation="tanh", kernel_constraint=C(K).MaxNorm(0.5),
                       bias_constraint=C(K).NonNeg()), L(K).Dense(3, activation="softmax")]),
         _xy((6,), classes=3), "sparse_categorical_crossentropy",
         lambda K: K.optimizers.SGD(0.5)),
        ("Dense UnitNorm(axis=0), MinMaxNorm(0.2, 0.8, rate=0.5, axis=1)", lambda K: _seq(
            K, (6,), [L(K).Dense(8, activation="relu", kernel_constraint=C(K).UnitNorm(0)),
                      L(K).Dense(2, kernel_constraint=C(K).MinMaxNorm(0.2, 0.8, 0.5, 1))]),
         _xy((6,), regress=2), "mse", lambda K: K.optimizers.Adam(0.02)),
        ("Conv2D MaxNorm(1.0, axis=[0, 1, 2]) + Dense NonNeg", lambda K: _seq(K, (6, 6, 2), [
            L(K).Conv2D(3, 3, kernel_constraint=C(K).MaxNorm(1.0, axis=[0, 1, 2])),
            L(K).Flatten(), L(K).Dense(4, activation="softmax",
                                       kernel_constraint=C(K).NonNeg())]),
         _xy((6, 6, 2), classes=4, n=32), "sparse_categorical_crossentropy",
         lambda K: K.optimizers.SGD(0.1, momentum=0.9)),
        ("LSTM recurrent UnitNorm + Dense", lambda K: _seq(K, (5, 3), [
            L(K).LSTM(4, recurrent_constraint=C(K).UnitNorm(), kernel_constraint=C(K).MaxNorm(
                0.7)), L(K).Dense(2)]),
         _xy((5, 3), regress=2, n=32), "mse", lambda K: K.optimizers.RMSprop(0.01)),
        ("constraint and regularizer on one kernel", lambda K: _seq(K, (6,), [
            L(K).Dense(5, activation="tanh", kernel_constraint=C(K).MaxNorm(0.6),
                       kernel_regularizer=K.regularizers.L2(0.05)), L(K).Dense(2)]),
         _xy((6,), regress=2), "mse", lambda K: K.optimizers.SGD(0.2)),
    ]
    return [Case(f"constraint {name}", build, data, lambda K, n=loss: n,
                 ("accuracy",) if "crossentropy" in loss else ("mae",), opt, epochs=2)
            for name, build, data, loss, opt in specs]


def sample_weight_cases(L: Callable[[Any], Any], mlp: Callable[..., Any]) -> list[Case]:
    """``fit`` / ``evaluate`` with ``sample_weight``, under each reduction of a loss object."""
    specs: list[tuple[str, str | None, int, Callable[[Any], Any], Any]] = [
        ("sparse_categorical_crossentropy", "softmax", 3,
         lambda K: "sparse_categorical_crossentropy", _xy((6,), classes=3)),
        ("mse", None, 2, lambda K: "mse", _xy((6,), regress=2)),
        ("MeanSquaredError(reduction='sum')", None, 2,
         lambda K: K.losses.MeanSquaredError(reduction="sum"), _xy((6,), regress=2)),
        ("CategoricalCrossentropy(reduction='sum')", "softmax", 3,
         lambda K: K.losses.CategoricalCrossentropy(reduction="sum"),
         _xy((6,), classes=3, onehot=True)),
        ("BinaryCrossentropy(from_logits, 'mean_with_sample_weight')", None, 2,
         lambda K: K.losses.BinaryCrossentropy(from_logits=True,
                                               reduction="mean_with_sample_weight"),
         _xy((6,), regress=2, binary=True)),
        ("SparseCategoricalCrossentropy(from_logits) + L2 kernel", "l2", 3,
         lambda K: K.losses.SparseCategoricalCrossentropy(from_logits=True),
         _xy((6,), classes=3)),
    ]
    out = []
    for name, act, n, loss, data in specs:
        build = (mlp(act, n) if act != "l2" else lambda K: _seq(K, (6,), [
            L(K).Dense(8, activation="tanh", kernel_regularizer=K.regularizers.L2(0.02)),
            L(K).Dense(3)]))
        metrics = ("mae",) if "mse" in name or "MeanSquared" in name else ()
        out.append(Case(f"sample_weight {name}", build, data, loss, metrics,
                        lambda K: K.optimizers.SGD(0.05), epochs=2, sample_weight=True))
    return out


# ----------------------------------------------------------------------------- running

def _close(a: Any, b: Any, tol: tuple[float, float], scaled: bool = False) -> str:
    """'' when ``a`` (tfc) agrees with ``b`` (Keras), else what differs; lists (a model's
    several outputs) element by element."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{len(a)} outputs vs Keras {len(b)}"
        return "; ".join(f"output {i}: {d}" for i, (x, y) in enumerate(zip(a, b))
                         if (d := _close(x, y, tol, scaled)))
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return f"shape {a.shape} vs Keras {b.shape}"
    atol = tol[1] * (max(1.0, float(np.max(np.abs(b)))) if scaled and b.size else 1.0)
    bad = ~np.isclose(a, b, rtol=tol[0], atol=atol)
    if not bad.any():
        return ""
    i = np.unravel_index(np.argmax(np.abs(a - b) * bad), a.shape)
    return (f"{int(bad.sum())}/{a.size} elements differ, worst at {tuple(map(int, i))}: "
            f"tfc {a[i]:.8g} vs Keras {b[i]:.8g}")


def run_keras(case: Case, x: Any, y: Any, sw: Any = None) -> dict[str, Any]:
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(0)
    model = case.build(keras)
    out: dict[str, Any] = {"weights": [np.array(w) for w in model.get_weights()],
                           "params": model.count_params()}
    out["predict"] = model.predict(x, batch_size=len(y) if y is not None else 64, verbose=0)
    initial = model.get_weights()  # a training call below updates moving statistics
    if case.training_mode:
        out["predict training"] = np.array(model(x, training=True))
        model.set_weights(initial)
    if case.loss is None:
        return out
    loss = case.loss(keras)
    model.compile(optimizer=case.optimizer(keras) if case.optimizer else "sgd", loss=loss,
                  metrics=list(case.metrics), jit_compile=False)
    out["evaluate"] = model.evaluate(x, y, batch_size=len(y), verbose=0, return_dict=True,
                                     sample_weight=sw)
    loss_fn = keras.losses.get(loss) if isinstance(loss, str) else loss
    with tf.GradientTape() as tape:
        value = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        for extra in model.losses:  # regularizers: what compute_loss adds
            value = value + tf.reduce_sum(extra)
    out["grads"] = [np.array(tf.convert_to_tensor(g))  # Embedding's: IndexedSlices
                    for g in tape.gradient(value, model.trainable_weights)]
    model.set_weights(initial)  # fit starts from the initial moving statistics, as tfc's
    if case.optimizer is not None:
        hist = model.fit(x, y, epochs=case.epochs, batch_size=case.batch_size, shuffle=False,
                         verbose=0, sample_weight=sw)
        out["history"] = {k: list(v) for k, v in hist.history.items()}
        out["final"] = [np.array(w) for w in model.get_weights()]
        if case.training_mode:
            out["evaluate after fit"] = model.evaluate(x, y, batch_size=len(y), verbose=0,
                                                       return_dict=True)
    return out


def run_tfc(case: Case, x: Any, y: Any, weights: list[np.ndarray], backend: str,
            sw: Any = None) -> dict[str, Any]:
    import tfc
    import tfc.keras
    os.environ["TFC_BACKEND"] = backend
    out: dict[str, Any] = {}
    with tfc.Graph().as_default():
        model = case.build(tfc.keras)
        out["params"] = model.count_params()
        model.set_weights(weights)
        out["predict"] = model.predict(x, batch_size=len(y) if y is not None else 64)
        if case.training_mode:
            train_out = model(model._packed_inputs(), training=True)
            out["predict training"] = model.session.run(train_out, dict(zip(
                model._input_list(), x if isinstance(x, list) else [x])))
        if case.loss is None:
            return out
        model.compile(optimizer=case.optimizer(tfc.keras) if case.optimizer else "sgd",
                      loss=case.loss(tfc.keras), metrics=list(case.metrics))
        out["evaluate"] = model.evaluate(x, y, batch_size=len(y), sample_weight=sw)
        tr = model._require_training()
        grads = tfc.gradients(tr.loss, model.trainable_variables)
        grads = [g.to_dense() if hasattr(g, "to_dense") else g for g in grads]  # Embedding
        out["grads"] = model.session.run(grads, model._feed_dict(x, y))
        if case.optimizer is not None:
            hist = model.fit(x, y, epochs=case.epochs, batch_size=case.batch_size,
                             shuffle=False, verbose=0, sample_weight=sw)
            out["history"] = {k: list(v) for k, v in hist.items()}
            out["final"] = model.get_weights()
            if case.training_mode:
                out["evaluate after fit"] = model.evaluate(x, y, batch_size=len(y))
    return out


def compare(case: Case, k: dict[str, Any], t: dict[str, Any]) -> list[tuple[str, str]]:
    """``(check, '' or what differs)`` for each thing both sides computed."""
    res = [("params", "" if k["params"] == t["params"]
            else f"{t['params']} params vs Keras {k['params']}"),
           ("predict", _close(t["predict"], k["predict"], FWD))]
    if "predict training" in k:
        res.append(("predict training", _close(t["predict training"], k["predict training"],
                                               FWD)))
    for check, tol in (("evaluate", FWD), ("evaluate after fit", FIT)):
        if check not in k:
            continue
        ke, te = k[check], t[check]
        d = ("" if set(ke) == set(te) else f"keys {sorted(te)} vs Keras {sorted(ke)}")
        d = d or "; ".join(f"{n}: {c}" for n in ke
                           if (c := _close(te[n], ke[n], tol)))
        res.append((check, d))
    if "evaluate" in k:
        d = "; ".join(f"weight {i}: {c}" for i, (a, b) in enumerate(zip(t["grads"], k["grads"]))
                      if (c := _close(a, b, GRAD, scaled=True)))
        res.append(("gradients", d if len(t["grads"]) == len(k["grads"])
                    else f"{len(t['grads'])} gradients vs Keras {len(k['grads'])}"))
    if "history" in k:
        kh, th = k["history"], t["history"]
        d = "" if set(kh) == set(th) else f"History keys {sorted(th)} vs Keras {sorted(kh)}"
        d = d or "; ".join(f"{n}: {c}" for n in kh if (c := _close(th[n], kh[n], FIT)))
        d2 = "; ".join(f"weight {i}: {c}" for i, (a, b) in enumerate(zip(t["final"], k["final"]))
                       if (c := _close(a, b, FIT)))
        res.append(("fit", "; ".join(s for s in (d, d2 and "final " + d2) if s)))
    return res


# Initializers tfc claims are Keras's (by name, with Keras's default): the fresh weights'
# shapes and statistics (bound and standard deviation; element counts >= 4096, so a sample
# standard deviation is within ~2% of the distribution's: 5% tolerance; the largest |w|
# within 15%).
INIT_CASES: list[tuple[str, Callable[[Any], Any], Sequence[int]]] = [
    ("Dense glorot_uniform kernel, zeros bias",
     lambda K: _seq(K, (128,), [K.layers.Dense(64)]), (128,)),
    ("Conv2D glorot_uniform kernel (receptive field in the fans)",
     lambda K: _seq(K, (8, 8, 16), [K.layers.Conv2D(32, 3)]), (8, 8, 16)),
    ("Embedding uniform(-0.05, 0.05)",
     lambda K: _seq(K, (3,), [K.layers.Embedding(500, 16)], dtype="int32"), (3,)),
    ("Dense random_normal kernel", lambda K: _seq(K, (128,), [
        K.layers.Dense(64, kernel_initializer="random_normal")]), (128,)),
    ("LSTM kernel, recurrent kernel, unit_forget_bias",
     lambda K: _seq(K, (4, 64), [K.layers.LSTM(32)]), (4, 64)),
    ("GRU orthogonal recurrent kernel",
     lambda K: _seq(K, (4, 64), [K.layers.GRU(48)]), (4, 64)),
    ("Dense orthogonal kernel, more rows than columns", lambda K: _seq(K, (128,), [
        K.layers.Dense(64, kernel_initializer="orthogonal")]), (128,)),
    ("Dense Orthogonal(gain=2) kernel, fewer rows", lambda K: _seq(K, (64,), [
        K.layers.Dense(128, kernel_initializer=K.initializers.Orthogonal(gain=2.0))]), (64,)),
    ("Conv2D orthogonal kernel (4-D)", lambda K: _seq(K, (8, 8, 16), [
        K.layers.Conv2D(32, 3, kernel_initializer="orthogonal")]), (8, 8, 16)),
]


def init_stats(k: list[np.ndarray], t: list[np.ndarray]) -> str:
    if [w.shape for w in k] != [w.shape for w in t]:
        return f"shapes {[w.shape for w in t]} vs Keras {[w.shape for w in k]}"
    out = []
    for i, (a, b) in enumerate(zip(t, k)):
        if a.size < 4096 or b.std() == 0:  # a bias: compare exactly
            if not np.array_equal(a, b):
                out.append(f"weight {i}: {a.ravel()[:4]}... vs Keras {b.ravel()[:4]}...")
            continue
        bound_a, bound_b = np.abs(a).max(), np.abs(b).max()
        # the bound tells a uniform from a normal of the same deviation (sqrt(3) sd vs ~4
        # sd); a normal sample's maximum varies by ~8%
        if not (abs(a.std() / b.std() - 1) < 0.05 and abs(bound_a / bound_b - 1) < 0.15):
            out.append(f"weight {i}: std {a.std():.4g} max|w| {bound_a:.4g} vs Keras "
                       f"std {b.std():.4g} max|w| {bound_b:.4g}")
    return "; ".join(out)


def run_inits() -> list[tuple[str, str, str, str]]:
    import keras
    import tfc
    import tfc.keras
    rows = []
    for name, build, _ in INIT_CASES:
        keras.utils.set_random_seed(0)
        k = [np.array(w) for w in build(keras).get_weights()]
        os.environ["TFC_BACKEND"] = "reference"
        with tfc.Graph().as_default():
            t = build(tfc.keras).get_weights()
        rows.append((f"init {name}", "reference", "initial weights", init_stats(k, t)))
        print(f"  {'init ' + name:52s} {'ok' if not rows[-1][3] else 'DIFFERS'}")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["llvm", "reference"], action="append",
                    help="tfc backend(s) to check (default: both)")
    ap.add_argument("--only", help="only cases whose name contains this")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    backends = args.backend or ["llvm", "reference"]
    start = time.perf_counter()
    import keras
    import tensorflow as tf
    from tfc.version import __version__ as tfc_version
    print(f"Keras {keras.__version__} on TensorFlow {tf.__version__} (CPU), tfc {tfc_version}, "
          f"numpy {np.__version__}; backends: {', '.join(backends)}")
    rows: list[tuple[str, str, str, str]] = []  # case, backend, check, detail
    for n, case in enumerate(build_cases()):
        if args.only and args.only not in case.name:
            continue
        rng = np.random.default_rng(args.seed * 1000 + n)
        x, y = case.data(rng)
        sw = rng.uniform(0.0, 2.0, size=len(y)).astype(np.float32) if case.sample_weight \
            else None
        try:
            k = run_keras(case, x, y, sw)
        except Exception as e:  # noqa: BLE001
            print(f"  Keras failed on {case.name}: {type(e).__name__}: {e}"[:300])
            continue
        for be in backends:
            try:
                t = run_tfc(case, x, y, k["weights"], be, sw)
                checks = compare(case, k, t)
            except Exception as e:  # noqa: BLE001
                checks = [("run", f"ERROR {type(e).__name__}: {e}"[:400])]
            rows += [(case.name, be, c, d) for c, d in checks]
        status = [d for c, b, ch, d in rows if c == case.name and d]
        print(f"  {case.name:52s} {'ok' if not status else 'DIFFERS'}")
    if not args.only or "init" in args.only:
        rows += run_inits()
    print("\nDifferences:")
    new = 0
    for name, be, check, detail in rows:
        if not detail:
            continue
        known = KNOWN.get((name, check))
        verdict = known.verdict if known else "NEW"
        new += verdict == "NEW"
        print(f"  {verdict:8s} {name} [{check}] {be}: {detail}"
              + (f"\n           reason: {known.reason}" if known else ""))
    fixed = [(key, kn) for key, kn in KNOWN.items() if kn.verdict == "FIXED"]
    if fixed and not args.only:
        print("\nFixed (each has a regression test under tests/layers):")
        for (name, check), kn in fixed:
            now = [d for c, _, ch, d in rows if (c, ch) == (name, check)]
            state = ("agrees now" if now and not any(now) else
                     f"still differs in {sum(map(bool, now))} of {len(now)}" if now
                     else "not run")
            print(f"  FIXED    {name} [{check}]: {kn.reason} ({state})")
    print(f"\n{len(rows)} checks, {sum(not r[3] for r in rows)} agree; {new} new difference(s); "
          f"{time.perf_counter() - start:.0f} s")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
