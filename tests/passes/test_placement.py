"""Cost-model placement: constraints, colocation, the greedy choice, the report."""

import numpy as np
import pytest

import tfc
from tfc.devices import DeviceProfile, DeviceRates, LinkRates
from tfc.errors import TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.types import DType, TensorType
from tfc.passes import run_passes
from tfc.passes.placement import place_graph
from tfc.testing import split_mlp_module

DEVICES = ["/cpu:0", "/cpu:1"]


def profile(link_bw=1e10, latency=1e-6, fast=None):
    rates = {d: DeviceRates(1e10, 1e10, 1e-6) for d in DEVICES}
    if fast:
        rates[fast] = DeviceRates(1e12, 1e12, 1e-6)
    return DeviceProfile(rates, {}, LinkRates(link_bw, latency))


def two_branches():
    """Two independent matmul chains joined at the end: parallel work for two devices."""
    g = Graph("g")
    t = TensorType(DType.f32, (256, 256))
    a, c = g.add_arg(t, "a"), g.add_arg(t, "c")
    b = Builder(g)
    x, y = a, c
    for _ in range(4):
        x, y = b("matmul", x, x), b("matmul", y, y)
    g.set_results([b("add", x, y)])
    return g


def test_independent_branches_spread_over_devices_and_beat_one_device():
    g = two_branches()
    report = place_graph(g, DEVICES, profile(), {})
    assert {op.device for op in g.ops if op.kind == "matmul"} == set(DEVICES)
    assert report.estimated_s < 0.7 * report.all_on_one_s
    assert report.ops_per_device["/cpu:0"] + report.ops_per_device["/cpu:1"] == len(g.ops)


def test_slow_links_make_the_join_wait_for_one_transfer_only():
    # greedy cannot foresee the join, so the branches still split; the join then goes
    # where one operand already is, and the estimate shows the link's cost
    g = two_branches()
    report = place_graph(g, DEVICES, profile(link_bw=1e3, latency=1.0), {})
    assert report.transfers == 1
    assert report.estimated_s > 1.0  # one latency of the slow link


def test_a_chain_stays_on_one_device():
    g = Graph("chain")
    t = TensorType(DType.f32, (128, 128))
    x = g.add_arg(t, "x")
    b = Builder(g)
    for _ in range(6):
        x = b("tanh", b("matmul", x, x))
    g.set_results([x])
    report = place_graph(g, DEVICES, profile(), {})
    assert len({op.device for op in g.ops}) == 1 and report.transfers == 0


def test_a_much_faster_device_takes_the_work():
    g = two_branches()
    place_graph(g, DEVICES, profile(fast="/cpu:1"), {})
    assert all(op.device == "/cpu:1" for op in g.ops if op.kind == "matmul")


def test_scopes_pin_and_variables_colocate_with_their_ops():
    m = split_mlp_module(["/cpu:1", None])
    m.devices = DEVICES
    run_passes(m, "placement")
    graph = m.graphs["train"]
    for op in graph.ops:
        if op.kind.startswith("var."):
            assert op.device == m.variables[op.attrs["var"]].device
    assert m.variables["w0"].device == "/cpu:1"  # its scope
    by_var = {}
    for op in graph.ops:
        if op.kind.startswith("var."):
            by_var.setdefault(op.attrs["var"], set()).add(op.device)
    assert all(len(ds) == 1 for ds in by_var.values())
    report = m.placement_reports["train"]
    assert "estimated step" in report.summary() and "round robin" in report.summary()


def test_a_scope_naming_a_device_the_module_lacks_is_a_located_error():
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [2], name="x")
        with tfc.device("/cpu:5"):
            y = x * 2.0
        tfc.entry("f", feeds={"x": x}, fetches={"y": y})
    m = g.as_module()
    m.devices = DEVICES
    with pytest.raises(TfcError, match=r"/cpu:5.*compiled for /cpu:0, /cpu:1") as e:
        run_passes(m, "placement")
    assert "test_placement.py" in str(e.value)


def test_placed_modules_print_and_parse_with_their_devices():
    from tfc.ir.parser import parse_module
    m = split_mlp_module([None])
    m.devices = DEVICES
    run_passes(m, "canonicalize,cse,dce,placement")
    text = str(m)
    back = parse_module(text)
    assert str(back) == text
    assert {op.device for op in back.graphs["train"].ops} <= set(DEVICES)
    np.testing.assert_equal(len(back.graphs["train"].ops), len(m.graphs["train"].ops))
