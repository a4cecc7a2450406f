"""Partitioning: one graph per device, send/recv pairs, one transfer per (value, device)."""

import numpy as np
import pytest

from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.printer import print_graph
from tfc.ir.types import DType, TensorType
from tfc.ir.verifier import verify_graph
from tfc.passes.compress import compress_transfers
from tfc.passes.partition import lower_all_reduce, partition_graph, partition_module, stage_numbers
from tfc.runtime.rendezvous import Rendezvous
from tfc.testing import split_mlp_module

F32 = TensorType(DType.f32, (3,))


def pingpong(n: int) -> Graph:
    """x -> tanh on cpu:0 -> tanh on cpu:1 -> ... (n hops), plus a value used twice on
    the other device."""
    g = Graph("pp")
    x = g.add_arg(F32, "x")
    v = x
    for i in range(n):
        b = Builder(g, device=f"/cpu:{i % 2}")
        t = b("tanh", v)
        v = b("add", t, b("exp", t))  # t used twice on its own device
    b1 = Builder(g, device="/cpu:1")
    w = b1("mul", v, v)  # v (from cpu:0 when n is odd) used twice on cpu:1: one transfer
    g.set_results([v, w], ["v", "w"])
    return g


def run_partitions(parts, feeds):
    """Each partition in its own thread with the reference interpreter, blocking recvs."""
    import threading
    rv = Rendezvous(timeout_s=10)
    out, errors = {}, []

    def go(d, p):
        try:
            out[d] = run_graph(p.graph, [feeds[i] for i in p.arg_indices],
                               ExecContext({}, 0, rendezvous=rv))
        except BaseException as e:  # noqa: BLE001  (reported below)
            rv.abort(e)
            errors.append(e)

    threads = [threading.Thread(target=go, args=item) for item in parts.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors
    results = {}
    for d, p in parts.items():
        results.update(zip(p.result_indices, out[d]))
    return [results[i] for i in sorted(results)]


def test_partitions_are_valid_graphs_and_compute_the_same():
    g = pingpong(5)
    x = np.array([0.1, -0.5, 0.9], np.float32)
    want = run_graph(g, [x], ExecContext({}, 0))
    parts = partition_graph(g.clone(), "/cpu:0")
    assert set(parts) == {"/cpu:0", "/cpu:1"}
    for p in parts.values():
        verify_graph(p.graph)
        assert {op.device for op in p.graph.ops} == {p.device}
    got = run_partitions(parts, [x])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_one_transfer_per_value_and_destination_with_paired_keys():
    parts = partition_graph(pingpong(5).clone(), "/cpu:0")
    sends = [op for p in parts.values() for op in p.sends]
    recvs = [op for p in parts.values() for op in p.recvs]
    assert sorted(s.attrs["key"] for s in sends) == sorted(r.attrs["key"] for r in recvs)
    assert len({(id(s.inputs[0]), s.attrs["to"]) for s in sends}) == len(sends)
    assert len(sends) == 5  # one per hop; the value used twice on cpu:1 crosses once
    for r in recvs:
        assert r.attrs["from"] != r.device


def test_stages_follow_the_crossings():
    parts = partition_graph(pingpong(4).clone(), "/cpu:0")
    stage = stage_numbers(parts)
    recv_stages = sorted(stage[op] for p in parts.values() for op in p.recvs)
    assert recv_stages == [1, 2, 3]  # 4 hops alternate devices: 3 crossings


def test_model_parallel_module_partitions_keep_variables_home():
    m = split_mlp_module(["/cpu:0", "/cpu:1"])
    parts = partition_module(m, "train")
    for p in parts.values():
        for op in p.graph.ops:
            if op.kind.startswith("var."):
                assert m.variables[op.attrs["var"]].device == p.device
    text = print_graph(parts["/cpu:1"].graph)
    assert "send " in text and "recv " in text and '"/cpu:0"' in text


def test_all_reduce_lowers_to_identical_sums_on_each_replica():
    g = Graph("ar")
    xs = [g.add_arg(F32, f"x{i}") for i in range(3)]
    outs = []
    for i, x in enumerate(xs):
        outs.append(Builder(g, device=f"/cpu:{i}")("neg", x))
    ar = Builder(g).op("all_reduce", *outs, reduction="mean")
    g.set_results(list(ar.results))
    vals = [np.array([1, 2, 3], np.float32) * (i + 1) / 7 for i in range(3)]
    want = run_graph(g, vals, ExecContext({}, 0))
    lowered = g.clone()
    assert lower_all_reduce(lowered, "/cpu:0") == 1
    assert not any(op.kind == "all_reduce" for op in lowered.ops)
    parts = partition_graph(g.clone(), "/cpu:0")
    got = run_partitions(parts, vals)
    for a in got:
        np.testing.assert_array_equal(a, want[0])  # bitwise: same order everywhere
    assert [p.graph.ops[-1].device for p in parts.values()] == ["/cpu:0", "/cpu:1", "/cpu:2"]


@pytest.mark.parametrize("backend", ["reference", "llvm"])
@pytest.mark.parametrize("n, shape", [(2, (10, 100)), (3, (10, 100)), (4, (7, 3)),
                                      (3, (2,)), (4, ())])
def test_ring_all_reduce_moves_2_n_minus_1_over_n_of_the_data_per_replica(n, shape, backend):
    """The ring sends each element 2(N-1) times in all (reduce-scatter, then all-gather):
    2(N-1)/N of the tensor per replica, where all-to-all sends N-1 whole tensors to each
    replica. Every replica gets bitwise the same mean."""
    from tfc.runtime import Program
    t = TensorType(DType.f32, shape)
    g = Graph("ar")
    xs = [g.add_arg(t, f"x{i}") for i in range(n)]
    outs = [Builder(g, device=f"/cpu:{i}")("neg", x) for i, x in enumerate(xs)]
    g.set_results(list(Builder(g).op("all_reduce", *outs, reduction="mean").results))
    m = Module({"ar": g}, devices=[f"/cpu:{i}" for i in range(n)])
    p = Program(m, backend=backend)
    rng = np.random.default_rng(n)
    feeds = {f"x{i}": rng.normal(size=shape).astype(np.float32) for i in range(n)}
    got = list(p.run("ar", **feeds).values())
    for a in got[1:]:
        np.testing.assert_array_equal(a, got[0])
    np.testing.assert_allclose(got[0], -np.mean(list(feeds.values()), axis=0), rtol=1e-5,
                               atol=1e-6)
    size = int(np.prod(shape))
    sent = p._executable("ar").last_rendezvous.bytes_sent
    assert sent == 2 * (n - 1) * size * 4  # = 2(N-1)/N x size x N, exactly


def test_compressed_transfers_carry_f16_and_halve_bytes():
    g = pingpong(3)
    x = np.array([0.1, -0.5, 0.9], np.float32)
    want = run_graph(g, [x], ExecContext({}, 0))
    parts = partition_graph(g.clone(), "/cpu:0")
    report = compress_transfers(parts, {})
    assert report.compressed == report.transfers == 3
    assert report.bytes_after * 2 == report.bytes_before
    for p in parts.values():
        verify_graph(p.graph)
        assert all(s.inputs[0].dtype is DType.f16 for s in p.sends)
        assert all(r.result.dtype is DType.f16 for r in p.recvs)
    got = run_partitions(parts, [x])
    for a, b in zip(got, want):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=4e-3)  # a few f16 roundings (2^-11 each)


