"""After a LabelX commit, the new version is one click away in the dataset browser.

The dashboard said "Committed pets@v3 (4 records changed)." and its exports table "v3", as
text: to see the labels in the browser and diff them, a new user had to find the dataset and
the version by hand. Under ``datahub serve`` (``make run``) both now link to the browser's
version page and to its diff from the parent, and the diff counts the same records the
commit said it changed.
"""

from __future__ import annotations

import re

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import _wait_text, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# the project's items labelled "dog", submitted and accepted, through the page's own API helper
ACCEPTED = """
const done = arguments[arguments.length - 1];
(async () => {
  const p = await api('POST', '/api/projects', {name: 'links', dataset: 'pets', prefix: 'val/',
    annotators: ['admin'], schema: {kind: 'classification', classes: ['cat', 'dog']}});
  const [task] = await api('GET', `/api/projects/${p.id}/tasks`);
  const view = await api('GET', `/api/tasks/${task.id}`);
  for (const it of view.items) await api('PUT', `/api/items/${it.id}`, {version: it.version, value: 'dog'});
  await api('POST', `/api/tasks/${task.id}/submit`);
  for (const it of await api('GET', `/api/projects/${p.id}/review`))
    await api('POST', `/api/items/${it.id}/review`, {version: it.version, accept: true});
  return p.id;
})().then(done, e => done(String(e)));
"""

# the "commit over" checkbox stands left of its sentence, within the sentence's height
BESIDE = """
const box = document.getElementById('commit-overwrite').getBoundingClientRect();
const text = Array.from(document.getElementById('commit-overwrite').parentNode.childNodes)
  .find(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
const range = document.createRange(); range.selectNodeContents(text);
const r = range.getBoundingClientRect();
return box.top >= r.top && box.bottom <= r.bottom && box.right <= r.left;
"""


def test_a_commit_links_to_its_version_and_diff_in_the_dataset_browser(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-links-1-login") as base:
        project = c.driver.execute_async_script(ACCEPTED)
        assert isinstance(project, int), project
        c.visit(f"{base}/labelx/")
        _wait_text(c, "[data-project=links]", "4 items")
        assert c.find("[data-project=links] div.muted").text.endswith(" · 4 items · 1 task")  # was "1 tasks"
        dashboard = f"{base}/labelx/projects/{project}"
        c.visit(dashboard)
        for size in ((1360, 900), (390, 844)):  # "commit over": its box sat above its sentence
            c.driver.set_window_size(*size)
            assert c.driver.execute_script(BESIDE), f"the overwrite box is not beside its sentence at {size}"
        c.driver.set_window_size(1360, 900)
        c.find("#commit-form input[name=message]").send_keys("the val/ labels")
        c.find("#commit-btn").click()
        _wait_text(c, "#commit-msg", "Committed pets@v3")
        assert env.catalog.store.get_version("pets", 3).message == "the val/ labels"
        # the message is the commit's: left in the box it went with the next commit (newuser71)
        assert c.find("#commit-form input[name=message]").get_attribute("value") == ""
        c.check("lx-links-2-committed")
        changed = int(re.search(r"\((\d+) records? changed\)", c.find("#commit-msg").text).group(1))
        assert changed == len(list(env.catalog.list_records("pets", 2, prefix="val/")))
        version = c.find("#commit-msg a[data-version]").get_attribute("href")
        diff = c.find("#commit-msg a[data-diff]").get_attribute("href")
        assert version == f"{base}/datasets/pets/versions/3"
        assert diff == f"{base}/datasets/pets/diff?to=3"
        _wait_text(c, "#exports", "v3")
        assert c.find("#exports a[data-version]").get_attribute("href") == version
        assert c.find("#exports a[data-diff]").get_attribute("href") == diff

        c.find("#commit-msg a[data-version]").click()
        c.wait_for_url(lambda url: url == version)
        c.check("lx-links-3-version")
        assert c.find("h1").text.startswith("pets@v3")
        c.visit(diff, "lx-links-4-diff")
        assert c.find("h1").text == "pets: v2 → v3"
        assert f"~{changed} modified" in c.find("main").text  # the number the commit said
