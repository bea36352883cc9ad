"""What a new user met after ``make run`` (newuser19), in the dataset browser and in LabelX.

- LabelX's dashboard drew its charts 560 units wide whatever the window: in a phone's window
  (390 px) their 11 px labels (annotators, classes, hours) were drawn 6.5 px tall, unreadable,
  and a task nobody had begun had an empty "state" cell beside its empty progress bar.
- The dataset browser's hints named a bare ``datahub`` ("No tags (datahub tag sample NAME
  VERSION)"), which is not on the PATH of a ``make run`` user, while the same page's "Mount it"
  line names the checkout's ``.venv/bin/datahub --home …`` as the demo's own lines do.
- "Mount it" mounted ``sample@v1`` at ``/mnt/sample``, where ``ls`` shows only ``sample``: the
  files are under ``/mnt/sample/sample/v1/``. The line now ends by listing them there.
"""

from __future__ import annotations

import pytest

from datahub.demo import cli_hint
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import project_in_page, signed_in

pytestmark = [pytest.mark.browser]
PHONE = (390, 844)
DESKTOP = (1280, 800)
READABLE = 10.5  # px: the charts' text is 11 px (labelx/static/app.css)

CHART_TEXT = """
return Array.from(document.querySelectorAll('.chart svg text')).map(t => {
  const svg = t.ownerSVGElement;
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  return [t.closest('.chart').id, t.textContent, scale * parseFloat(getComputedStyle(t).fontSize)];
});
"""


def test_the_dashboard_charts_are_readable_in_a_phone_window_and_a_new_task_says_to_do(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    c = chrome
    with signed_in(c, env, "newuser19-lx-login") as base:
        schema = {"kind": "classification", "classes": [{"name": "cat"}, {"name": "dog"}]}
        body = {"name": "cats", "dataset": "pets", "prefix": "train/cat/", "schema": schema,
                "annotators": ["admin"], "task_size": 5}  # fmt: skip
        made = project_in_page(c, body)
        dashboard = f"{base}/labelx/projects/{made['id']}"
        for width, height in (PHONE, DESKTOP):
            c.driver.set_window_size(width, height)
            c.driver.get(dashboard)
            c.until(lambda d: d.find_elements("css selector", "#tasks select"))
            c.until(lambda d: d.find_elements("css selector", "#chart-classes svg, #chart-hours svg"))
            c.settle()
            c.check()
            c.save_view(f"newuser19-dashboard-{width}")
            sizes = c.driver.execute_script(CHART_TEXT)
            assert {chart for chart, _, _ in sizes} >= {"chart-classes", "chart-hours"}, sizes
            small = [(chart, text, round(px, 1)) for chart, text, px in sizes if px < READABLE]
            assert small == [], f"{width} px: chart text drawn smaller than {READABLE} px: {small[:6]}"
            wide = c.driver.execute_script(
                "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert wide[0] <= wide[1], f"{width} px: the dashboard scrolls sideways {wide}"
            states = [cell.text for cell in c.find_all("#tasks tr td:last-child")]
            assert states == ["5 to do", "5 to do"], states  # 10 cats of pets@v2, tasks of 5


def test_the_browser_names_commands_as_the_demo_does(env: Env, app, client) -> None:
    """Under ``make run`` every command a page names is typed as shown (the venv's datahub
    with the demo's home), not only the "Mount it" line."""
    cli = cli_hint(env.config)  # what datahub.demo sets: ./.venv/bin/datahub --home …
    app.state.browser.cli = cli
    env.catalog.create_dataset("empty", description="nothing yet")
    page = client.get("/datasets/empty").text
    assert f"<code>{cli} tag empty NAME VERSION</code>" in page
    assert f"<code>{cli} import SRC --to empty</code>" in page
    assert "<code>datahub " not in page
    version = client.get("/datasets/pets/versions/2").text
    # the mount, then where its files are (MNT/<dataset>/v<N>/: MNT/ itself holds only "pets")
    assert f"{cli} mount --background /mnt/pets pets@v2 &amp;&amp; ls /mnt/pets/pets/v2</code>" in version
    # an installed datahub (datahub serve) keeps the bare command
    app.state.browser.cli = "datahub"
    assert "<code>datahub tag empty NAME VERSION</code>" in client.get("/datasets/empty").text
