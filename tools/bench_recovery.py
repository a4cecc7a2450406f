"""Recovery benchmark (issue #18 item 4): how long a cluster job takes to survive the death
of a worker and of a PS task, and how many steps it loses.

On a ``LoopbackCluster`` this tool starts (``--nodes``, default 3: each task on a node of
its own) the MLP 784-512-512-10 of ``tools/bench_cluster.py`` (SGD, global batch 512,
2.4 MB of variables) is compiled for 1 PS and 2 workers (``ps-sync``) and trained under a
``tfc.distributed.recovery.Supervisor``, with a checkpoint every ``--every`` steps. Four
kinds of failure, each ``--repeats`` times:

- ``worker:1 injected`` / ``ps:0 injected``: ``--inject-failure`` (the task SIGKILLs
  itself just before a step is launched; the launch then fails: detection (a));
- ``worker:1 killed`` / ``ps:0 killed``: SIGKILL of the task's process from outside,
  between two steps, found by the driver's health checks (every ``--health`` s:
  detection (b)), or by the next step's failure if that comes first.

Each row gives medians: *detect* (from the kill to the driver knowing), *restart* (a new
actor on another node, the artifact loaded and compiled there, every task reconnected),
*restore* (every variable from the latest sharded checkpoint), the steps lost (the failed
step minus the checkpoint's), and *back* (from the kill until the failed step has run
again: detection, restart, restore and the replayed steps; for the ``killed`` rows it
includes the idle wait, 2 x ``--health``, that the tool leaves between the kill and the
next step for the health checks to act). The header gives the load
average before and after (the host may be shared: numbers are noisy, take medians).

    python tools/bench_recovery.py                    # 3 repeats of each (about a minute)
    python tools/bench_recovery.py --repeats 5 --json out.json
    python tools/bench_recovery.py --elastic          # elastic all-reduce instead
    python tools/bench_recovery.py --hung             # a SIGSTOPped worker instead

``--hung``: ``worker:1`` SIGSTOPped just before a step is launched; the step waits for
it until two health checks in a row (each bounded by ``--health-timeout``) found it
silent, then the task is killed and restarted as a dead one is.

``--elastic``: the same MLP compiled for 3 ``allreduce`` workers (global batch
``ELASTIC_BATCH``, which splits into 3 and into 2), ``worker:1`` injected at step
``--every`` + 2 under ``Supervisor(on_failure="elastic")``: the job goes on with 2
workers, and ``worker:1`` restarted in the background rejoins when ready (unless
``--no-rejoin``). A fresh program per repeat (each run shrinks its ring once and grows
it back once). Medians of *detect*, *recompile* (the step replicated for 2 workers and
lowered), *ring* (2 new actors on the survivors' nodes, started together, connected,
their parts compiled), *read* (the variables from a survivor), *first step* (the failed
step run again on the new ring: the first step of a new program compiles nothing more,
but its variables are sent), *back* (from the kill to the end of that step), the steps
lost, and the median step before and after (at 2 workers, while the restart runs in the
background). The rejoin: *restart* (from the shrink until the 3 new actors of the full
ring, started together in the background, are ready), *ready wait* (until the next step
boundary), *read* (the variables from a survivor), *swap*, *first step at 3* (every
variable sent with it), *back* (from the end of the first step at 2 to the end of the
first at 3), the steps run at 2 meanwhile, and the median step at 3 after it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_cluster import MLP_BATCH, MLP_MODEL, MLP_SIZES  # noqa: E402
from bench_timing import machine_info  # noqa: E402

from tfc.compiler.driver import compile_model  # noqa: E402
from tfc.distributed.cluster import LoopbackCluster  # noqa: E402
from tfc.distributed.recovery import Supervisor, full_name  # noqa: E402
from tfc.passes.replicate import ClusterSpec  # noqa: E402
from tfc.runtime.program import Program  # noqa: E402

CASES = (("worker:1", "injected"), ("ps:0", "injected"), ("worker:1", "killed"),
         ("ps:0", "killed"))
# ``--hung``: a worker SIGSTOPped just before a step is launched (it hangs, it does not
# die): found by two silent health checks (each bounded by ``--health-timeout``)
HUNG_CASES = (("worker:1", "hung"),)


def batch(step: int) -> dict[str, np.ndarray]:
    """Step ``step``'s batch: a deterministic data order (a replayed step sees it again)."""
    rng = np.random.default_rng(step)
    return {"x": rng.normal(size=(MLP_BATCH, MLP_SIZES[0])).astype(np.float32),
            "y": rng.integers(0, MLP_SIZES[-1], MLP_BATCH).astype(np.int32)}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(args: argparse.Namespace, address: str, work: Path) -> list[dict[str, Any]]:
    model = work / "mlp.py"
    model.write_text(MLP_MODEL.format(sizes=MLP_SIZES))
    module = compile_model(model, cluster=ClusterSpec(ps=1, workers=2, strategy="ps-sync"))
    program = Program(module, cluster=address, cluster_timeout_s=60)
    ck = work / "ck"
    rows: list[dict[str, Any]] = []
    try:
        # a failure every `gap` steps, `lost` steps after a checkpoint
        gap, lost = 2 * args.every, args.every // 2
        cases = HUNG_CASES if args.hung else CASES
        plan = [(task, how) for _ in range(args.repeats) for task, how in cases]
        first = args.every + lost
        inject = [f"{task}@step={first + i * gap}" for i, (task, how) in enumerate(plan)
                  if how == "injected"]
        kills = {first + i * gap: (task, how) for i, (task, how) in enumerate(plan)
                 if how != "injected"}
        kill_times: dict[int, float] = {}
        with Supervisor(program, ck, inject=inject, health_interval_s=args.health,
                        health_timeout_s=args.health_timeout,
                        report=lambda line: print("  " + line)) as supervisor:
            def one() -> Any:
                out = program.run("train_step", batch(program.step))
                if program.step % args.every == 0:
                    program.save_checkpoint(ck, max_to_keep=2)
                return out

            back: dict[int, float] = {}
            for _ in range(first + len(plan) * gap):
                step = program.step
                if step in kills and step not in kill_times:
                    task = full_name(kills[step][0], program._cluster.tasks)
                    kill_times[step] = time.monotonic()
                    hang = kills[step][1] == "hung"
                    os.kill(program._cluster.where[task]["pid"],
                            signal.SIGSTOP if hang else signal.SIGKILL)
                    if not hang:  # between steps: the health checks find it
                        time.sleep(args.health * 2)
                injected_at = time.monotonic()
                supervisor.step(one)
                if step >= first and (step - first) % gap == 0:
                    back[step] = time.monotonic() - kill_times.get(step, injected_at)
        for event, (task, how) in zip(supervisor.events, plan):
            detect = event.detect_s if how == "injected" else \
                event.detected_at - kill_times[event.step]
            rows.append({"task": task, "how": how, "step": event.step,
                         "detected_by": event.detected_by, "detect_s": detect,
                         "restart_s": event.restart_s, "restore_s": event.restore_s,
                         "lost": event.lost_steps, "back_s": back.get(event.step)})
    finally:
        program.close(read_back=False)
    return rows


