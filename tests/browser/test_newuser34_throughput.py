"""LabelX's "Throughput per hour" on a new project, in headless Chromium (newuser34).

Before any item was labelled it drew an empty axis (18:00 … 15:00) and said nothing: it read as
a chart still loading, or a broken one, where "Progress per annotator" beside it said "No data
yet.". It now says no item was labelled in the last 24 hours, until one is.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import _wait_text, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = {
    "name": "hours",
    "dataset": "pets",
    "prefix": "val/",
    "annotators": ["admin"],
    "schema": {"kind": "classification", "classes": ["cat", "dog"]},
}

LABEL_ONE = """
const [tid, done] = arguments;
(async () => {
  const it = (await api('GET', `/api/tasks/${tid}`)).items[0];
  await api('PUT', `/api/items/${it.id}`, {version: it.version, value: 'dog'});
  return 'ok';
})().then(done, e => done(String(e)));
"""


def test_an_empty_throughput_chart_says_no_item_was_labelled(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env) as base:
        made = project_in_page(c, PROJECT)
        dashboard = f"{base}/labelx/projects/{made['id']}"
        c.visit(dashboard, "lx-newuser34-1-no-throughput")
        _wait_text(c, "#chart-hours", "No item labelled in the last 24 hours.")
        assert c.driver.find_elements("css selector", "#chart-hours svg")  # the axis stays
        assert c.driver.execute_async_script(LABEL_ONE, made["task"]) == "ok"
        c.visit(dashboard, "lx-newuser34-2-throughput")
        c.until(lambda d: d.find_elements("css selector", "#chart-hours svg text.value"))
        assert "No item labelled" not in c.find("#chart-hours").text
