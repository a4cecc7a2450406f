"""Sparse-update benchmark (issue #18 item 2 follow-ups): the step time of an embedding
lookup trained with a sparse optimizer, on one device, as the table grows.

The model: ids [batch, 16] -> mean of their rows of ``E`` [rows, 64] f32 -> a dense
layer -> softmax cross-entropy; the optimizer's sparse update touches at most
``batch x 16`` rows of ``E`` a step. A sparse update should cost what it touches, so the
step time should not grow with ``rows`` (it did while a scatter copied the whole table
into its update buffer each step). ``--optimizers`` also times Momentum/AdaGrad, whose
updates first sum the rows of repeated ids (``tfc.train.optimizers.unique_rows``).

Times are medians over ``--steps`` steps after 3 warm-up steps; the header gives the load
average (the host is shared).

    python tools/bench_sparse_update.py
    python tools/bench_sparse_update.py --rows 100000 1000000 --optimizers sgd adagrad
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tfc
from tfc.runtime import Program

WORDS, DIM, CLASSES = 16, 64, 4
OPTIMIZERS = {
    "sgd": lambda: tfc.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tfc.train.MomentumOptimizer(0.1, 0.9),
    "adagrad": lambda: tfc.train.AdagradOptimizer(0.1),
}


def program(rows: int, optimizer: str, backend: str | None) -> Program:
    graph = tfc.Graph()
    with graph.as_default():
        tfc.set_random_seed(0)
        ids = tfc.placeholder(tfc.int32, [None, WORDS], name="ids")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        emb = tfc.Variable(tfc.random.normal([rows, DIM], stddev=0.05), name="E")
        w = tfc.Variable(tfc.random.normal([DIM, CLASSES], stddev=0.1), name="W")
        logits = tfc.matmul(tfc.reduce_mean(tfc.gather(emb, ids), axis=1), w)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        train = OPTIMIZERS[optimizer]().minimize(loss)
        tfc.entry("train", feeds={"ids": ids, "y": y}, fetches={"loss": loss},
                  targets=[train])
    return Program(graph.as_module(), backend=backend)


def step_ms(prog: Program, rows: int, batch: int, steps: int) -> float:
    rng = np.random.default_rng(0)
    times = []
    for k in range(steps + 3):
        x = rng.integers(0, rows, (batch, WORDS)).astype(np.int32)
        y = rng.integers(0, CLASSES, batch).astype(np.int32)
        t0 = time.perf_counter()
        prog.run("train", ids=x, y=y)
        if k >= 3:
            times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--optimizers", nargs="+", default=["sgd"], choices=sorted(OPTIMIZERS))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--backend", default=None)
    a = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; batch {a.batch} x {WORDS} ids; "
          f"median of {a.steps} steps")
    for opt in a.optimizers:
        for rows in a.rows:
            prog = program(rows, opt, a.backend)
            ms = step_ms(prog, rows, a.batch, a.steps)
            print(f"{opt:9s} rows {rows:>9,d}  step {ms:8.2f} ms", flush=True)


if __name__ == "__main__":
    main()
