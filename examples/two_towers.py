"""Two towers: an ensemble of two LSTM classifiers, trained in one step. The model where
splitting across devices can pay off on a small host.

Each tower reads the same sequences ``x`` ([B, 32, 8]) with an LSTM of 32 units (one
``tfc.scan`` over time, its gradient a reverse scan) and a dense softmax head; each is
trained on its own loss by its own ``minimize``, and ``predict`` averages the towers'
probabilities. So nothing of one tower's step needs the other's.

Why two devices can win here, when a chain of dense layers never does: a scan is a long
sequence of small ops (per time step, products of a 64-row batch with 128-column weights
and 64 x 128 element-wise ops), below the sizes at which tfc splits a kernel across
cores (65,536 elements). On one device the two towers run one after the other and
barely use the second core; on two logical devices (one core each) they can run side by
side, and the step exchanges only one tower's loss (a 4-byte scalar) for the fetched sum.
Two details make that so: each tower's ``minimize`` is called inside its device scope
(with ``colocate_gradients_with_ops``), so its gradient ops, its gradient seed included,
stay on its device; and no value of one tower feeds the other's backward pass (a join
such as a dot product of the towers' outputs would make each device wait for the other,
because a stage sends its values only when it ends).

Measured (``train_step``, batch 64, AMD EPYC Zen 5 with 2 cores, LLVM backend; median of
9 windows in which the shared host was quiet, each 7 interleaved repeats of 40 steps):
one device 3.68 ms, the towers pinned to ``/cpu:0`` and ``/cpu:1`` 2.70 ms, 1.36x. The
split won in 7 windows (1.39-1.71x) and lost in 2 (0.92-0.94x), when another job took a core
and the towers ran one after the other; details in ``docs/benchmarks.md`` ("Placement
(#16)"). ``python examples/two_towers.py`` measures it again: one device against the
towers pinned with ``tfc.device`` and against the placer's own choice for the unpinned
model (main's placer does not find the tower split: it chose 39 transfers).

    tfc compile examples/two_towers.py --devices cpu:0,cpu:1 -o towers2.tfc
    tfc bench towers2.tfc --trace towers2.json     # per device: compute, waiting, transfers
"""

import numpy as np

import tfc

LENGTH, FEATURES, UNITS, CLASSES = 32, 8, 32, 10


def build(devices=(None, None)):
    """The two towers in the default graph, tower ``i`` under ``tfc.device(devices[i])``
    (no scope for None: the placer decides)."""
    tfc.set_random_seed(0)
    x = tfc.placeholder(tfc.float32, [None, LENGTH, FEATURES], name="x")
    y = tfc.placeholder(tfc.int32, [None], name="y")
    optimizer = tfc.train.GradientDescentOptimizer(0.05)
    losses, probs, train_ops = [], [], []
    for i, device in enumerate(devices):
        with tfc.device(device), tfc.name_scope(f"tower{i}"):
            h = tfc.layers.LSTM(UNITS)(x)
            logits = tfc.layers.Dense(CLASSES)(h)
            loss = tfc.reduce_mean(
                tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            losses.append(loss)
            probs.append(tfc.nn.softmax(logits))
            train_ops.append(optimizer.minimize(loss, colocate_gradients_with_ops=True))
    tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": losses[0] + losses[1]},
              targets=train_ops)
    tfc.entry("predict", feeds={"x": x}, fetches={"probs": (probs[0] + probs[1]) * 0.5})


build()


def measure(repeats=7, steps=50, batch=64):
    """Median-of-medians step of ``train_step``: one device, the towers pinned one per
    device, and the placer's split of the unpinned model; printed and returned (ms)."""
    from tfc.backends.base import default_backend_name
    from tfc.pipeline import Target, lower
    from tfc.runtime import Program
    from tfc.runtime.profiler import bench_entry

    backend = default_backend_name()
    two = ("/cpu:0", "/cpu:1")
    variants = {"one device": ((None, None), ()), "towers pinned to two devices": (two, two),
                "placer's choice on two devices": ((None, None), two)}
    programs = {}
    for name, (scopes, devices) in variants.items():
        graph = tfc.Graph()
        with graph.as_default():
            build(scopes)
        programs[name] = Program(lower(graph.as_module(), Target(backend, devices)))
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((batch, LENGTH, FEATURES)).astype(np.float32),
             "y": rng.integers(0, CLASSES, batch).astype(np.int32)}
    medians = {name: [] for name in programs}
    for r in range(repeats):  # interleaved, so that load on the host hits all alike
        for name, program in programs.items():
            medians[name].append(bench_entry(program, "train_step", feeds, steps).median_s)
    out = {name: float(np.median(m)) * 1e3 for name, m in medians.items()}
    for name, ms in out.items():
        print(f"{name}: {ms:.3f} ms per step ({out['one device'] / ms:.2f}x one device)")
    return out


if __name__ == "__main__":
    measure()