ELASTIC_BATCH = 504  # 3 shards of 168, then 2 of 252


def elastic_batch(step: int, rows: int = ELASTIC_BATCH) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    return {"x": rng.normal(size=(rows, MLP_SIZES[0])).astype(np.float32),
            "y": rng.integers(0, MLP_SIZES[-1], rows).astype(np.int32)}


def run_elastic(args: argparse.Namespace, address: str, work: Path) -> list[dict[str, Any]]:
    model = work / "mlp.py"
    model.write_text(MLP_MODEL.format(sizes=MLP_SIZES))
    module = compile_model(model, cluster=ClusterSpec(ps=0, workers=3, strategy="allreduce"))
    rows = []
    fail_at = args.every + 2
    for _ in range(args.repeats):
        program = Program(module, cluster=address, cluster_timeout_s=60)
        times: dict[int, float] = {}
        ring: dict[int, int] = {}
        try:
            with Supervisor(program, None, "elastic", inject=[f"worker:1@step={fail_at}"],
                            health_interval_s=args.health, rejoin=not args.no_rejoin,
                            report=lambda line: print("  " + line)) as supervisor:
                step = 0
                while not elastic_done(args, supervisor, step, times, fail_at):
                    started = time.monotonic()
                    times[-1 - step] = started  # (when the step began)
                    supervisor.step(lambda: program.run(
                        "train_step", elastic_batch(step, args.elastic_batch)))
                    times[step] = time.monotonic() - started
                    ring[step] = len(program._cluster.tasks)
                    step = program.step
            event = supervisor.events[0]
            shrunk = event.elastic
            assert shrunk is not None
            # the failed step's time from its kill: detection, recompile, ring, read, rerun
            detect = event.detect_s or 0.0
            recovered = detect + event.restart_s + event.restore_s
            steps = sorted(s for s in times if s >= 0)
            row = {"layout": shrunk.layout, "detect_s": detect,
                   "recompile_s": shrunk.recompile_s,
                   "ring_s": shrunk.ring_s, "read_s": shrunk.read_s,
                   "first_step_s": times[fail_at] - recovered, "back_s": times[fail_at],
                   "lost": event.lost_steps,
                   "step_before_s": statistics.median(
                       [times[s] for s in range(1, fail_at)]),
                   "step_after_s": statistics.median(
                       [times[s] for s in steps if s > fail_at + 1 and ring[s] == 2][:20]
                       or [float("nan")])}
            back = supervisor.rejoins[0] if supervisor.rejoins else None
            if back is not None and not back.failed:
                grown = back.step  # the first step on the grown ring
                shrunk_at = times[-1 - fail_at] + times[fail_at]  # the first N-1 step's end
                row.update({
                    "restart_s": back.restart_s, "ready_wait_s": back.ready_wait_s,
                    "rejoin_read_s": back.read_s, "swap_s": back.swap_s,
                    "first_step_n_s": times[grown] - back.read_s - back.swap_s,
                    "rejoin_back_s": times[-1 - grown] + times[grown] - shrunk_at,
                    "steps_at_n_minus_1": grown - fail_at,
                    "step_grown_s": statistics.median(
                        [times[s] for s in steps if s > grown][:20] or [float("nan")])})
            elif back is not None:
                row["rejoin_failed"] = back.failed
            rows.append(row)
        finally:
            program.close(read_back=False)
    return rows


