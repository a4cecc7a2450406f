"""Steps allocate nothing once results are let go, and never reuse an array still held."""

import numpy as np

import tfc
from tfc.runtime import Program


def program():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None], name="x")
        v = tfc.Variable(np.zeros(4, np.float32), name="v")
        up = v.assign_add(tfc.ones([4]))
        tfc.entry("f", feeds={"x": x}, fetches={"y": x * 2.0, "v": v.value()}, targets=[up])
    return Program(g.as_module(), backend="llvm")


def test_dropped_results_are_recycled_and_state_stays_right():
    p = program()
    seen = set()
    for i in range(6):
        out = p.run("f", x=np.full(3, i, np.float32))
        np.testing.assert_array_equal(out["y"], np.full(3, 2 * i))
        np.testing.assert_array_equal(out["v"], np.full(4, i))  # read at the step's start
        seen.add(id(out["y"]))
        del out
    assert len(seen) <= 2
    np.testing.assert_array_equal(p.variables["v"], np.full(4, 6))


def test_held_results_and_views_are_never_overwritten():
    p = program()
    a = p.run("f", x=np.ones(3, np.float32))
    b = p.run("f", x=np.full(3, 5, np.float32))
    assert a["y"] is not b["y"]
    np.testing.assert_array_equal(a["y"], [2, 2, 2])
    view = p.run("f", x=np.ones(3, np.float32))["y"][:2]  # only a view survives
    for k in range(3):
        p.run("f", x=np.full(3, 9 + k, np.float32))
    np.testing.assert_array_equal(view, [2, 2])
    held = p.variables["v"]  # a stored value the caller keeps
    before = held.copy()
    for _ in range(3):
        p.run("f", x=np.ones(3, np.float32))
    np.testing.assert_array_equal(held, before)


def test_steps_allocate_nothing_once_results_are_dropped():
    """The same arrays come back step after step: output and update pools stay at the
    one (fetch) or two (update: the new value and the one being read) arrays."""
    p = program()
    step = p.callable("f", ["x"], ["y", "v"])
    x = np.ones(3, np.float32)
    for _ in range(3):
        step(x)
    exe = p._executable("f")
    fetched = set()
    for _ in range(5):
        y, v = step(x)
        fetched |= {id(y), id(v)}
        del y, v
    assert [len(pool) for pool, *_ in exe._last.fills] == [1, 1, 2]  # fetches, update
    assert len(fetched) == 2  # the same two fetch arrays, every step
