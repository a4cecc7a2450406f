"""``tfc.data.Dataset``: each transformation against a plain Python reference of the same
semantics, iterator positions (state / restore), and bad input."""

import gc
import threading
import time

import numpy as np
import pytest

import tfc
from tfc.backends import cores
from tfc.data import Dataset
from tfc.data.dataset import INFINITE, flat_state, unflatten_state
from tfc.errors import TfcError


def as_list(ds):
    return [np.asarray(e).tolist() if not isinstance(e, (tuple, dict)) else e for e in ds]


def ints(n):
    return Dataset.from_tensor_slices(np.arange(n, dtype=np.int64))


def values(ds):
    return [int(e) for e in ds]


def ref_shuffle(items, buffer_size, rng):
    """tf.data's shuffle: a buffer of buffer_size; emit a random slot, refill it."""
    out, buf, src = [], [], iter(items)
    for x in src:
        buf.append(x)
        if len(buf) == buffer_size:
            break
    while buf:
        i = int(rng.integers(len(buf)))
        out.append(buf[i])
        nxt = next(src, None)
        if nxt is None:
            buf[i] = buf[-1]
            buf.pop()
        else:
            buf[i] = nxt
    return out


class ListDataset(Dataset):
    """A source of given elements (a stand-in for a reader), failing where one is an error."""

    def __init__(self, elements):
        super().__init__()
        self.elements = elements

    def cardinality(self):
        return len(self.elements)

    def _iterate(self, pass_):
        elements = self.elements

        class It:
            index = 0

            def next(self):
                if self.index >= len(elements):
                    raise StopIteration
                self.index += 1
                e = elements[self.index - 1]
                if isinstance(e, BaseException):
                    raise e
                if callable(e):
                    return e()
                return e

            def state(self):
                return {"index": self.index}

            def restore(self, s):
                self.index = s["index"]
        return It()


def test_from_tensor_slices_arrays_tuples_dicts():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert [e.tolist() for e in Dataset.from_tensor_slices(x)] == x.tolist()
    pairs = list(Dataset.from_tensor_slices((x, np.arange(4))))
    assert [(a.tolist(), int(b)) for a, b in pairs] == [(x[i].tolist(), i) for i in range(4)]
    dicts = list(Dataset.from_tensor_slices({"a": x, "b": (np.arange(4), -np.arange(4))}))
    assert dicts[2]["a"].tolist() == x[2].tolist() and int(dicts[2]["b"][1]) == -2
    assert Dataset.from_tensor_slices(x).cardinality() == 4
    assert values(Dataset.from_tensor_slices([4, 5, 6])) == [4, 5, 6]  # a list is a value


def test_from_npy_is_memory_mapped(tmp_path):
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.arange(10))
    ds = Dataset.from_npy((str(tmp_path / "x.npy"), str(tmp_path / "y.npy")))
    assert isinstance(ds.arrays[0], np.memmap)
    got = list(ds.batch(4))
    assert [b[0].tolist() for b in got] == [x[:4].tolist(), x[4:8].tolist(), x[8:].tolist()]
    assert not isinstance(got[0][0], np.memmap)  # copies: the map may close
    with pytest.raises(TfcError, match="cannot read"):
        Dataset.from_npy(str(tmp_path / "missing.npy"))


def test_batch_against_reference():
    for n, b, drop in [(10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False), (2, 5, True)]:
        ref = [list(range(i, min(i + b, n))) for i in range(0, n, b)]
        if drop:
            ref = [r for r in ref if len(r) == b]
        got = [e.tolist() for e in ints(n).batch(b, drop)]
        assert got == ref, (n, b, drop)
        assert ints(n).batch(b, drop).cardinality() == len(ref)


