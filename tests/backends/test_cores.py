"""``tfc.backends.cores``: threads reserve cores, backends' hooks see every change of the
count in order, and the count always comes back (nesting, errors, other threads)."""

import threading

import pytest

from tfc.backends import cores


def test_hooks_see_each_count_in_order_and_it_comes_back():
    seen: list[int] = []
    remove = cores.on_reserved(seen.append)
    try:
        with cores.reserve_core():
            assert cores.reserved() == 1
            with cores.reserve_core():
                assert cores.reserved() == 2
        with pytest.raises(ValueError), cores.reserve_core():
            raise ValueError("a failing producer")
    finally:
        remove()
    assert seen == [0, 1, 2, 1, 0, 1, 0]
    assert cores.reserved() == 0
    with cores.reserve_core():  # a removed hook is not called any more
        pass
    assert seen == [0, 1, 2, 1, 0, 1, 0]


def test_reservations_from_many_threads_balance():
    seen: list[int] = []
    remove = cores.on_reserved(seen.append)

    def work() -> None:
        for _ in range(200):
            with cores.reserve_core():
                pass
    threads = [threading.Thread(target=work) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    finally:
        remove()
    assert cores.reserved() == 0 and seen[-1] == 0
    assert len(seen) == 1 + 4 * 200 * 2 and all(0 <= n <= 4 for n in seen)
