"""newuser74: LabelX's dashboard and the dataset browser's lineage graph in a 380 px window."""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import signed_in
from tests.browser.test_newuser44_dashboard_narrow import WORK

pytestmark = [pytest.mark.browser]

# each visible select narrower than itself unconstrained (as wide as its widest option and its
# arrow, as Chromium sizes one): the names its options cannot show whole
SELECTS_CUT = """
const out = [];
for (const s of document.querySelectorAll('select')) {
  if (!s.offsetParent) continue;
  const free = s.cloneNode(true);
  free.style.cssText = 'width: auto; max-width: none; min-width: 0; position: absolute; visibility: hidden';
  s.parentNode.append(free);
  const needs = free.getBoundingClientRect().width, has = s.getBoundingClientRect().width;
  free.remove();
  if (needs > has + 0.5) out.push([s.getAttribute('aria-label'), Math.round(needs), Math.round(has)]);
}
return out;
"""


@pytest.mark.parametrize("width", [380, 1360])
def test_the_assignee_menus_show_each_name_whole(chrome: Chrome, env: Env, width: int) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env) as base:
        project = c.driver.execute_async_script(WORK)
        assert isinstance(project, int), project
        c.driver.set_window_size(width, 900)
        try:
            c.visit(f"{base}/labelx/projects/{project}")
            c.until(lambda d: d.find_elements("css selector", "#tasks select"))
            c.driver.execute_script("document.getElementById('tasks').scrollIntoView()")
            c.save_view(f"newuser74-dashboard-{width}-tasks")
            cut = c.driver.execute_script(SELECTS_CUT)
            assert cut == [], cut
            wide = c.driver.execute_script(
                "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert wide[0] <= wide[1], wide  # the page never scrolls sideways
        finally:
            c.driver.set_window_size(1360, 900)


# the lineage graph's box, its scroller's, and each node's right edge, in the page's pixels
GRAPH = """
const scroller = document.querySelector('.graph-scroll'), svg = document.getElementById('lineage');
const r = el => { const b = el.getBoundingClientRect(); return [b.left, b.right, b.top, b.bottom]; };
return {scroller: r(scroller), scrollWidth: scroller.scrollWidth, clientWidth: scroller.clientWidth,
        svg: r(svg), page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
        nodes: Array.from(svg.querySelectorAll('a.node'), a => [a.dataset.node, ...r(a.querySelector('rect'))])};
"""


@pytest.mark.parametrize("width", [380, 1360])
def test_the_lineage_graph_scrolls_to_its_far_nodes(chrome, env, server, width: int) -> None:  # noqa: F811
    c = chrome
    env.catalog.derive("pets", 2, "labels.class=cat", to_dataset="cats", author="alice")
    from datahub.catalog import Patch

    first = sorted(r.key for r in env.catalog.list_records("cats", 1))[0]
    env.catalog.commit("cats", [Patch(first, meta={"seen": 1})], message="v2")
    env.catalog.derive("cats", 2, "labels.class=cat", to_dataset="cats-of-a-rather-long-name")
    c.driver.set_window_size(width, 900)
    try:
        c.visit(f"{server}/datasets/cats")
        c.driver.execute_script("document.getElementById('lineage').scrollIntoView()")
        c.save_view(f"newuser74-lineage-{width}")
        c.driver.execute_script("document.querySelector('.graph-scroll').scrollLeft = 0")
        g = c.driver.execute_script(GRAPH)
        assert g["page"][0] <= g["page"][1], g  # the page never scrolls sideways
        left, right = g["scroller"][0], g["scroller"][1]
        assert left >= 0 and right <= g["page"][1] + 0.5, g
        # every node is reached by scrolling the graph's own box: none lies beyond its scroll range
        reach = right + (g["scrollWidth"] - g["clientWidth"])
        for node, n_left, n_right, _, _ in g["nodes"]:
            assert n_left >= left - 0.5 and n_right <= reach + 0.5, (node, g)
        c.driver.execute_script(
            "const s = document.querySelector('.graph-scroll'); s.scrollLeft = s.scrollWidth"
        )
        c.save_view(f"newuser74-lineage-{width}-scrolled")
        far = max(g["nodes"], key=lambda n: n[2])
        shown = c.driver.execute_script(GRAPH)
        box = next(n for n in shown["nodes"] if n[0] == far[0])
        assert box[1] >= left - 0.5 and box[2] <= right + 0.5, (far[0], shown)
    finally:
        c.driver.set_window_size(1360, 900)