def test_repeat_take_shard_against_reference():
    assert values(ints(3).repeat(3)) == [0, 1, 2] * 3
    assert values(ints(3).repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert ints(3).repeat().cardinality() == INFINITE
    assert values(ints(5).take(2)) == [0, 1] and values(ints(2).take(5)) == [0, 1]
    for n, k in [(10, 3), (7, 7), (3, 5)]:
        for i in range(k):
            ds = ints(n).shard(k, i)
            assert values(ds) == list(range(n))[i::k]
            assert ds.cardinality() == len(range(n)[i::k])
    assert values(Dataset.from_tensor_slices(np.zeros(0)).repeat()) == []  # no endless loop


def test_shuffle_against_reference_and_its_properties():
    seed, n, buffer_size = 11, 50, 7
    ds = ints(n).shuffle(buffer_size, seed=seed)
    got = values(ds)
    assert got == ref_shuffle(range(n), buffer_size, np.random.default_rng([seed, 0]))
    assert sorted(got) == list(range(n))
    # the buffer window: output k comes from the first k + buffer_size elements
    assert all(v < k + buffer_size for k, v in enumerate(got))
    assert values(ints(n).shuffle(1, seed=3)) == list(range(n))  # a buffer of 1: no shuffle
    second = values(ds)  # a new pass reshuffles, deterministically
    assert second != got
    assert second == ref_shuffle(range(n), buffer_size, np.random.default_rng([seed, 1]))
    assert values(ints(n).shuffle(buffer_size, seed)) == got  # same seed, same order
    fixed = ints(n).shuffle(n, seed, reshuffle_each_iteration=False)
    assert values(fixed) == values(fixed)
    reps = values(ints(5).shuffle(5, seed=2).repeat(3))
    epochs = [reps[i:i + 5] for i in (0, 5, 10)]
    assert all(sorted(e) == list(range(5)) for e in epochs) and epochs[0] != epochs[1]


@pytest.mark.parametrize("n, buffer_size, batch, drop", [
    (47, 47, 8, False), (47, 10, 8, True), (47, 100, 5, False), (47, 1, 7, False),
    (47, 47, 47, False), (3, 2, 1, False), (10, 3, 4, False)])
def test_batches_of_slices_are_gathered_without_python_per_element(n, buffer_size, batch, drop,
                                                                   monkeypatch):
    """A batch of slices (shuffled or not) is one gather of rows, not ``batch`` elements
    stacked: the same batches as the reference, and the same positions as the element by
    element pipeline (``take`` in between forces that one)."""
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = np.arange(n, dtype=np.int32)
    fast = Dataset.from_tensor_slices((x, y)).shuffle(buffer_size, seed=4).batch(batch, drop)
    slow = (Dataset.from_tensor_slices((x, y)).take(n).shuffle(buffer_size, seed=4)
            .batch(batch, drop))
    plain = Dataset.from_tensor_slices((x, y)).batch(batch, drop)

    def per_element(self):
        raise AssertionError("a batch of slices took an element at a time")
    from tfc.data import dataset
    with monkeypatch.context() as m:
        m.setattr(dataset._SliceIter, "next", per_element)
        got = [list(fast) for _ in range(2)]  # two passes: two shuffles
        got_plain = list(plain)
    for p, passed in enumerate(got):
        order = ref_shuffle(range(n), buffer_size, np.random.default_rng([4, p]))
        want = [order[i:i + batch] for i in range(0, n, batch)]
        want = [w for w in want if len(w) == batch or not drop]
        assert [b[1].tolist() for b in passed] == want
        for xb, yb in passed:
            assert xb.dtype == np.float32 and yb.dtype == np.int32
            np.testing.assert_array_equal(xb, x[yb])
    assert [b[1].tolist() for b in got_plain] == [
        list(range(i, min(i + batch, n))) for i in range(0, n, batch)
        if not drop or i + batch <= n]
    for k in range(len(got[0])):  # positions: the element by element pipeline's
        a, b = fast.iterator(), slow.iterator()
        for _ in range(k):
            np.testing.assert_array_equal(next(a)[1], next(b)[1])
        assert a.state() == b.state()
        rest = [e[1].tolist() for e in a]
        assert [e[1].tolist() for e in fast.iterator(b.state())] == rest
        assert [e[1].tolist() for e in slow.iterator(b.state())] == rest
    elements = Dataset.from_tensor_slices((x, y)).shuffle(buffer_size, seed=4)
    assert [int(e[1]) for e in elements] == ref_shuffle(range(n), buffer_size,
                                                        np.random.default_rng([4, 0]))


def test_map_is_traced_and_compiled_against_numpy():
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
    ds = Dataset.from_tensor_slices((x, np.arange(4, dtype=np.int32)))
    calls = []

    def fn(a, b):
        calls.append(1)  # once per trace, not per element
        return tfc.nn.relu(a) * 2.0 + 1.0, b * 3

    got = list(ds.map(fn))
    for i, (a, b) in enumerate(got):
        np.testing.assert_allclose(a, np.maximum(x[i], 0) * 2 + 1, rtol=1e-6)
        assert int(b) == 3 * i and b.dtype == np.int32
    assert len(calls) == 1
    batched = list(ds.batch(3).map(fn))  # batches of 3 then 1: one trace per shape
    assert len(calls) == 3 and batched[1][0].shape == (1, 3)
    from tfc.data.map_fn import TracedMap
    by_key = TracedMap(lambda d: {k: v * 2.0 for k, v in d.items()})  # traced per structure
    assert list(by_key({"a": x[0]})) == ["a"] and list(by_key({"b": x[0]})) == ["b"]
    listed = list(Dataset.from_tensor_slices(x).map(lambda a: [a, -a]))  # a list: a tuple
    assert isinstance(listed[0], tuple) and listed[0][1].tolist() == (-x[0]).tolist()
    dict_ds = Dataset.from_tensor_slices({"v": x}).map(lambda d: {"s": tfc.reduce_sum(d["v"])})
    np.testing.assert_allclose([float(e["s"]) for e in dict_ds], x.sum(axis=1), rtol=1e-6)


def test_map_that_fails_to_trace_names_the_users_line():
    def bad(a):
        return a.no_such_method()  # the line the error names

    line = bad.__code__.co_firstlineno + 1
    with pytest.raises(TfcError) as e:
        list(ints(3).map(bad))
    assert f"test_dataset.py:{line}" in str(e.value)
    assert "Dataset.map: bad failed to trace: AttributeError" in str(e.value)
    with pytest.raises(TfcError, match="returned None"):
        list(ints(3).map(lambda a: None))
    with pytest.raises(TfcError, match="failed to trace"):
        list(Dataset.from_tensor_slices(np.zeros((2, 3), np.float32)).map(
            lambda a: tfc.matmul(a, a)))


def test_prefetch_yields_the_same_elements_and_stops_its_thread():
    ds = ints(20).shuffle(5, seed=1).batch(3)
    assert [e.tolist() for e in ds.prefetch(2)] == [e.tolist() for e in ds]
    counted = iter(ints(2000).prefetch(2))
    assert counted.busy_s == 0.0 and sum(1 for _ in counted) == 2000
    assert counted.busy_s > 0.0  # the producer's CPU time for what was taken
    assert iter(ints(3)).busy_s == 0.0
    before = threading.active_count()
    it = iter(ints(1000).prefetch(4))
    next(it)
    deadline = time.monotonic() + 2
    while it._it._stream.channel._elements() < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    thread = it._it._stream.thread
    assert thread.is_alive()  # blocked on the full queue
    del it
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive() and threading.active_count() <= before


def test_a_prefetch_producer_holds_a_core_only_while_it_makes_an_element():
    """While it makes an element the producer reserves a core (``tfc.backends.cores``:
    OpenBLAS then leaves it one); while it waits for room in its queue it holds none."""
    seen = []

    def element(i):
        def make():
            seen.append(cores.reserved())
            return np.int64(i)
        return make
    assert values(ListDataset([element(i) for i in range(5)]).prefetch(2)) == list(range(5))
    assert seen == [1] * 5 and cores.reserved() == 0
    it = iter(ListDataset([element(i) for i in range(10)]).prefetch(2))
    next(it)
    deadline = time.monotonic() + 5
    while it._it._stream.channel._elements() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # (the producer is blocked on the full queue)
    assert cores.reserved() == 0
    it.close()


def test_prefetch_surfaces_a_producer_error_after_the_good_elements():
    elements = [np.int64(i) for i in range(3)] + [ValueError("element 3 is broken")]
    it = iter(ListDataset(elements).prefetch(2))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="element 3 is broken"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_prefetch_times_out_instead_of_hanging():
    stuck = ListDataset([lambda: time.sleep(1.0) or np.zeros(1)])
    it = iter(stuck.prefetch(1, timeout_s=0.2))
    with pytest.raises(TfcError, match="no element within 0.2 s"):
        next(it)
    it.close()


class ThreadRecording(Dataset):
    """``n`` int64 elements per pass; records which thread made each (pass, element), and
    fails at ``fail``: (pass, element), or (pass, None) to fail opening the pass."""

    def __init__(self, n, cardinality=None, fail=None):
        super().__init__()
        self.n, self.fixed, self.fail = n, cardinality, fail
        self.made = []  # (pass, element, thread ident)

    def cardinality(self):
        return self.n if self.fixed is None else self.fixed

    def _iterate(self, pass_):
        ds = self
        if ds.fail == (pass_[-1], None):
            raise ValueError(f"pass {pass_[-1]} cannot start")

        class It:
            index = 0

            def next(self):
                if self.index >= ds.n:
                    raise StopIteration
                if ds.fail == (pass_[-1], self.index):
                    raise ValueError(f"element {self.index} of pass {pass_[-1]} is broken")
                ds.made.append((pass_[-1], self.index, threading.get_ident()))
                self.index += 1
                return np.int64(100 * pass_[-1] + self.index - 1)

            def state(self):
                return {"index": self.index}

            def restore(self, s):
                self.index = s["index"]
        return It()


def wait_until(cond, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.005)
    return cond()


def test_epochs_keep_one_producer_that_makes_the_next_pass_ahead():
    """``Dataset.epochs``: each pass is what ``iter()`` gives (the same shuffles), on one
    producer thread that makes the next pass's first elements before it is opened; the
    thread ends with the last pass, and with ``close``."""
    plain = ints(23).shuffle(23, seed=3).batch(4)
    expected = [[b.tolist() for b in plain] for _ in range(3)]  # passes 0, 1, 2
    prefetched = ints(23).shuffle(23, seed=3).batch(4).prefetch(2)
    got, threads = [], []
    for it in prefetched.epochs(3):
        threads.append(it._it._stream.thread)
        got.append([b.tolist() for b in it])
        if len(got) < 3:  # the next pass's first two elements are made meanwhile
            assert wait_until(lambda: it._it._stream.channel._elements() == 2)
    assert got == expected
    assert threads[0] is threads[1] is threads[2]
    assert wait_until(lambda: not threads[0].is_alive())  # ends after the last pass
    assert [b.tolist() for b in prefetched] == [b.tolist() for b in plain]  # pass 3

    source = ThreadRecording(5)
    epochs = source.prefetch(1).epochs()
    assert [int(e) for e in next(epochs)] == [0, 1, 2, 3, 4]
    assert wait_until(lambda: (1, 0) in {(p, i) for p, i, _ in source.made})
    assert len({t for _, _, t in source.made}) == 1 and threading.get_ident() not in {
        t for _, _, t in source.made}
    thread = epochs._passes._stream[0].thread
    del epochs  # dropped: its producer stops
    gc.collect()
    assert wait_until(lambda: not thread.is_alive())


def test_positions_of_passes_opened_by_epochs_restore_exactly():
    """A checkpoint at an epoch's start (the producer is already in that pass) or in its
    middle resumes with exactly the batches an unbroken pass yields."""
    def make():
        return ints(17).shuffle(17, seed=2).batch(4).prefetch(2)
    with make().epochs(3) as epochs:
        for _ in range(3):
            it = next(epochs)
            at_start = unflatten_state(flat_state(it.state()))
            whole = [b.tolist() for b in it]
            with make().epochs() as again:  # (a pass's position names its pass number)
                resumed = next(again)
                resumed.restore(at_start)
                assert [b.tolist() for b in resumed] == whole
    with make().epochs(2) as epochs:
        next(epochs).close()
        it = next(epochs)
        head = [next(it).tolist() for _ in range(2)]
        state = unflatten_state(flat_state(it.state()))
        tail = [b.tolist() for b in make().iterator(state)]
        assert head + tail == whole_pass(make, 1)


def whole_pass(make, index):
    ds = make()
    for _ in range(index):
        iter(ds).close()
    return [b.tolist() for b in iter(ds)]


def test_a_repeat_of_a_prefetch_keeps_one_producer_and_restores_exactly():
    plain = ints(10).shuffle(10, seed=1).batch(3)
    source = ThreadRecording(4)
    ds = source.prefetch(2).repeat(3)
    assert [int(e) for e in ds] == [100 * p + i for p in range(3) for i in range(4)]
    assert len({t for _, _, t in source.made}) == 1  # one thread for the three passes
    assert [e.tolist() for e in plain.prefetch(2).repeat(3)] == \
        [e.tolist() for e in plain.repeat(3)]


def test_a_pass_left_early_or_out_of_order_is_made_afresh():
    source = ThreadRecording(6)
    prefetched = source.prefetch(2)
    epochs = prefetched.epochs()
    first = next(epochs)
    assert int(next(first)) == 0
    first.close()  # left before its end: the producer is not of use for pass 1
    assert [int(e) for e in next(epochs)] == [100 + i for i in range(6)]
    other = iter(prefetched)  # pass 2, taken by someone else
    assert int(next(other)) == 200
    other.close()
    assert [int(e) for e in next(epochs)] == [300 + i for i in range(6)]  # pass 3, afresh
    epochs.close()


def test_a_prefetch_over_a_queue_does_not_run_into_the_next_pass():
    """A queue's elements are taken for good: a producer must not take the next pass's."""
    from tfc.data.dataset import UNKNOWN
    source = ThreadRecording(3, cardinality=UNKNOWN)
    with source.prefetch(2).epochs(2) as epochs:
        assert [int(e) for e in next(epochs)] == [0, 1, 2]
        time.sleep(0.1)
        assert {p for p, _, _ in source.made} == {0}
        assert [int(e) for e in next(epochs)] == [100, 101, 102]


def test_an_error_in_the_next_pass_surfaces_in_that_pass():
    source = ThreadRecording(3, fail=(1, 1))
    with source.prefetch(2).epochs(2) as epochs:
        assert [int(e) for e in next(epochs)] == [0, 1, 2]
        second = next(epochs)
        assert int(next(second)) == 100
        with pytest.raises(ValueError, match="element 1 of pass 1 is broken"):
            next(second)
    source = ThreadRecording(3, fail=(1, None))  # the next pass fails to open
    with source.prefetch(2).epochs(2) as epochs:
        assert [int(e) for e in next(epochs)] == [0, 1, 2]
        with pytest.raises(ValueError, match="pass 1 cannot start"):
            next(next(epochs))


@pytest.mark.parametrize("make", [
    lambda: ints(17).shuffle(17, seed=2).batch(4).prefetch(2).repeat(3),
    lambda: ints(23).shuffle(6, seed=5).batch(4).repeat(3),
    lambda: ints(23).repeat(2).shuffle(30, seed=1).batch(5, drop_remainder=True),
    lambda: ints(40).shard(3, 1).shuffle(4, seed=9).map(lambda a: a * 2).batch(2).take(9),
    lambda: ints(17).shuffle(17, seed=2).batch(4).repeat().prefetch(3).take(13),
])
def test_restored_iterator_continues_exactly(make):
    whole = [e.tolist() for e in make().iterator()]
    for cut in (0, 1, len(whole) // 2, len(whole) - 1, len(whole)):
        it = make().iterator()
        head = [next(it).tolist() for _ in range(cut)]
        state = unflatten_state(flat_state(it.state()))  # through the checkpoint form
        it.close()
        tail = [e.tolist() for e in make().iterator(state)]
        assert head + tail == whole, cut


def test_bad_arguments_are_clear_errors():
    with pytest.raises(TfcError, match="different first dims"):
        Dataset.from_tensor_slices((np.zeros(3), np.zeros(4)))
    with pytest.raises(TfcError, match="no first dim"):
        Dataset.from_tensor_slices(np.float32(1))
    with pytest.raises(TfcError, match="batch_size must be an integer >= 1"):
        ints(3).batch(0)
    with pytest.raises(TfcError, match="index 3 is not below num_shards 3"):
        ints(3).shard(3, 3)
    with pytest.raises(TfcError, match="buffer_size must be an integer >= 1"):
        ints(3).shuffle(0)
    with pytest.raises(TfcError, match="different shapes"):
        list(ListDataset([np.zeros(2), np.zeros(3)]).batch(2))
    with pytest.raises(TfcError, match="not an Iterator.state"):
        ints(3).iterator({"bogus": 1})
    with pytest.raises(TfcError, match="seed 2 to a position saved with seed 1"):
        ints(3).shuffle(3, seed=2).iterator({"pass": [0], "at": {"seed": 1, "emitted": 1}})
