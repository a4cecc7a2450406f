"""The automatic row split of ``.tfm`` and ``.tfir`` models (``tfc.api.split_variables``):
``tfc compile --cluster ps=2 --min-slice-size S`` splits their large variables and those
variables' optimizer slots by rows over the PS tasks as it splits a Python model's; the
split model trains to the unsplit model's numbers and to the Python path's, its
checkpoints restore into the Python model, its embedding's gradient stays sparse, and the
compile report shows the same split for every frontend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tfc.api.partitioned import automatic_partitioner
from tfc.api.split_variables import plan_split, split_variables
from tfc.cli import main
from tfc.compiler.driver import compile_with_report, load_source
from tfc.compiler.ps_training import compile_ps_training, unplaced
from tfc.ir.printer import print_module
from tfc.passes.async_split import split_async
from tfc.passes.partition import source_value
from tfc.passes.replicate import ClusterSpec, task_label
from tfc.runtime import Program

SLICE = 4096  # bytes: E (25,600) and W (16,384) split in two; V, b and the one-row R not
SPEC = ClusterSpec(2, 2, "ps-sync")
OPTIMIZERS = {"momentum": ("momentum(learning_rate=0.5, momentum=0.9)",
                           "tfc.train.MomentumOptimizer(0.5, 0.9)", ["Momentum"]),
              "adam": ("adam(learning_rate=0.05)", "tfc.train.AdamOptimizer(0.05)",
                       ["Adam", "Adam_1"])}
# every other optimizer of tfc: each computes a row's update from that row alone
OTHER_OPTIMIZERS = {
    "sgd": ("sgd(learning_rate=0.5)", "tfc.train.GradientDescentOptimizer(0.5)", []),
    "adagrad": ("adagrad(learning_rate=0.5)", "tfc.train.AdagradOptimizer(0.5)", ["Adagrad"]),
    "rmsprop": ("rmsprop(learning_rate=0.05, momentum=0.5, centered=true)",
                "tfc.train.RMSPropOptimizer(0.05, momentum=0.5, centered=True)",
                ["RMSProp", "RMSProp_1"])}

TFM = '''
input ids: i32[B, 4]
input y: i32[B]

param E: f64[200, 16] = random.normal(stddev=0.1, seed=1)
param W: f64[16, 128] = random.normal(stddev=0.1, seed=2)
param V: f64[128, 3] = random.normal(stddev=0.1, seed=3)
param b: f64[3] = zeros
param R: f64[1, 2048] = random.normal(stddev=0.1, seed=4)

fn logits(ids) = relu(mean(gather(E, ids), axes=[1]) @ W) @ V + b

train train(ids, y) {
  loss = mean(sparse_softmax_cross_entropy(logits(ids), y)) + 0.01 * mean(R * R)
  minimize loss with OPTIMIZER
  return loss
}

entry predict(ids) {
  return logits = logits(ids)
}
'''

PY = '''
import tfc
ids = tfc.placeholder(tfc.int32, [None, 4], name="ids")
y = tfc.placeholder(tfc.int32, [None], name="y")
f64 = tfc.float64
E = tfc.Variable(tfc.random.normal([200, 16], stddev=0.1, seed=1, dtype=f64), name="E")
W = tfc.Variable(tfc.random.normal([16, 128], stddev=0.1, seed=2, dtype=f64), name="W")
V = tfc.Variable(tfc.random.normal([128, 3], stddev=0.1, seed=3, dtype=f64), name="V")
b = tfc.Variable(tfc.zeros([3], f64), name="b")
R = tfc.Variable(tfc.random.normal([1, 2048], stddev=0.1, seed=4, dtype=f64), name="R")
logits = tfc.matmul(tfc.nn.relu(tfc.matmul(tfc.reduce_mean(tfc.gather(E, ids), axis=1), W)),
                    V) + b
loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
    labels=y, logits=logits)) + 0.01 * tfc.reduce_mean(R * R)
train = OPTIMIZER.minimize(loss)
tfc.entry("train", feeds={"ids": ids, "y": y}, fetches={"loss": loss}, targets=[train])
tfc.entry("predict", feeds={"ids": ids}, fetches={"logits": logits})
'''


def write_models(tmp_path: Path, optimizer: str) -> dict[str, Path]:
    """The one model as ``.tfm``, ``.tfir`` (the ``.tfm``'s module printed) and ``.py``."""
    tfm_opt, py_opt, _ = {**OPTIMIZERS, **OTHER_OPTIMIZERS}[optimizer]
    paths = {"tfm": tmp_path / "bow.tfm", "tfir": tmp_path / "bow.tfir",
             "py": tmp_path / "bow.py"}
    paths["tfm"].write_text(TFM.replace("OPTIMIZER", tfm_opt))
    paths["py"].write_text(PY.replace("OPTIMIZER", py_opt))
    paths["tfir"].write_text(print_module(load_source(paths["tfm"])))
    return paths


def batches(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [{"ids": rng.integers(0, 200, (8, 4)).astype(np.int32),
             "y": rng.integers(0, 3, 8).astype(np.int32)} for _ in range(n)]


def train(program: Program, steps: int = 4) -> list[float]:
    return [float(program.run("train", feeds)["loss"]) for feeds in batches(steps)]


def split_program(path: Path) -> Program:
    module, _ = compile_with_report(path, cluster=SPEC, min_slice_size=SLICE)
    return Program(module, cluster="inprocess")


def whole(values: dict[str, np.ndarray], name: str) -> np.ndarray:
    """Variable or slot ``name`` of a split or unsplit program: ``E/Momentum`` of a split
    one is its blocks' ``E/part_i/Momentum`` concatenated."""
    if name in values:
        return values[name]
    var, _, slot = name.partition("/")
    parts = [values[f"{var}/part_{i}" + (f"/{slot}" if slot else "")] for i in range(2)]
    return np.concatenate(parts, axis=0)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("frontend", ["tfm", "tfir"])
def test_a_tfm_or_tfir_model_is_split_and_trains_as_unsplit(tmp_path, frontend, optimizer):
    path = write_models(tmp_path, optimizer)[frontend]
    split = split_program(path)
    decls = split.module.variables
    slots = OPTIMIZERS[optimizer][2]
    for name, rows in (("E", 100), ("W", 8)):  # the blocks and their slots, on their PS
        assert name not in decls
        for i in range(2):
            block = decls[f"{name}/part_{i}"]
            assert block.type.shape[0] == rows and block.device == f"/job:ps/task:{i}/cpu:0"
            for slot in slots:
                assert decls[f"{name}/part_{i}/{slot}"].device == block.device
    assert {"V", "b", "R", "R/" + slots[0]} <= set(decls)  # small, or one row: whole
    unsplit = Program(compile_with_report(path)[0])
    np.testing.assert_allclose(train(split), train(unsplit), rtol=1e-10)
    got, want = split.variables, unsplit.variables
    for name in ("E", "W", "V", "b", "R", *(f"{v}/{s}" for v in "EW" for s in slots)):
        np.testing.assert_allclose(whole(got, name), want[name], rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    ids = {"ids": batches(1)[0]["ids"]}
    np.testing.assert_allclose(split.run("predict", ids)["logits"],
                               unsplit.run("predict", ids)["logits"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_the_split_tfm_model_trains_as_the_split_python_model_and_shares_its_checkpoints(
        tmp_path, optimizer):
    paths = write_models(tmp_path, optimizer)
    tfm, py = split_program(paths["tfm"]), split_program(paths["py"])
    assert sorted(tfm.module.variables) == sorted(py.module.variables)
    np.testing.assert_allclose(train(tfm), train(py), rtol=1e-10)
    for name, value in py.variables.items():
        np.testing.assert_allclose(tfm.variables[name], value, rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    # a checkpoint of either restores into the other: the same names, the same blocks
    for source, target in ((tfm, split_program(paths["py"])),
                           (py, split_program(paths["tfm"]))):
        saved = source.save_checkpoint(tmp_path / f"ckpt-{id(source)}")
        target.restore_checkpoint(saved)
        for name, value in source.variables.items():
            np.testing.assert_array_equal(target.variables[name], value, err_msg=name)
        np.testing.assert_allclose(train(target, 2), train(source, 2), rtol=1e-10)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_the_split_embedding_s_gradient_stays_sparse(tmp_path, optimizer):
    """Each PS gets E's gradient as rows of the batch's ids from each worker (and sends
    back rows per id), never a block or the table: each block's update runs on its PS.
    What crosses tasks per step is no more than the split Python model moves."""
    paths = write_models(tmp_path, optimizer)
    module, report = compile_with_report(paths["tfm"], cluster=SPEC, min_slice_size=SLICE)
    table = module.partitions["train"]
    received: dict[str, set[tuple]] = {}
    for device, _, send in table.sends():
        into = task_label(send.receiver)
        if into != task_label(device):
            value = source_value(module, table, device, send.value)
            received.setdefault(into or "", set()).add(value.type.shape)
    for ps in ("ps:0", "ps:1"):
        assert ("?", 4, 16) in received[ps], received[ps]  # a worker's ids' rows
    everything = set().union(*received.values())
    assert not {(100, 16), (200, 16)} & everything, everything
    _, python = compile_with_report(paths["py"], cluster=SPEC, min_slice_size=SLICE)
    assert report.cluster is not None and python.cluster is not None
    assert report.cluster.transfers["train"][1] <= python.cluster.transfers["train"][1]


def test_small_and_one_row_variables_and_a_high_threshold_leave_the_model_alone(tmp_path):
    module = load_source(write_models(tmp_path, "momentum")["tfm"])
    assert sorted(plan_split(module, automatic_partitioner(2, SLICE))) == [
        "E", "E/Momentum", "W", "W/Momentum"]
    before = print_module(module)
    assert split_variables(module, automatic_partitioner(2, 64 << 10)) == []
    assert print_module(module) == before
    assert split_variables(module, automatic_partitioner(2, SLICE)) == [
        "E", "W", "E/Momentum", "W/Momentum"]
    # the optimizer's update copied per block: one gradient marker each
    assert sorted(op.attrs["var"] for op in module.graphs["train"].ops
                  if op.kind == "optimizer.grad") == [
        "E/part_0", "E/part_1", "R", "V", "W/part_0", "W/part_1", "b"]
    module = load_source(write_models(tmp_path, "momentum")["tfm"])
    assert print_module(module) == before
    assert split_variables(module, automatic_partitioner(1, SLICE)) == []  # one PS


def split_report(argv: list[str], capsys) -> list[str]:
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(out) if line.startswith("variables split"))
    return out[first:first + 3]


def test_the_compile_report_shows_the_same_split_for_every_frontend(tmp_path, capsys):
    paths = write_models(tmp_path, "adam")
    reports = {name: split_report(["compile", str(path), "--cluster", "ps=2,workers=2",
                                   "--min-slice-size", "4KiB", "-o",
                                   str(tmp_path / f"{name}.tfc")], capsys)
               for name, path in paths.items()}
    assert reports["tfm"] == reports["tfir"] == reports["py"]
    assert reports["tfm"] == [
        "variables split by rows (a partitioner, or automatically: blocks of at least 4,096 "
        "bytes (--min-slice-size)):",
        "  E f64[200,16] -> E/part_0 on ps:0, E/part_1 on ps:1",
        "  W f64[16,128] -> W/part_0 on ps:0, W/part_1 on ps:1"]


@pytest.mark.parametrize("size, message, code", [
    ("lots", "'lots' is not a size", 2), ("0", "a slice needs at least one byte", 2)])
def test_a_bad_min_slice_size_is_a_clear_error(tmp_path, capsys, size, message, code):
    path = write_models(tmp_path, "momentum")["tfm"]
    assert main(["compile", str(path), "--cluster", "ps=2,workers=2", "--min-slice-size",
                 size, "-o", str(tmp_path / "m.tfc")]) == code
    assert message in capsys.readouterr().err


SQUARE = '''
input x: f64[B, 32]
param S: f64[32, 32] = random.normal(stddev=0.1, seed=1)
train train(x) {
  h = x @ S
  loss = mean(h * h)
  minimize loss with sgd(learning_rate=0.1)
  return loss
}
'''
# an update an optimizer of tfc never writes: row r of S's step needs every row of it
# (the step's mean over rows taken out), or the step is fetched too
CENTERED = [('  var.assign_sub @S, %19', '''  %100 = mean %19 {axes=[0], keepdims=true} : f64[1,32]
  %101 = sub %19, %100 : f64[32,32]
  var.assign_sub @S, %101''')]
FETCHED = [('  return %2', '  return %2, %19'),
           ('-> (loss: f64[])', '-> (loss: f64[], step: f64[32,32])')]


@pytest.mark.parametrize("edit", [CENTERED, FETCHED], ids=["centered", "fetched"])
def test_an_update_that_needs_other_blocks_rows_stays_whole_and_is_right(tmp_path, edit):
    tfm = tmp_path / "square.tfm"
    tfm.write_text(SQUARE)
    text = print_module(load_source(tfm))
    for old, new in edit:
        assert text.count(old) == 1
        text = text.replace(old, new)
    path = tmp_path / "square.tfir"
    path.write_text(text)
    split = split_program(path)
    assert sorted(n for n in split.module.variables if n.startswith("S")) == [
        "S/part_0", "S/part_1"]
    unsplit = Program(compile_with_report(path)[0])
    feeds = [{"x": np.random.default_rng(k).normal(size=(8, 32))} for k in range(3)]
    for f in feeds:
        got, want = split.run("train", f), unsplit.run("train", f)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-10, err_msg=name)
    np.testing.assert_allclose(split.variables["S"], unsplit.variables["S"], rtol=1e-10)
    module = load_source(path)  # the split alone: one marker, on the first block
    split_variables(module, automatic_partitioner(2, SLICE))
    assert [op.attrs["var"] for op in module.graphs["train"].ops
            if op.kind == "optimizer.grad"] == ["S/part_0"]


def test_min_slice_size_for_a_compiled_artifact_is_an_error(tmp_path, capsys):
    """An artifact is not split (its values are stored per variable): a size given for
    one says so instead of being ignored."""
    path = write_models(tmp_path, "momentum")["tfm"]
    artifact = tmp_path / "m.tfc"
    assert main(["compile", str(path), "-o", str(artifact)]) == 0
    capsys.readouterr()
    assert main(["compile", str(artifact), "--cluster", "ps=2,workers=2", "--min-slice-size",
                 "4KiB", "-o", str(tmp_path / "again.tfc")]) == 1
    assert "give the model's source (.py, .tfm or .tfir), not the compiled" in \
        capsys.readouterr().err


@pytest.mark.parametrize("optimizer", sorted(OTHER_OPTIMIZERS))
def test_every_optimizer_s_update_is_copied_per_block_and_right(tmp_path, optimizer):
    path = write_models(tmp_path, optimizer)["tfm"]
    module = load_source(path)
    split_variables(module, automatic_partitioner(2, SLICE))
    assert sorted(op.attrs["var"] for op in module.graphs["train"].ops
                  if op.kind == "optimizer.grad") == [
        "E/part_0", "E/part_1", "R", "V", "W/part_0", "W/part_1", "b"]
    split, unsplit = split_program(path), Program(compile_with_report(path)[0])
    np.testing.assert_allclose(train(split), train(unsplit), rtol=1e-10)
    for name, value in unsplit.variables.items():
        np.testing.assert_allclose(whole(split.variables, name), value, rtol=1e-10,
                                   atol=1e-12, err_msg=name)


def test_ps_async_cuts_the_split_tfm_step_as_the_split_python_step(tmp_path):
    """``--strategy ps-async``: each PS task applies the updates of its own blocks (and
    their slots), the same for both frontends."""
    spec = ClusterSpec(2, 2, "ps-async")
    paths = write_models(tmp_path, "adam")
    parts = {}
    for frontend in ("tfm", "py"):
        report = compile_ps_training(paths[frontend], tmp_path / f"{frontend}.tfc", spec,
                                     min_slice_size=SLICE)
        assert report.module is not None
        cut = split_async(unplaced(report.module), spec)
        parts[frontend] = {ps: (sorted(p.variables), p.foreign_reads)
                           for ps, p in cut.apply.items()}
    assert parts["tfm"] == parts["py"]
    held = parts["tfm"]["/job:ps/task:1/cpu:0"][0]
    assert {"E/part_1", "E/part_1/Adam", "W/part_1/Adam_1"} <= set(held)
    assert not any(v.startswith(("E/part_0", "W/part_0")) for v in held)
