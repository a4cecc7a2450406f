"""``tfc.viz.render_html``: a well-formed, self-contained page with one node per partition
op, send->recv edges between device clusters, a legend, and escaped text."""

import re
from collections import Counter
from html.parser import HTMLParser

import pytest

from tfc.errors import Location, TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
from tfc.ir.types import DType, TensorType
from tfc.passes import run_passes
from tfc.passes.partition import partition_module
from tfc.testing import split_mlp_module
from tfc.viz import render_html

VOID = {"meta", "br", "img", "input", "link", "hr", "wbr", "col", "area", "base", "source"}
DEVICES = ["/cpu:0", "/cpu:1"]


class Page(HTMLParser):
    """Checks nesting while it parses, and collects nodes, edges, clusters and legend."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict]] = []
        self.nodes: dict[str, dict] = {}   # id -> attrs + "cluster"
        self.edges: list[dict] = []
        self.legend: list[str] = []
        self.sections: list[str] = []
        self.rects: dict[str, tuple[float, float, float, float]] = {}
        self.attrs_seen: list[tuple[str, str]] = []
        self.feed(text)
        self.close()
        assert not self.stack, f"unclosed: {[t for t, _ in self.stack]}"

    def _cluster(self) -> str | None:
        for tag, a in reversed(self.stack):
            if tag == "g" and "cluster" in (a.get("class") or "").split():
                return a.get("data-device")
        return None

    def _in_node(self) -> str | None:
        for tag, a in reversed(self.stack):
            if tag == "g" and "node" in (a.get("class") or "").split():
                return a["id"]
        return None

    def _element(self, tag: str, attrs: list) -> dict:
        a = dict(attrs)
        self.attrs_seen += [(k, v or "") for k, v in attrs]
        classes = (a.get("class") or "").split()
        if tag == "g" and "node" in classes:
            assert a["id"] not in self.nodes, f"duplicate id {a['id']}"
            self.nodes[a["id"]] = dict(a, cluster=self._cluster(), cat=classes[1])
        elif tag == "path" and "edge" in classes and "data-src" in a:
            self.edges.append(a)
        elif tag == "li" and "dev" in classes:
            self.legend.append(a["data-device"])
        elif tag == "section":
            self.sections.append(a["data-entry"])
        elif tag == "rect":
            node = self._in_node()
            if node is not None and node not in self.rects:
                self.rects[node] = tuple(float(a[k]) for k in ("x", "y", "width", "height"))
        return a

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = self._element(tag, attrs)
        if tag not in VOID:
            self.stack.append((tag, a))

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self._element(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1][0] == tag, \
            f"</{tag}> closes <{self.stack[-1][0] if self.stack else None}>"
        self.stack.pop()

    def ops(self, device: str | None = None) -> list[dict]:
        return [n for n in self.nodes.values() if n["cat"] not in ("feed", "fetch")
                and (device is None or n["data-device"] == device)]


@pytest.fixture(scope="module")
def split_mlp() -> Module:
    m = split_mlp_module(DEVICES)
    m.devices = list(DEVICES)
    return m


def test_one_node_per_partition_op(split_mlp):
    text = render_html(split_mlp, "train")
    page = Page(text)
    parts = partition_module(split_mlp, "train")
    assert set(parts) == set(DEVICES)
    for device, part in parts.items():
        drawn = page.ops(device)
        assert Counter(n["data-kind"] for n in drawn) == Counter(op.kind for op in part.graph.ops)
        assert all(n["cluster"] == device for n in drawn)  # inside its device's cluster
    # every op of the original graph is drawn; what is added is only sends and recvs
    drawn = Counter(n["data-kind"] for n in page.ops())
    original = Counter(op.kind for op in split_mlp.graphs["train"].ops)
    assert drawn - original == Counter({k: drawn[k] for k in ("send", "recv")})
    assert not original - drawn
    feeds = [n for n in page.nodes.values() if n["cat"] == "feed"]
    assert len(feeds) == sum(len(p.graph.args) for p in parts.values())


def test_send_recv_pairs_are_edges_between_clusters(split_mlp):
    page = Page(render_html(split_mlp, "train"))
    parts = partition_module(split_mlp, "train")
    keys = {op.attrs["key"] for p in parts.values() for op in p.sends}
    assert keys, "the split MLP must transfer something"
    xfers = {e["data-key"]: e for e in page.edges if "xfer" in e["class"].split()}
    assert set(xfers) == keys
    for key, e in xfers.items():
        src, dst = page.nodes[e["data-src"]], page.nodes[e["data-dst"]]
        assert (src["data-kind"], dst["data-kind"]) == ("send", "recv")
        assert src["data-key"] == dst["data-key"] == key
        assert src["cluster"] in DEVICES and dst["cluster"] in DEVICES
        assert src["cluster"] != dst["cluster"]
    # every other edge stays inside one device and joins drawn nodes
    for e in page.edges:
        assert e["data-src"] in page.nodes and e["data-dst"] in page.nodes
        if "xfer" not in e["class"].split():
            assert page.nodes[e["data-src"]]["cluster"] == page.nodes[e["data-dst"]]["cluster"]
    assert re.search(r'class="xfer-label".*?\d+(\.\d)? (B|KiB|MiB)<', render_html(split_mlp))


def test_legend_sections_and_variables(split_mlp):
    text = render_html(split_mlp)
    page = Page(text)
    assert page.sections == ["train", "predict"]  # every entry, not __init__
    assert page.legend == DEVICES * 2
    for device in DEVICES:
        assert f">{device}</text>" in text  # cluster titles
    vars_drawn = [n for n in page.nodes.values() if n["cat"] == "var"]
    assert {n["data-kind"] for n in vars_drawn} >= {"var.read", "var.assign_sub"}
    assert "var.read @w0" in text
    assert re.search(r"/cpu:0: \d+ ops; variables b0, b2, w0, w2<", text)  # layers 0, 2


def test_nodes_do_not_overlap(split_mlp):
    page = Page(render_html(split_mlp, "train"))
    boxes = list(page.rects.values())
    assert len(boxes) == len(page.nodes)
    for i, (x0, y0, w0, h0) in enumerate(boxes):
        for x1, y1, w1, h1 in boxes[i + 1:]:
            apart = x0 + w0 <= x1 or x1 + w1 <= x0 or y0 + h0 <= y1 or y1 + h1 <= y0
            assert apart, ((x0, y0, w0, h0), (x1, y1, w1, h1))


def test_self_contained(split_mlp):
    text = render_html(split_mlp)
    assert "http://" not in text and "https://" not in text
    assert "<link" not in text and "@import" not in text
    page = Page(text)
    for name, value in page.attrs_seen:
        assert name not in ("src", "xlink:href"), (name, value)
        if name == "href":
            assert value.startswith("#")


def test_unplaced_module_is_one_device():
    m = split_mlp_module([None])
    assert not m.devices
    text = render_html(m, "train")
    page = Page(text)
    assert page.legend == ["/cpu:0"]
    assert not [e for e in page.edges if "xfer" in e["class"]]
    assert len(page.ops()) == len(m.graphs["train"].ops)
    assert "unplaced" in text


def odd_module() -> Module:
    t = TensorType(DType.f32, ("B", 3))
    g = Graph('odd<&>"entry')
    x = g.add_arg(t, "<script>alert(1)</script>")
    b = Builder(g)
    y = b.op("tanh", x).result
    g.ops[-1].loc = Location('dir/"a&b<c>".py', 7)
    g.set_results([y], ["out'</svg>"])
    return Module({g.name: g})


def test_escapes_odd_names():
    text = render_html(odd_module())
    page = Page(text)
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "dir/&quot;a&amp;b&lt;c&gt;&quot;.py:7" in text
    assert page.sections == ['odd<&>"entry']
    assert text.count("<script>") == 1 and text.count("</svg>") == text.count("<svg ")
    assert len(page.ops()) == 1


def test_region_ops_are_single_nodes():
    t = TensorType(DType.f32, ("B", 8))
    g = Graph("f")
    x = g.add_arg(t, "x")
    b = Builder(g)
    y = b.op("exp", b.op("tanh", b.op("neg", x).result).result).result
    g.set_results([y], ["y"])
    m = run_passes(Module({"f": g}), "fusion")
    regions = [op for op in m.graphs["f"].ops if op.regions]
    assert regions, "fusion should have made a region"
    text = render_html(m)
    page = Page(text)
    assert len(page.ops()) == len(m.graphs["f"].ops)
    inner = sum(len(list(r.walk())) for op in regions for r in op.regions)
    assert [n["cat"] for n in page.ops()].count("region") == len(regions)
    assert f"fusion ({inner} ops)" in text


def test_fp16_transfers_drawn(split_mlp):
    split_mlp.fp16_transfers = True
    try:
        text = render_html(split_mlp, "train")
    finally:
        split_mlp.fp16_transfers = False
    page = Page(text)
    assert "fp16 transfers:" in text
    assert any(n["data-kind"] == "cast" for n in page.ops())


def test_bad_entry(split_mlp):
    with pytest.raises(TfcError, match="no entry 'nope'"):
        render_html(split_mlp, "nope")


def test_partition_failure_falls_back(split_mlp, monkeypatch):
    import tfc.viz as viz

    def broken(module, entry):
        raise TfcError("cannot cut")
    monkeypatch.setattr(viz, "device_graphs", broken)
    text = render_html(split_mlp, "train")
    page = Page(text)
    assert "not partitioned (cannot cut)" in text
    assert len(page.ops()) == len(split_mlp.graphs["train"].ops)
    assert set(page.legend) <= set(DEVICES)


def test_cluster_tasks_are_drawn_as_hosts():
    """A module compiled for a cluster: one dashed box per task around its lanes."""
    from tfc.passes.replicate import ClusterSpec, replicate_module
    import numpy as np
    import tfc
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.ones((4,), np.float32), name="w")
        loss = tfc.reduce_mean(tfc.reduce_sum(x * w, axis=1))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("train", feeds={"x": x}, fetches={"loss": loss}, targets=[train])
    m = g.as_module()
    replicate_module(m, ClusterSpec(1, 2, "ps-sync"))
    text = render_html(m, "train")
    Page(text)  # well-formed
    assert [t for t in ("ps:0", "worker:0", "worker:1")
            if f'class="task" data-task="{t}"' in text] == ["ps:0", "worker:0", "worker:1"]
    assert "3 tasks (ps:0, worker:0, worker:1)" in text
    assert 'class="task"' not in render_html(split_mlp_module(DEVICES), "train")
