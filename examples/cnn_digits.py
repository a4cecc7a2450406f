"""A small convolutional network on sklearn's 8x8 digits as images ``[B, 8, 8, 1]``:
conv 3x3 (16 filters, same padding) -> relu -> 2x2 max pool -> dense 64 -> dense 10.

A model file (``tfc compile examples/cnn_digits.py``: entries ``predict(x)``,
``evaluate(x, y)``, ``train_step(x, y)`` with ``x`` of shape ``[B, 8, 8, 1]``);
``python examples/cnn_digits.py`` trains it and prints the test accuracy (about 0.98);
``--logdir runs/cnn`` also writes TensorBoard events there (loss, accuracy, learning rate,
step time, weight histograms and the training graph: ``tensorboard --logdir runs``).
``--dataset`` feeds ``fit`` from a ``tfc.data`` pipeline instead of arrays (``pipeline``:
shuffled each epoch, batched, rows turned into images by a compiled map fn, prefetched on
a thread), to the same accuracy.
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


def rows_to_images(x: tfc.Tensor, y: tfc.Tensor) -> tuple[tfc.Tensor, tfc.Tensor]:
    """The pipeline's map fn, traced and compiled: a batch of rows as NHWC images."""
    return tfc.reshape(x, [-1, 8, 8, 1]), y


def pipeline(x: np.ndarray, y: np.ndarray, batch_size: int = 32, seed: int = 0,
             prefetch: int = 2, map_fn=rows_to_images) -> tfc.data.Dataset:
    """The training input as a ``tfc.data`` pipeline of (images, labels) batches."""
    ds = (tfc.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=seed)
          .batch(batch_size).map(map_fn))
    return ds.prefetch(prefetch) if prefetch else ds


def train(epochs: int = 12, batch_size: int = 32, seed: int = 0, verbose: int = 1,
          logdir: str | None = None, dataset: bool = False) -> float:
    """Fit on the training split (from arrays, or from ``pipeline`` with ``dataset``;
    watched in TensorBoard when ``logdir`` is given); returns the accuracy on the
    held-out test split."""
    x_train, x_test, y_train, y_test = digits_split()
    callbacks = [] if logdir is None else [tfc.callbacks.TensorBoard(logdir, histogram_freq=1)]
    if dataset:
        model.fit(pipeline(x_train, y_train, batch_size, seed), epochs=epochs,
                  validation_data=(images(x_test), y_test), verbose=verbose,
                  callbacks=callbacks)
    else:
        model.fit(images(x_train), y_train, epochs=epochs, batch_size=batch_size, seed=seed,
                  validation_data=(images(x_test), y_test), verbose=verbose,
                  callbacks=callbacks)
    return model.evaluate(images(x_test), y_test)["accuracy"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", help="write TensorBoard events to this directory")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--dataset", action="store_true",
                        help="feed fit from a tfc.data pipeline instead of arrays")
    args = parser.parse_args()
    accuracy = train(epochs=args.epochs, logdir=args.logdir, dataset=args.dataset)
    print(f"test accuracy: {accuracy:.4f}")
