"""The digits MLP (64-256-256-10) split across two devices, TensorFlow 1 style.

Layer 1 is pinned to ``/cpu:0`` and layers 2-3 to ``/cpu:1`` with ``tfc.device`` (model
parallelism); what no scope pins (the loss, the gradient ops) goes where the cost model
says. Compile it for two logical CPUs and look at the result:

    tfc compile examples/mlp_devices_digits.py --devices cpu:0,cpu:1 -o mlp2.tfc
    tfc ir mlp2.tfc --device cpu:1          # the partition on /cpu:1, with its send/recv
    tfc viz mlp2.tfc -o mlp2.html           # the placed, partitioned graph
    tfc bench mlp2.tfc --entry train_step --trace trace.json

``python examples/mlp_devices_digits.py`` trains it on one device, on two, and on two
with fp16 transfers, and prints each run's test accuracy and the bytes the devices hand
each other per step (``Rendezvous.bytes_sent``: by reference, inside one process nothing
is copied; fp16 transfers halve them).
"""

import numpy as np

import tfc
from data import digits_split

rng = np.random.default_rng(0)


def dense(x, n_in, n_out, name, relu=True):
    w = tfc.Variable(rng.normal(0, np.sqrt(2.0 / n_in), (n_in, n_out)).astype(np.float32),
                     name=f"{name}/w")
    b = tfc.Variable(np.zeros(n_out, np.float32), name=f"{name}/b")
    h = tfc.matmul(x, w) + b
    return tfc.nn.relu(h) if relu else h


x = tfc.placeholder(tfc.float32, [None, 64], name="x")
y = tfc.placeholder(tfc.int32, [None], name="y")
with tfc.device("/cpu:0"):
    h1 = dense(x, 64, 256, "layer1")
with tfc.device("/cpu:1"):
    h2 = dense(h1, 256, 256, "layer2")
    logits = dense(h2, 256, 10, "layer3", relu=False)
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
classes = tfc.argmax(logits, axis=1, output_type=tfc.int32)
accuracy = tfc.reduce_mean(tfc.cast(tfc.equal(classes, y), tfc.float32))
train_op = tfc.train.MomentumOptimizer(0.05, 0.9).minimize(loss)

tfc.entry("predict", feeds={"x": x}, fetches={"classes": classes})
tfc.entry("evaluate", feeds={"x": x, "y": y}, fetches={"accuracy": accuracy, "loss": loss})
tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train_op])
graph = tfc.get_default_graph()


def train(devices=None, fp16_transfers=False, epochs=15, batch_size=64, seed=0):
    """Train from the same initial weights; returns (test accuracy, bytes handed over
    between the devices in the last step)."""
    from tfc.backends.base import default_backend_name
    from tfc.devices import parse_devices
    from tfc.pipeline import Target, lower
    from tfc.runtime import Program

    # optimize, place, partition and lower for the backend, as `tfc compile --devices` does
    target = Target(default_backend_name(), tuple(parse_devices(devices)) if devices else (),
                    fp16_transfers)
    program = Program(lower(graph.as_module(), target))
    x_train, x_test, y_train, y_test = digits_split()
    order_rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = order_rng.permutation(len(x_train))
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            program.run("train_step", x=x_train[batch], y=y_train[batch])
    exe = program._executable("train_step")
    rendezvous = getattr(exe, "last_rendezvous", None)
    sent = rendezvous.bytes_sent if rendezvous is not None else 0
    return float(program.run("evaluate", x=x_test, y=y_test)["accuracy"]), sent


if __name__ == "__main__":
    for label, devices, fp16 in [("one device", None, False),
                                 ("two devices", ["/cpu:0", "/cpu:1"], False),
                                 ("two devices, fp16 transfers", ["/cpu:0", "/cpu:1"], True)]:
        acc, sent = train(devices, fp16)
        print(f"{label}: test accuracy {acc:.4f}, {sent} bytes handed over between "
              f"devices in the last step")
