"""Draw a placed, partitioned module as one self-contained HTML page (``tfc viz``).

Each entry graph is drawn as the ``partition`` pass cut it (its table's stages glued
back into one graph per device, ``device_graphs``), which is what the runtime runs, so
the picture shows what runs: one lane per device (a cluster box in the device's
colour; for a module compiled for a cluster, a dashed box per task around its devices'
lanes: one host), every partition op as one node in its device's lane, and each ``send`` ->
``recv`` pair as a dashed edge across lanes labelled with the bytes it carries per
step (symbolic dims counted as ``SYMBOL_SIZE``, like the placement report). Feeds and
fetches are drawn in the lanes of the partitions that take or produce them; variable
ops are pills named after their variable; region ops (``fusion``, ``cond``, ``while``,
``scan``) are single double-bordered nodes with their op count.

The layout is layered top to bottom by topological depth (networkx), in the manner of
Sugiyama: sources sink to just above their first consumer, long edges pass through
invisible waypoints so they route between nodes, and within each lane and layer the
nodes are ordered and positioned by the mean position of their neighbours (a few
sweeps down and up, positions solved as an isotonic least-squares fit).

The page needs no server and nothing from the network: inline SVG, inline CSS, and a
few lines of inline JavaScript for the hover card (kind, types, device, ``file:line``)
and for zoom (buttons, Ctrl+wheel) and drag-to-pan. Every text is HTML-escaped.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import networkx as nx
import numpy as np

from tfc.errors import TfcError
from tfc.ir.core import Module, Op
from tfc.ir.printer import format_attr
from tfc.ir.types import SYMBOL_SIZE
from tfc.passes.partition import Partition, device_graphs, devices_of, single_device
from tfc.passes.replicate import task_label
from tfc.pipeline import lower_for_devices
from tfc.units import format_bytes


PALETTE = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#bcbd22", "#e377c2",
           "#7f7f7f", "#393b79", "#637939"]
XFER_COLOUR = "#d9480f"
HOST_COLOUR = "#6c757d"

ROW_H = 62          # vertical distance between layers
NODE_H = 34
CHAR_W = 6.7        # width of one character at the 11px monospace font
GAP_X = 12          # between nodes of one layer
DUMMY_W = 6         # a long edge's waypoint
LANE_PAD = 14
LANE_GAP = 26
TOP = 52            # room for the lane titles
MAX_CHARS = 32


@dataclass
class _Node:
    id: str
    lane: str
    cat: str            # op var region send recv feed fetch dummy
    label: str = ""
    sub: str = ""
    tip: str = ""
    kind: str = ""
    key: str = ""       # send/recv rendezvous key
    width: float = DUMMY_W
    layer: int = 0
    x: float = 0.0      # centre

    @property
    def drawn(self) -> bool:
        return self.cat != "dummy"

    @property
    def is_op(self) -> bool:
        """A partition op (not a feed, fetch or waypoint)."""
        return self.cat not in ("dummy", "feed", "fetch")


@dataclass
class _Edge:
    src: str
    dst: str
    xfer: bool
    tip: str
    label: str = ""
    key: str = ""
    slot: float = 0.0   # x offset of the arrow on the target (one per input)
    via: list[str] = field(default_factory=list)


@dataclass
class _Scene:
    nodes: dict[str, _Node]
    edges: list[_Edge]
    lanes: list[str]
    notes: list[str]
    transfers: int = 0
    transfer_bytes: int = 0
    lane_x: dict[str, float] = field(default_factory=dict)
    lane_w: dict[str, float] = field(default_factory=dict)
    width: float = 0.0
    height: float = 0.0


# ---- text -------------------------------------------------------------------------------

def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[:max(1, n - 1)] + "\u2026"


def _attr_text(v: Any, kind: str | None = None) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= 8:
            return np.array2string(v, separator=",").replace("\n", "")
        return f"array {v.dtype}{list(v.shape)}"
    if isinstance(v, str):
        return _clip(v, 60)
    try:
        return _clip(format_attr(v, kind), 60)
    except TfcError:
        return _clip(str(v), 60)


def _types(values: Sequence[Any]) -> str:
    return ", ".join(str(v.type) for v in values)


def _op_node(op: Op, nid: str, lane: str) -> _Node:
    """The node of one partition op: its shape class, label, and hover text."""
    cat, label = "op", op.kind
    sub = _types(op.results) or _types(op.inputs[:1])
    lines = [op.kind + "".join(f"  %{r.name}" for r in op.results if r.name)]
    if op.results:
        lines.append(f"result: {_types(op.results)}")
    if op.inputs:
        lines.append(f"inputs: {_types(op.inputs)}")
    lines.append(f"device: {op.device or lane}")
    lines.append(f"at: {op.loc if op.loc is not None else 'unknown'}")
    key = ""
    if op.kind.startswith("var."):
        cat, label = "var", f"{op.kind} @{op.attrs.get('var', '?')}"
    elif op.regions:
        inner = [o.kind for r in op.regions for o in r.walk()]
        cat, label = "region", f"{op.kind} ({len(inner)} ops)"
        common = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in Counter(inner).most_common(8))
        lines.append(f"{len(inner)} ops inside: {common}")
    elif op.kind in ("send", "recv"):
        cat, key = op.kind, str(op.attrs.get("key", ""))
        peer = op.attrs.get("to" if op.kind == "send" else "from", "?")
        label = f"send \u2192 {peer}" if op.kind == "send" else f"recv \u2190 {peer}"
        value = (op.inputs[0] if op.kind == "send" and op.inputs
                 else op.results[0] if op.results else None)
        if value is not None:
            lines.append(f"carries: {format_bytes(value.type.nbytes(SYMBOL_SIZE))} per step "
                         f"(B={SYMBOL_SIZE})")
    for k, v in op.attrs.items():
        lines.append(f"  {k} = {_attr_text(v, 'shape' if k == 'shape' else None)}")
    return _Node(nid, lane, cat, label, sub, "\n".join(lines), op.kind, key,
                 _text_width(label, sub))


def _text_width(label: str, sub: str) -> float:
    chars = min(MAX_CHARS, max(len(label), len(sub)))
    return max(64.0, chars * CHAR_W + 18)


# ---- the scene: nodes and edges of the partitioned graph ----------------------------------

def _partitions(module: Module, entry: str, notes: list[str]) -> tuple[dict[str, Partition], bool]:
    """The partitions the runtime runs for ``entry`` (as the ``partition`` pass, and
    ``compress`` when the module has fp16 transfers, cut them; a module for one device
    is cut by its ops' device scopes); the unpartitioned graph in one pseudo-partition
    when the cut fails."""
    default = module.devices[0] if module.devices else "/cpu:0"
    graph = module.graphs[entry]
    try:
        devices = None
        if entry not in module.partitions and len(module.devices) < 2:
            devices = devices_of(graph, default)
        lowered = lower_for_devices(module, "reference", devices)
        if entry not in lowered.partitions:  # its ops all run on one device
            device = single_device(graph, default) or default
            return {device: Partition(device, graph.clone(), list(range(len(graph.args))),
                                      list(range(len(graph.results))))}, True
        parts = device_graphs(lowered, entry)
    except TfcError as e:
        notes.append(f"not partitioned ({e.message}): drawn as one graph")
        graph = graph.clone()
        part = Partition(default, graph, list(range(len(graph.args))),
                         list(range(len(graph.results))))
        return {default: part}, False
    if module.fp16_transfers and len(parts) > 1:
        from tfc.passes.compress import compression_report
        notes.append(compression_report(lowered, entry).summary())
    return parts, True


def _scene(module: Module, entry: str, prefix: str) -> _Scene:
    notes: list[str] = []
    parts, cut = _partitions(module, entry, notes)
    nodes: dict[str, _Node] = {}
    edges: list[_Edge] = []
    sends: dict[str, _Node] = {}
    recvs: dict[str, _Node] = {}

    def add(node: _Node) -> _Node:
        nodes[node.id] = node
        return node

    for part in parts.values():
        g = part.graph
        home: dict[Any, str] = {}
        for a in g.args:
            name = a.name or f"arg{a.index}"
            n = add(_Node(f"{prefix}-n{len(nodes)}", part.device, "feed", f"feed {name}",
                          str(a.type), f"feed {name}\ntype: {a.type}\nhanded to {part.device}"))
            n.width = _text_width(n.label, n.sub)
            home[a] = n.id
        for op in g.ops:
            lane = op.device if not cut and op.device else part.device
            n = add(_op_node(op, f"{prefix}-n{len(nodes)}", lane))
            for r in op.results:
                home[r] = n.id
            if n.cat == "send":
                sends[n.key] = n
            elif n.cat == "recv":
                recvs[n.key] = n
            k = len(op.inputs)
            for i, v in enumerate(op.inputs):
                if v in home:
                    tip = (f"%{v.name}: " if v.name else "") + str(v.type)
                    edges.append(_Edge(home[v], n.id, False, tip,
                                       slot=(i - (k - 1) / 2) * min(14.0, n.width / (k + 1))))
        for v, name in zip(g.results, g.result_names):
            n = add(_Node(f"{prefix}-n{len(nodes)}", part.device, "fetch", f"fetch {name}",
                          str(v.type), f"fetch {name}\ntype: {v.type}\nfrom {part.device}"))
            n.width = _text_width(n.label, n.sub)
            if v in home:
                edges.append(_Edge(home[v], n.id, False, str(v.type)))

    scene = _Scene(nodes, edges, [], notes)
    for key, s in sends.items():
        recv = recvs.get(key)
        if recv is None:
            continue
        value_type = _send_type(parts, key)
        nbytes = value_type.nbytes(SYMBOL_SIZE) if value_type is not None else 0
        scene.transfers += 1
        scene.transfer_bytes += nbytes
        edges.append(_Edge(s.id, recv.id, True, f"{s.lane} \u2192 {recv.lane}: {value_type}, "
                           f"{format_bytes(nbytes)} per step (B={SYMBOL_SIZE})\nkey {key}",
                           label=format_bytes(nbytes), key=key))
    lanes = list(module.devices)
    for n in nodes.values():
        if n.lane not in lanes:
            lanes.append(n.lane)
    scene.lanes = [d for d in lanes if any(n.lane == d for n in nodes.values())] or lanes[:1]
    return scene


def _send_type(parts: dict[str, Partition], key: str) -> Any:
    for p in parts.values():
        for op in p.sends:
            if op.attrs.get("key") == key and op.inputs:
                return op.inputs[0].type
    return None


# ---- layout ---------------------------------------------------------------------------------

def _layout(scene: _Scene) -> None:
    """Layers, waypoints of long edges, order and x of nodes, lanes' extents."""
    nodes = scene.nodes
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from((e.src, e.dst) for e in scene.edges)
    for depth, generation in enumerate(nx.topological_generations(g)):
        for nid in generation:
            nodes[nid].layer = depth
    # Move a node down to just above its first consumer where that shortens its edges in
    # total (fewer inputs than uses), or keeps them equal for sources (feeds, var.read,
    # constants) and transfers: a variable read only to be sent to another device, its
    # send and recv then sit by their consumer instead of all crowding the top row.
    for nid in reversed(list(nx.topological_sort(g))):
        ins, outs = g.in_degree(nid), g.out_degree(nid)
        if outs and (ins < outs or (ins == outs and nodes[nid].cat in ("send", "recv"))
                     or ins == 0):
            nodes[nid].layer = min(nodes[s].layer for s in g.successors(nid)) - 1
    used = sorted({n.layer for n in nodes.values()})
    renumber = {layer: i for i, layer in enumerate(used)}
    for n in nodes.values():
        n.layer = renumber[n.layer]

    # waypoints: one chain per source and lane, shared by all its long edges (a bundle)
    chains: dict[str, list[str]] = {}
    for e in scene.edges:
        s, d = nodes[e.src], nodes[e.dst]
        if e.xfer or s.lane != d.lane or d.layer - s.layer < 2:
            continue
        chain = chains.setdefault(e.src, [])
        while len(chain) < d.layer - s.layer - 1:
            w = _Node(f"{e.src}-w{len(chain)}", s.lane, "dummy", layer=s.layer + len(chain) + 1)
            nodes[w.id] = w
            chain.append(w.id)
        e.via = chain[:d.layer - s.layer - 1]

    cells: dict[tuple[str, int], list[str]] = {}
    for nid, n in nodes.items():
        cells.setdefault((n.lane, n.layer), []).append(nid)
    preds: dict[str, set[str]] = {nid: set() for nid in nodes}
    succs: dict[str, set[str]] = {nid: set() for nid in nodes}
    for e in scene.edges:
        path = [e.src, *e.via, e.dst]
        for a, b in zip(path, path[1:]):
            if nodes[a].lane == nodes[b].lane:
                preds[b].add(a)
                succs[a].add(b)

    def cell_width(ids: list[str]) -> float:
        return sum(nodes[i].width for i in ids) + GAP_X * (len(ids) - 1)

    x: float = LANE_PAD
    for lane in scene.lanes:
        width = max([cell_width(ids) for (ln, _), ids in cells.items() if ln == lane],
                    default=80.0)
        width = max(width, len(lane) * 8.0 + 60) + 2 * LANE_PAD
        scene.lane_x[lane], scene.lane_w[lane] = x, width
        x += width + LANE_GAP
    scene.width = x - LANE_GAP + LANE_PAD
    scene.height = TOP + len(used) * ROW_H + LANE_PAD

    for (lane, _), ids in cells.items():  # start centred
        left = scene.lane_x[lane] + (scene.lane_w[lane] - cell_width(ids)) / 2
        for nid in ids:
            nodes[nid].x = left + nodes[nid].width / 2
            left += nodes[nid].width + GAP_X

    by_layer = sorted(cells.items(), key=lambda kv: kv[0][1])
    for sweep in range(8):
        down = sweep % 2 == 0
        for (lane, _), ids in (by_layer if down else reversed(by_layer)):
            nbrs = preds if down else succs
            if sweep == 7:
                nbrs = {i: preds[i] | succs[i] for i in ids}
            desired = {i: (sum(nodes[j].x for j in nbrs[i]) / len(nbrs[i]) if nbrs[i]
                           else nodes[i].x) for i in ids}
            ids.sort(key=lambda i: desired[i])
            lo = scene.lane_x[lane] + LANE_PAD
            _place([nodes[i] for i in ids], [desired[i] for i in ids],
                   lo, lo + scene.lane_w[lane] - 2 * LANE_PAD)


def _place(row: list[_Node], desired: list[float], lo: float, hi: float) -> None:
    """Centres as close as possible (least squares) to ``desired`` keeping the order, the
    gaps between nodes, and ``[lo, hi]``: isotonic regression by pooling violators."""
    offs = [0.0]
    for a, b in zip(row, row[1:]):
        offs.append(offs[-1] + (a.width + b.width) / 2 + GAP_X)
    blocks: list[list[float]] = []  # [sum, count]
    for d, o in zip(desired, offs):
        blocks.append([d - o, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    ys = [s / c for s, c in blocks for _ in range(int(c))]
    first = lo + row[0].width / 2
    last = max(first, hi - row[-1].width / 2 - offs[-1])
    for n, y, o in zip(row, ys, offs):
        n.x = min(max(y, first), last) + o


# ---- SVG ------------------------------------------------------------------------------------

def _colour(i: int) -> str:
    if i < len(PALETTE):
        return PALETTE[i]
    return f"hsl({(i * 137.5) % 360:.0f},55%,42%)"


def _tint(colour: str, amount: float) -> str:
    """``colour`` mixed with white (hex colours; others get a plain light grey)."""
    if not colour.startswith("#"):
        return "#f1f3f5"
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


def _y(layer: int) -> float:
    return TOP + layer * ROW_H


def _edge_path(scene: _Scene, e: _Edge) -> tuple[str, float, float]:
    """An SVG path from the source's bottom through the waypoints to the target's top, with
    vertical tangents (smooth S curves); and the middle of its first curve (the label)."""
    nodes = scene.nodes
    s, d = nodes[e.src], nodes[e.dst]
    pts = [(s.x, _y(s.layer) + NODE_H)]
    for w in e.via:
        n = nodes[w]
        pts += [(n.x, _y(n.layer)), (n.x, _y(n.layer) + NODE_H)]
    pts.append((d.x + e.slot, _y(d.layer)))
    parts = [f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 == x1:
            parts.append(f"L{x1:.1f},{y1:.1f}")
        else:
            k = (y1 - y0) / 2
            parts.append(f"C{x0:.1f},{y0 + k:.1f} {x1:.1f},{y1 - k:.1f} {x1:.1f},{y1:.1f}")
    (x0, y0), (x1, y1) = pts[0], pts[1]
    return " ".join(parts), (x0 + x1) / 2, (y0 + y1) / 2


def _svg(scene: _Scene, prefix: str, colours: dict[str, str]) -> str:
    out = [f'<svg class="tfc-graph" width="{scene.width:.0f}" height="{scene.height:.0f}" '
           f'viewBox="0 0 {scene.width:.0f} {scene.height:.0f}" role="img">',
           "<defs>"]
    for name, colour in (("a", "#8a8a8a"), ("x", XFER_COLOUR)):
        out.append(f'<marker id="{prefix}-{name}" viewBox="0 0 10 10" refX="9" refY="5" '
                   f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
                   f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>')
    out.append("</defs>")
    counts = Counter(n.lane for n in scene.nodes.values() if n.is_op)
    tasks = _tasks(scene.lanes)
    if tasks:  # a cluster module: one box per task (a host), around its devices' lanes
        out.append('<g class="tasks">')
        for task, lanes in tasks.items():
            x0 = min(scene.lane_x[d] for d in lanes) - 6
            x1 = max(scene.lane_x[d] + scene.lane_w[d] for d in lanes) + 6
            out.append(f'<rect class="task" data-task="{_esc(task)}" x="{x0:.1f}" y="2" '
                       f'width="{x1 - x0:.1f}" height="{scene.height - 4:.1f}" rx="14" '
                       f'fill="none" stroke="{HOST_COLOUR}" stroke-width="2" '
                       f'stroke-dasharray="8 4"><title>task {_esc(task)}: one process '
                       f'(host) of the cluster</title></rect>')
        out.append("</g>")
    out.append('<g class="lanes">')
    for lane in scene.lanes:
        c, x, w = colours[lane], scene.lane_x[lane], scene.lane_w[lane]
        out.append(f'<rect x="{x:.1f}" y="8" width="{w:.1f}" height="{scene.height - 16:.1f}" '
                   f'rx="10" fill="{_tint(c, 0.93)}" stroke="{c}" stroke-width="1.5"/>'
                   f'<text class="lane-title" x="{x + 12:.1f}" y="30" fill="{c}">{_esc(lane)}'
                   f'</text><text class="lane-sub" x="{x + 12:.1f}" y="44">'
                   f'{counts[lane]} ops</text>')
    out.append("</g>")
    out.append('<g class="edges">')
    for e in scene.edges:
        d, _, _ = _edge_path(scene, e)
        cls = "edge xfer" if e.xfer else "edge"
        extra = f' data-key="{_esc(e.key)}"' if e.xfer else ""
        out.append(f'<path class="{cls}" d="{d}" data-src="{e.src}" data-dst="{e.dst}"{extra} '
                   f'marker-end="url(#{prefix}-{"x" if e.xfer else "a"})">'
                   f"<title>{_esc(e.tip)}</title></path>")
    for e in scene.edges:  # labels above every edge
        if e.xfer:
            _, mx, my = _edge_path(scene, e)
            w = len(e.label) * 6.2 + 10
            out.append(f'<g class="xfer-label"><rect x="{mx - w / 2:.1f}" y="{my - 8:.1f}" '
                       f'width="{w:.1f}" height="16" rx="8"/><text x="{mx:.1f}" '
                       f'y="{my + 4:.1f}">{_esc(e.label)}</text></g>')
    out.append("</g>")
    for lane in scene.lanes:
        out.append(f'<g class="cluster" data-device="{_esc(lane)}">')
        for n in scene.nodes.values():
            if n.lane == lane and n.drawn:
                out.append(_node_svg(n, colours[lane]))
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _tasks(lanes: Sequence[str]) -> dict[str, list[str]]:
    """The cluster tasks (``worker:1``) of ``lanes`` with their devices, in lane order;
    empty for local devices."""
    out: dict[str, list[str]] = {}
    for lane in lanes:
        try:
            task = task_label(lane)
        except TfcError:  # a lane that is not a device name
            continue
        if task is not None:
            out.setdefault(task, []).append(lane)
    return out


def _node_svg(n: _Node, colour: str) -> str:
    x0, y0, w = n.x - n.width / 2, _y(n.layer), n.width
    rx: float  # 4, 12 or half a node's height
    fill, stroke, rx, extra = _tint(colour, 0.8), colour, 4, ""
    if n.cat == "var":
        rx, extra = NODE_H / 2, ' stroke-width="2.6"'
    elif n.cat in ("send", "recv"):
        fill, stroke, extra = "#fff4e6", XFER_COLOUR, ' stroke-width="1.6" stroke-dasharray="4 2"'
    elif n.cat in ("feed", "fetch"):
        fill, stroke, rx = "#ffffff", HOST_COLOUR, 12
    shape = (f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{NODE_H}" rx="{rx}" '
             f'fill="{fill}" stroke="{stroke}"{extra}/>')
    if n.cat == "region":
        shape += (f'<rect x="{x0 + 3:.1f}" y="{y0 + 3:.1f}" width="{w - 6:.1f}" '
                  f'height="{NODE_H - 6}" rx="2" fill="none" stroke="{stroke}"/>')
    chars = int((w - 10) / CHAR_W)
    key = f' data-key="{_esc(n.key)}"' if n.key else ""
    return (f'<g class="node {n.cat}" id="{n.id}" data-kind="{_esc(n.kind or n.cat)}" '
            f'data-device="{_esc(n.lane)}"{key}><title>{_esc(n.tip)}</title>{shape}'
            f'<text class="label" x="{n.x:.1f}" y="{y0 + 15:.1f}">{_esc(_clip(n.label, chars))}'
            f'</text><text class="sub" x="{n.x:.1f}" y="{y0 + 28:.1f}">'
            f"{_esc(_clip(n.sub, chars))}</text></g>")


# ---- the page -------------------------------------------------------------------------------

def _legend(scene: _Scene, prefix: str, colours: dict[str, str]) -> str:
    items = []
    for lane in scene.lanes:
        ops = [n for n in scene.nodes.values() if n.lane == lane and n.is_op]
        variables = sorted({n.label.split("@", 1)[1] for n in ops if n.cat == "var"})
        var_text = f"; variables {', '.join(variables)}" if variables else ""
        c = colours[lane]
        items.append(f'<li class="dev" data-device="{_esc(lane)}"><span class="sw" style="'
                     f'background:{_tint(c, 0.8)};border-color:{c}"></span>{_esc(lane)}: '
                     f"{len(ops)} ops{_esc(var_text)}</li>")
    shapes = [("var", "variable read/write (@name)"), ("region", "region op (op count)"),
              ("send", "send / recv"), ("feed", "feed / fetch")]
    for cat, text in shapes:
        items.append(f'<li><span class="sw {cat}"></span>{_esc(text)}</li>')
    items.append(f'<li><svg width="34" height="10"><path d="M1,5 H33" class="edge xfer"/></svg>'
                 f"transfer: bytes per step at B={SYMBOL_SIZE}</li>")
    return f'<ul class="legend" id="{prefix}-legend">' + "".join(items) + "</ul>"


def _summary(module: Module, entry: str, scene: _Scene) -> str:
    report = module.placement_reports.get(entry)
    ops = sum(1 for n in scene.nodes.values() if n.is_op)
    line = (f"{ops} ops in {len(scene.lanes)} partition{'s' if len(scene.lanes) != 1 else ''}; "
            f"{scene.transfers} transfers, {format_bytes(scene.transfer_bytes)} per step "
            f"(B={SYMBOL_SIZE})")
    lines = [report.summary()] if report is not None and hasattr(report, "summary") else []
    if len(scene.lanes) == 1 and not module.devices:
        lines.append(f"unplaced module: every op runs on the default device {scene.lanes[0]}")
    lines.append(line)
    return "".join(f"<p class='summary'>{_esc(s)}</p>" for s in lines + scene.notes)


_CSS = """
body{font:14px system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#212529;
 background:#f8f9fa}
header{padding:10px 18px;background:#fff;border-bottom:1px solid #dee2e6}
header h1{font-size:18px;margin:0}
nav a{margin-right:12px}
section{padding:6px 18px 18px}
h2{font-size:16px;margin:12px 0 4px;font-family:monospace}
.summary{margin:2px 0;color:#495057}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;list-style:none;padding:0;margin:8px 0}
.legend li{display:flex;align-items:center;gap:6px}
.sw{display:inline-block;width:16px;height:12px;border:2px solid #6c757d;border-radius:3px;
 background:#fff}
.sw.var{border-radius:8px;border-width:3px}
.sw.region{outline:1px solid #6c757d;outline-offset:-5px}
.sw.send{border:2px dashed #d9480f;background:#fff4e6}
.sw.feed{border-radius:7px}
.toolbar button{font:12px monospace;margin-right:4px}
.viewport{overflow:auto;max-height:82vh;border:1px solid #ced4da;background:#fff;
 cursor:grab}
.tfc-graph text{font-family:ui-monospace,Menlo,Consolas,"DejaVu Sans Mono",monospace;
 font-size:11px;text-anchor:middle;pointer-events:none}
.tfc-graph text.sub{font-size:10px;fill:#495057}
.tfc-graph text.lane-title{font-size:14px;font-weight:bold;text-anchor:start}
.tfc-graph text.lane-sub{font-size:11px;fill:#6c757d;text-anchor:start}
.edge{fill:none;stroke:#8a8a8a;stroke-width:1.2;opacity:.85}
.edge.xfer{stroke:#d9480f;stroke-width:2;stroke-dasharray:6 4;opacity:1}
.edge.hl{stroke:#111;stroke-width:2.6;opacity:1}
.xfer-label rect{fill:#fff;stroke:#d9480f}
.xfer-label text{fill:#d9480f;font-size:10px}
.node{cursor:default}
.node:hover rect{stroke-width:3}
#tip{position:fixed;display:none;z-index:9;max-width:70ch;padding:6px 9px;border-radius:4px;
 background:#212529;color:#f8f9fa;font:12px ui-monospace,Menlo,Consolas,monospace;
 white-space:pre-wrap;pointer-events:none}
"""

_JS = """
(function(){
var tip=document.getElementById('tip');
document.querySelectorAll('svg.tfc-graph').forEach(function(svg){
 var edges=svg.querySelectorAll('.edge');
 function mark(id,on){edges.forEach(function(e){
  if(e.getAttribute('data-src')===id||e.getAttribute('data-dst')===id){
   e.classList.toggle('hl',on);}});}
 svg.querySelectorAll('.node').forEach(function(n){
  var t=n.querySelector('title');
  if(t){n.setAttribute('data-tip',t.textContent);t.remove();}
  n.addEventListener('mouseenter',function(){tip.textContent=n.getAttribute('data-tip');
   tip.style.display='block';mark(n.id,true);});
  n.addEventListener('mousemove',function(ev){
   tip.style.left=Math.min(ev.clientX+14,innerWidth-tip.offsetWidth-8)+'px';
   tip.style.top=Math.min(ev.clientY+14,innerHeight-tip.offsetHeight-8)+'px';});
  n.addEventListener('mouseleave',function(){tip.style.display='none';mark(n.id,false);});
 });
});
document.querySelectorAll('.viewport').forEach(function(vp){
 var svg=vp.querySelector('svg'),w=+svg.getAttribute('width'),h=+svg.getAttribute('height'),s=1;
 function zoom(z){s=Math.min(4,Math.max(0.05,z));
  svg.setAttribute('width',w*s);svg.setAttribute('height',h*s);}
 vp.addEventListener('wheel',function(ev){if(ev.ctrlKey||ev.metaKey){ev.preventDefault();
  zoom(s*(ev.deltaY<0?1.15:1/1.15));}},{passive:false});
 var drag=null;
 vp.addEventListener('mousedown',function(ev){ev.preventDefault();
  drag=[ev.clientX,ev.clientY,vp.scrollLeft,vp.scrollTop];vp.style.cursor='grabbing';});
 addEventListener('mousemove',function(ev){if(drag){
  vp.scrollLeft=drag[2]-(ev.clientX-drag[0]);vp.scrollTop=drag[3]-(ev.clientY-drag[1]);}});
 addEventListener('mouseup',function(){drag=null;vp.style.cursor='';});
 vp.previousElementSibling.querySelectorAll('button').forEach(function(b){
  b.addEventListener('click',function(){var z=b.getAttribute('data-zoom');
   if(z==='fit'){zoom(Math.min(1,vp.clientWidth/w,innerHeight*0.8/h));}
   else if(z==='1'){zoom(1);}else{zoom(s*parseFloat(z));}});});
});
})();
"""


def _section(module: Module, entry: str, k: int) -> str:
    prefix = f"e{k}"
    scene = _scene(module, entry, prefix)
    _layout(scene)
    colours = {lane: HOST_COLOUR for lane in scene.lanes}
    order = list(module.devices) + [d for d in scene.lanes if d not in module.devices]
    for i, d in enumerate(order):
        colours[d] = _colour(i)
    toolbar = ('<div class="toolbar"><button data-zoom="1.25">+</button>'
               '<button data-zoom="0.8">&minus;</button><button data-zoom="fit">fit</button>'
               '<button data-zoom="1">1:1</button> <small>Ctrl+wheel zooms, drag pans, '
               'hover a node for details</small></div>')
    return (f'<section id="{prefix}" data-entry="{_esc(entry)}"><h2>@{_esc(entry)}</h2>'
            f"{_summary(module, entry, scene)}{_legend(scene, prefix, colours)}"
            f'{toolbar}<div class="viewport">{_svg(scene, prefix, colours)}</div></section>')


def render_html(module: Module, entry: str | None = None) -> str:
    """One self-contained HTML page drawing ``entry`` (every entry graph when None, one
    section each) placed and partitioned: no server, no network, no external files."""
    if entry is not None:
        if entry not in module.graphs:
            known = ", ".join(sorted(module.entries)) or "none"
            raise TfcError(f"no entry {entry!r} to draw (entries: {known})")
        entries = [entry]
    else:
        entries = list(module.entries)
    if not entries:
        raise TfcError("the module has no entry graphs to draw")
    sections = [_section(module, name, k) for k, name in enumerate(entries)]
    nav = ""
    if len(entries) > 1:
        nav = "<nav>" + "".join(f'<a href="#e{k}">@{_esc(name)}</a>'
                                for k, name in enumerate(entries)) + "</nav>"
    devices = ", ".join(module.devices) if module.devices else "one default device"
    tasks = _tasks(module.devices)
    if tasks:
        devices = f"{len(tasks)} tasks ({', '.join(tasks)}): {devices}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>tfc graph: {_esc(', '.join('@' + e for e in entries))}</title>"
            f"<style>{_CSS}</style></head><body>"
            f"<header><h1>tfc: placed and partitioned graph</h1>"
            f"<p class='summary'>devices: {_esc(devices)}</p>{nav}</header>"
            + "\n".join(sections)
            + f'<div id="tip"></div><script>{_JS}</script></body></html>\n')
