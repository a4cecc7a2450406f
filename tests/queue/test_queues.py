"""``tfc.queue``: FIFOQueue / RandomShuffleQueue ops in Session.run against Python
references, blocking and timeouts, producer threads (QueueRunner, Coordinator), producer
errors reaching the consumer, and the end of the input (OutOfRangeError)."""

import collections
import threading
import time

import numpy as np
import pytest

import tfc
from tfc.data import Dataset
from tfc.errors import CancelledError, DeadlineExceededError, OutOfRangeError, TfcError
from tfc.queue import Coordinator, FIFOQueue, QueueRunner, RandomShuffleQueue


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def test_fifo_ops_in_session_run_against_a_deque():
    q = FIFOQueue(10, [tfc.float32, tfc.int32], [[2], []])
    x = tfc.placeholder(tfc.float32, [None, 2], name="x")
    i = tfc.placeholder(tfc.int32, [None], name="i")
    enq_many = q.enqueue_many([x, i])
    enq_one = q.enqueue([tfc.constant(np.array([9.0, 9.0], np.float32)), 99])
    a, b = q.dequeue()
    doubled = a * 2.0  # the dequeued value flows into the compiled step
    many = q.dequeue_many(3)
    size = q.size()
    ref = collections.deque()
    rng = np.random.default_rng(0)
    with tfc.Session() as sess:
        for n in (4, 3):
            xs = rng.normal(size=(n, 2)).astype(np.float32)
            ids = np.arange(n, dtype=np.int32) + len(ref) * 10
            sess.run(enq_many, {x: xs, i: ids})
            ref.extend(zip(xs, ids))
        sess.run(enq_one)
        ref.append((np.array([9.0, 9.0], np.float32), 99))
        assert int(sess.run(size)) == len(ref) == 8
        got_a, got_b = sess.run([doubled, b])
        want = ref.popleft()
        np.testing.assert_array_equal(got_a, want[0] * 2)
        assert int(got_b) == want[1]
        mx, mi = sess.run(many)
        want = [ref.popleft() for _ in range(3)]
        np.testing.assert_array_equal(mx, np.stack([w[0] for w in want]))
        np.testing.assert_array_equal(mi, [w[1] for w in want])
        assert int(sess.run(size)) == len(ref) == 4
        sess.run(q.close())
        assert sess.run(b) == ref.popleft()[1]  # a closed queue still gives what it holds
        mx, _ = sess.run(many)  # the last 3
        np.testing.assert_array_equal(mx, np.stack([ref.popleft()[0] for _ in range(3)]))
        with pytest.raises(OutOfRangeError, match="closed and has 0 elements"):
            sess.run(many)


def test_closed_queue_out_of_range_and_enqueue_cancelled():
    q = FIFOQueue(4, tfc.int32, timeout_s=5)
    enq = q.enqueue(1)
    deq = q.dequeue()
    with tfc.Session() as sess:
        sess.run(enq)
        sess.run(q.close())
        assert int(sess.run(deq)) == 1
        with pytest.raises(OutOfRangeError, match="closed and has 0 elements"):
            sess.run(deq)
        with pytest.raises(CancelledError, match="closed"):
            sess.run(enq)


def test_every_block_has_a_timeout():
    q = FIFOQueue(1, tfc.int32, timeout_s=0.2)
    enq, deq = q.enqueue(5), q.dequeue()
    with tfc.Session() as sess:
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError, match="dequeue .* timed out after 0.2 s"):
            sess.run(deq)
        sess.run(enq)
        with pytest.raises(DeadlineExceededError, match="enqueue .* timed out"):
            sess.run(enq)  # full
        assert time.monotonic() - start < 3


def test_dequeue_blocks_until_a_producer_enqueues():
    q = FIFOQueue(2, tfc.float32, [[3]])
    deq = q.dequeue()
    out = tfc.reduce_sum(deq)

    def later():
        time.sleep(0.3)
        q.put_rows([(np.ones(3, np.float32),)])

    t = threading.Thread(target=later)
    with tfc.Session() as sess:
        start = time.monotonic()
        t.start()
        assert float(sess.run(out)) == 3.0
        assert time.monotonic() - start >= 0.25
    t.join()


def test_random_shuffle_queue_keeps_min_after_dequeue_and_drains_after_close():
    q = RandomShuffleQueue(20, 5, tfc.int32, seed=3, timeout_s=0.2)
    x = tfc.placeholder(tfc.int32, [None], name="x")
    enq = q.enqueue_many([x])
    deq = q.dequeue()
    with tfc.Session() as sess:
        sess.run(enq, {x: np.arange(8, dtype=np.int32)})
        got = [int(sess.run(deq)) for _ in range(3)]  # 8 -> 5 left
        with pytest.raises(DeadlineExceededError):
            sess.run(deq)  # would leave 4 < min_after_dequeue
        sess.run(q.close())
        got += [int(sess.run(deq)) for _ in range(5)]
        with pytest.raises(OutOfRangeError):
            sess.run(deq)
    assert sorted(got) == list(range(8)) and got != list(range(8))
    # the reference: the same seeded picks from a list
    rng, items, ref = np.random.default_rng(3), list(range(8)), []
    for _ in range(8):
        i = int(rng.integers(len(items)))
        ref.append(items[i])
        items[i] = items[-1]
        items.pop()
    assert got == ref


