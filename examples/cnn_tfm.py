"""The Python twin of ``cnn.tfm``: the same small CNN in TensorFlow 1 style.

conv 3x3 (16 filters, same padding) -> relu -> 2x2 max pool -> dense 64 -> dense 10 on
``[B, 8, 8, 1]`` images. ``tfc compile`` gives the same IR for this file and for
``cnn.tfm`` after canonicalization and CSE; ``python examples/cnn_tfm.py`` trains it in a
``tfc.Session`` and prints the test accuracy.
"""

import numpy as np

import tfc
from data import digits_split

x = tfc.placeholder(tfc.float32, [None, 8, 8, 1], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")

kernel = tfc.Variable(tfc.random.glorot_uniform([3, 3, 1, 16], seed=1), name="kernel")
bias = tfc.Variable(tfc.zeros([16]), name="bias")
w1 = tfc.Variable(tfc.random.glorot_uniform([256, 64], seed=2), name="w1")
b1 = tfc.Variable(tfc.zeros([64]), name="b1")
w2 = tfc.Variable(tfc.random.glorot_uniform([64, 10], seed=3), name="w2")
b2 = tfc.Variable(tfc.zeros([10]), name="b2")


def logits(x):
    conv = tfc.nn.relu(tfc.nn.conv2d(x, kernel, padding="SAME") + bias)
    pooled = tfc.nn.max_pool2d(conv, 2)
    flat = tfc.reshape(pooled, [-1, 256])
    hidden = tfc.nn.relu(flat @ w1 + b1)
    return hidden @ w2 + b2


def xent(l, y):
    return tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=l))


def classes(l):
    return tfc.argmax(l, axis=1, output_type=tfc.int32)


def accuracy(l, y):
    return tfc.reduce_mean(tfc.cast(tfc.equal(classes(l), y), tfc.float32))


l = logits(x)
tfc.entry("predict", feeds={"x": x}, fetches={"probs": tfc.nn.softmax(l), "classes": classes(l)})

l = logits(x)
tfc.entry("evaluate", feeds={"x": x, "y": y},
          fetches={"loss": xent(l, y), "accuracy": accuracy(l, y)})

l = logits(x)
loss = xent(l, y)
train_op = tfc.train.AdamOptimizer(learning_rate=0.005).minimize(loss)
tfc.entry("train_step", feeds={"x": x, "y": y},
          fetches={"loss": loss, "accuracy": accuracy(l, y)}, targets=[train_op])
graph = tfc.get_default_graph()


def train(epochs: int = 12, batch_size: int = 32, seed: int = 0, verbose: bool = True
          ) -> float:
    """Minibatch Adam on the training split (as images); returns the test accuracy."""
    x_train, x_test, y_train, y_test = digits_split()
    x_train, x_test = x_train.reshape(-1, 8, 8, 1), x_test.reshape(-1, 8, 8, 1)
    rng = np.random.default_rng(seed)
    acc = accuracy(logits(x), y)
    with tfc.Session(graph) as sess:
        for epoch in range(epochs):
            order = rng.permutation(len(x_train))
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                sess.run(train_op, {x: x_train[batch], y: y_train[batch]})
            if verbose:
                print(f"epoch {epoch + 1}: test accuracy "
                      f"{sess.run(acc, {x: x_test, y: y_test}):.4f}")
        return float(sess.run(acc, {x: x_test, y: y_test}))


if __name__ == "__main__":
    print(f"test accuracy: {train():.4f}")
