"""The Python twin of ``mlp.tfm``: the same MLP (64-128-64-10, relu) in TensorFlow 1 style.

``tfc compile examples/mlp_tfm.py`` and ``tfc compile examples/mlp.tfm`` give the same
IR after canonicalization and CSE (``tests/compiler/test_tfm_examples.py`` checks it):
the model language builds its graph through this same API. ``python
examples/mlp_tfm.py`` trains it in a ``tfc.Session`` and prints the test accuracy.
"""

import numpy as np

import tfc
from data import digits_split

x = tfc.placeholder(tfc.float32, [None, 64], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")

w1 = tfc.Variable(tfc.random.glorot_uniform([64, 128], seed=1), name="w1")
b1 = tfc.Variable(tfc.zeros([128]), name="b1")
w2 = tfc.Variable(tfc.random.glorot_uniform([128, 64], seed=2), name="w2")
b2 = tfc.Variable(tfc.zeros([64]), name="b2")
w3 = tfc.Variable(tfc.random.glorot_uniform([64, 10], seed=3), name="w3")
b3 = tfc.Variable(tfc.zeros([10]), name="b3")


def dense(h, w, b):
    return h @ w + b


def logits(x):
    h1 = tfc.nn.relu(dense(x, w1, b1))
    h2 = tfc.nn.relu(dense(h1, w2, b2))
    return dense(h2, w3, b3)


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


def train(epochs: int = 20, batch_size: int = 32, seed: int = 0, verbose: bool = True
          ) -> float:
    """Minibatch Adam on the training split; returns the accuracy on the test split."""
    x_train, x_test, y_train, y_test = digits_split()
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
