"""Partitioning: one graph per device, send/recv pairs, one transfer per (value, device)."""

import numpy as np
import pytest

from tfc.backends.reference import ExecContext, run_graph
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
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