def test_unknown_entry_is_an_error():
    from tfc.errors import TfcError
    with pytest.raises(TfcError, match="no graph @nope"):
        partition_module(Module(), "nope")


# ---- the partition pass: stage graphs in the module and a table ------------------------------

def two_device_module(n: int = 5) -> Module:
    m = Module({"pp": pingpong(n)}, devices=["/cpu:0", "/cpu:1"])
    return m


def test_partition_pass_leaves_stage_graphs_and_a_table():
    from tfc.ir.parser import parse_module
    from tfc.ir.printer import print_module
    from tfc.passes import run_passes
    m = run_passes(two_device_module(), "partition", verify=True)
    table = m.partitions["pp"]
    assert list(m.entries) == ["pp"]  # the stage graphs are no entries
    names = table.graph_names()
    assert names and set(names) == set(m.graphs) - {"pp"} == m.stage_graphs()
    for d in table.devices:
        for st in d.stages:
            if st.graph is not None:
                g = m.graphs[st.graph]
                assert {op.device for op in g.ops} == {d.device}
                assert not {"send", "recv"} & {op.kind for op in g.ops}
                assert len(st.inputs) == len(g.args)
    # one transfer per hop, each sent once and received once
    keys = [s.key for _, _, s in table.sends()]
    recvs = [r.key for d in table.devices for st in d.stages for r in st.recvs]
    assert len(keys) == 5 and sorted(keys) == sorted(recvs)
    assert [d for d, _ in table.fetches] == ["/cpu:0", "/cpu:1"]
    # the stage graphs print and parse back under their names, with the target
    back = parse_module(print_module(m))
    assert list(back.graphs) == list(m.graphs) and back.devices == m.devices
    table.check(m)


