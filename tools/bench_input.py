"""Input pipeline throughput on the CNN of ``examples/cnn_digits.py``: training steps per
second fed by a ``tfc.data`` pipeline, with and without ``prefetch``, with a cheap and a
costly map fn, and the time each step waits for its batch.

    PYTHONPATH=. python tools/bench_input.py [--epochs 3] [--rounds 3] [--batch 32]
                                             [--prefetch 0,1,2,4]

The pipeline is ``from_tensor_slices((x, y)).shuffle(n).batch(B).map(fn)``, then
``.prefetch(k)`` for each k of ``--prefetch`` (0: none). The cheap fn reshapes rows into
images (what the example's pipeline does); the costly one also runs ``--cost`` rounds of
a 64x64 matmul and tanh on each batch (an augmentation's worth of work), the medium one
``--medium`` rounds (about the training step's own time: the most an overlap can gain on
2 cores, against ~1.2x with the costly one, whose map fn alone sets the pace). A step is
``next(it)`` (the wait: all of the pipeline's work without prefetch, only the part the
producer thread has not done ahead with it) plus the compiled training step
(``Session.run``). The epochs are iterated as ``fit`` iterates them (``Dataset.epochs``: one
producer thread across them, making the next epoch's first batches while this one's last
steps run); ``--iter-per-epoch`` adds rows that call ``iter()`` per epoch instead (a
producer per epoch, as before ``epochs``). An epoch's first wait counts from opening its
pass. steps/s is over the wall
time of whole epochs (the first, which compiles, not counted); the other columns are
medians per step over the rounds. 'pipe cpu' is the CPU time of the pipeline's work per
batch: in the step's thread without prefetch, in the producer thread with it
(``Iterator.busy_s``); that work holds the interpreter lock, which the step needs too.
'cpu/step' is the CPU time of the whole process (every thread: the step's, the
producer's, OpenBLAS's and the kernels' pool's workers, spinning included) per step: on a
loaded host, where wall times say little, it shows what the threads burn. 'load' is the
load average when the row's last epoch ended. The machine is shared, so compare the rows
of one run.
"""

from __future__ import annotations

import argparse
import os
import runpy
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import tfc  # noqa: E402
from data import digits_split  # noqa: E402


def costly(rounds: int) -> Callable[..., Any]:
    mix = (np.eye(64) + 0.01 * np.random.default_rng(0).normal(size=(64, 64))).astype(
        np.float32)

    def augment(x: Any, y: Any) -> Any:
        for _ in range(rounds):
            x = tfc.tanh(tfc.matmul(x, tfc.constant(mix)))
        return tfc.reshape(x, [-1, 8, 8, 1]), y
    return augment


def measure(example: dict, x: np.ndarray, y: np.ndarray, batch: int, epochs: int,
            map_fn: Callable[..., Any], prefetch: int, per_epoch: bool = False
            ) -> dict[str, float]:
    """Per-step medians (seconds) of the wait for data and of the whole step."""
    model = example["model"]
    tr = model._require_training()
    sess = model.session
    ds = example["pipeline"](x, y, batch_size=batch, seed=0, prefetch=prefetch, map_fn=map_fn)
    passes = ds.epochs(epochs)  # (as fit: one producer thread across the epochs)
    waits, steps, firsts, pipe_cpu, proc_cpu = [], [], [], [], []
    wall = 0.0
    for epoch in range(epochs):
        start = t0 = time.perf_counter()
        cpu0 = time.process_time()
        it = iter(ds) if per_epoch else next(passes)
        first = True
        batches = 0
        busy = 0.0  # the pipeline's CPU seconds in this thread (no prefetch)
        while True:
            if not first:
                t0 = time.perf_counter()
            c0 = time.thread_time()
            try:
                xb, yb = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            busy += time.thread_time() - c0
            batches += 1
            sess.run([tr.train_op, tr.loss], {model.inputs: xb, tr.y: yb})
            t2 = time.perf_counter()
            if epoch:  # the first epoch compiles (the map fn's two shapes): not counted
                (firsts if first else waits).append(t1 - t0)
                steps.append(t2 - t0)
            first = False
        if epoch:
            pipe_cpu.append((it.busy_s if prefetch else busy) / max(batches, 1))
            proc_cpu.append((time.process_time() - cpu0) / max(batches, 1))
        it.close()
        if epoch:
            wall += time.perf_counter() - start
    passes.close()
    return {"steps_per_s": len(steps) / wall, "step_med": statistics.median(steps),
            "wait_med": statistics.median(waits), "wait_p90": float(np.percentile(waits, 90)),
            "wait_mean": statistics.fmean(waits), "first_wait": statistics.median(firsts),
            "pipe_cpu": statistics.median(pipe_cpu), "proc_cpu": statistics.median(proc_cpu),
            "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--cost", type=int, default=200, help="matmul rounds of the costly fn")
    ap.add_argument("--medium", type=int, default=30,
                    help="matmul rounds of the medium fn (about a step's time: where an "
                         "overlap can double steps/s on 2 cores)")
    ap.add_argument("--prefetch", default="0,1,2,4",
                    help="prefetch buffer sizes to time (0: none)")
    ap.add_argument("--fns", default="cheap,medium,costly", help="map fns to time")
    ap.add_argument("--iter-per-epoch", action="store_true",
                    help="also time prefetch with iter() per epoch (a producer per epoch)")
    args = ap.parse_args()
    with tfc.Graph().as_default():
        example = runpy.run_path(str(ROOT / "examples" / "cnn_digits.py"),
                                 run_name="__tfc_model__")
    x, _, y, _ = digits_split()
    fns = {"cheap": example["rows_to_images"], "medium": costly(args.medium),
           "costly": costly(args.cost)}
    print(f"load: {os.getloadavg()[0]:.2f}  backend: {os.environ.get('TFC_BACKEND', 'llvm')}"
          f"  batch {args.batch}, {len(x)} examples, {args.rounds} rounds x {args.epochs} "
          f"epochs (first epoch of each not counted)")
    fns = {name: fns[name] for name in args.fns.split(",")}
    modes = [False, True] if args.iter_per_epoch else [False]
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            for prefetch in map(int, args.prefetch.split(",")):
                for per_epoch in modes if prefetch else [False]:
                    label = f"{prefetch}{' iter' if per_epoch else ''}" if prefetch else "-"
                    rows.setdefault((name, label), []).append(measure(
                        example, x, y, args.batch, args.epochs, fn, prefetch, per_epoch))
    print("waits per step in ms, over the steps after an epoch's first; 'first': the wait "
          "for an epoch's first batch (the shuffle buffer's fill)")
    print(f"{'map fn':8} {'prefetch':>8} {'steps/s':>8} {'step med':>9} {'wait med':>9} "
          f"{'wait p90':>9} {'wait mean':>10} {'first':>7} {'pipe cpu':>9} {'cpu/step':>9} "
          f"{'load':>5}")
    for (name, label), results in rows.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(f"{name:8} {label:>8} {med['steps_per_s']:8.1f} "
              f"{med['step_med'] * 1e3:9.3f} {med['wait_med'] * 1e3:9.3f} "
              f"{med['wait_p90'] * 1e3:9.3f} {med['wait_mean'] * 1e3:10.3f} "
              f"{med['first_wait'] * 1e3:7.2f} {med['pipe_cpu'] * 1e3:9.3f} "
              f"{med['proc_cpu'] * 1e3:9.3f} {med['load']:5.2f}")
    print(f"load: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
