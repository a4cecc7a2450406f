"""``tfc.data.Dataset``: a description of an input pipeline; iterating it runs the pipeline
in Python (``map``'s fn as a compiled step, ``prefetch`` on a thread).

Semantics are tf.data's: ``shuffle(buffer_size, seed)`` keeps a buffer of that many
elements and emits a uniformly chosen one, refilling its slot from upstream (so a buffer
at least the dataset's size is a full shuffle, and 1 is none), reshuffling on each pass
(each ``iter()`` and each pass of an enclosing ``repeat``); ``batch(n, drop_remainder)``
stacks ``n`` consecutive elements; ``repeat(count)`` passes ``count`` times (``None``:
forever); ``shard(num_shards, index)`` keeps the elements whose position is ``index``
modulo ``num_shards``; ``take(count)`` the first ``count``.

An iterator's position is a small nested dict of ints (``Iterator.state``): the index into
the slices, the pass of each ``repeat``, the seed and the number of elements a ``shuffle``
has emitted in its pass. A shuffle is restored by replaying its pass from the start with
the same seed (its buffer holds elements, which the checkpoint does not store), so a
restored iterator yields exactly the elements an uninterrupted one would have.
``flat_state``/``unflatten_state`` turn it into named int64 arrays for a checkpoint.

Batches of slices are made without Python per element: ``batch`` asks an upstream that
can (the slices themselves, or a ``shuffle`` of them) for the rows of a whole batch at
once (``take_rows``): a slice's rows are one copy of a range, a shuffle's one gather of
the rows it picks, which it picks on indices (its buffer holds row numbers, not
elements) with the random draws of the whole batch made in one call. The batches, and
the positions, are exactly those of the element by element pipeline (the same draws
from the same generator, in the same order), only cheaper: that work holds the GIL, which
a ``prefetch`` thread shares with the training step it runs beside.
"""

from __future__ import annotations

import os
import secrets
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from tfc.data.structure import as_arrays, flatten, packer
from tfc.errors import OutOfRangeError, TfcError

INFINITE = -1  # cardinality of an endless dataset
UNKNOWN = -2   # cardinality that depends on the data (a queue's)

Pass = tuple[int, ...]  # which pass of each enclosing repeat (and iter() call) this is


