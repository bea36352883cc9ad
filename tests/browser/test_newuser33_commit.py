"""LabelX's "Commit accepted labels" with nothing left to commit, in headless Chromium.

It stayed enabled: a click only then said, in red, that there was nothing to commit. It is
disabled now, with the reason beside it (the server's, as the commit's 409 gives it, and the
button is described by that line for a screen reader); into a new dataset, any accepted item
is enough, and the reason follows what "Into dataset" says.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import _wait_text, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = {
    "name": "to-commit",
    "dataset": "pets",
    "prefix": "val/",
    "annotators": ["admin"],
    "schema": {"kind": "classification", "classes": ["cat", "dog"]},
}

# the project's items labelled "dog", submitted and accepted, through the page's own API helper
ACCEPT = """
const [pid, tid, done] = arguments;
(async () => {
  const view = await api('GET', `/api/tasks/${tid}`);
  for (const it of view.items) await api('PUT', `/api/items/${it.id}`, {version: it.version, value: 'dog'});
  await api('POST', `/api/tasks/${tid}/submit`);
  for (const it of await api('GET', `/api/projects/${pid}/review`))
    await api('POST', `/api/items/${it.id}/review`, {version: it.version, accept: true});
  return 'ok';
})().then(done, e => done(String(e)));
"""


def _disabled(c: Chrome) -> bool:
    return bool(c.find("#commit-btn").get_attribute("disabled"))


def test_commit_is_disabled_with_the_reason_when_nothing_is_left_to_commit(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-newuser33-1-login") as base:
        made = project_in_page(c, PROJECT)
        pid, total = made["id"], made["total"]
        dashboard = f"{base}/labelx/projects/{pid}"
        c.visit(dashboard)
        _wait_text(c, "#commit-why", "Nothing to commit")
        assert _disabled(c)
        assert c.find("#commit-why").text == (
            f"Nothing to commit: project 'to-commit' has no accepted label left to commit (of its {total} "
            f"items: {total} still to annotate or submit); annotate the items and submit their tasks, "
            "accept them in review, then commit again."
        )
        assert c.find("#commit-btn").get_attribute("aria-describedby") == "commit-why"
        c.check("lx-newuser33-2-nothing")
        c.find("#commit-form [name=to_dataset]").send_keys("pets-new")
        _wait_text(c, "#commit-why", "into a new dataset pets-new")
        assert _disabled(c)

        assert c.driver.execute_async_script(ACCEPT, pid, made["task"]) == "ok"
        c.visit(dashboard)
        c.until(lambda d: not d.find_element("css selector", "#commit-btn").get_attribute("disabled"))
        assert c.find("#commit-why").text == ""
        c.check("lx-newuser33-3-ready")
        c.find("#commit-btn").click()
        _wait_text(c, "#commit-msg", "Committed pets@v3")
        # committed: nothing is left, and the page says so at once
        _wait_text(c, "#commit-why", "every accepted label is in the dataset already")
        assert _disabled(c)
        c.find("#commit-form [name=to_dataset]").send_keys("pets-new")
        c.until(lambda d: not d.find_element("css selector", "#commit-btn").get_attribute("disabled"))
        assert c.find("#commit-why").text == ""
        c.check("lx-newuser33-4-committed")
