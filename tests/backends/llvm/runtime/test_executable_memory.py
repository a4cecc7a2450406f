"""The memory a first step touches (``executable.py``, ``arena.py``): a large arena is a
zeroed mapping of its own that asks for no huge pages (only the pages a step touches are
backed) and goes with its binding; the first training step after an initializer updates
the variables in place, as later steps do, instead of writing every update into fresh
arrays."""

from __future__ import annotations

import gc
import mmap
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import tfc
from tfc.backends.llvm.runtime import arena
from tfc.runtime import Program

MAPS = Path("/proc/self/maps")


def _mapped_at(addr: int) -> bool:
    """Whether ``addr`` lies in a mapping of this process (Linux)."""
    for line in MAPS.read_text().splitlines():
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= addr < hi:
            return True
    return False


def _vm_flags(addr: int) -> list[str] | None:
    """The VmFlags of the mapping holding ``addr`` (``hg``: huge pages asked for), from
    /proc/self/smaps; None where there is no such file."""
    smaps = Path("/proc/self/smaps")
    if not smaps.exists():
        return None
    inside = False
    for line in smaps.read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return None


def _resident_pages(addr: int, nbytes: int) -> int | None:
    """How many pages of [addr, addr + nbytes) are backed (/proc/self/pagemap's present
    bit); None where there is no such file."""
    pagemap = Path("/proc/self/pagemap")
    if not pagemap.exists():
        return None
    first, last = addr // mmap.PAGESIZE, (addr + nbytes - 1) // mmap.PAGESIZE
    with pagemap.open("rb") as f:
        f.seek(first * 8)
        entries = np.frombuffer(f.read((last - first + 1) * 8), np.uint64)
    return int(((entries >> np.uint64(63)) & np.uint64(1)).sum())


def _thp_mode() -> str | None:
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not path.exists():
        return None
    return path.read_text().split("[")[1].split("]")[0]


needs_mmap = pytest.mark.skipif(not hasattr(mmap, "MAP_ANONYMOUS"),
                                reason="no anonymous mmap on this platform")
needs_maps = pytest.mark.skipif(not MAPS.exists(), reason="no /proc/self/maps")


@needs_mmap
def test_a_large_arena_is_a_zeroed_mapping_that_asks_for_no_huge_pages():
    n = 3 * (1 << 21) + 4160  # (NumPy asks for huge pages from 4 MB)
    a = arena.zeroed(n)
    assert a.size == n and a.dtype == np.uint8 and a.flags.writeable
    assert a.ctypes.data % mmap.PAGESIZE == 0
    assert isinstance(a.base, memoryview) and isinstance(a.base.obj, mmap.mmap)
    a[n // 2] = 7  # one page touched
    a[-1] = 9  # the whole of it is usable
    assert "hg" not in (_vm_flags(a.ctypes.data) or [])
    resident = _resident_pages(a.ctypes.data, n)  # (before anything reads the rest)
    if resident is not None and _thp_mode() in ("madvise", "never"):
        assert resident == 2  # the pages touched, not 2 MB around each (not "always":
        # there the system asks for huge pages itself)
    assert np.count_nonzero(a) == 2 and a[n // 2] == 7 and a[-1] == 9  # zeroed


def test_a_small_arena_is_plain_zeros():
    a = arena.zeroed(arena.MAP_MIN - 1)
    assert a.size == arena.MAP_MIN - 1 and a.flags.owndata and not a.any()


@needs_mmap
@needs_maps
def test_an_arena_mapping_is_released_when_its_array_goes():
    a = arena.zeroed(2 * arena.MAP_MIN)
    view = a[100:200]
    addr = a.ctypes.data
    a[:] = 1
    del a
    gc.collect()
    assert _mapped_at(addr)  # the view holds it
    del view
    gc.collect()
    assert not _mapped_at(addr)


def _two_matmuls(w1: np.ndarray, w2: np.ndarray):
    """A graph whose arena grows with the batch (a [batch, 1024] f32 product lives in it:
    2 MB and more from a batch of 512)."""
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, w1.shape[0]], name="x")
        h = tfc.matmul(tfc.nn.relu(tfc.matmul(x, tfc.constant(w1))), tfc.constant(w2))
        tfc.entry("f", feeds={"x": x}, fetches={"y": tfc.reduce_sum(h, axis=1)})
    return g