class Dataset:
    """Base of every dataset; see the module docstring."""

    def __init__(self) -> None:
        self._iterations = 0  # iter() calls so far: each is a new pass (a new shuffle)

    # ---- what subclasses give -------------------------------------------------------

    def _iterate(self, pass_: Pass) -> Any:
        raise NotImplementedError

    def cardinality(self) -> int:
        """How many elements one pass yields (``INFINITE``: -1)."""
        raise NotImplementedError

    def _passes(self, prefix: Pass) -> "Passes":
        """Opens the passes ``(*prefix, i)`` one after another (``epochs``, ``repeat``): a
        prefetch keeps one producer thread across them (``tfc.data.prefetch``)."""
        return Passes(self, prefix)

    # ---- sources --------------------------------------------------------------------

    @staticmethod
    def from_tensor_slices(tensors: Any) -> "Dataset":
        """Slices of ``tensors`` (an array, or a tuple / dict of arrays with the same
        first dim) along their first dim: element ``i`` is ``tensors[..][i]``."""
        return _Slices(tensors, "Dataset.from_tensor_slices")

    @staticmethod
    def from_npy(paths: Any) -> "Dataset":
        """``from_tensor_slices`` of ``.npy`` files (a path, or a tuple / dict of paths),
        memory-mapped: only the rows read are loaded."""
        leaves = flatten(paths)
        arrays = []
        for p in leaves:
            if not isinstance(p, (str, os.PathLike)):
                raise TfcError(f"Dataset.from_npy: expected .npy paths, got {p!r}")
            try:
                arrays.append(np.load(p, mmap_mode="r", allow_pickle=False))
            except (OSError, ValueError) as e:
                raise TfcError(f"Dataset.from_npy: cannot read {p}: {e}") from None
            if not isinstance(arrays[-1], np.ndarray):
                raise TfcError(f"Dataset.from_npy: {p} is not a .npy file")
        return _Slices(packer(paths)(arrays), "Dataset.from_npy")

    @staticmethod
    def from_queue(queue: Any, batch_size: int | None = None) -> "Dataset":
        """Elements dequeued from a ``tfc.queue`` queue on the host (``batch_size`` of them
        stacked per element, else one at a time) until it is closed and empty: the
        queue's ``OutOfRangeError`` ends the pass. Its position is the queue's, so its
        iterators cannot be restored."""
        return _QueueSource(queue, batch_size)

    # ---- transformations ------------------------------------------------------------

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True) -> "Dataset":
        return _Shuffle(self, buffer_size, seed, reshuffle_each_iteration)

    def batch(self, batch_size: int, drop_remainder: bool = False) -> "Dataset":
        return _Batch(self, batch_size, drop_remainder)

    def repeat(self, count: int | None = None) -> "Dataset":
        return _Repeat(self, count)

    def map(self, fn: Callable[..., Any], backend: str | None = None) -> "Dataset":
        """Each element through ``fn`` (called with a tuple element's parts as arguments),
        traced into a graph and compiled (on ``backend``, default the default one)."""
        from tfc.data.map_fn import TracedMap
        return _Map(self, TracedMap(fn, backend))

    def shard(self, num_shards: int, index: int) -> "Dataset":
        return _Shard(self, num_shards, index)

    def take(self, count: int) -> "Dataset":
        return _Take(self, count)

    def prefetch(self, buffer_size: int = 1, timeout_s: float = 300.0) -> "Dataset":
        return _Prefetch(self, buffer_size, timeout_s)

    # ---- iterating ------------------------------------------------------------------

    def __iter__(self) -> "Iterator":
        pass_ = (self._iterations,)
        self._iterations += 1
        return Iterator(self, pass_)

    def iterator(self, state: Mapping[str, Any] | None = None) -> "Iterator":
        """An iterator of the first pass (``iter()`` counts passes; this does not), at
        ``state`` (an ``Iterator.state()``) if given."""
        it = Iterator(self, (0,))
        if state is not None:
            it.restore(state)
        return it

    def epochs(self, count: int | None = None) -> "Epochs":
        """``count`` passes (None: no end), each the iterator ``iter()`` would give then
        (the same pass numbers: the same shuffles), opened one after another: a
        ``prefetch`` then makes the next pass's first elements while the current pass's
        last are consumed, on one producer thread for all of them (``fit`` iterates a
        dataset so). ``close()`` (or ``with``, or dropping it) stops that thread."""
        return Epochs(self, count)

    def as_numpy(self) -> list[Any]:
        """Every element of one pass, in a list (for tests and small datasets)."""
        return list(self)


class Passes:
    """``Dataset._passes``: by default each pass is opened afresh."""

    def __init__(self, dataset: Dataset, prefix: Pass) -> None:
        self.dataset, self.prefix = dataset, prefix

    def open(self, index: int, last: bool = False) -> Any:
        """The iterator of pass ``(*prefix, index)``; ``last``: no pass is opened after it
        (a producer does not run into the next one)."""
        return self.dataset._iterate((*self.prefix, index))

    def close(self) -> None:
        pass


class _WrappedPasses(Passes):
    """The passes of a one-to-one transformation: its iterator around each of the
    upstream's passes (so a prefetch upstream keeps its producer across them)."""

    def __init__(self, upstream: Passes, wrap: Callable[[Any], Any]) -> None:
        self.upstream, self.wrap = upstream, wrap

    def open(self, index: int, last: bool = False) -> Any:
        return self.wrap(self.upstream.open(index, last))

    def close(self) -> None:
        self.upstream.close()


