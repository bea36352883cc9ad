"""newuser44: the lineage graph's arrows, parent -> child, read one way only, in headless Chromium.

Every edge down the dataset's own column was a curve from the right edge's middle of one node to
the right edge's middle of the other, and every edge out to a product left from that same point:
at ``cats@v3`` the arrowhead of ``cats@v2 -> cats@v3`` touched the start of ``cats@v3 ->
cats-64@v1`` (a line with a head at each end), and at ``cats@v2`` the head of the labelx edge ran
into the start of the commit curve, so the chain read as one line with no direction. Now a
version made from the one above it gets a straight arrow down the gap between them; a curve to a
version further down leaves the right edge low and comes in high; an edge out leaves from the
middle. No arrow ends where another edge starts, and each arrow runs from its source's border
to its target's border, its head pointing into the target.
"""

from __future__ import annotations

import math

import pytest

from tests.browser.chrome import chrome  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# each edge: its path's first and last points, a point just before the end, and both nodes' boxes
GEOMETRY = """
const box = id => { const r = document.querySelector(`#lineage a.node[data-node="${id}"] rect`);
  return [r.x.baseVal.value, r.y.baseVal.value, r.width.baseVal.value, r.height.baseVal.value]; };
return Array.from(document.querySelectorAll('#lineage g.edge')).map(g => {
  const p = g.querySelector('path'), n = p.getTotalLength();
  const at = l => { const q = p.getPointAtLength(l); return [q.x, q.y]; };
  return {source: g.dataset.source, target: g.dataset.target, kind: g.dataset.kind,
          start: at(0), end: at(n), before: at(Math.max(0, n - 3)),
          from: box(g.dataset.source), to: box(g.dataset.target)};
});
"""


def _on_border(point, rect, slack=1.0) -> bool:
    x, y = point
    left, top, w, h = rect
    inside = left - slack <= x <= left + w + slack and top - slack <= y <= top + h + slack
    near = min(abs(x - left), abs(x - left - w), abs(y - top), abs(y - top - h)) <= slack
    return inside and near


def _inside(point, rect) -> bool:
    x, y = point
    left, top, w, h = rect
    return left < x < left + w and top < y < top + h


def test_no_arrow_ends_where_another_edge_starts(chrome, env, server) -> None:  # noqa: F811
    c = chrome
    env.catalog.derive("pets", 2, "labels.class=cat", to_dataset="cats", author="alice")  # pets@v2 -> cats@v1
    first = sorted(r.key for r in env.catalog.list_records("cats", 1))[0]
    from datahub.catalog import Delete, Patch

    env.catalog.commit("cats", [Patch(first, meta={"seen": 1})], message="v2")
    env.catalog.commit("cats", [Delete(first)], message="v3")
    env.catalog.derive("cats", 1, "labels.class=cat", message="again from v1")  # cats@v1 -> cats@v4
    env.catalog.derive("cats", 3, "labels.class=cat", to_dataset="cats-3")  # cats@v3 -> cats-3@v1
    c.visit(f"{server}/datasets/cats", "newuser44-lineage")
    edges = c.driver.execute_script(GEOMETRY)
    kinds = {(e["source"], e["target"]): e["kind"] for e in edges}
    assert kinds == {
        ("pets@v2", "cats@v1"): "derive",
        ("cats@v1", "cats@v2"): "commit",
        ("cats@v2", "cats@v3"): "commit",
        ("cats@v3", "cats@v4"): "commit",
        ("cats@v1", "cats@v4"): "derive",
        ("cats@v3", "cats-3@v1"): "derive",
    }, kinds
    for e in edges:
        where = (e["source"], e["target"])
        assert _on_border(e["start"], e["from"]), (where, e["start"], e["from"])
        assert _on_border(e["end"], e["to"]), (where, e["end"], e["to"])
        assert not _inside(e["before"], e["to"]), (where, e["before"])  # the head points in
    for a in edges:
        for b in edges:
            if a is not b:
                gap = math.dist(a["end"], b["start"])
                assert gap > 6, f"{a['source']}->{a['target']} ends where {b['source']}->{b['target']} starts"
            if a is not b and a["target"] == b["target"]:
                assert math.dist(a["end"], b["end"]) > 6, (a["target"], "two heads on one point")
    c.driver.execute_script("document.getElementById('lineage').scrollIntoView()")
    c.save_view("newuser44-lineage-view")
