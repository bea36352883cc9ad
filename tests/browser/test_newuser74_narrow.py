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