class Epochs:
    """``Dataset.epochs``: an iterator of ``Iterator``s, one per pass."""

    def __init__(self, dataset: Dataset, count: int | None) -> None:
        if count is not None:
            count = _positive("Dataset.epochs: count", count, 0)
        self.dataset, self.count = dataset, count
        self.opened = 0
        self._passes = dataset._passes(())

    def __iter__(self) -> "Epochs":
        return self

    def __next__(self) -> "Iterator":
        if self.count is not None and self.opened >= self.count:
            self.close()
            raise StopIteration
        self.opened += 1
        index = self.dataset._iterations
        self.dataset._iterations += 1
        last = self.count is not None and self.opened == self.count
        return Iterator(self.dataset, (index,), self._passes.open(index, last))

    def close(self) -> None:
        """Stop any prefetch thread."""
        self._passes.close()

    def __enter__(self) -> "Epochs":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Iterator:
    """A pass over a dataset: ``next(it)``, ``state()`` and ``restore(state)``."""

    def __init__(self, dataset: Dataset, pass_: Pass, it: Any = None) -> None:
        self.dataset = dataset
        self.pass_ = pass_
        self._it = dataset._iterate(pass_) if it is None else it

    def __iter__(self) -> "Iterator":
        return self

    def __next__(self) -> Any:
        try:
            return self._it.next()
        except OutOfRangeError:  # a closed, empty queue: the end of the input
            raise StopIteration from None

    def state(self) -> dict[str, Any]:
        """The position: after restoring it, this iterator yields what it would yield
        next now."""
        return {"pass": list(self.pass_), "at": self._it.state()}

    def restore(self, state: Mapping[str, Any]) -> None:
        try:
            pass_ = tuple(int(p) for p in state["pass"])
            at = state["at"]
        except (KeyError, TypeError, ValueError):
            raise TfcError(f"cannot restore a dataset iterator from {dict(state)!r}: not an "
                           f"Iterator.state()") from None
        self.close()
        self.pass_ = pass_
        self._it = self.dataset._iterate(pass_)
        self._it.restore(at)

    @property
    def wait_s(self) -> float:
        """Seconds spent waiting for a prefetched element (0 without ``prefetch``)."""
        return float(getattr(self._it, "wait_s", 0.0))

    @property
    def busy_s(self) -> float:
        """CPU seconds a ``prefetch`` thread spent making the elements taken (0 without
        ``prefetch``: the pipeline then runs in the caller's ``next``)."""
        return float(getattr(self._it, "busy_s", 0.0))

    def close(self) -> None:
        """Stop any prefetch thread (also done when the iterator is dropped)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


# ---- the datasets ------------------------------------------------------------------

def _positive(what: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise TfcError(f"{what} must be an integer >= {minimum}, not {value!r}")
    return int(value)


class _Slices(Dataset):
    def __init__(self, tensors: Any, what: str) -> None:
        super().__init__()
        leaves = flatten(tensors)
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in leaves]
        if not arrays:
            raise TfcError(f"{what}: nothing to slice")
        for a in arrays:
            if a.dtype == object:
                raise TfcError(f"{what}: {type(a).__name__} is not an array of numbers")
            if a.ndim == 0:
                raise TfcError(f"{what}: a scalar has no first dim to slice")
        lengths = {len(a) for a in arrays}
        if len(lengths) != 1:
            raise TfcError(f"{what}: the arrays have different first dims "
                           f"({', '.join(str(len(a)) for a in arrays)})")
        self.arrays = arrays
        self.length = lengths.pop()
        self.pack = packer(tensors)

    def cardinality(self) -> int:
        return self.length

    def _iterate(self, pass_: Pass) -> Any:
        return _SliceIter(self)


class _SliceIter:
    def __init__(self, ds: _Slices) -> None:
        self.ds, self.index = ds, 0

    def next(self) -> Any:
        if self.index >= self.ds.length:
            raise StopIteration
        i = self.index
        self.index += 1
        return self.ds.pack([np.array(a[i]) for a in self.ds.arrays])

    def take_rows(self, n: int) -> tuple[Any, int]:
        """The next (up to) ``n`` elements stacked, as ``batch`` stacks them, and how
        many; ``StopIteration`` when there are none."""
        start = self.index
        stop = min(start + n, self.ds.length)
        if stop <= start:
            raise StopIteration
        self.index = stop
        return self.ds.pack([np.array(a[start:stop]) for a in self.ds.arrays]), stop - start

    def take_indices(self, n: int) -> range:
        """The row numbers of the next (up to) ``n`` elements (a shuffle of slices picks
        rows by number: ``_ShuffleIter``)."""
        start = self.index
        self.index = min(start + n, self.ds.length)
        return range(start, self.index)

    def state(self) -> dict[str, Any]:
        return {"index": self.index}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.index = int(state["index"])


class _QueueSource(Dataset):
    def __init__(self, queue: Any, batch_size: int | None) -> None:
        super().__init__()
        if not hasattr(queue, "take_rows"):
            raise TfcError(f"Dataset.from_queue: {queue!r} is not a tfc.queue queue")
        self.queue = queue
        self.batch_size = None if batch_size is None else _positive(
            "Dataset.from_queue: batch_size", batch_size)

    def cardinality(self) -> int:
        return UNKNOWN

    def _iterate(self, pass_: Pass) -> Any:
        return _QueueIter(self)


class _QueueIter:
    def __init__(self, ds: _QueueSource) -> None:
        self.ds = ds

    def next(self) -> Any:
        rows = self.ds.queue.take_rows(self.ds.batch_size or 1)  # OutOfRangeError: the end
        parts = list(rows[0]) if self.ds.batch_size is None else \
            [np.stack(c) for c in zip(*rows)]
        return parts[0] if len(parts) == 1 else tuple(parts)

    def state(self) -> dict[str, Any]:
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        if state:
            raise TfcError("Dataset.from_queue: a queue's position cannot be restored")


class _Unary(Dataset):
    def __init__(self, upstream: Dataset) -> None:
        super().__init__()
        if not isinstance(upstream, Dataset):
            raise TfcError(f"expected a Dataset, got {upstream!r}")
        self.upstream = upstream

    def cardinality(self) -> int:
        return self.upstream.cardinality()


class _Map(_Unary):
    def __init__(self, upstream: Dataset, fn: Callable[[Any], Any]) -> None:
        super().__init__(upstream)
        self.fn = fn

    def _iterate(self, pass_: Pass) -> Any:
        return self._wrap(self.upstream._iterate(pass_))

    def _passes(self, prefix: Pass) -> Passes:
        return _WrappedPasses(self.upstream._passes(prefix), self._wrap)

    def _wrap(self, up: Any) -> Any:
        return _MapIter(up, self.fn)


class _MapIter:
    def __init__(self, up: Any, fn: Callable[[Any], Any]) -> None:
        self.up, self.fn = up, fn

    def next(self) -> Any:
        return self.fn(self.up.next())

    def state(self) -> dict[str, Any]:
        return self.up.state()

    def restore(self, state: Mapping[str, Any]) -> None:
        self.up.restore(state)

    def close(self) -> None:
        _close(self.up)


def _close(it: Any) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        close()


class _Batch(_Unary):
    def __init__(self, upstream: Dataset, batch_size: int, drop_remainder: bool) -> None:
        super().__init__(upstream)
        self.batch_size = _positive("Dataset.batch: batch_size", batch_size)
        self.drop_remainder = bool(drop_remainder)

    def cardinality(self) -> int:
        n = self.upstream.cardinality()
        if n < 0:
            return n
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def _iterate(self, pass_: Pass) -> Any:
        return _BatchIter(self, self.upstream._iterate(pass_))

    def _passes(self, prefix: Pass) -> Passes:
        return _WrappedPasses(self.upstream._passes(prefix), lambda up: _BatchIter(self, up))


class _BatchIter:
    def __init__(self, ds: _Batch, up: Any) -> None:
        self.ds, self.up = ds, up

    def next(self) -> Any:
        take_rows = getattr(self.up, "take_rows", None)
        if take_rows is not None:  # a batch of slices: no Python per element
            batch, count = take_rows(self.ds.batch_size)
            if self.ds.drop_remainder and count < self.ds.batch_size:
                raise StopIteration
            return batch
        elements = []
        for _ in range(self.ds.batch_size):
            try:
                elements.append(self.up.next())
            except StopIteration:
                break
        if not elements or (self.ds.drop_remainder and len(elements) < self.ds.batch_size):
            raise StopIteration
        columns = [as_arrays(e, "Dataset.batch") for e in elements]
        shapes = {tuple(a.shape for a in c) for c in columns}
        if len(shapes) != 1:
            raise TfcError(f"Dataset.batch: the elements have different shapes "
                           f"({', '.join(str(list(s)) for s in sorted(shapes))}); batch "
                           f"needs equal shapes")
        return packer(elements[0])([np.stack(parts) for parts in zip(*columns)])

    def state(self) -> dict[str, Any]:
        return self.up.state()

    def restore(self, state: Mapping[str, Any]) -> None:
        self.up.restore(state)

    def close(self) -> None:
        _close(self.up)


class _Repeat(_Unary):
    def __init__(self, upstream: Dataset, count: int | None) -> None:
        super().__init__(upstream)
        if count is not None and count != -1:
            count = _positive("Dataset.repeat: count", count, 0)
        self.count = None if count in (None, -1) else count

    def cardinality(self) -> int:
        n = self.upstream.cardinality()
        if self.count is None:
            return n if n == 0 else INFINITE
        return n if n < 0 else n * self.count

    def _iterate(self, pass_: Pass) -> Any:
        return _RepeatIter(self, pass_)


class _RepeatIter:
    def __init__(self, ds: _Repeat, pass_: Pass) -> None:
        self.ds, self.pass_ = ds, pass_
        self.passes = ds.upstream._passes(pass_)  # (a prefetch: one producer for them all)
        self.inner: Any = None
        self._start_epoch(0)

    def next(self) -> Any:
        while self.ds.count is None or self.epoch < self.ds.count:
            try:
                element = self.inner.next()
                self.yielded = True
                return element
            except StopIteration:
                if not self.yielded and self.ds.count is None:
                    break  # nothing in a pass: forever would never yield
                self._start_epoch(self.epoch + 1)
        raise StopIteration

    def _start_epoch(self, epoch: int) -> None:
        _close(self.inner)
        self.epoch = epoch
        self.yielded = False  # in this epoch (an empty epoch ends an endless repeat)
        if self.ds.count is not None and epoch >= self.ds.count:
            self.inner = _Exhausted()  # (no pass after the last is opened)
            return
        self.inner = self.passes.open(epoch, epoch + 1 == self.ds.count)

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "inner": self.inner.state()}

    def restore(self, state: Mapping[str, Any]) -> None:
        self._start_epoch(int(state["epoch"]))
        if not isinstance(self.inner, _Exhausted):
            self.inner.restore(state["inner"])

    def close(self) -> None:
        _close(self.inner)
        self.passes.close()


class _Exhausted:
    """A repeat's inner iterator after its last pass."""

    def next(self) -> Any:
        raise StopIteration

    def state(self) -> dict[str, Any]:
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        pass


