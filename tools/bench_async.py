"""Asynchronous PS training against synchronous (issue #18 item 1): the digits MLP.

The model is ``examples/mlp_digits_ps.py``: ``mlp_digits.py``'s MLP (64-128-64-10, Adam
0.005) with its rate decayed (cosine, to a tenth over the run's updates: at a constant
rate the final weights' accuracy swings by 2-3% from one update to the next, in one
process too; see there), mini-batches of ``--batch`` (32) examples drawn from the
training split, shuffled each epoch with a fixed seed. On a ``LoopbackCluster`` this tool starts (a head and two more nodes on 127.0.0.1):

- ``ps-async`` with 1 PS and 1, 2, 4 workers (``tfc.distributed.AsyncPSTrainer``): each
  step is one worker's mini-batch, applied on the PS on arrival; ``--epochs`` passes over
  the data in all (the workers share them). Reported: steps/s and examples/s (wall time
  of the whole run), the test accuracy of the final weights, the staleness distribution
  and histogram; once per ``--seeds`` seed of the data order (the accuracy of an
  asynchronous run varies with the order the updates land in: report it over seeds).
  ``--damping`` scales gradients staler than W - 1 updates (``staleness_damping``);
- ``ps-sync`` with 1 PS and the same numbers of workers (``tfc compile --cluster``'s
  module on ``Program(cluster=...)``): each step takes W mini-batches (one per worker)
  and applies their mean once, so the same epochs are 1/W as many steps.

    python tools/bench_async.py [--epochs 20] [--workers 1,2,4] [--parts async,sync]
        [--seeds 0,1,2] [--damping] [--straggler worker:3=25ms]

Report ``uptime``'s load with the numbers: the host's cores are shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "mlp_digits_ps.py"
sys.path.insert(0, str(ROOT / "examples"))


def batches(x: np.ndarray, y: np.ndarray, size: int, seed: int
            ) -> Callable[[int], dict[str, np.ndarray]]:
    """Step ``k``'s mini-batch: epoch ``k // per_epoch``'s permutation, in order."""
    per_epoch = len(x) // size
    orders: dict[int, np.ndarray] = {}

    def batch(k: int) -> dict[str, np.ndarray]:
        epoch, i = divmod(k, per_epoch)
        if epoch not in orders:
            orders[epoch] = np.random.default_rng(seed + epoch).permutation(len(x))
        idx = orders[epoch][i * size:(i + 1) * size]
        return {"x": np.ascontiguousarray(x[idx]), "y": np.ascontiguousarray(y[idx])}

    return batch


def model(decay_steps: int) -> Any:
    """The example's module, its rate decayed over ``decay_steps`` updates."""
    import importlib.util

    import tfc
    spec = importlib.util.spec_from_file_location("mlp_digits_ps", MODEL)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    with tfc.Graph().as_default():
        spec.loader.exec_module(example)
    graph = tfc.Graph()
    with graph.as_default():
        example.build(decay_steps)
    return graph.as_module()


