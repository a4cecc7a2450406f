"""Sharded-embedding benchmark (issue #18 item 2): what a step moves between tasks, and
its time, for an embedding partitioned over PS tasks; sampled softmax against the full
softmax on a large vocabulary.

Every model is compiled for ``ClusterSpec(ps=2, workers=2, "ps-sync")`` and run with
``cluster="inprocess"`` (each task a thread of this process; the loopback Ray cluster
would add Ray's per-step cost and copy a 256 MB table into its actors, more than this
2-core host shared with other jobs fits in the time). The bytes are counted as the tasks
hand them over: every tensor one task's device sends to another task's during the step
(the ``send``s of the partition table whose receiver is another task), at its real size
in that step. So they are what a multi-host run would put on the wire: on the loopback
Ray cluster (``cluster="local"``, vocabulary 20,000, batch 64) the Ray runtime's own
``last_transfer_stats`` counted the same 26 tensors and 1,069,128 bytes per step as this
counter does in process, and the losses were bitwise those of the in-process run.

(a) ``examples/embedding_bow.py`` (bag of words, embedding [VOCAB, 64] f32 in 2 shards,
    SGD): bytes per step and median step time at two batch sizes and two table sizes.
    The bytes grow with the batch's ids and stay put as the table grows 10x; the static
    scheme sends each shard all the ids of a worker (``tfc.api.partitioned``), so the
    bytes are ``2 workers x 2 shards x n x (4 + 2 x 256)`` plus the dense layer's.
    The step time does not grow with the table either: each PS's gather reads its shard
    where it runs, and its update is a scatter into the shard's own array (the executor's
    ``in_place_stages``; until #18's leftovers each step copied every shard, twice).
(b) Output layer over ``--vocab`` classes (default 200,000; weights [vocab, 64] f32 in 2
    shards, biases on a PS), inputs [batch, 64]: ``tfc.nn.sampled_softmax_loss`` with 64
    sampled classes against the full softmax (``matmul`` + ``sparse_softmax_cross_
    entropy``), SGD: bytes per step and step time.

Times are medians over ``--steps`` steps after 3 warm-up steps; the header gives the load
average (the host is shared: rerun on a quiet one for numbers to compare).

    python tools/bench_embedding.py                 # both parts (a few minutes)
    python tools/bench_embedding.py --quick         # a smoke run: small tables, few steps
    python tools/bench_embedding.py --parts softmax --vocab 500000
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import tfc
from tfc.ir.core import Module
from tfc.passes.replicate import ClusterSpec, task_label
from tfc.pipeline import Target, lower
from tfc.runtime import Program
from tfc.runtime.rendezvous import Rendezvous

SPEC = ClusterSpec(2, 2, "ps-sync")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embedding_bow.py"


class CrossTaskBytes:
    """Counts the bytes of the sends that cross tasks, as the rendezvous receives them."""

    def __init__(self) -> None:
        self.crossing: set[str] = set()
        self.bytes = 0
        self.tensors = 0
        self._original = Rendezvous.send_many

    def watch(self, module: Module) -> None:
        for table in module.partitions.values():
            for device, _, send in table.sends():
                if task_label(device) != task_label(send.receiver):
                    self.crossing.add(send.key)

    def __enter__(self) -> "CrossTaskBytes":
        counter, original = self, self._original

        def send_many(rv: Rendezvous, items: Any) -> None:
            for key, value in items:
                if key in counter.crossing:
                    counter.bytes += value.nbytes
                    counter.tensors += 1
            original(rv, items)
        Rendezvous.send_many = send_many  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        Rendezvous.send_many = self._original  # type: ignore[method-assign]


def measure(build: Callable[[], None], feeds: Callable[[int], dict[str, np.ndarray]],
            steps: int, backend: str = "llvm") -> dict[str, float]:
    """Bytes between tasks in one step and the median step time of ``train``."""
    graph = tfc.Graph()
    with graph.as_default():
        build()
    module = lower(graph.as_module(), Target(backend, tuple(SPEC.devices), False, SPEC))
    program = Program(module, backend=backend, cluster="inprocess")
    counter = CrossTaskBytes()
    counter.watch(module)
    for i in range(3):
        program.run("train", **feeds(i))
    with counter:
        program.run("train", **feeds(3))
    times = []
    for i in range(steps):
        f = feeds(4 + i)
        t0 = time.perf_counter()
        program.run("train", **f)
        times.append(time.perf_counter() - t0)
    return {"bytes": counter.bytes, "tensors": counter.tensors,
            "step_ms": float(np.median(times) * 1e3)}


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("embedding_bow_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with tfc.Graph().as_default():
        spec.loader.exec_module(module)
    return module


def part_embedding(vocabs: list[int], batches: list[int], steps: int) -> list[dict[str, Any]]:
    bow = load_example()
    rows = []
    print(f"\n(a) bag of words, embedding [vocab, {bow.DIM}] f32 in 2 shards on 2 PS, "
          f"2 workers, {bow.WORDS} ids per example")
    print(f"{'vocab':>10} {'batch':>6} {'ids':>6} {'sent/step':>12} {'per id':>8} "
          f"{'tensors':>8} {'step ms':>9}")
    for vocab in vocabs:
        for batch in batches:
            def feeds(i: int, batch: int = batch, vocab: int = vocab) -> dict[str, np.ndarray]:
                x, y = bow.generate(batch, seed=i)
                return {"ids": x % vocab, "y": y}
            r = measure(lambda vocab=vocab: bow.build(vocab), feeds, steps)
            ids = batch * bow.WORDS
            r.update(vocab=vocab, batch=batch, ids=ids, table_bytes=vocab * bow.DIM * 4)
            rows.append(r)
            print(f"{vocab:>10} {batch:>6} {ids:>6} {r['bytes']:>12,} "
                  f"{r['bytes'] / ids:>8.0f} {r['tensors']:>8} {r['step_ms']:>9.1f}",
                  flush=True)
    return rows


def output_layer(vocab: int, sampled: int | None) -> None:
    """Inputs [B, 64] -> ``vocab`` classes; sampled softmax with ``sampled`` classes, or
    the full softmax (None)."""
    dim = 64
    x = tfc.placeholder(tfc.float32, [None, dim], name="x")
    y = tfc.placeholder(tfc.int64, [None, 1], name="y")
    w = tfc.Variable(tfc.random.normal([vocab, dim], stddev=0.05, seed=1), name="softmax_w",
                     partitioner=tfc.fixed_size_partitioner(2))
    b = tfc.Variable(np.zeros(vocab, np.float32), name="softmax_b")
    if sampled is None:
        logits = tfc.matmul(x, w, transpose_b=True) + b
        losses = tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tfc.cast(tfc.reshape(y, [-1]), tfc.int32), logits=logits)
    else:
        losses = tfc.nn.sampled_softmax_loss(w, b, y, x, sampled, vocab, seed=3)
    loss = tfc.reduce_mean(losses)
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])


def part_softmax(vocab: int, batch: int, sampled: int, steps: int, backend: str = "llvm"
                 ) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)

    def feeds(i: int) -> dict[str, np.ndarray]:
        return {"x": rng.normal(size=(batch, 64)).astype(np.float32),
                "y": rng.integers(0, vocab, (batch, 1)).astype(np.int64)}
    print(f"\n(b) output layer over {vocab:,} classes (weights [vocab, 64] f32 in 2 shards), "
          f"batch {batch}, 2 PS + 2 workers")
    print(f"{'loss':>22} {'sent/step':>14} {'tensors':>8} {'step ms':>9}")
    rows = []
    for name, k in ((f"sampled ({sampled})", sampled), ("full softmax", None)):
        r = measure(lambda k=k: output_layer(vocab, k), feeds, steps, backend)
        r.update(loss=name, vocab=vocab, batch=batch)
        rows.append(r)
        print(f"{name:>22} {r['bytes']:>14,} {r['tensors']:>8} {r['step_ms']:>9.1f}",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="embedding,softmax")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--vocab", type=int, default=200_000, help="(b)'s classes")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} "
          f"(before); cluster inprocess (threads), llvm backend")
    out: dict[str, Any] = {}
    if args.quick:
        vocabs, batches, steps, vocab = [10_000, 100_000], [32, 128], 3, 20_000
    else:
        vocabs, batches, steps, vocab = [100_000, 1_000_000], [64, 256], args.steps, args.vocab
    if "embedding" in parts:
        out["embedding"] = part_embedding(vocabs, batches, steps)
    if "softmax" in parts:
        out["softmax"] = part_softmax(vocab, 128, 64, steps)
    print(f"\nload average {os.getloadavg()[0]:.2f} (after)")
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
