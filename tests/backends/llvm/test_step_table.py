"""The schedule as data (``step_table``): one fixed native loop walks each entry's table of
steps, so no code is made per entry besides its kernels; the numbers are those of the
same entry loaded from the caches; a table that reads outside its arrays is refused
before native code sees it, and a damaged one in the entry cache is a recompile."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from tests.backends.llvm.test_kernel_units import check_against_reference, feeds, mlp
from tfc.backends.llvm import LLVMBackend, step_table
from tfc.backends.llvm.step_table import (COPY, HEADER, INLINE, SPLIT, StepTable, check,
                                          records)
from tfc.errors import ArtifactError
from tfc.testing import compile_lowered


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    return tmp_path


def _step(exe, values):
    got = exe(feeds(), dict(values), 0)
    return [got.fetches[0], *(got.updates[k] for k in sorted(got.updates))]


def test_every_entry_runs_on_the_same_runner_and_its_own_table(cache):
    small, values = mlp(2)
    exe = compile_lowered(LLVMBackend(use_cache=False), small, "train_step")
    deep = compile_lowered(LLVMBackend(use_cache=False), mlp(9)[0], "train_step")
    table = StepTable(exe.meta.steps, exe.meta.symbols)
    kinds = [kind for kind, _ in records(table.words)]
    assert len(kinds) == table.words[0] == len(exe._lowered().steps)
    assert kinds.count(INLINE) + kinds.count(SPLIT) == exe.report.kernels
    assert set(exe.meta.symbols) <= set(deep.meta.symbols)  # the layers' kernels: the same
    assert len(deep.meta.steps) > len(exe.meta.steps)
    check_against_reference(small, values, exe)


@pytest.mark.parametrize("threads", [1, 2])
def test_an_entry_from_the_entry_cache_computes_the_same_bits(cache, threads, monkeypatch):
    monkeypatch.setenv("TFC_PARALLEL_MIN", "1")  # split what can be split
    module, values = mlp(4)
    first = compile_lowered(LLVMBackend(threads=threads), module, "train_step")
    again = compile_lowered(LLVMBackend(threads=threads), module, "train_step")
    assert "entry cache" in again.report.seconds and again._graph_compiler is None
    for a, b in zip(_step(first, values), _step(again, values)):
        np.testing.assert_array_equal(a, b)
    if threads > 1:
        assert SPLIT in [kind for kind, _ in records(first.meta.steps)]


def _bad_tables(table: StepTable, n_ptrs: int, n_params: int) -> dict[str, list[int]]:
    w = list(table.words)
    kernel = next(pos for kind, pos in records(w) if kind in (INLINE, SPLIT))
    first_arg = kernel + (5 if w[kernel] == SPLIT else 3)
    copy = next((pos for kind, pos in records(w) if kind == COPY), None)
    out = {"a pointer past the pointer array": _set(w, first_arg, n_ptrs + 3),
           "an arena offset past the params": _set(w, first_arg, -n_params - 5),
           "a symbol that is not there": _set(w, kernel + 1, len(table.symbols)),
           "more pointers than the header allows": _set(w, kernel + 2, 10 ** 6),
           "a record kind that is none": _set(w, kernel, 7),
           "a step count that is not the records'": _set(w, 0, w[0] + 1),
           "the arena not last": _set(w, 1, 0),
           "a table cut short": w[:-1],
           "no header": w[:HEADER - 2]}
    if copy is not None:
        out["a copy's size past the params"] = _set(w, copy + 3, n_params)
    return out


def _set(words: list[int], pos: int, value: int) -> list[int]:
    out = list(words)
    out[pos] = value
    return out


def test_tables_that_read_outside_their_arrays_are_refused(cache):
    exe = compile_lowered(LLVMBackend(use_cache=False), mlp(3)[0], "train_step")
    meta = exe.meta
    table = StepTable(meta.steps, meta.symbols)
    most = check(table, meta.n_ptrs, meta.n_params)  # the real one passes
    # the pointer array the loop allocates is what the records pass, whatever the header
    # says (a huge count there would overflow the stack)
    huge = StepTable(tuple(_set(list(table.words), 2, 10 ** 12)), meta.symbols)
    assert check(huge, meta.n_ptrs, meta.n_params) == most < 64
    for what, words in _bad_tables(table, meta.n_ptrs, meta.n_params).items():
        with pytest.raises(ArtifactError, match="invalid step table"):
            check(StepTable(tuple(words), meta.symbols), meta.n_ptrs, meta.n_params)
            pytest.fail(what)


def test_an_artifact_whose_table_names_a_kernel_its_code_lacks_is_refused(cache):
    module, values = mlp(2)
    exe = compile_lowered(LLVMBackend(use_cache=False), module, "train_step")
    members = LLVMBackend().export(exe)
    table = json.loads(members["tables.json"])
    table["symbols"][0] = "tfck_00000000000000000000"
    members["tables.json"] = json.dumps(table).encode()
    with pytest.raises(ArtifactError, match="no kernel tfck_0"):
        LLVMBackend().load(exe.module, "train_step", members)


@pytest.mark.parametrize("damage", ["pointer", "symbol", "words"])
def test_a_damaged_table_in_the_entry_cache_is_a_recompile(cache, damage):
    module, values = mlp(3)
    want = _step(compile_lowered(LLVMBackend(), module, "train_step"), values)
    [path] = (cache / "entries").glob("*.zip")
    with zipfile.ZipFile(path) as zf:
        parts = {name: zf.read(name) for name in zf.namelist()}
    table = json.loads(parts["tables.json"])
    if damage == "pointer":
        kernel = next(pos for kind, pos in records(table["steps"]) if kind == INLINE)
        table["steps"][kernel + 3] = 10 ** 9
    elif damage == "symbol":
        table["symbols"][-1] = "tfck_ffffffffffffffffffff"
    else:
        table["steps"] = "not a list"
    parts["tables.json"] = json.dumps(table).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
    exe = compile_lowered(LLVMBackend(), module, "train_step")
    assert "entry cache" not in exe.report.seconds  # compiled again (kernels from cache)
    assert exe.report.kernels_cached == exe.report.distinct_kernels
    for a, b in zip(want, _step(exe, values)):
        np.testing.assert_array_equal(a, b)
    again = compile_lowered(LLVMBackend(), module, "train_step")  # the entry was replaced
    assert "entry cache" in again.report.seconds


def test_the_runner_is_one_text(cache):
    from tfc.backends.llvm.runtime import native
    text = step_table.runner(*native.triple_and_layout())
    assert text.count("define i32 @") == 2  # tfc_run_steps and tfc_entry
    assert "tfck_" not in text


def test_draft_works_once_per_kernel_function(monkeypatch):
    """The draft asks for each kernel function's whole-range wrapper (and decides whether
    it splits) once, not once per step: a 12-layer MLP calls a handful of functions from
    many steps."""
    from tfc.pipeline import lower_entry
    asked: list[str] = []
    real = step_table.whole_range

    def counting(kernel):
        asked.append(kernel.fn.name)
        return real(kernel)
    monkeypatch.setattr(step_table, "whole_range", counting)
    backend = LLVMBackend(use_cache=False, threads=2)
    _, _, gc, report = backend._lower(lower_entry(mlp(12)[0], "train_step", "llvm"),
                                      "train_step")
    assert report.kernels > 3 * len(set(asked))
    assert len(asked) == len(set(asked))