def test_queue_runner_pipeline_trains_until_the_input_ends():
    """Two stages as in TF1 input pipelines: examples -> (threads square them) -> batches;
    the training loop ends at OutOfRangeError, having seen every example exactly once."""
    n = 40
    raw = FIFOQueue(n, tfc.float32, [[2]])
    prepared = FIFOQueue(8, tfc.float32, [[2]])
    feed = tfc.placeholder(tfc.float32, [None, 2], name="feed")
    load, close_raw = raw.enqueue_many([feed]), raw.close()
    runner = QueueRunner(prepared, [prepared.enqueue(tfc.square(raw.dequeue()))] * 2)
    batch = prepared.dequeue_many(4)
    w = tfc.Variable(np.zeros(2, np.float32), name="w")
    train = w.assign_add(tfc.reduce_sum(batch, axis=0))
    xs = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    coord = Coordinator()
    with tfc.Session() as sess:
        sess.run(load, {feed: xs})
        sess.run(close_raw)
        threads = runner.create_threads(sess, coord)
        steps = 0
        while True:
            try:
                sess.run(train)
            except OutOfRangeError:
                break
            steps += 1
        coord.request_stop()
        coord.join(threads)
        assert steps == n // 4
        np.testing.assert_allclose(sess.run(w), (xs ** 2).sum(axis=0), rtol=1e-6)
    assert not any(t.is_alive() for t in threads)


def test_a_dying_producer_surfaces_its_error_in_the_consumer():
    q = FIFOQueue(4, tfc.float32, [[2]], timeout_s=30)
    src = tfc.placeholder(tfc.float32, [2], name="src")  # never fed: the producer fails
    runner = QueueRunner(q, [q.enqueue(src * 2.0)])
    deq = q.dequeue()
    coord = Coordinator()
    with tfc.Session() as sess:
        threads = runner.create_threads(sess, coord)
        start = time.monotonic()
        with pytest.raises(TfcError, match="a producer failed: FeedError: .*'src'"):
            sess.run(deq)  # no hang: the error arrives, not the 30 s timeout
        assert time.monotonic() - start < 10
        with pytest.raises(TfcError, match="'src'"):
            coord.join(threads)


def test_stop_request_wakes_a_producer_blocked_on_a_full_queue():
    q = FIFOQueue(2, tfc.int32, timeout_s=30)
    runner = QueueRunner(q, [q.enqueue(7)])
    coord = Coordinator()
    with tfc.Session() as sess:
        threads = runner.create_threads(sess, coord)
        deadline = time.monotonic() + 5
        while len(q) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(q) == 2  # full: the producer is blocked in its enqueue
        start = time.monotonic()
        coord.request_stop()
        coord.join(threads, stop_grace_period_s=5)
        assert time.monotonic() - start < 3
    assert not threads[0].is_alive()


def test_fit_reads_a_queue_until_it_is_closed():
    x = np.random.default_rng(0).normal(size=(48, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    model = tfc.Sequential([tfc.layers.Dense(2, activation="softmax", input_shape=(2,))])
    model.compile("sgd", "sparse_categorical_crossentropy")
    q = FIFOQueue(48, [tfc.float32, tfc.int32], [[2], []])
    q.put_rows(list(zip(x, y)))
    q.close_now()
    history = model.fit(Dataset.from_queue(q, batch_size=16), epochs=2, verbose=0)
    assert len(history["loss"]) == 2  # epoch 1: three batches; epoch 2: the queue is empty
    assert len(q) == 0


def test_bad_queue_arguments():
    with pytest.raises(TfcError, match="capacity must be an integer >= 1"):
        FIFOQueue(0, tfc.int32)
    with pytest.raises(TfcError, match="2 dtypes needs as many shapes"):
        FIFOQueue(2, [tfc.int32, tfc.int32], [[]])
    with pytest.raises(TfcError, match="min_after_dequeue"):
        RandomShuffleQueue(4, 4, tfc.int32)
    q = FIFOQueue(2, tfc.float32, [[3]])
    with pytest.raises(TfcError, match="expected 1 components, got 2"):
        q.enqueue([1.0, 2.0])
    enq = q.enqueue(tfc.placeholder(tfc.float32, [None], name="v"))
    with tfc.Session() as sess, pytest.raises(TfcError, match=r"shape \[2\], the queue holds \[3\]"):
        sess.run(enq, {"v": np.zeros(2, np.float32)})
