"""The digits MLP of ``mlp_digits.py`` (64-128-64-10, relu, Adam 0.005) for parameter
servers: its learning rate decays (cosine, to a tenth over ``DECAY_STEPS`` updates).

Why the decay: at a constant 0.005 the last iterate of Adam is noisy. Trained in one
process on mini-batches of 32 for 20 epochs (840 updates), the test accuracy of the final
weights depends on the data order: 0.9778, 0.9756, 0.9756, 0.9667, 0.9756, 0.9800 for six
shuffle seeds, and from one update to the next it swings between 0.953 and 0.982 in the
21st epoch. Asynchronous workers add their own noise (the order the updates land in), so
4 async workers missed 0.97 in one of two runs. With the rate decayed to 0.0005 by the
last update the six seeds end at 0.9778-0.9800 in one process, and the asynchronous runs
hold 0.97 as well (``tools/bench_async.py``). ``global_step`` lives on a PS task and
counts the updates applied there, whichever worker sent them, so the schedule follows the
run's updates under ``ps-async`` too.

    python tools/bench_async.py --seeds 0,1,2      # async (1, 2, 4 workers) and sync
    tfc compile examples/mlp_digits_ps.py --cluster ps=1,workers=4 --strategy ps-async
"""

import numpy as np

import tfc

DECAY_STEPS = 840  # 20 epochs of mini-batches of 32 of the training split (1,347 examples)


def dense(h: tfc.Tensor, n_in: int, n_out: int, name: str, relu: bool = True) -> tfc.Tensor:
    """A dense layer with Glorot-uniform weights (Keras' default) and zero biases."""
    limit = float(np.sqrt(6.0 / (n_in + n_out)))
    w = tfc.Variable(tfc.random.uniform([n_in, n_out], -limit, limit), name=f"{name}/kernel")
    b = tfc.Variable(np.zeros(n_out, np.float32), name=f"{name}/bias")
    out = tfc.matmul(h, w) + b
    return tfc.nn.relu(out) if relu else out


def build(decay_steps: int = DECAY_STEPS) -> None:
    """The model in the default graph: entries ``train_step``, ``evaluate``, ``predict``."""
    tfc.set_random_seed(0)
    x = tfc.placeholder(tfc.float32, [None, 64], name="x")
    y = tfc.placeholder(tfc.int32, [None], name="y")
    logits = dense(dense(dense(x, 64, 128, "dense1"), 128, 64, "dense2"), 64, 10, "dense3",
                   relu=False)
    loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits))
    predicted = tfc.cast(tfc.argmax(logits, 1), tfc.int32)
    accuracy = tfc.reduce_mean(tfc.cast(tfc.equal(predicted, y), tfc.float32))
    step = tfc.Variable(np.asarray(0, np.int64), name="global_step", trainable=False)
    rate = tfc.train.cosine_decay(0.005, step, decay_steps, alpha=0.1)
    train = tfc.train.AdamOptimizer(rate).minimize(loss, global_step=step)
    tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    tfc.entry("evaluate", feeds={"x": x, "y": y}, fetches={"accuracy": accuracy})
    tfc.entry("predict", feeds={"x": x}, fetches={"classes": predicted})


build()
