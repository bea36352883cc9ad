"""What newuser73 met on LabelX's home page in a 380 px window (a phone), in headless Chromium:
the new-project form's selects, each half the form's width, showed their choice cut
("Classification (single", "assigned round-robi"). Each select now takes the form's width
there; every placeholder and chosen option is read whole at 380 and 1,360 px."""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# the visible inputs and selects whose text (placeholder, chosen option) is wider than the room
# for it (a select's arrow takes ARROW px of its inner width)
CUT = """
const ARROW = 20, ctx = document.createElement('canvas').getContext('2d'), out = [];
for (const e of document.querySelectorAll('input[placeholder], select')) {
  if (!e.offsetParent) continue;
  const cs = getComputedStyle(e);
  ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
  const text = e.tagName === 'SELECT' ? e.options[e.selectedIndex].text : e.placeholder;
  const room = e.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)
    - (e.tagName === 'SELECT' ? ARROW : 0);
  const needs = ctx.measureText(text).width;
  if (needs > room + 0.5) out.push([e.name, text, Math.round(needs), Math.round(room)]);
}
return out;
"""


def test_the_new_project_form_reads_whole_at_380_and_1360_px(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env) as base:
        for width in (380, 1360):
            c.driver.set_window_size(width, 900)
            c.visit(f"{base}/labelx/")
            c.until(lambda d: d.find_element("css selector", "#create-card").is_displayed())
            for name in ("kind", "assign"):  # every choice of each select, one after the other
                options = c.driver.execute_script(
                    f"return Array.from(document.querySelector('#create-form [name={name}]').options, o => o.value)"
                )
                for value in options:
                    c.driver.execute_script(
                        f"document.querySelector('#create-form [name={name}]').value = arguments[0]", value
                    )
                    cut = c.driver.execute_script(CUT)
                    assert cut == [], (width, cut)
            c.save_view(f"newuser73-labelx-home-{width}")
