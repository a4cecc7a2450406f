"""What the multi-device executor itself costs, per step, per stage and per transfer.

    PYTHONPATH=. python tools/bench_executor.py [--steps N] [--backend llvm]
                                                [--only tiny,handoff,chain]

Three measurements (medians over many steps; the machine is shared, so repeat a number
that matters):

- ``tiny``: a 2-layer MLP's ``predict`` split over two devices (two compute stages, one
  transfer) against the same entry on one device. The difference of their step times is
  what the executor adds to a step; the stage calls are timed too, through the executor's
  own call (``Stage.run``) and through the executable directly (``fast_step``).
- ``handoff``: a send in one thread to the recv returning in another, on a bare
  ``Rendezvous`` (what the cost model's hand-off latency is): the receiver already
  waiting, and the value already there.
- ``chain``: a 64-layer, 256-wide MLP training step, the first half pinned to ``/cpu:0``
  and the second to ``/cpu:1`` (its gradients go where the placer puts them), traced: per
  step, the time each device waits in recvs, and the part of it that the other device's
  compute does not explain (from the send of each key, or the start of the wait if later,
  to the recv returning: the wake-up latency of every transfer).

Measured on the 2-core Zen 5 host of issue #16 (shared, load 2-5; medians, 3 rounds,
before = main at 72a2d58): a stage as the executor calls it costs 0.4 us over its
``fast_step`` (was 1.1-1.2 us); a tiny 2-device step 39-58 us (was 46-72 us: two or
three thread wake-ups of ~13 us each, the bare hand-off's latency, dominate); the
chain's unexplained recv wait 0.27-0.56 ms per device per step (was 0.35-0.62 ms, one
round 2.3 ms). The chain step itself is 22-23 ms (was 15-16 ms quiet, 65-160 ms under
load): each device's GEMMs now use its share of OpenBLAS's threads (one here) instead
of every core, which costs a split chain the other core while its peer waits but ends
the oversubscribed steps of seconds (``tfc bench`` of the placer's mlp64 split: median
23-24 ms, max 28-64 ms; was 18-19 ms quiet and 100-395 ms with 1-6 s steps loaded).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from typing import Any, Callable

import numpy as np

from tfc.pipeline import Target, lower
from tfc.runtime import Program
from tfc.runtime.rendezvous import Rendezvous
from tfc.runtime.trace import Tracer
from tfc.testing import split_mlp_module

TWO = ("/cpu:0", "/cpu:1")


def median_us(fn: Callable[[], Any], steps: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def tiny(steps: int, backend: str) -> None:
    x = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)
    one = Program(split_mlp_module([None], sizes=(4, 4, 3)), backend=backend)
    placed = lower(split_mlp_module(list(TWO), sizes=(4, 4, 3)), Target(backend, TWO),
                   passes="", place=False)
    two = Program(placed, dict(one.variables), backend=backend)
    run1, run2 = one.callable("predict", fetches="logits"), two.callable("predict",
                                                                         fetches="logits")
    np.testing.assert_allclose(run1(x), run2(x), rtol=1e-6)
    t1, t2 = median_us(lambda: run1(x), steps), median_us(lambda: run2(x), steps)
    print(f"tiny predict (2 layers, 1 transfer), {backend}:")
    print(f"  one device   {t1:8.1f} us/step")
    print(f"  two devices  {t2:8.1f} us/step  (executor adds {t2 - t1:.1f} us)")
    exe = two._executable("predict")
    variables = two._view
    for plan in exe.plans:
        for st in plan.stages:
            if st.executable is None:
                continue
            # zeros of the stage's own input types, batch 4
            feeds = [np.zeros(tuple(4 if isinstance(d, str) else d for d in a.type.shape),
                              a.dtype.np) for a in st.graph.args]
            call = getattr(st, "call", None) or st.executable
            via = median_us(lambda: call(feeds, variables, 0), steps)
            fast = getattr(st.executable, "fast_step", None)
            held = [variables[n] for n in getattr(st.executable, "var_names", ())]
            direct = (median_us(lambda: fast(feeds, held, 0), steps) if fast is not None
                      else float("nan"))
            print(f"  {plan.device} @{st.graph.name}: {via:6.1f} us as the executor calls it,"
                  f" {direct:6.1f} us through fast_step")


def handoff(steps: int) -> None:
    value = np.zeros(1, np.float32)
    waiting, ready = [], []
    go, done = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def receiver() -> None:
        while True:
            go.wait()
            go.clear()
            rv = box.get("rv")
            if rv is None:
                return
            rv.recv("k")
            box["t"] = time.perf_counter()
            done.set()

    t = threading.Thread(target=receiver, daemon=True)
    t.start()
    for i in range(steps + 20):
        rv = box["rv"] = Rendezvous(timeout_s=10)
        go.set()
        time.sleep(50e-6)  # the receiver is blocked in recv by now
        t0 = time.perf_counter()
        rv.send("k", value)
        done.wait(10)
        done.clear()
        if i >= 20:
            waiting.append(box["t"] - t0)
    box["rv"] = None
    go.set()
    t.join()
    for _ in range(steps):
        rv = Rendezvous()
        t0 = time.perf_counter()
        rv.send("k", value)
        rv.recv("k")
        ready.append(time.perf_counter() - t0)
    print("hand-off (bare Rendezvous, one thread to another):")
    print(f"  receiver waiting: {statistics.median(waiting) * 1e6:6.1f} us send -> recv returns")
    print(f"  value already there: {statistics.median(ready) * 1e6:6.1f} us send + recv")


def chain(steps: int, backend: str, batch: int = 64) -> None:
    # /tmp/i16/mlp64.py's model: 64 ReLU layers, He init, SGD; first half on /cpu:0
    m = split_mlp_module([TWO[0]] * 32 + [TWO[1]] * 32, sizes=(256,) * 65, stddev=None,
                         lr=0.01)
    program = Program(lower(m, Target(backend, TWO)), backend=backend)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, 256)).astype(np.float32)
    y = rng.integers(0, 256, batch).astype(np.int32)
    for _ in range(5):
        program.run("train", x=x, y=y)
    exe = program._executable("train")
    table = program.module.partitions["train"]
    n_transfers = len(table.sends())
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        program.run("train", x=x, y=y)
        times.append(time.perf_counter() - t0)
    tracer = Tracer()
    exe.tracer = tracer
    waits: dict[str, list[float]] = {}
    unexplained: dict[str, list[float]] = {}
    busy: dict[str, list[float]] = {}
    try:
        for i in range(steps):
            tracer.step = i
            tracer.events.clear()
            program.run("train", x=x, y=y)
            sent = {e["name"][5:]: e["ts"] for e in tracer.events if e.get("cat") == "send"}
            per_wait: dict[str, float] = {}
            per_lost: dict[str, float] = {}
            per_busy: dict[str, float] = {}
            names = {tid: d for d, tid in tracer.devices.items()}
            for e in tracer.events:
                d = names.get(e.get("tid"))
                if e.get("cat") == "recv":  # one wait for a stage's keys (or one key)
                    keys = e["args"].get("keys") or [e["name"][5:]]
                    start, end = e["ts"], e["ts"] + e["dur"]
                    last_sent = max(sent.get(k, start) for k in keys)
                    per_wait[d] = per_wait.get(d, 0.0) + e["dur"]
                    per_lost[d] = per_lost.get(d, 0.0) + end - max(start, last_sent)
                elif e.get("cat") == "stage":
                    per_busy[d] = per_busy.get(d, 0.0) + e["dur"]
            for d in per_busy:
                waits.setdefault(d, []).append(per_wait.get(d, 0.0))
                unexplained.setdefault(d, []).append(per_lost.get(d, 0.0))
                busy.setdefault(d, []).append(per_busy[d])
    finally:
        exe.tracer = None
    stages = sum(1 for plan in exe.plans for st in plan.stages if st.executable is not None)
    print(f"64x256 MLP train step split in halves over 2 devices (batch {batch}), {backend}: "
          f"{stages} compute stages, {n_transfers} transfers")
    print(f"  step {statistics.median(times) * 1e3:.3f} ms (median of {steps}, untraced)")
    for d in busy:
        print(f"  {d}: compute {statistics.median(busy[d]) / 1e3:.3f} ms, waiting in recv "
              f"{statistics.median(waits[d]) / 1e3:.3f} ms, of which not explained by the "
              f"other device's compute {statistics.median(unexplained[d]) / 1e3:.3f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--backend", default="llvm")
    ap.add_argument("--only", default="tiny,handoff,chain")
    args = ap.parse_args(argv)
    parts = args.only.split(",")
    if "tiny" in parts:
        tiny(args.steps, args.backend)
    if "handoff" in parts:
        handoff(args.steps)
    if "chain" in parts:
        chain(max(20, args.steps // 10), args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
