"""What newuser72 met on a LabelX dashboard: the assignee menu of each task offered annotators
only, while docs/labelx.md's roles say a reviewer may take a project's open tasks and an admin
may do everything; a reviewer or admin who also labels could be given a task only through the
API (``PUT /api/tasks/<id>/assignee`` took them). And the reviewer's dashboard hid "Take next
task". The menu now offers every account, each with its role when it is not an annotator; a
reviewer given a task labels it by keyboard, and sees "Take next task"."""

from __future__ import annotations

import pytest
from selenium.webdriver.support.ui import Select

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import sign_out_and_in, signed_in
from tests.browser.test_newuser_labelx import _wait_text

pytestmark = pytest.mark.browser

# three more accounts, and a project of pets' four val/ pictures in two tasks, both ann's
WORK = """
const done = arguments[arguments.length - 1];
(async () => {
  for (const [name, role] of [['ann', 'annotator'], ['rita', 'reviewer'], ['boss', 'admin']])
    await api('POST', '/api/users', {name, role, password: 'pw-' + name + '-123456'});
  const p = await api('POST', '/api/projects', {name: 'assign', dataset: 'pets', prefix: 'val/', task_size: 2,
    annotators: ['ann'], schema: {kind: 'classification', classes: ['cat', 'dog']}});
  return p.id;
})().then(done, e => done(String(e)));
"""
OPTIONS = "return Array.from(document.querySelector('#tasks select').options, o => [o.value, o.text])"
VALUE = "return document.querySelector('#tasks select').value"


def test_a_reviewer_and_an_admin_are_assignable_and_a_reviewer_labels(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env) as base:
        project = c.driver.execute_async_script(WORK)
        assert isinstance(project, int), project
        dashboard = f"{base}/labelx/projects/{project}"
        c.visit(dashboard)
        c.until(lambda d: d.find_elements("css selector", "#tasks select"))
        options = c.driver.execute_script(OPTIONS)
        assert options == [
            ["", "unassigned"],
            ["admin", "admin (admin)"],
            ["ann", "ann"],
            ["boss", "boss (admin)"],
            ["rita", "rita (reviewer)"],
        ], options
        Select(c.find("#tasks select")).select_by_value("rita")
        c.until(lambda d: not d.find_element("css selector", "#assign-msg").text)
        c.driver.refresh()
        c.until(lambda d: d.find_elements("css selector", "#tasks select"))
        c.until(lambda d: d.execute_script(VALUE) == "rita")  # the server has it
        c.check()

        sign_out_and_in(c, "rita", "pw-rita-123456")
        c.visit(dashboard)
        c.until(lambda d: d.find_elements("css selector", "#tasks a"))
        assert c.find("#take-task").is_displayed()  # docs/labelx.md: a reviewer may take open tasks
        c.save_view("newuser72-reviewer-dashboard")
        c.find("#tasks a").click()  # task 1, hers now
        c.wait_for_url(lambda url: "/tasks/" in url)
        _wait_text(c, "#item-key", "val/")
        c.find("body").send_keys("1")  # cat, by its key
        _wait_text(c, "#save-state", "Saved")
        c.check("newuser72-reviewer-labels")