def test_partition_table_round_trips_through_json():
    import json
    from tfc.ir.core import PartitionTable
    from tfc.passes import run_passes
    m = split_mlp_module(["/cpu:0", "/cpu:1"])
    m.devices = ["/cpu:0", "/cpu:1"]
    m.fp16_transfers = True
    m = run_passes(m, "partition,compress", verify=True)
    for table in m.partitions.values():
        back = PartitionTable.from_json(json.loads(json.dumps(table.to_json())))
        assert back == table and back.compressed
        back.check(m)


@pytest.mark.parametrize("broken, message", [
    ({"entry": 3}, "field 'entry' should be a string"),
    ({"entry": "pp", "devices": [{"device": "/cpu:0", "stages": [{"inputs": [{"x": 1}]}]}]},
     "expected {'feed'}"),
    ({"entry": "pp", "devices": {}}, "field 'devices' should be a list"),
])
def test_partition_table_from_bad_json_is_a_clear_error(broken, message):
    from tfc.errors import TfcError
    from tfc.ir.core import PartitionTable
    with pytest.raises(TfcError, match=message):
        PartitionTable.from_json(broken)


def test_partition_table_that_does_not_fit_the_module_is_a_clear_error():
    import copy
    from tfc.errors import TfcError
    from tfc.passes import run_passes
    m = run_passes(two_device_module(), "partition")
    table = m.partitions["pp"]
    wrong = copy.deepcopy(table)
    wrong.devices[0].stages[0].graph = "nope"
    with pytest.raises(TfcError, match="no graph @nope"):
        wrong.check(m)
    wrong = copy.deepcopy(table)
    wrong.fetches.pop()
    with pytest.raises(TfcError, match="1 fetches for the 2 results"):
        wrong.check(m)
    wrong = copy.deepcopy(table)
    next(st for st in wrong.devices[1].stages if st.recvs).recvs.clear()
    with pytest.raises(TfcError, match="not received before"):
        wrong.check(m)
    wrong = copy.deepcopy(table)
    wrong.devices[0].stages[0].sends.clear()
    with pytest.raises(TfcError, match="has no one send"):
        wrong.check(m)


def test_one_device_modules_and_init_are_not_partitioned():
    from tfc.ir.printer import print_module
    from tfc.passes import run_passes
    for devices in ([], ["/cpu:0"]):
        m = Module({"pp": pingpong(3)}, devices=list(devices))
        before = print_module(m)
        m = run_passes(m, "partition,compress", verify=True)
        assert not m.partitions and print_module(m) == before
    m = split_mlp_module(["/cpu:0", "/cpu:1"])
    m.devices = ["/cpu:0", "/cpu:1"]
    m = run_passes(m, "partition", verify=True)
    assert "__init__" in m.graphs and set(m.partitions) == {"train", "predict"}
    assert not any(name.startswith("__init__") for name in m.stage_graphs())


def test_partition_pass_twice_changes_nothing_and_names_stay_unique():
    from tfc.ir.printer import print_module
    from tfc.passes import run_passes
    m = two_device_module()
    taken = Graph("pp.cpu0.s0")  # a graph already named as a stage would be
    taken.set_results([])
    m.add_graph(taken)
    m = run_passes(m, "partition", verify=True)
    assert m.graphs["pp.cpu0.s0"] is taken and "pp.cpu0.s0" in m.entries
    assert "pp.cpu0.s0_1" in m.partitions["pp"].graph_names()
    once = print_module(m)
    assert print_module(run_passes(m, "partition,compress,partition")) != once  # compressed
    m2 = run_passes(two_device_module(), "partition")
    assert print_module(run_passes(m2, "partition")) == print_module(
        run_passes(two_device_module(), "partition"))


def test_device_graphs_glue_the_stages_back_into_the_partitions():
    """The table's stages, glued, are the partitions the cut made: the same ops per
    device, the same transfers, and they compute the entry's results."""
    from tfc.passes import run_passes
    from tfc.passes.partition import device_graphs
    g = pingpong(5)
    x = np.array([0.1, -0.5, 0.9], np.float32)
    want = run_graph(g, [x], ExecContext({}, 0))
    m = run_passes(Module({"pp": g}, devices=["/cpu:0", "/cpu:1"]), "partition")
    glued = device_graphs(m, "pp")
    cut = partition_graph(pingpong(5), "/cpu:0")
    assert set(glued) == set(cut)
    for device, part in glued.items():
        verify_graph(part.graph)
        assert sorted(op.kind for op in part.graph.ops) == sorted(
            op.kind for op in cut[device].graph.ops)
        assert sorted(s.attrs["key"] for s in part.sends) == sorted(
            s.attrs["key"] for s in cut[device].sends)
    got = run_partitions(glued, [x])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
