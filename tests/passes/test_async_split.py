"""``split_async``: a training step cut into the worker's gradients and each PS's update.

Run in one process (no Ray): the gradient program fed the PS programs' variables, each
PS program fed the gradients, must give the single program's losses and variables
exactly (the same ops on the same values), with Adam's beta powers read across PS tasks.
"""

from __future__ import annotations

import numpy as np
import pytest

import tfc
from tfc.distributed.async_ps import worker_plan
from tfc.errors import TfcError
from tfc.ir.parser import parse_module
from tfc.ir.printer import print_module
from tfc.passes.async_split import split_async
from tfc.passes.replicate import ClusterSpec, replicate_module
from tfc.runtime import Program


def classifier(optimizer: str, extra_fetch: bool = False) -> tfc.ir.core.Module:
    rng = np.random.default_rng(5)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float64, [None, 5], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        w0 = tfc.Variable(rng.normal(0, 0.5, (5, 7)), name="w0")
        w1 = tfc.Variable(rng.normal(0, 0.5, (7, 3)), name="w1")
        step = tfc.Variable(np.asarray(0, np.int64), name="global_step", trainable=False)
        logits = tfc.matmul(tfc.nn.relu(tfc.matmul(x, w0)), w1)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        opt = {"momentum": tfc.train.MomentumOptimizer(0.1, 0.9),
               "adam": tfc.train.AdamOptimizer(0.05)}[optimizer]
        fetches = {"loss": loss, **({"norm": tfc.reduce_sum(w0 * w0)} if extra_fetch else {})}
        tfc.entry("train", feeds={"x": x, "y": y}, fetches=fetches,
                  targets=[opt.minimize(loss, global_step=step)])
    return g.as_module()


@pytest.mark.parametrize("backend", ["reference", "llvm"])
@pytest.mark.parametrize("optimizer, ps", [("momentum", 1), ("adam", 2)])
def test_the_two_halves_give_the_single_programs_step(backend, optimizer, ps):
    split = split_async(classifier(optimizer), ClusterSpec(ps, 1, "ps-async"))
    plan = worker_plan(split)
    one = Program(classifier(optimizer), backend=backend)
    init = dict(one.variables)
    grads = Program(parse_module(print_module(split.gradient)), backend=backend)
    servers = {d: Program(parse_module(print_module(p.module)), backend=backend,
                          variables={n: init[n] for n in p.variables})
               for d, p in split.apply.items()}
    assert sorted(n for p in split.apply.values() for n in p.variables) == sorted(init)
    if optimizer == "adam":  # the beta powers live on one PS and are read on the other
        assert any(p.foreign_reads for p in split.apply.values())
    rng = np.random.default_rng(6)
    feeds = {"x": rng.normal(size=(12, 5)), "y": rng.integers(0, 3, 12).astype(np.int32)}
    for _ in range(3):
        want = one.run("train", feeds)["loss"]
        read = {n: servers[d].variables[n] for d, ns in plan["reads"].items() for n in ns}
        out = list(grads.run("train", {**feeds, **{a: read[v] for a, v in plan["read_args"]}})
                   .values())
        for d, a in plan["apply"].items():
            servers[d].run("train", {**{f"grad{i}": out[i] for i in a["grad_results"]},
                                     **{arg: read[v] for arg, v in a["foreign"]}})
        assert out[0] == want
    for p in servers.values():
        for name, value in p.variables.items():
            np.testing.assert_array_equal(value, one.variables[name], err_msg=name)


def test_errors_are_one_line():
    with pytest.raises(TfcError, match="ps-async keeps the variables on parameter servers"):
        ClusterSpec(0, 2, "ps-async")
    with pytest.raises(TfcError, match="fetch 'norm' of @train does not depend on the batch"):
        split_async(classifier("adam", extra_fetch=True), ClusterSpec(1, 2, "ps-async"))
    with pytest.raises(TfcError, match="ps-async runs the training step as two programs"):
        replicate_module(classifier("adam"), ClusterSpec(1, 2, "ps-async"))
    with pytest.raises(TfcError, match="entry 'predict' applies no optimizer"):
        split_async(classifier("adam"), ClusterSpec(1, 2, "ps-async"), "predict")
    assert str(ClusterSpec(2, 3, "ps-async")) == "ps=2,workers=3 (ps-async, greedy)"


def test_tfc_compile_stores_ps_async_for_tfc_run_and_tfc_ir_says_why(tmp_path, capsys):
    """``tfc compile`` stores the step uncut for ``tfc run`` (``tfc.cli_ps``: once an error
    pointing at Python); a placed module of it (``tfc ir``) is one line saying why not."""
    from tfc.cli import main
    model = tmp_path / "model.tfir"
    model.write_text(print_module(classifier("adam")))
    code = main(["compile", str(model), "--cluster", "ps=1,workers=2", "--strategy",
                 "ps-async", "-o", str(tmp_path / "m.tfc")])
    out = capsys.readouterr().out
    assert code == 0 and f"run: tfc run {tmp_path / 'm.tfc'} --cluster local" in out
    code = main(["ir", str(model), "--cluster", "ps=1,workers=2", "--strategy", "ps-async"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.startswith("error: --strategy ps-async runs the training step")
    assert "tfc compile stores it uncut" in err and "\n" not in err
