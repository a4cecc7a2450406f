"""Mini-batches of named arrays for a training loop that runs an entry per step (``tfc run
--batch N [--epochs E] [--shuffle --seed S]``), with the position saved in checkpoints.

Every feed with a first dim is sliced (they must share its length); scalars are fed whole
each step. The pipeline is ``batches_of(arrays, N, shuffle, seed).repeat()``; its
iterator's state and the count of batches taken go into the checkpoint's extras under
``data/``, so ``--resume`` continues with exactly the batch an uninterrupted run would
have taken next (same seed, same order, also mid-epoch)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tfc.data.dataset import flat_state, unflatten_state
from tfc.errors import TfcError

PREFIX = "data/"
BATCHES = PREFIX + "batches"  # batches taken so far (all epochs)
BATCH_SIZE = PREFIX + "batch_size"


class MiniBatches:
    """Per-step feeds: ``next_feeds()``; ``extra()`` and ``restore(extra)`` for
    checkpoints; ``steps_to(epochs)``: the steps left to the end of epoch ``epochs``."""

    def __init__(self, feeds: Mapping[str, Any], batch_size: int, shuffle: bool,
                 seed: int) -> None:
        from tfc.data.dataset import batches_of
        arrays = {k: np.asarray(v) for k, v in feeds.items() if np.ndim(v) >= 1}
        self.fixed = {k: v for k, v in feeds.items() if k not in arrays}
        if not arrays:
            raise TfcError("--batch: no feed has a first dim to batch (give arrays with "
                           "--feed NAME=FILE.npy)")
        lengths = {k: len(a) for k, a in arrays.items()}
        if len(set(lengths.values())) != 1:
            raise TfcError("--batch: the batched feeds have different first dims ("
                           + ", ".join(f"{k}: {n}" for k, n in lengths.items()) + ")")
        self.batch_size = batch_size
        self.examples = next(iter(lengths.values()))
        if self.examples == 0:
            raise TfcError("--batch: the feeds have no examples (first dim 0)")
        self.dataset = batches_of(arrays, batch_size, shuffle=shuffle, seed=seed)
        self.per_epoch = self.dataset.cardinality()
        self.iterator = self.dataset.repeat().iterator()
        self.taken = 0

    def next_feeds(self) -> dict[str, Any]:
        batch = next(self.iterator)
        self.taken += 1
        return {**batch, **self.fixed}

    def steps_to(self, epochs: int) -> int:
        """Steps left until ``epochs`` passes over the examples are done (0 if they are)."""
        return max(0, epochs * self.per_epoch - self.taken)

    def extra(self) -> dict[str, np.ndarray]:
        return {**flat_state(self.iterator.state(), PREFIX),
                BATCHES: np.asarray(self.taken, dtype=np.int64),
                BATCH_SIZE: np.asarray(self.batch_size, dtype=np.int64)}

    def restore(self, extra: Mapping[str, np.ndarray], where: str) -> None:
        """Continue from a checkpoint's extras (no ``data/`` extras: from the start)."""
        mine = {k[len(PREFIX):]: v for k, v in extra.items()
                if k.startswith(PREFIX) and k not in (BATCHES, BATCH_SIZE)}
        if not mine:
            return
        saved = int(extra.get(BATCH_SIZE, self.batch_size))
        if saved != self.batch_size:
            raise TfcError(f"{where} was saved with --batch {saved}, not {self.batch_size}: "
                           f"resume with the same batch size")
        try:
            self.iterator.restore(unflatten_state(mine))
        except (KeyError, TypeError, ValueError) as e:
            raise TfcError(f"{where}: its input position does not fit this --batch "
                           f"pipeline ({type(e).__name__}: {e})") from None
        except TfcError as e:
            raise TfcError(f"{where}: {e.message}") from None
        self.taken = int(extra.get(BATCHES, 0))
