"""The admin page's token form and the "Live tokens" heading under it, in headless Chromium
(newuser43): the form had no room below it, and at 400 px the heading sat on the "expires" menu
and the "Create token for me" button (0 px between them). Checked by the elements' rectangles
at 360, 400 and 1360 px: a line's worth of room between the form and the heading.
"""

from __future__ import annotations

import pytest

from tests.labelx.test_browser import browser, login, no_page_errors, server, shot  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GAP = """() => {
  const form = document.getElementById('token-form');
  const heading = Array.from(document.querySelectorAll('h2')).find(h => h.textContent === 'Live tokens');
  const lowest = Math.max(...Array.from(form.querySelectorAll('*'), e => e.getBoundingClientRect().bottom),
                          form.getBoundingClientRect().bottom);
  return heading.getBoundingClientRect().top - lowest; }"""


def test_the_live_tokens_heading_has_room_below_the_token_form(app, server, browser) -> None:  # noqa: F811
    for width in (360, 400, 1360):
        page = login(browser, server, "admin", width, 900)
        page.goto(f"{server}/admin")
        page.locator("#tokens tr").first.wait_for(state="attached")
        shot(page, f"newuser43-admin-{width}")
        gap = page.evaluate(GAP)
        assert gap >= 12, (width, gap)
        page.context.close()