MAX_REJOIN_S = 120.0  # --elastic: how long a run waits (stepping) for a rejoin


def elastic_done(args: argparse.Namespace, supervisor: Any, step: int,
                 times: dict[int, float], fail_at: int) -> bool:
    """Whether an ``--elastic`` run has its steps: ``--every + 8``, and with a rejoin 6
    more after it (or its failure, or ``MAX_REJOIN_S`` after the kill without one)."""
    if step < args.every + 8:
        return False
    if args.no_rejoin:
        return True
    if supervisor.rejoins:
        back = supervisor.rejoins[0]
        return bool(back.failed) or step >= back.step + 6
    return time.monotonic() - times[-1 - fail_at] > MAX_REJOIN_S


def report_elastic(rows: list[dict[str, Any]]) -> None:
    keys = ("detect_s", "recompile_s", "ring_s", "read_s", "first_step_s", "back_s", "lost",
            "step_before_s", "step_after_s")
    print(f"elastic, 3 -> 2 workers, layout {rows[0]['layout']}, medians over {len(rows)} (s):")
    print("  " + " ".join(f"{k[:-2] if k.endswith('_s') else k:>11}" for k in keys))
    print("  " + " ".join(f"{statistics.median(r[k] for r in rows):>11.3f}" for k in keys))
    grown = [r for r in rows if "restart_s" in r]
    if grown:
        grown_keys = ("restart_s", "ready_wait_s", "rejoin_read_s", "swap_s", "first_step_n_s",
                "rejoin_back_s", "steps_at_n_minus_1", "step_grown_s")
        print(f"rejoin, 2 -> 3 workers, medians over {len(grown)} (s; restart: in the "
              f"background, from the shrink; back: from the first step at 2 to the end of "
              f"the first at 3):")
        print("  " + " ".join(f"{k[:-2] if k.endswith('_s') else k:>13}"
                              for k in grown_keys))
        print("  " + " ".join(f"{statistics.median(r[k] for r in grown):>13.3f}"
                              for k in grown_keys))
    for r in rows:
        if "rejoin_failed" in r:
            print(f"  no rejoin: {r['rejoin_failed']}")


def report(rows: list[dict[str, Any]]) -> None:
    cases = sorted({(r["task"], r["how"]) for r in rows}, key=[*CASES, *HUNG_CASES].index)
    print(f"{'failure':<20} {'found by':<16} {'detect':>8} {'restart':>8} {'restore':>8} "
          f"{'lost':>5} {'back':>8}  (medians over {len(rows) // len(cases)} each, s)")
    for task, how in cases:
        mine = [r for r in rows if (r["task"], r["how"]) == (task, how)]
        if not mine:
            continue
        found = sorted({r["detected_by"] for r in mine})

        def med(key: str) -> str:
            values = [r[key] for r in mine if r[key] is not None]
            return f"{statistics.median(values):.2f}" if values else "-"
        print(f"{task + ' ' + how:<20} {'/'.join(found):<16} {med('detect_s'):>8} "
              f"{med('restart_s'):>8} {med('restore_s'):>8} {med('lost'):>5} {med('back_s'):>8}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every", type=int, default=4, help="checkpoint every K steps")
    parser.add_argument("--health", type=float, default=0.5, help="health check interval, s")
    parser.add_argument("--json", metavar="FILE", help="also write the raw rows here")
    parser.add_argument("--health-timeout", type=float, default=2.0,
                        help="each health check's bound, s (a task silent for two is dead)")
    parser.add_argument("--hung", action="store_true",
                        help="a worker SIGSTOPped just before a step instead (it hangs)")
    parser.add_argument("--elastic-batch", type=int, default=ELASTIC_BATCH,
                        help="--elastic's global batch (504 splits into 3 and 2: the even "
                             "layout; 501 only into 3: the shards kept)")
    parser.add_argument("--elastic", action="store_true",
                        help="an allreduce worker lost under --on-failure elastic instead")
    parser.add_argument("--no-rejoin", action="store_true",
                        help="--elastic: the ring stays at 2 (no restart in the background)")
    args = parser.parse_args()
    info = machine_info()
    print(f"{info['cpu']}, {info['cores']} cores; load before: {load()}")
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp, \
            LoopbackCluster(args.nodes) as cluster:
        rows = (run_elastic if args.elastic else run)(args, cluster.address, Path(tmp))
    print(f"load after: {load()}")
    (report_elastic if args.elastic else report)(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
