"""fp16 transfers: what crosses as f16 (activations, gradients) and what never does
(state, scalars), the saturating cast both backends run, and the bytes the placement and
the compile report count."""

import numpy as np
import pytest

from tfc.devices import DeviceProfile, DeviceRates, LinkRates
from tfc.errors import TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
from tfc.ir.types import DType, TensorType
from tfc.passes import run_passes
from tfc.passes.compress import compress_transfers, compression_report, transfer_policy
from tfc.passes.partition import partition_module
from tfc.passes.placement import place_graph
from tfc.runtime import Program
from tfc.testing import split_mlp_module

DEVICES = ["/cpu:0", "/cpu:1"]
F16_MAX = 65504.0


def cast_module(n: int, **attrs) -> Module:
    g = Graph("f")
    x = g.add_arg(TensorType(DType.f32, (n,)), "x")
    g.set_results([Builder(g)("cast", x, dtype=DType.f16, **attrs)], ["y"])
    return Module({"f": g})


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_the_transfer_cast_rounds_to_nearest_even_and_saturates(backend):
    x = np.array([1e5, -7e4, 65519.0, 65520.0, -65536.0, np.inf, -np.inf, np.nan,
                  1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 3e-8, 0.1], np.float32)
    y = Program(cast_module(len(x), saturate=True), backend=backend).run("f", x=x)["y"]
    assert y.dtype == np.float16
    want = np.array([F16_MAX, -F16_MAX, F16_MAX, F16_MAX, -F16_MAX, np.inf, -np.inf, np.nan,
                     1.0, 1.0 + 2.0 ** -9, 2 ** -24, 0.1], np.float16)  # ties to even
    np.testing.assert_array_equal(y, want)
    plain = Program(cast_module(len(x)), backend=backend).run("f", x=x)["y"]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(plain, x.astype(np.float16))  # TensorFlow's: inf
    assert np.isinf(plain[[0, 1, 3, 4]]).all() and plain[2] == F16_MAX


def test_saturate_is_for_float_to_float_casts():
    g = Graph("f")
    x = g.add_arg(TensorType(DType.i32, (2,)), "x")
    with pytest.raises(TfcError, match="saturate applies to float-to-float casts"):
        Builder(g)("cast", x, dtype=DType.f16, saturate=True)


def adam_module():
    """A two-layer model whose layers are pinned to two devices, trained with Adam."""
    import tfc
    rng = np.random.default_rng(0)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 6], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        with g.device("/cpu:0"):
            w0 = tfc.Variable(rng.normal(0, 0.5, (6, 8)).astype(np.float32), name="w0")
            h = tfc.nn.relu(tfc.matmul(x, w0))
        with g.device("/cpu:1"):
            w1 = tfc.Variable(rng.normal(0, 0.5, (8, 3)).astype(np.float32), name="w1")
            logits = tfc.matmul(h, w1)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        train = tfc.train.AdamOptimizer(0.01).minimize(loss)
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
    m = g.as_module()
    m.devices = DEVICES
    return m


def test_state_and_scalars_stay_f32_activations_and_gradients_go_f16():
    m = adam_module()
    graph = m.graphs["train"]
    allowed = transfer_policy([graph], m.variables)
    kinds = {}
    for op in graph.ops:
        for r in op.results:
            kinds.setdefault(op.kind, set()).add(r in allowed)
    assert kinds["var.read"] == {False}  # weights feed their update; slots are state
    assert kinds["relu"] == {True}       # the activation
    assert {False} != kinds["matmul"]    # the forward and gradient products
    for op in graph.ops:
        for r in op.results:
            if r.type.num_elements() == 1:
                assert r not in allowed, op  # scalars: beta powers, learning rate, loss
            reads = {i.op.attrs["var"] for i in op.inputs if i.op and i.op.kind == "var.read"}
            if any(v.endswith(("/Adam", "/Adam_1")) for v in reads):
                assert r not in allowed, op  # computed from an optimizer slot
    # every value assigned to a variable stays f32
    for op in graph.ops:
        if op.kind.startswith("var.assign"):
            assert op.inputs[0] not in allowed, op


