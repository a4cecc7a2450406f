"""The Functional API: two inputs, two towers, two outputs, on sklearn's digits.

Each 8x8 digit is cut into its top and bottom halves, two inputs (``top`` and ``bottom``,
32 pixels each); each half goes through its own tower (``Dense(32, relu)``), the towers are
joined (``Concatenate``) and feed two heads: ``digit``, the class (softmax, sparse
cross-entropy, accuracy), and ``ink``, the mean pixel value of the whole image (a
regression, mean squared error, weighted 10x in the total loss). The same network could be
a ``tfc.Sequential`` only if it had one input and one output; ``tfc.keras.Model(inputs,
outputs)`` takes dicts of them, and ``fit`` / ``evaluate`` / ``predict`` take dicts of
arrays by the same names.

A model file: ``tfc compile examples/functional_two_towers.py -o towers.tfc`` compiles
``predict(top, bottom) -> digit, ink``, ``evaluate`` and ``train_step(top, bottom,
y_digit, y_ink)``. ``python examples/functional_two_towers.py`` trains it from Python,
prints the model's summary and the test metrics (digit accuracy about 0.97 after 20
epochs).
"""

from __future__ import annotations

import numpy as np

import tfc
from data import digits_split

L = tfc.keras.layers

tfc.set_random_seed(0)
top = tfc.keras.Input(shape=(32,), name="top")
bottom = tfc.keras.Input(shape=(32,), name="bottom")
joined = L.Concatenate()([L.Dense(32, activation="relu", name="top_tower")(top),
                          L.Dense(32, activation="relu", name="bottom_tower")(bottom)])
model = tfc.keras.Model(
    inputs={"top": top, "bottom": bottom},
    outputs={"digit": L.Dense(10, activation="softmax", name="digit")(joined),
             "ink": L.Dense(1, name="ink")(joined)},
    name="two_towers")
model.compile(optimizer=tfc.train.AdamOptimizer(0.005),
              loss={"digit": "sparse_categorical_crossentropy", "ink": "mse"},
              loss_weights={"digit": 1.0, "ink": 10.0},
              metrics={"digit": ["accuracy"], "ink": ["mae"]})
model.export()


def halves(x: np.ndarray, y: np.ndarray) -> tuple[dict, dict]:
    """The inputs and targets of the two-tower model for flat digits ``x`` [N, 64]."""
    return ({"top": x[:, :32], "bottom": x[:, 32:]},
            {"digit": y, "ink": x.mean(axis=1, dtype=np.float32)})


def train(epochs: int = 20, batch_size: int = 32, seed: int = 0, verbose: int = 1
          ) -> dict[str, float]:
    """Fit on the training split; returns the metrics on the held-out test split."""
    x_train, x_test, y_train, y_test = digits_split()
    model.fit(*halves(x_train, y_train), epochs=epochs, batch_size=batch_size, seed=seed,
              validation_data=halves(x_test, y_test), verbose=verbose)
    return model.evaluate(*halves(x_test, y_test))


if __name__ == "__main__":
    model.summary()
    results = train()
    print(", ".join(f"{k}: {v:.4f}" for k, v in results.items()))
