"""The top bar of a page with long breadcrumbs, in headless Chromium (newuser34).

A dataset named with 62 characters, on a folder named with 100, pushed the bar's right side
into a narrow column: the "local mode" badge broke over two lines, a pill holding "local" above
"mode". A badge and a top link keep their words on one line.
"""

from __future__ import annotations

from datahub.catalog import Put, Record
from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env

NAME = "a-dataset-with-a-rather-long-name-for-layout-checks-of-browser"
FOLDER = "a_very_long_directory_name_that_goes_on_and_on_and_on_to_test_layout_wrapping_in_the_browser_view"

# the lines each element's text is laid out on (a flex item has one box however its text wraps)
LINES = """return Array.from(document.querySelectorAll(arguments[0])).map(e => {
  const r = document.createRange(); r.selectNodeContents(e); return r.getClientRects().length; })"""


def test_the_top_bars_badge_stays_on_one_line_beside_long_breadcrumbs(
    chrome: Chrome,  # noqa: F811
    env: Env,
    server: str,
) -> None:
    info = env.objects.put("long/file.txt", b"hi")
    env.catalog.create_dataset(NAME)
    env.catalog.commit(
        NAME, [Put(Record(f"{FOLDER}/file.txt", env.objects.url_for("long/file.txt"), info.etag, 2))]
    )
    c = chrome
    c.visit(f"{server}/datasets/{NAME}/versions/1?prefix={FOLDER}/")
    c.driver.set_window_size(
        1000, 900
    )  # a laptop's window beside another (the next test's reset restores it)
    assert c.find(".topbar .role").text == "local mode"
    lines = c.driver.execute_script(LINES, ".topbar .role, .topbar .toplink")
    assert len(lines) >= 2 and lines == [1] * len(lines), lines  # the badge and "API" at least
