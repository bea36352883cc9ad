"""The LabelX top bar beside a long project name and a long user name, in headless Chromium
(leftovers34; the dataset browser's 'local mode' badge, ae98b34c, did the same).

A 63-character project name in the breadcrumbs and a 63-character user name pushed the bar's
right side into a narrow column: the role badge ("annotator") is a flex item, and its words
(or the name beside it, or "Log out") could break over lines. Each keeps to one line.
"""

from __future__ import annotations

import pytest

from tests.labelx.conftest import add_users
from tests.labelx.test_browser import browser, login, no_page_errors, server, shot  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = "a-project-with-a-rather-long-name-for-layout-checks-of-labelx-p"  # 63: the longest allowed
USER = "an.annotator.whose.name.is.as.long.as.labelx.allows.at.all.x-yz"  # 63
# the lines each element's text is laid out on (a flex item has one box however its text wraps;
# text cut with an ellipsis gives two rectangles on one line, so lines are counted by their tops)
LINES = """s => Array.from(document.querySelectorAll(s)).map(e => {
  const r = document.createRange(); r.selectNodeContents(e);
  return new Set(Array.from(r.getClientRects(), c => Math.round(c.top))).size; })"""

# the bar's height, and the top bar's elements (crumbs included) that reach outside it
BAR = """(() => { const bar = document.querySelector('.topbar').getBoundingClientRect();
  const out = Array.from(document.querySelectorAll('.topbar *')).filter(e => {
    const r = e.getBoundingClientRect(); return r.height && (r.top < bar.top || r.bottom > bar.bottom); });
  return [bar.height, out.map(e => e.tagName + '.' + e.className)]; })()"""


def test_the_top_bars_role_badge_stays_on_one_line_beside_long_names(
    app,
    env,
    server,  # noqa: F811
    browser,  # noqa: F811
) -> None:
    assert len(PROJECT) == len(USER) == 63
    service, store = app.state.labelx.service, app.state.labelx.store
    add_users(app, **{USER: "annotator"})
    project = service.create_project(
        store.user_by_name("admin"), name=PROJECT, dataset="pets", prefix="img/000", task_size=5,
        annotators=[USER], schema={"kind": "classification", "classes": ["cat", "dog"]},
    )  # fmt: skip
    task = store.list_tasks(project.id)[0]["id"]
    for width in (1000, 1360):  # a window beside another, and a laptop's
        page = login(browser, server, USER, width, 800)
        for path in (f"/projects/{project.id}", f"/tasks/{task}"):
            page.goto(f"{server}{path}")
            # a locator's wait, not wait_for_function: a string predicate that is false at first is
            # polled with eval() in the page, which LabelX's CSP (script-src 'self') refuses
            page.locator("#crumbs a, #crumbs span").nth(1).wait_for(state="attached")
            assert page.locator(".topbar .role").inner_text() == "annotator"
            shot(page, f"leftovers34-topbar-{width}-{path.split('/')[1]}", full_page=False)
            lines = page.evaluate(
                LINES, ".topbar .role, .topbar .avatar, .topbar #logout, .topbar .toplink, #crumbs > *"
            )
            assert len(lines) >= 6 and lines == [1] * len(lines), (width, path, lines)
            # one row of 52 px (the annotation page's height counts on it), nothing spilling out of it
            assert page.evaluate(BAR) == [52, []], (width, path)
            assert page.locator(".topbar .avatar").get_attribute("title") == USER
            assert PROJECT in page.locator("#crumbs").evaluate("n => [...n.children].map(c => c.title)")
            # a short crumb ("Projects", "Task 1") is whole: the long name gives up the room
            cut = page.locator("#crumbs").evaluate(
                "n => [...n.children].filter(c => c.scrollWidth > c.clientWidth).map(c => c.textContent)"
            )
            assert cut in ([], [PROJECT]), (width, path, cut)
