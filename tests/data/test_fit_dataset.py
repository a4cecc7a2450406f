"""``Sequential.fit`` / ``evaluate`` on a ``tfc.data.Dataset`` of (x, y) batches."""

import numpy as np
import pytest

import tfc
from tfc.data import Dataset
from tfc.errors import FeedError, OutOfRangeError, TfcError


@pytest.fixture(autouse=True)
def fresh_graph():
    with tfc.Graph().as_default() as g:
        yield g


def blobs(n=120, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 3.0], [3.0, -2.0], [-3.0, -2.0]])
    y = rng.integers(0, 3, size=n)
    return (centers[y] + 0.5 * rng.normal(size=(n, 2))).astype(np.float32), y


def classifier():
    with tfc.Graph().as_default():
        tfc.set_random_seed(0)
        model = tfc.Sequential([tfc.layers.Dense(8, activation="relu", input_shape=(2,)),
                                tfc.layers.Dense(3, activation="softmax")])
        model.compile(tfc.train.AdamOptimizer(0.05), "sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        model.build()
    return model


def test_fit_on_a_dataset_equals_fit_on_the_arrays_bit_for_bit():
    x, y = blobs()
    a, b = classifier(), classifier()
    ha = a.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0)
    hb = b.fit(Dataset.from_tensor_slices((x, y)).batch(16), epochs=3, verbose=0)
    assert ha == hb
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        assert wa.tobytes() == wb.tobytes()
    ds = Dataset.from_tensor_slices((x, y)).batch(50)
    assert a.evaluate(ds) == a.evaluate(x, y, batch_size=50)


def test_fit_on_a_shuffled_prefetched_mapped_pipeline_learns():
    x, y = blobs()
    ds = (Dataset.from_tensor_slices((x, y)).shuffle(120, seed=1).batch(16)
          .map(lambda xb, yb: (xb * 0.5, yb)).prefetch(2))
    model = classifier()
    history = model.fit(ds, epochs=6, verbose=0)
    assert history["accuracy"][-1] > 0.9
    assert model.evaluate(Dataset.from_tensor_slices((x * 0.5, y)).batch(64))["accuracy"] > 0.9
    # an unbuilt model takes its input shape from the first element
    with tfc.Graph().as_default():
        plain = tfc.Sequential([tfc.layers.Dense(3, activation="softmax")])
        plain.compile("adam", "sparse_categorical_crossentropy")
        plain.fit(Dataset.from_tensor_slices((x, y)).batch(32), verbose=0)
        assert plain.input_shape == (2,)


def test_fit_keeps_one_prefetch_thread_across_epochs_with_the_same_results(monkeypatch):
    """The next epoch's first batches are made by the thread that made this epoch's (no
    thread per epoch); the batches, so the history and weights, are those without
    prefetch; no thread is left when fit returns, also when a callback stops it early."""
    import threading
    started = []
    start = threading.Thread.start

    def recording(thread):
        started.append(thread)
        start(thread)
    monkeypatch.setattr(threading.Thread, "start", recording)
    x, y = blobs()
    pipeline = Dataset.from_tensor_slices((x, y)).shuffle(120, seed=4).batch(16)
    a, b = classifier(), classifier()
    ha = a.fit(pipeline, epochs=4, verbose=0)
    hb = b.fit(pipeline.prefetch(2), epochs=4, verbose=0)
    assert ha == hb
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        assert wa.tobytes() == wb.tobytes()
    producers = [t for t in started if t.name == "tfc-prefetch"]
    assert len(producers) == 1  # (the model is built: no first element for its shape)
    assert not any(t.is_alive() for t in producers)

    class StopAfterOneEpoch(tfc.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = True
    started.clear()
    b.fit(pipeline.prefetch(2), epochs=4, verbose=0, callbacks=[StopAfterOneEpoch()])
    assert [t.name for t in started] == ["tfc-prefetch"]
    assert not started[0].is_alive()


def test_steps_per_epoch_continues_an_endless_dataset_across_epochs():
    x, y = blobs(40)
    model = classifier()
    seen = []
    ds = Dataset.from_tensor_slices((x, y)).batch(10).repeat()
    with pytest.raises(TfcError, match="endless.*steps_per_epoch"):
        model.fit(ds, epochs=1, verbose=0)
    orig = model._prepare_x
    model._prepare_x = lambda xb: seen.append(np.asarray(xb)[0, 0]) or orig(xb)
    model.fit(ds, epochs=3, steps_per_epoch=3, verbose=0)
    assert len(seen) == 9
    assert seen == [x[(i % 4) * 10, 0] for i in range(9)]  # one pass: 3 + 3 + 3 batches


def test_out_of_range_from_the_source_ends_the_epoch():
    x, y = blobs(40)

    class Draining(Dataset):  # as a dataset reading a queue that its producer closed
        def cardinality(self):
            return -2

        def _iterate(self, pass_):
            batches = [(x[i:i + 10], y[i:i + 10]) for i in range(0, 20, 10)]

            class It:
                def next(self):
                    if not batches:
                        raise OutOfRangeError("queue is closed and empty")
                    return batches.pop(0)
            return It()

    model = classifier()
    history = model.fit(Draining(), epochs=2, verbose=0)
    assert len(history["loss"]) == 2


def test_dataset_errors():
    x, y = blobs(20)
    model = classifier()
    with pytest.raises(TfcError, match="y must be None when x is a Dataset"):
        model.fit(Dataset.from_tensor_slices((x, y)).batch(4), y, verbose=0)
    with pytest.raises(FeedError, match=r"must be an \(x, y\) pair"):
        model.fit(Dataset.from_tensor_slices(x).batch(4), verbose=0)
    with pytest.raises(TfcError, match="y is missing"):
        model.fit(x, verbose=0)
