"""``tfc compile --cluster ps=P``'s automatic row split (``--min-slice-size``): a Python
model's large trainable variable is split over the PS tasks without a partitioner (TF's
``min_max_variable_partitioner`` rule), trains as the unsplit model does, and the compile
report shows the split; small variables, slots and scalars stay whole."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.cli import main
from tfc.compiler.driver import compile_with_report
from tfc.passes.replicate import ClusterSpec
from tfc.runtime import Program

MODEL = '''
import numpy as np
import tfc
tfc.set_random_seed(0)
ids = tfc.placeholder(tfc.int32, [None, 4], name="ids")
y = tfc.placeholder(tfc.int32, [None], name="y")
emb = tfc.Variable(tfc.random.normal([20000, 16], stddev=0.1), name="E")  # 1.28 MB
w = tfc.Variable(tfc.random.normal([16, 3], stddev=0.1), name="W")
step = tfc.Variable(np.asarray(0, np.int64), name="global_step", trainable=False)
logits = tfc.matmul(tfc.reduce_mean(tfc.gather(emb, ids), axis=1), w)
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
train = tfc.train.MomentumOptimizer(0.5, 0.9).minimize(loss, global_step=step)
tfc.entry("train", feeds={"ids": ids, "y": y}, fetches={"loss": loss}, targets=[train])
'''


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "bow.py"
    path.write_text(MODEL)
    return path


def batches(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(2)
    return [{"ids": rng.integers(0, 20000, (8, 4)).astype(np.int32),
             "y": rng.integers(0, 3, 8).astype(np.int32)} for _ in range(n)]


def test_a_large_variable_is_split_over_the_ps_tasks_and_trains_as_unsplit(model):
    spec = ClusterSpec(2, 2, "ps-sync")
    module, report = compile_with_report(model, cluster=spec, backend="llvm")
    decls = module.variables
    assert "E" not in decls and decls["E/part_0"].type.shape == (10000, 16)
    assert decls["E/part_0"].device == "/job:ps/task:0/cpu:0"
    assert decls["E/part_1"].device == "/job:ps/task:1/cpu:0"
    # the slots follow their shard; small and non-trainable variables stay whole
    assert decls["E/part_1/Momentum"].device == decls["E/part_1"].device
    assert {"W", "W/Momentum", "global_step"} <= set(decls)
    split = Program(module, backend="llvm", cluster="inprocess")
    whole_module, _ = compile_with_report(model, backend="llvm")
    whole = Program(whole_module, backend="llvm")
    for feeds in batches(4):
        np.testing.assert_allclose(split.run("train", feeds)["loss"],
                                   whole.run("train", feeds)["loss"], rtol=1e-5)
    np.testing.assert_allclose(split.variables["E"], whole.variables["E"], rtol=1e-5,
                               atol=1e-7)  # the program shows the split variable whole


def test_the_compile_report_shows_the_split_and_the_threshold_is_an_option(model, tmp_path,
                                                                            capsys):
    out = tmp_path / "m.tfc"
    assert main(["compile", str(model), "--cluster", "ps=2,workers=1", "-o", str(out)]) == 0
    report = capsys.readouterr().out
    assert "blocks of at least 262,144 bytes (--min-slice-size)" in report
    assert "E f32[20000,16] -> E/part_0 on ps:0, E/part_1 on ps:1" in report
    for size in ("off", "2MiB"):  # 1.28 MB: never split, or less than two slices
        assert main(["compile", str(model), "--cluster", "ps=2,workers=1", "-o", str(out),
                     "--min-slice-size", size]) == 0
        assert "E/part_0" not in capsys.readouterr().out
    module, _ = compile_with_report(model, cluster=ClusterSpec(1, 2, "ps-sync"))
    assert "E" in module.variables  # one PS task: nothing to split over
    assert main(["compile", str(model), "--cluster", "ps=2,workers=1", "-o", str(out),
                 "--min-slice-size", "lots"]) == 2
    assert "'lots' is not a size" in capsys.readouterr().err


def test_min_slice_size_without_ps_tasks_is_an_error(model, tmp_path, capsys):
    out = str(tmp_path / "m.tfc")
    for extra in ([], ["--cluster", "ps=0,workers=2"]):
        assert main(["compile", str(model), "-o", out, "--min-slice-size", "1MiB",
                     *extra]) == 1
        assert "--min-slice-size splits variables over PS tasks" in capsys.readouterr().err