class _Shuffle(_Unary):
    def __init__(self, upstream: Dataset, buffer_size: int, seed: int | None,
                 reshuffle: bool) -> None:
        super().__init__(upstream)
        self.buffer_size = _positive("Dataset.shuffle: buffer_size", buffer_size)
        if seed is None:
            seed = secrets.randbits(62)  # fixed for this dataset: restorable
        elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise TfcError(f"Dataset.shuffle: seed must be an integer >= 0, not {seed!r}")
        self.seed = int(seed)
        self.reshuffle = bool(reshuffle)

    def _iterate(self, pass_: Pass) -> Any:
        return _ShuffleIter(self, pass_)


class _ShuffleIter:
    def __init__(self, ds: _Shuffle, pass_: Pass) -> None:
        self.ds, self.pass_ = ds, pass_
        self._reset()

    def _reset(self) -> None:
        words = [self.ds.seed, *self.pass_] if self.ds.reshuffle else [self.ds.seed]
        self.rng = np.random.default_rng(words)
        self.up = self.ds.upstream._iterate(self.pass_)
        self.buffer: list[Any] = []
        self.exhausted = False
        self.emitted = 0
        # over slices the buffer holds row numbers, and batches gather rows (take_rows)
        self.rows = self.up if isinstance(self.up, _SliceIter) else None
        self.take_rows = self._take_rows if self.rows is not None else None

    def _pick(self, n: int) -> list[int]:
        """Over slices: the row numbers of the next (up to) ``n`` elements, picked as
        ``next`` picks elements (``StopIteration`` when there are none). The buffer is
        filled as ``_fill`` fills it; then the k-th pick draws from ``len(buffer)``
        rows, which stays the buffer's size while the slices last and shrinks by one per
        pick after, so the draws of all ``n`` picks come from one call."""
        rows = self.rows
        assert rows is not None
        buffer = self.buffer
        if not self.exhausted and len(buffer) < self.ds.buffer_size:
            buffer.extend(rows.take_indices(self.ds.buffer_size - len(buffer)))
        left = rows.ds.length - rows.index  # rows not yet in the buffer
        n = min(n, len(buffer) + left)
        if n <= 0:
            raise StopIteration
        sizes = len(buffer) - np.maximum(np.arange(n) - left, 0)
        picks: list[int] = []
        for i in self.rng.integers(sizes).tolist():
            picks.append(buffer[i])
            if left > 0:  # the slot is refilled from upstream, else closed up
                buffer[i] = rows.index
                rows.index += 1
                left -= 1
            else:
                buffer[i] = buffer[-1]
                buffer.pop()
        # (next's refill that finds the slices ended marks them exhausted; so do we)
        self.exhausted = self.exhausted or (left == 0 and len(buffer) < self.ds.buffer_size)
        self.emitted += n
        return picks

    def _take_rows(self, n: int) -> tuple[Any, int]:
        """The next (up to) ``n`` elements stacked, and how many (over slices)."""
        picks = np.asarray(self._pick(n), dtype=np.int64)
        assert self.rows is not None
        ds = self.rows.ds
        return ds.pack([np.asarray(a[picks]) for a in ds.arrays]), len(picks)

    def _fill(self) -> None:
        while not self.exhausted and len(self.buffer) < self.ds.buffer_size:
            try:
                self.buffer.append(self.up.next())
            except StopIteration:
                self.exhausted = True

    def next(self) -> Any:
        if self.rows is not None:
            row = self._pick(1)[0]
            ds = self.rows.ds
            return ds.pack([np.array(a[row]) for a in ds.arrays])
        self._fill()
        if not self.buffer:
            raise StopIteration
        i = int(self.rng.integers(len(self.buffer)))
        element = self.buffer[i]
        try:  # the slot is refilled from upstream (as tf.data), else closed up
            self.buffer[i] = self.up.next() if not self.exhausted else None
        except StopIteration:
            self.exhausted = True
        if self.exhausted:
            self.buffer[i] = self.buffer[-1]
            self.buffer.pop()
        self.emitted += 1
        return element

    def state(self) -> dict[str, Any]:
        return {"seed": self.ds.seed, "emitted": self.emitted}

    def restore(self, state: Mapping[str, Any]) -> None:
        if int(state["seed"]) != self.ds.seed:
            raise TfcError(f"cannot restore a shuffle of seed {self.ds.seed} to a position "
                           f"saved with seed {int(state['seed'])}")
        _close(self.up)
        self._reset()
        emitted = int(state["emitted"])
        if self.rows is not None and emitted:  # replay: the buffer is not saved
            self._pick(emitted)
            return
        for _ in range(emitted):
            self.next()

    def close(self) -> None:
        _close(self.up)


