"""Where each version of a dataset came from and what was made from it, laid out as a graph.

Every producer writes its own lineage shape into the version it commits (the importer,
``Catalog.derive``, LabelX, pack, workspaces, bucket snapshots); ``origin`` reads them all
into one (kind, source version, detail) triple, so the picture and the version page agree.
Downstream versions are found by reading the lineage of every version of every dataset the
caller may read; datasets the caller may not read are never drawn, upstream or downstream.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datahub.catalog.model import Version

_REF = re.compile(r"(?P<dataset>[^@]+)@v(?P<seq>[0-9]+)")  # ASCII digits: a version as written (review73)
COL_WIDTH, ROW_HEIGHT, NODE_W, NODE_H, MARGIN = 300, 64, 210, 38, 16
MAX_VERSIONS = 40  # the graph shows the newest versions; older ones stay in the table


@dataclass(frozen=True, slots=True)
class Origin:
    kind: str  # import | commit | derive | labelx | pack | workspace | snapshot
    source: tuple[str, int] | None  # (dataset, version) it was made from, if any
    detail: str = ""


def _ref(text: Any) -> tuple[str, int] | None:
    m = _REF.fullmatch(text) if isinstance(text, str) else None
    return (m["dataset"], int(m["seq"])) if m else None


def origin(lineage: Mapping[str, Any]) -> Origin:
    """The one reading of every producer's lineage shape. ``detail`` follows ``kind`` on the
    page ("import /data/pets", "labelx from pets@v2 project review"), so it never repeats it."""
    if "derived_from" in lineage:
        return Origin("derive", _ref(lineage["derived_from"]), f"where {lineage.get('filter', '')}")
    if lineage.get("source") == "labelx":
        return Origin("labelx", _ref(lineage.get("from")), f"project {lineage.get('project', '')}")
    if lineage.get("kind") == "pack":
        seq = lineage.get("source_version")
        source = (str(lineage.get("source_dataset")), seq) if isinstance(seq, int) else None
        return Origin("pack", source, _spec(lineage.get("params")))
    if isinstance(lineage.get("import"), Mapping):
        return Origin("import", None, str(lineage["import"].get("source", "")))
    if "workspace" in lineage:
        return Origin("workspace", None, str(lineage["workspace"]))
    if "snapshot_of" in lineage:
        return Origin("snapshot", None, f"of {lineage['snapshot_of']}")
    return Origin("commit", None, "")


def _spec(params: Any) -> str:
    """A pack spec as its CLI flags would say it: the transform's settings that are set."""
    if not isinstance(params, Mapping):
        return ""
    transform = params.get("transform")
    shown = transform if isinstance(transform, Mapping) else params
    return " ".join(f"{k}={v}" for k, v in shown.items() if k in _PACK_FLAGS and v not in (None, ""))


_PACK_FLAGS = ("resize", "crop", "format", "quality")
SOURCED = ("derive", "labelx", "pack")  # the kinds made from a version they name


@dataclass
class Node:
    id: str
    label: str
    dataset: str
    seq: int
    column: int  # 0 upstream, 1 this dataset, 2 downstream
    row: int = 0
    x: int = 0
    y: int = 0


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str
    detail: str = ""
    path: str = ""  # SVG path data, filled in by the layout
    label_x: int = 0
    label_y: int = 0
    label_end: bool = False  # the label ends at label_x (text-anchor end)


@dataclass
class Graph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    width: int = 0
    height: int = 0


def node_id(dataset: str, seq: int) -> str:
    return f"{dataset}@v{seq}"


# The width a node's text may take (its 13 px font, 10 px of padding each side), in ems, and
# each character's width in ems as the widest sans-serif a browser picks here draws it (DejaVu
# Sans, measured in Chromium; others are narrower). A node names only [a-z0-9._-], "@v" and "…".
NODE_TEXT_EMS = (NODE_W - 20) / 13
_EMS = {
    **dict.fromkeys("ijl.", 0.32),
    **dict.fromkeys("frt-", 0.42),
    "_": 0.5,
    "w": 0.82,
    "m": 0.98,
    "@": 1.0,
    "…": 1.0,
}


def _ems(text: str) -> float:
    return sum(_EMS.get(ch, 0.64) for ch in text)


