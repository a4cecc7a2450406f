"""A partitioned variable in a ``Program`` (tfc/runtime/logical.py): listed once under the
name the user gave it, with its whole value, and set whole, as ``tf.train.Saver`` saves
it; its blocks (``NAME/part_i``) only in ``stored_variables`` (and by name)."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.errors import TfcError
from tfc.ir.core import VariableDecl
from tfc.ir.types import DType, TensorType
from tfc.runtime import Program
from tfc.runtime.logical import partitioned_variables

TABLE = np.arange(20, dtype=np.float32).reshape(10, 2)


def build(optimizer: bool = False) -> tfc.Graph:
    with tfc.Graph().as_default() as g:
        ids = tfc.placeholder(tfc.int32, [None], name="ids")
        emb = tfc.Variable(TABLE, name="E", partitioner=tfc.fixed_size_partitioner(3))
        w = tfc.Variable(np.ones(2, np.float32), name="w")
        loss = tfc.reduce_sum(tfc.gather(emb, ids) * w)
        targets = [tfc.train.AdagradOptimizer(0.5).minimize(loss)] if optimizer else []
        tfc.entry("train", feeds={"ids": ids}, fetches={"loss": loss}, targets=targets)
    return g


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_program_lists_the_partitioned_variable_whole(backend):
    g = build(optimizer=True)
    p = Program(g.as_module(), backend=backend)
    names = list(p.variables)
    assert names[:2] == ["E", "w"] and not any("/part_" in n and n.count("/") == 1
                                              for n in names)
    assert len(p.variables) == len(names)
    assert sorted(n for n in p.stored_variables if n.startswith("E/part_") and
                  n.count("/") == 1) == ["E/part_0", "E/part_1", "E/part_2"]
    np.testing.assert_array_equal(p.variables["E"], TABLE)
    np.testing.assert_array_equal(p.variables["E/part_1"], TABLE[4:7])  # 4, 3, 3 rows
    p.run("train", ids=np.array([0, 9, 9], np.int32))
    whole = p.variables["E"]
    assert not whole.flags.writeable
    np.testing.assert_array_equal(whole, np.concatenate(
        [p.stored_variables[f"E/part_{i}"] for i in range(3)]))
    assert not np.array_equal(whole[[0, 9]], TABLE[[0, 9]])
    np.testing.assert_array_equal(whole[1:9], TABLE[1:9])


def test_program_names_match_the_savers(tmp_path):
    from tfc.runtime.checkpoint import read_checkpoint
    g = build()
    with g.as_default(), tfc.Session() as sess:
        sess.run(tfc.global_variables_initializer())
        saved = read_checkpoint(tfc.train.Saver().save(sess, tmp_path / "model")).values
    p = Program(g.as_module())
    assert sorted(p.variables) == sorted(saved) == ["E", "w"]
    for name in saved:
        np.testing.assert_array_equal(p.variables[name], saved[name])


def test_set_variable_and_initial_values_take_the_whole_value():
    g = build()
    p = Program(g.as_module())
    new = TABLE * 10
    p.set_variable("E", new)
    np.testing.assert_array_equal(p.variables["E"], new)
    np.testing.assert_array_equal(p.stored_variables["E/part_2"], new[7:])
    assert p.run("train", ids=np.array([9], np.int32))["loss"] == new[9].sum()
    p.set_variable("E/part_0", np.zeros((4, 2), np.float32))  # a block, by its name
    np.testing.assert_array_equal(p.variables["E"][:4], 0)
    with pytest.raises(TfcError, match=r"f32\[10,2\]"):
        p.set_variable("E", np.zeros((9, 2), np.float32))
    with pytest.raises(TfcError, match="did you mean 'E'"):
        p.set_variable("EE", new)
    q = Program(g.as_module(), {"E": new, "w": np.ones(2, np.float32)})
    np.testing.assert_array_equal(q.variables["E"], new)
    assert q.run("train", ids=np.array([3], np.int32))["loss"] == new[3].sum()


def _decls(*specs: tuple[str, tuple[int, ...]]) -> dict[str, VariableDecl]:
    return {n: VariableDecl(n, TensorType(DType.f32, s)) for n, s in specs}


def test_only_complete_row_blocks_are_one_variable():
    found = partitioned_variables(_decls(
        ("E/part_0", (4, 2)), ("E/part_1", (3, 2)), ("E/part_2", (3, 2)),
        ("E/part_0/Adagrad", (4, 2)),          # a slot: its own variable
        ("gap/part_0", (2, 2)), ("gap/part_2", (2, 2)),      # part_1 missing
        ("x", (4,)), ("x/part_0", (4,)),        # a variable named x exists
        ("odd/part_0", (2, 2)), ("odd/part_1", (3, 2)),      # not TF's split
        ("wide/part_0", (2, 2)), ("wide/part_1", (2, 3)),    # row shapes differ
        ("one/part_0", (5, 2))))
    assert sorted(found) == ["E", "one"]
    assert found["E"].shards == ("E/part_0", "E/part_1", "E/part_2")
    assert found["E"].type == TensorType(DType.f32, (10, 2))
