"""Backup workers under injected stragglers (issue #18 item 3; the OSDI'16 paper's Fig. 8).

The digits MLP (``examples/mlp_digits.py``) trained synchronously on 1 PS with N = 4
workers (``--workers``) and b = 0..4 backup workers (``tfc.distributed.BackupTrainer``):
every step each of the N + b workers computes the gradients of its own mini-batch of
``--batch`` examples and the PS applies the mean of the first N. Stragglers are injected
(``--straggler``, default ``lognormal:sigma=0.5,median=20ms,seed=1``: every worker waits a
seeded log-normal delay before computing, each step). Reported per b: the median and p90
step time, the offers dropped, and the test accuracy after ``--epochs`` epochs of N
mini-batches a step (the sync accuracy band: b = 0's).

    python tools/bench_backup.py [--backups 0,1,2,3,4] [--straggler SPEC] [--epochs 5]

The paper saw the median step time fall up to 4 backups and rise after (more workers to
serve per step). Report ``uptime``'s load with the numbers: the host's cores are shared.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "mlp_digits.py"
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tools"))


def accuracy(variables: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """The test accuracy of ``MODEL`` with ``variables``."""
    from tfc.compiler.driver import load_source
    from tfc.runtime import Program
    program = Program(load_source(MODEL), variables=variables)
    return float(program.run("evaluate", x=x, y=y)["accuracy"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--backups", default="0,1,2,3,4")
    ap.add_argument("--straggler", default="lognormal:sigma=0.5,median=20ms,seed=1")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    from data import digits_split

    from tfc.compiler.driver import load_source
    from tfc.distributed.backup import BackupTrainer, StragglerSpec
    from tfc.distributed.cluster import LoopbackCluster
    from tfc.passes.replicate import ClusterSpec
    x_train, x_test, y_train, y_test = digits_split()
    straggler = StragglerSpec.parse(args.straggler)
    steps = args.epochs * len(x_train) // (args.workers * args.batch)

    def batch(k: int, i: int) -> dict[str, np.ndarray]:
        idx = np.random.default_rng([k, i]).choice(len(x_train), args.batch, replace=False)
        return {"x": np.ascontiguousarray(x_train[idx]), "y": np.ascontiguousarray(y_train[idx])}

    rows = []
    with LoopbackCluster(3) as loop:
        for b in (int(s) for s in args.backups.split(",")):
            with BackupTrainer(load_source(MODEL), ClusterSpec(1, args.workers, "ps-sync"),
                               loop.address, backup_workers=b) as trainer:
                stats = trainer.train(batch, steps, straggler)
                acc = accuracy(trainer.variables(), x_test, y_test)
            rows.append((b, stats.median_s(), stats.p90_s(), stats.late, acc))
            print(f"b={b}: median {stats.median_s() * 1e3:.1f} ms, p90 "
                  f"{stats.p90_s() * 1e3:.1f} ms, dropped {stats.late}, test acc {acc:.4f}",
                  flush=True)
    load = os.getloadavg()
    print(f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; N={args.workers}, "
          f"{steps} steps, straggler {args.straggler}")
    print(f"{'backups':>7} {'median ms':>9} {'p90 ms':>7} {'dropped':>7} {'test acc':>8}")
    for b, med, p90, late, acc in rows:
        print(f"{b:7d} {med * 1e3:9.1f} {p90 * 1e3:7.1f} {late:7d} {acc:8.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