class _Shard(_Unary):
    def __init__(self, upstream: Dataset, num_shards: int, index: int) -> None:
        super().__init__(upstream)
        self.num_shards = _positive("Dataset.shard: num_shards", num_shards)
        self.index = _positive("Dataset.shard: index", index, 0)
        if self.index >= self.num_shards:
            raise TfcError(f"Dataset.shard: index {index} is not below num_shards "
                           f"{num_shards}")

    def cardinality(self) -> int:
        n = self.upstream.cardinality()
        return n if n < 0 else max(0, -(-(n - self.index) // self.num_shards))

    def _iterate(self, pass_: Pass) -> Any:
        return _ShardIter(self, self.upstream._iterate(pass_))

    def _passes(self, prefix: Pass) -> Passes:
        return _WrappedPasses(self.upstream._passes(prefix), lambda up: _ShardIter(self, up))


class _ShardIter:
    def __init__(self, ds: _Shard, up: Any) -> None:
        self.ds, self.up = ds, up
        self.position = 0  # of the next upstream element

    def next(self) -> Any:
        while True:
            element = self.up.next()
            self.position += 1
            if (self.position - 1) % self.ds.num_shards == self.ds.index:
                return element

    def state(self) -> dict[str, Any]:
        return {"position": self.position, "inner": self.up.state()}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.position = int(state["position"])
        self.up.restore(state["inner"])

    def close(self) -> None:
        _close(self.up)


class _Take(_Unary):
    def __init__(self, upstream: Dataset, count: int) -> None:
        super().__init__(upstream)
        self.count = _positive("Dataset.take: count", count, 0)

    def cardinality(self) -> int:
        n = self.upstream.cardinality()
        return self.count if n == INFINITE else min(n, self.count)

    def _iterate(self, pass_: Pass) -> Any:
        return _TakeIter(self, self.upstream._iterate(pass_))


class _TakeIter:
    def __init__(self, ds: _Take, up: Any) -> None:
        self.ds, self.up, self.taken = ds, up, 0

    def next(self) -> Any:
        if self.taken >= self.ds.count:
            raise StopIteration
        element = self.up.next()
        self.taken += 1
        return element

    def state(self) -> dict[str, Any]:
        return {"taken": self.taken, "inner": self.up.state()}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.taken = int(state["taken"])
        self.up.restore(state["inner"])

    def close(self) -> None:
        _close(self.up)


class _Prefetch(_Unary):
    def __init__(self, upstream: Dataset, buffer_size: int, timeout_s: float) -> None:
        super().__init__(upstream)
        self.buffer_size = _positive("Dataset.prefetch: buffer_size", buffer_size)
        if not timeout_s > 0:
            raise TfcError(f"Dataset.prefetch: timeout_s must be positive, not {timeout_s!r}")
        self.timeout_s = float(timeout_s)

    def _iterate(self, pass_: Pass) -> Any:
        return self._passes(pass_[:-1]).open(pass_[-1], alone=True)

    def _passes(self, prefix: Pass) -> Any:
        from tfc.data.prefetch import PrefetchPasses
        upstream = self.upstream
        return PrefetchPasses(lambda index: upstream._iterate((*prefix, index)),
                              self.buffer_size, self.timeout_s,
                              continues=upstream.cardinality() != UNKNOWN)


# ---- positions in checkpoints --------------------------------------------------------

def flat_state(state: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    """An ``Iterator.state()`` as int64 arrays named by their path (``at/inner/index``)."""
    out: dict[str, np.ndarray] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_state(value, name + "/"))
        else:
            out[name] = np.asarray(value, dtype=np.int64)
    return out


def unflatten_state(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The inverse of ``flat_state``."""
    out: dict[str, Any] = {}
    for name, arr in arrays.items():
        *path, leaf = name.split("/")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        a = np.asarray(arr)
        node[leaf] = a.tolist() if a.ndim else int(a)
    return out


def batches_of(arrays: Mapping[str, Any] | Iterable[Any], batch_size: int, *,
               shuffle: bool = False, seed: int | None = None,
               drop_remainder: bool = False) -> Dataset:
    """The mini-batch pipeline of ``fit`` and ``tfc run --batch``: slices of ``arrays``,
    fully shuffled each pass (buffer = the dataset's size) if asked, batched."""
    ds = Dataset.from_tensor_slices(arrays)
    if shuffle:
        ds = ds.shuffle(max(ds.cardinality(), 1), seed)
    return ds.batch(batch_size, drop_remainder)
