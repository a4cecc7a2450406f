"""A ``.tfm`` model whose embedding and dense layer the automatic row split put on two PS
tasks (``tfc.api.split_variables``) trains on the loopback Ray cluster (2 PS tasks, 2
workers, each a process) to the numbers of the unsplit model in one process."""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.compiler.driver import compile_with_report
from tfc.runtime import Program

from tests.api.test_split_variables import (OPTIMIZERS, SLICE, SPEC, train, whole,
                                            write_models)

pytestmark = pytest.mark.distributed


@pytest.mark.slow  # about 8 s on an idle host, 17 s at load 9 (the four tasks start)
def test_a_split_tfm_model_trains_on_the_cluster_as_unsplit_in_one_process(
        loopback_cluster, tmp_path):
    """Adam: its sparse update densifies (the whole slot is updated), so each block's
    copy must run on its own PS for the numbers and the bytes; the in-process tests in
    tests/api/test_split_variables.py cover Momentum and the ``.tfir`` frontend."""
    optimizer = "adam"
    path = write_models(tmp_path, optimizer)["tfm"]
    module, _ = compile_with_report(path, cluster=SPEC, min_slice_size=SLICE)
    assert "E/part_1" in module.variables and "W/part_1" in module.variables
    saved = tmp_path / "split.tfc"
    Program(module, cluster="inprocess").save(saved)
    unsplit = Program(compile_with_report(path)[0])
    want = train(unsplit, 3)
    with tfc.runtime.load(saved, cluster=loopback_cluster.address) as program:
        np.testing.assert_allclose(train(program, 3), want, rtol=1e-10)
        got = program.variables
    slots = OPTIMIZERS[optimizer][2]
    for name in ("E", "W", "V", "b", "R", *(f"{v}/{s}" for v in "EW" for s in slots)):
        np.testing.assert_allclose(whole(got, name), unsplit.variables[name], rtol=1e-10,
                                   atol=1e-12, err_msg=name)
