"""A small convolutional network on sklearn's 8x8 digits as images ``[B, 8, 8, 1]``:
conv 3x3 (16 filters, same padding) -> relu -> 2x2 max pool -> dense 64 -> dense 10.

A model file (``tfc compile examples/cnn_digits.py``: entries ``predict(x)``,
``evaluate(x, y)``, ``train_step(x, y)`` with ``x`` of shape ``[B, 8, 8, 1]``);
``python examples/cnn_digits.py`` trains it and prints the test accuracy (about 0.98);
``--logdir runs/cnn`` also writes TensorBoard events there (loss, accuracy, learning rate,
step time, weight histograms and the training graph: ``tensorboard --logdir runs``).
"""

import argparse

import numpy as np

import tfc
from data import digits_split

tfc.set_random_seed(0)
model = tfc.Sequential([
    tfc.layers.Conv2D(16, 3, padding="same", activation="relu", input_shape=(8, 8, 1)),
    tfc.layers.MaxPool2D(2),
    tfc.layers.Flatten(),
    tfc.layers.Dense(64, activation="relu"),
    tfc.layers.Dense(10, activation="softmax"),
], name="cnn")
model.compile(optimizer=tfc.train.AdamOptimizer(0.005),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.export()


def images(x: np.ndarray) -> np.ndarray:
    """Rows of 64 pixels as NHWC images."""
    return x.reshape(-1, 8, 8, 1)


def train(epochs: int = 12, batch_size: int = 32, seed: int = 0, verbose: int = 1,
          logdir: str | None = None) -> float:
    """Fit on the training split (watched in TensorBoard when ``logdir`` is given);
    returns the accuracy on the held-out test split."""
    x_train, x_test, y_train, y_test = digits_split()
    callbacks = [] if logdir is None else [tfc.callbacks.TensorBoard(logdir, histogram_freq=1)]
    model.fit(images(x_train), y_train, epochs=epochs, batch_size=batch_size, seed=seed,
              validation_data=(images(x_test), y_test), verbose=verbose, callbacks=callbacks)
    return model.evaluate(images(x_test), y_test)["accuracy"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", help="write TensorBoard events to this directory")
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    print(f"test accuracy: {train(epochs=args.epochs, logdir=args.logdir):.4f}")