@needs_mmap
@needs_maps
def test_an_executables_arenas_are_mapped_and_go_with_it():
    rng = np.random.default_rng(0)
    w1 = rng.normal(size=(64, 1024)).astype(np.float32)
    w2 = rng.normal(size=(1024, 8)).astype(np.float32)
    p = Program(_two_matmuls(w1, w2).as_module(), backend="llvm")
    for batch in (600, 700):  # one binding (and arena) per distinct feed shapes
        x = rng.normal(size=(batch, 64)).astype(np.float32)
        want = (np.maximum(x @ w1, 0) @ w2).sum(1)
        np.testing.assert_allclose(p.run("f", x=x)["y"], want, rtol=1e-3, atol=1e-2)
    exe = p._executable("f")
    arenas = [b.arena for b in exe._bindings.values()]
    assert len(arenas) == 2 and all(a.size - 64 >= arena.MAP_MIN for a in arenas)
    addrs = [a.ctypes.data for a in arenas]
    assert all(addr % mmap.PAGESIZE == 0 and _mapped_at(addr) for addr in addrs)
    assert all(not a.flags.owndata for a in arenas)  # (views of their mappings)
    del arenas, exe, p
    gc.collect()
    assert not any(_mapped_at(addr) for addr in addrs)  # no leak per binding


def _mlp():
    rng = np.random.default_rng(3)
    x = tfc.placeholder(tfc.float32, [16, 8], name="x")
    y = tfc.placeholder(tfc.float32, [16, 4], name="y")
    w1 = tfc.Variable(rng.normal(size=(8, 8)).astype(np.float32) * 0.3, name="W1")
    b1 = tfc.Variable(np.zeros(8, np.float32), name="b1")
    w2 = tfc.Variable(rng.normal(size=(8, 4)).astype(np.float32) * 0.3, name="W2")
    loss = tfc.reduce_mean(tfc.square(tfc.matmul(tfc.nn.relu(tfc.matmul(x, w1) + b1), w2)
                                      - y))
    train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
    feeds = {x: np.linspace(-1, 1, 128, dtype=np.float32).reshape(16, 8),
             y: np.linspace(0, 1, 64, dtype=np.float32).reshape(16, 4)}
    return loss, train, feeds


def test_the_first_step_after_the_initializer_updates_the_weights_in_place():
    """The initializer's executable keeps no reference to the arrays it made the variables'
    values (its pools and slots would count as holders: ``_sole``), so the first training
    step makes each update that can be made in place (``NativeMeta.in_place``) in that
    array."""
    with tfc.Graph().as_default():
        loss, train, feeds = _mlp()
        sess = tfc.Session(backend="llvm")
        want_sess = tfc.Session(backend="reference")
        for s in (sess, want_sess):
            s.run(tfc.global_variables_initializer())
        store = sess.variables.sync()
        first = {n: weakref.ref(a) for n, a in store.items()}
        del store
        for step in range(3):
            got = sess.run([loss, train], feeds)[0]
            np.testing.assert_allclose(got, want_sess.run([loss, train], feeds)[0],
                                       rtol=1e-5)
            if step == 0:
                exe = [c.executable for c in sess._cache.values() if c.executable.var_names]
                assert len(exe) == 1
                names = {exe[0].var_names[v] for _, v in exe[0].meta.in_place}
                assert names  # (not vacuous)
                store = sess.variables.sync()
                assert {n for n, ref in first.items() if store[n] is ref()} == names
                del store, exe
        for name, value in want_sess.variables.sync().items():
            np.testing.assert_allclose(sess.variables.sync()[name], value, rtol=1e-5)
        # running the initializer again resets the values (in new arrays), and the
        # training step after it starts from them
        sess.run(tfc.global_variables_initializer())
        want_sess.run(tfc.global_variables_initializer())
        np.testing.assert_allclose(sess.run([loss, train], feeds)[0],
                                   want_sess.run([loss, train], feeds)[0], rtol=1e-5)


def test_a_value_the_caller_holds_from_the_initializer_is_never_changed():
    with tfc.Graph().as_default():
        loss, train, feeds = _mlp()
        sess = tfc.Session(backend="llvm")
        sess.run(tfc.global_variables_initializer())
        held = sess.variables.sync()["W1"]
        want = held.copy()
        sess.run([loss, train], feeds)
        assert sess.variables.sync()["W1"] is not held
        np.testing.assert_array_equal(held, want)
        assert sys.getrefcount(held) == 2  # (nothing else kept it: only this name)
