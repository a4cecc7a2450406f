"""Which host feeds a GPU device page-locks in place (``device.PinnedFeed``): the policy
runs without a GPU, against a fake driver that records its calls."""

from __future__ import annotations

import numpy as np

from tfc.backends.cuda.device import PinnedFeed, _unpin_after

SHAPE = (128, 256)  # 128 KB of float32: above PinnedFeed.MIN_BYTES


class Driver:
    """``cudaHostRegister`` / ``cudaHostUnregister`` of one process: a range registered
    twice is refused, as the driver refuses it."""

    def __init__(self) -> None:
        self.registered: set[int] = set()
        self.calls: list[tuple[str, int]] = []

    def register(self, ptr: int, nbytes: int, flags: int) -> None:
        self.calls.append(("register", ptr))
        if ptr in self.registered:
            raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")
        self.registered.add(ptr)

    def unregister(self, ptr: int) -> None:
        self.calls.append(("unregister", ptr))
        self.registered.remove(ptr)

    def pins(self) -> PinnedFeed:
        return PinnedFeed(self.register, self.unregister, int(np.prod(SHAPE)) * 4,
                          np.float32)


def test_an_array_fed_twice_in_a_row_is_registered_once() -> None:
    driver = Driver()
    pins = driver.pins()
    a = np.ones(SHAPE, np.float32)
    assert [pins.page_locked(a) for _ in range(5)] == [False, True, True, True, True]
    assert driver.calls == [("register", a.ctypes.data)] and pins.held is a


def test_fresh_arrays_are_never_registered() -> None:
    driver = Driver()
    pins = driver.pins()
    assert not any(pins.page_locked(np.ones(SHAPE, np.float32)) for _ in range(4))
    assert driver.calls == []


def test_a_new_array_replaces_the_registered_one() -> None:
    driver = Driver()
    pins = driver.pins()
    a, b = np.ones(SHAPE, np.float32), np.zeros(SHAPE, np.float32)
    for x in (a, a, b, b):
        pins.page_locked(x)
    assert driver.calls == [("register", a.ctypes.data), ("unregister", a.ctypes.data),
                            ("register", b.ctypes.data)]
    assert driver.registered == {b.ctypes.data} and pins.held is b


def test_an_array_the_driver_refuses_is_not_asked_again() -> None:
    """Two feeds (two programs) fed the same array: the second is refused once, then
    stages its copies without another failed driver call."""
    driver = Driver()
    first, second = driver.pins(), driver.pins()
    a = np.ones(SHAPE, np.float32)
    assert [first.page_locked(a) for _ in range(2)] == [False, True]
    assert [second.page_locked(a) for _ in range(10)] == [False] * 10
    assert driver.calls == [("register", a.ctypes.data)] * 2
    assert second.held is None


def test_small_strided_or_mismatched_arrays_are_never_registered() -> None:
    driver = Driver()
    pins = driver.pins()
    wide = np.ones((SHAPE[0], 2 * SHAPE[1]), np.float32)
    for x in (np.ones(SHAPE, np.float64)[:, :SHAPE[1] // 2],  # other dtype, same bytes
              wide[:, ::2],  # strided
              np.ones(SHAPE, np.int32)):  # other dtype
        assert not pins.page_locked(x) and not pins.page_locked(x)
    small = PinnedFeed(driver.register, driver.unregister, 1024, np.float32)
    s = np.ones(256, np.float32)
    assert not small.page_locked(s) and not small.page_locked(s)
    assert driver.calls == []


def test_the_uploaders_end_waits_for_the_last_copy_then_unregisters() -> None:
    driver = Driver()
    pins = driver.pins()
    a = np.ones(SHAPE, np.float32)
    pins.page_locked(a), pins.page_locked(a)
    order: list[str] = []

    class Event:
        def synchronize(self) -> None:
            order.append(f"synchronize with {len(driver.registered)} registered")

    _unpin_after(Event(), pins)
    assert order == ["synchronize with 1 registered"]
    assert driver.registered == set() and pins.held is None
    _unpin_after(Event(), pins)  # nothing held: no wait, no call
    assert order == ["synchronize with 1 registered"] and len(driver.calls) == 2
