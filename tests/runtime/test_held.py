"""``tfc.runtime.held``: the store ``Session.variables`` keeps its values in, with an
executable that holds its updates (a stand-in for the cuda backend's: it keeps them in a
dict and counts what it is asked to copy back), so the host-side logic is checked on
any machine."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pytest

from tfc.errors import ExecutionError
from tfc.runtime.held import VariableStore, defers, read_back_held


class Holder:
    """Reads ``reads``, adds 1 to each of ``writes`` and keeps the results (its
    "device"); ``read_back`` copies them out and counts the names."""

    def __init__(self, reads: Sequence[str], writes: Sequence[str]) -> None:
        self.var_names, self.update_names = list(reads), list(writes)
        self.device: dict[str, np.ndarray] = {}
        self.given: dict[str, Any] = {}
        self.read: list[str] = []
        self.fail = False

    def fast_step(self, feeds: Any, variables: Sequence[np.ndarray], step: int,
                  validate: Any = None, in_place: bool = False, defer: bool = False
                  ) -> tuple[list[np.ndarray], None]:
        assert defer and all(not v.flags.writeable for v in variables)
        values = {}
        for name, v in zip(self.var_names, variables):
            # the device copy is current while the caller passes what it passed before
            current = name in self.device and self.given.get(name) is v
            values[name] = self.device[name] if current else v
            self.given[name] = v
        if self.fail:
            raise ExecutionError("failed")
        for name in self.update_names:
            self.device[name] = values.get(name, np.zeros(2)) + 1
        return [sum(float(np.sum(v)) for v in values.values())], None

    def read_back(self, names: Sequence[str]) -> list[np.ndarray]:
        self.read.extend(names)
        out = []
        for name in names:
            host = self.device[name].copy()
            host.flags.writeable = False
            self.given[name] = host
            out.append(host)
        return out


def test_a_holders_updates_stay_with_it_until_read() -> None:
    store = VariableStore()
    store["a"], store["b"] = np.zeros(2), np.ones(2)
    exe = Holder(["a", "b"], ["a"])
    assert defers(exe)
    for _ in range(3):
        store.deferred_step(exe, [], 0)
    assert exe.read == [] and set(store.held) == {"a"}
    assert sorted(store) == ["a", "b"] and len(store) == 2 and "a" in store
    np.testing.assert_array_equal(store["a"], [3, 3])  # read back: this name only
    assert exe.read == ["a"] and not store.held
    store.deferred_step(exe, [], 0)  # the array read back is current: nothing re-read
    np.testing.assert_array_equal(store["a"], [4, 4])
    assert exe.read == ["a", "a"]


def test_a_write_ends_the_hold_and_is_the_next_steps_value() -> None:
    store = VariableStore()
    store["a"] = np.zeros(2)
    exe = Holder(["a"], ["a"])
    store.deferred_step(exe, [], 0)
    mine = np.full(2, 10.0)
    store["a"] = mine  # a writeable array the caller keeps
    assert not store.held
    store.deferred_step(exe, [], 0)  # (passed as a read-only copy: the holder may keep it)
    mine[...] = -1
    np.testing.assert_array_equal(store["a"], [11, 11])
    assert exe.read == ["a"]


def test_another_executables_held_values_are_read_back_before_a_step() -> None:
    store = VariableStore()
    store["a"] = np.zeros(2)
    writer, reader = Holder(["a"], ["a"]), Holder(["a"], [])
    store.deferred_step(writer, [], 0)
    assert store.deferred_step(reader, [], 0) == [2.0]  # sees the writer's value
    assert writer.read == ["a"] and not store.held


def test_a_variable_written_before_any_host_value_and_uninitialized_reads() -> None:
    store = VariableStore()
    init = Holder([], ["w"])
    store.deferred_step(init, [], 0)  # an initializer: @w exists on the device alone
    assert list(store) == ["w"] and "w" in store
    reader = Holder(["w"], [])
    assert reader.fast_step is not None
    assert store.deferred_step(reader, [], 0) == [2.0]
    with pytest.raises(ExecutionError, match="@z is not initialized"):
        store.deferred_step(Holder(["z"], []), [], 0)


def test_a_failed_step_holds_nothing_new() -> None:
    store = VariableStore()
    store["a"] = np.zeros(2)
    exe = Holder(["a"], ["a"])
    exe.fail = True
    with pytest.raises(ExecutionError):
        store.deferred_step(exe, [], 0)
    assert not store.held
    np.testing.assert_array_equal(store["a"], [0, 0])


def test_sync_reads_back_once_per_holder() -> None:
    first, second = Holder(["a", "b"], ["a", "b"]), Holder(["c"], ["c"])
    held = {"a": first, "b": first, "c": second}
    values: dict[str, Any] = {}
    first.device = {"a": np.ones(1), "b": np.ones(1)}
    second.device = {"c": np.ones(1)}
    read_back_held(held, values, ["a", "c", "b"])
    assert not held and sorted(values) == ["a", "b", "c"]
    assert first.read == ["a", "b"] and second.read == ["c"]
