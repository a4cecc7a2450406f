"""A deep MLP: 64 dense layers 256 wide (ReLU), sparse softmax cross-entropy, plain SGD.

A plain chain of layers: every op needs the one before it, so nothing can run
concurrently and splitting it across devices only adds transfers. It is the model of
issue #16 (the placer split it two ways and the step took twice as long) and a row of
``tools/bench_placement.py``, which checks that the placement keeps it on one device.

    tfc compile examples/deep_mlp.py --devices cpu:0,cpu:1 -o deep2.tfc
    tfc bench deep2.tfc --batch 64
"""

import numpy as np

import tfc

LAYERS, WIDTH = 64, 256
rng = np.random.default_rng(0)

x = tfc.placeholder(tfc.float32, [None, WIDTH], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")
h = x
for i in range(LAYERS):
    w = tfc.Variable(rng.normal(0, np.sqrt(2.0 / WIDTH), (WIDTH, WIDTH)).astype(np.float32),
                     name=f"l{i}/w")
    b = tfc.Variable(np.zeros(WIDTH, np.float32), name=f"l{i}/b")
    h = tfc.matmul(h, w) + b
    if i < LAYERS - 1:
        h = tfc.nn.relu(h)
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
train_op = tfc.train.GradientDescentOptimizer(0.01).minimize(loss)
tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train_op])