def accuracy(variables: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    from tfc.runtime import Program
    program = Program(model(1), variables=variables)
    return float(program.run("evaluate", x=x, y=y)["accuracy"])


def run_async(address: str, workers: int, steps: int, batch: Callable[[int], Any],
              test: tuple[np.ndarray, np.ndarray], damping: bool = False,
              straggler: Any = None) -> dict[str, Any]:
    from tfc.distributed.async_ps import AsyncPSTrainer, progress_line
    from tfc.passes.replicate import ClusterSpec
    spec = ClusterSpec(1, workers, "ps-async")
    with AsyncPSTrainer(model(steps), spec, address,
                        staleness_damping=damping) as trainer:
        every = max(1, steps // 4)

        def progress(k: int, stats: Any) -> None:
            if stats.steps % every == 0 or stats.steps == steps:
                print(f"  {progress_line(stats, steps)}", flush=True)

        stats = trainer.train(batch, steps, progress, straggler)
        variables = trainer.variables()
    return {"steps_per_s": stats.steps_per_s, "accuracy": accuracy(variables, *test),
            "staleness": stats.staleness_line(), "histogram": stats.histogram(),
            "worker_steps": list(stats.worker_steps.values())}


def run_sync(address: str, workers: int, steps: int, batch: Callable[[int], Any],
             test: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    from tfc.passes.replicate import ClusterSpec
    from tfc.pipeline import Target, lower
    from tfc.runtime import Program
    sync_steps = steps // workers
    spec = ClusterSpec(1, workers, "ps-sync")
    module = lower(model(sync_steps), Target("llvm", tuple(spec.devices), False, spec))
    program = Program(module, cluster=address)
    try:
        started = time.perf_counter()
        for k in range(sync_steps):
            parts = [batch(k * workers + i) for i in range(workers)]
            program.run("train_step", {n: np.concatenate([p[n] for p in parts])
                                       for n in ("x", "y")})
        seconds = time.perf_counter() - started
        variables = {n: np.array(v) for n, v in program.variables.items()}
    finally:
        program.close()
    return {"steps_per_s": sync_steps / seconds, "accuracy": accuracy(variables, *test),
            "examples_per_step": workers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--parts", default="async,sync")
    ap.add_argument("--cluster", metavar="HOST:PORT", help="a running Ray cluster")
    ap.add_argument("--seeds", default="0", help="data-order seeds of the async runs")
    ap.add_argument("--damping", action="store_true",
                    help="scale gradients staler than W - 1 updates (staleness_damping)")
    ap.add_argument("--straggler", metavar="SPEC", help="delay async workers (StragglerSpec)")
    args = ap.parse_args()
    from tfc.distributed.backup import StragglerSpec
    straggler = StragglerSpec.parse(args.straggler) if args.straggler else None
    from data import digits_split

    from tfc.distributed.cluster import LoopbackCluster
    x_train, x_test, y_train, y_test = digits_split()
    steps = args.epochs * (len(x_train) // args.batch)
    loop = None
    address = args.cluster
    if address is None:
        loop = LoopbackCluster(3).start()
        address = loop.address
    rows = []
    try:
        for part in args.parts.split(","):
            for w in (int(s) for s in args.workers.split(",")):
                seeds = [int(s) for s in args.seeds.split(",")] if part == "async" else [0]
                for seed in seeds:
                    print(f"{part} workers={w} seed={seed}: {steps} mini-batches of "
                          f"{args.batch}", flush=True)
                    batch = batches(x_train, y_train, args.batch, seed=100 * seed)
                    r = (run_async(address, w, steps, batch, (x_test, y_test),
                                   args.damping, straggler) if part == "async"
                         else run_sync(address, w, steps, batch, (x_test, y_test)))
                    per_step = r.get("examples_per_step", 1) * args.batch
                    rows.append((part, w, seed, r["steps_per_s"], r["steps_per_s"] * per_step,
                                 r["accuracy"], r.get("staleness", ""),
                                 r.get("histogram", {})))
                    print(f"  {r}", flush=True)
    finally:
        if loop is not None:
            loop.stop()
    load = os.getloadavg()
    print(f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{args.epochs} epochs, mini-batch {args.batch}")
    print(f"{'strategy':10} {'workers':>7} {'seed':>4} {'steps/s':>8} {'examples/s':>10} "
          f"{'test acc':>8}  staleness")
    for part, w, seed, sps, eps, acc, stale, _ in rows:
        print(f"ps-{part:7} {w:7d} {seed:4d} {sps:8.1f} {eps:10.0f} {acc:8.4f}  {stale}")
    for part, w, seed, *_, histogram in rows:
        if histogram:
            print(f"staleness histogram ps-{part} workers={w} seed={seed}: "
                  + ", ".join(f"{s}: {n}" for s, n in histogram.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