def node_text(dataset: str, seq: int) -> str:
    """What a node says: ``name@vN`` when it fits its box, else the name cut in its middle and
    never the version (``imagenet-2…-center@v3``). Why: cut at its end to 30 characters, every
    node of a dataset named longer than that read the same ``aaaa…``, no version, and ran past
    its box (the full name is the node's tooltip and the list under the graph)."""
    full = node_id(dataset, seq)
    keep = len(dataset)
    text = full
    while _ems(text) > NODE_TEXT_EMS and keep > 1:
        keep -= 1
        head, tail = dataset[: (keep + 1) // 2], dataset[len(dataset) - keep // 2 :]
        text = f"{head}…{tail}@v{seq}"
    return text


def build(dataset: str, versions: list[Version], others: Iterable[tuple[str, Iterable[Version]]]) -> Graph:
    """The graph of ``dataset``'s newest versions, their sources and what was made from them.

    ``versions`` are as the caller may see them (``datahub.api.lineage.LineageView``: a source
    the caller may not read is null, so it is never drawn); ``others`` yields (name, versions)
    of every other dataset the caller may read.
    """
    shown = sorted(versions, key=lambda v: v.seq)[-MAX_VERSIONS:]
    seqs = {v.seq for v in shown}
    graph = Graph()
    nodes: dict[str, Node] = {}

    def add(name: str, seq: int, column: int) -> str:
        nid = node_id(name, seq)
        if nid not in nodes:
            nodes[nid] = Node(nid, node_text(name, seq), name, seq, column)
        return nid

    for v in shown:
        add(dataset, v.seq, 1)
    for v in shown:
        o = origin(v.lineage)
        target = node_id(dataset, v.seq)
        # a hidden source (null for this caller) is no parent either: that edge is a plain commit
        from_parent = (o.source is None and o.kind not in SOURCED) or o.source == (dataset, v.parent)
        if v.parent in seqs:  # the commit chain; named by what made the version when it came from its parent
            kind, detail = (o.kind, o.detail) if from_parent else ("commit", "")
            graph.edges.append(Edge(node_id(dataset, v.parent), target, kind, detail))  # type: ignore[arg-type]
        if o.source is None or from_parent:
            continue
        name, seq = o.source
        if name != dataset:
            graph.edges.append(Edge(add(name, seq, 0), target, o.kind, o.detail))
        elif (
            name == dataset and seq in seqs
        ):  # an older version of this dataset (a hidden one is never drawn)
            graph.edges.append(Edge(node_id(name, seq), target, o.kind, o.detail))
    for name, their_versions in others:
        if name == dataset:
            continue
        for w in their_versions:
            o = origin(w.lineage)
            if o.source and o.source[0] == dataset and o.source[1] in seqs:
                graph.edges.append(Edge(node_id(dataset, o.source[1]), add(name, w.seq, 2), o.kind, o.detail))
    graph.nodes = list(nodes.values())
    _layout(graph, {v.seq: i for i, v in enumerate(shown)})
    return graph


def _layout(graph: Graph, row_of_seq: dict[int, int]) -> None:
    """Columns left to right (sources, this dataset, products); this dataset's versions one
    per row, oldest at the top; every other node next to the version it touches."""
    by_id = {n.id: n for n in graph.nodes}
    taken: dict[int, set[int]] = {0: set(), 2: set()}
    for n in graph.nodes:
        if n.column == 1:
            n.row = row_of_seq[n.seq]
    for n in graph.nodes:
        if n.column == 1:
            continue
        near = [
            by_id[e.target if e.source == n.id else e.source]
            for e in graph.edges
            if n.id in (e.source, e.target)
        ]
        row = min((m.row for m in near if m.column == 1), default=0)
        while row in taken[n.column]:
            row += 1
        taken[n.column].add(row)
        n.row = row
    rows = max((n.row for n in graph.nodes), default=-1) + 1
    for n in graph.nodes:
        n.x = MARGIN + n.column * COL_WIDTH
        n.y = MARGIN + n.row * ROW_HEIGHT
    graph.width = 2 * MARGIN + 2 * COL_WIDTH + NODE_W
    graph.height = 2 * MARGIN + max(rows, 1) * ROW_HEIGHT
    graph.edges = [_route(e, by_id[e.source], by_id[e.target]) for e in graph.edges]


def _route(edge: Edge, a: Node, b: Node) -> Edge:
    """The path of ``edge`` from ``a``'s border to ``b``'s, each end at a point of its own.

    Why: every edge down the middle column was a curve from the right edge's middle to the
    right edge's middle, and every edge out to a product left from that middle too: the head
    of ``v2 -> v3`` touched the start of ``v3 -> v4`` and of ``v3 -> packed@v1``, and the chain
    read as one line with no direction (newuser44). A version made from the one right above it
    gets a straight arrow down the gap between them; a curve to one further down leaves the
    right edge low (below the middle, where edges out leave) and comes in high."""
    if a.column == b.column and b.row == a.row + 1:  # the next row: straight down the gap
        x = a.x + NODE_W // 2
        y1, y2 = a.y + NODE_H, b.y
        return _with(edge, f"M{x},{y1} L{x},{y2}", x + 8, (y1 + y2) // 2 + 4)
    if a.column == b.column:  # further down (or up) the middle column: a curve on the right side
        x = a.x + NODE_W
        y1, y2 = a.y + NODE_H * 3 // 4, b.y + NODE_H // 4
        bulge = x + 40 + 6 * abs(b.row - a.row)
        path = f"M{x},{y1} C{bulge},{y1} {bulge},{y2} {x},{y2}"
        return _with(edge, path, bulge - 12, (y1 + y2) // 2)
    x1, y1 = a.x + NODE_W, a.y + NODE_H // 2
    x2, y2 = b.x, b.y + NODE_H // 2
    mid = (x1 + x2) // 2
    # the label ends beside the node the arrow points at (each has one such edge in), on the
    # side of the line its curve does not come from: at the curve's middle it sat between two
    # rows, over the label of the middle column's curve there ("labelx" over "derive", newuser22)
    path = f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"
    return _with(edge, path, x2 - 10, y2 + 14 if y2 > y1 else y2 - 5, end=True)


def _with(edge: Edge, path: str, x: int, y: int, *, end: bool = False) -> Edge:
    return Edge(edge.source, edge.target, edge.kind, edge.detail, path, x, y, end)