def test_adam_on_two_devices_keeps_its_state_exact_with_fp16_transfers():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = rng.integers(0, 3, 32).astype(np.int32)
    runs = {}
    for fp16 in (False, True):
        m = adam_module()
        m.fp16_transfers = fp16
        run_passes(m, "placement")
        p = Program(m, backend="reference")
        for _ in range(3):
            p.run("train", x=x, y=y)
        runs[fp16] = p.variables
    beta1_power = np.float32(0.9)
    for _ in range(3):
        beta1_power = np.float32(beta1_power * np.float32(0.9))
    assert runs[True]["beta1_power"] == runs[False]["beta1_power"] == beta1_power
    for slot in ("w0/Adam", "w0/Adam_1", "w1/Adam", "w1/Adam_1"):
        assert (runs[True][slot] != 0).all()  # second moments did not underflow f16
    for name in runs[False]:
        np.testing.assert_allclose(runs[True][name], runs[False][name], rtol=5e-3, atol=1e-4)


def test_reported_bytes_halve_for_compressed_edges_in_estimate_and_report():
    """The placement's transfer bytes and estimate, and the runtime's compression report,
    count f16 bytes for exactly the edges that are compressed. Between the logical CPUs of
    one process a transfer hands a reference over, so the bytes change no estimate there;
    between hosts the slow link carries half the bytes."""
    slow = DeviceProfile({}, {}, LinkRates(1e6, 1e-6), cpu=DeviceRates.flat(1e10, 1e10, 1e-6))
    reports, remote = {}, {}
    hosts = ["/job:w/task:0/cpu:0", "/job:w/task:1/cpu:0"]
    for fp16 in (False, True):
        m = split_mlp_module(["/cpu:0", "/cpu:1"])
        m.devices, m.fp16_transfers = DEVICES, fp16
        g = m.graphs["predict"]  # activations only cross: every transfer is compressed
        allowed = transfer_policy([g], m.variables) if fp16 else set()
        reports[fp16] = place_graph(g, DEVICES, slow, m.variables, allowed)
        if fp16:  # what the runtime runs: the table the partition and compress passes left
            compression = compression_report(run_passes(m, "partition,compress"), "predict")
        m = split_mlp_module(hosts)
        g = m.graphs["predict"]
        allowed = transfer_policy([g], m.variables) if fp16 else set()
        remote[fp16] = place_graph(g, hosts, slow, m.variables, allowed)
    full, half = reports[False], reports[True]
    assert full.transfers == half.transfers > 0
    assert half.transfer_bytes * 2 == full.transfer_bytes
    assert compression.compressed == compression.transfers == half.transfers
    assert compression.bytes_after == half.transfer_bytes
    assert half.estimated_s == full.estimated_s  # in process: no bytes move
    assert remote[True].transfers == remote[False].transfers > 0
    assert remote[True].estimated_s < remote[False].estimated_s  # half the bytes on the link


def test_compile_report_counts_the_halved_bytes(tmp_path):
    """Training: the compile report's bytes are the runtime's compressed bytes."""
    m = adam_module()
    m.fp16_transfers = True
    run_passes(m, "placement")
    report = m.placement_reports["train"]
    compression = compression_report(run_passes(m, "partition,compress"), "train")
    assert 0 < compression.compressed < compression.transfers == report.transfers
    assert report.transfer_bytes == compression.bytes_after < compression.bytes_before


def test_compress_pass_rewrites_the_table_as_compress_transfers_does():
    """The pass compresses exactly the transfers ``compress_transfers`` compresses on the
    cut partitions, with the same bytes, and the stage graphs carry the casts."""
    m = adam_module()
    m.fp16_transfers = True
    run_passes(m, "placement")
    direct = compress_transfers(partition_module(m, "train"), m.variables)
    m = run_passes(m, "partition,compress", verify=True)
    table = m.partitions["train"]
    assert sorted(table.compressed) == sorted(direct.keys) and direct.keys
    report = compression_report(m, "train")
    assert (report.transfers, report.compressed, report.bytes_before, report.bytes_after) \
        == (direct.transfers, direct.compressed, direct.bytes_before, direct.bytes_after)
    casts = [op for name in table.graph_names() for op in m.graphs[name].ops
             if op.kind == "cast" and op.attrs.get("saturate")]
    assert len(casts) == len(table.compressed)
    assert all(op.result.dtype is DType.f16 for op in casts)
    # a second run changes nothing: what travels as f16 already is not f32
    again = run_passes(m, "compress", verify=True)
    assert again.partitions["train"].compressed == table.compressed


def test_compress_leaves_modules_without_partitions_alone():
    from tfc.ir.printer import print_module
    m = split_mlp_module(["/cpu:0", "/cpu:1"])
    before = print_module(m)
    assert print_module(run_passes(m, "compress", verify=True)) == before
