"""What newuser25 met in ``make run``'s LabelX with two annotators, in headless Chromium.

"New project" with annotators ``admin, alice`` over 4 items (tasks of 50, assigned
round-robin) made one task, given to admin; the form said "Created pets-val with 4 items.",
and alice found "no task of yours yet" with nothing to say why. The form now says who has no
task and what gives each one (the command does too: tests/labelx/test_newuser25.py), styled as
a warning (newuser73: it was red, as the refusals "Not created" are, of a project that was made).
"""

from __future__ import annotations

import pytest
from selenium.webdriver.support.ui import Select

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import signed_in
from tests.browser.test_newuser_labelx import _wait_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _create(c: Chrome, name: str, task_size: str | None = None, claim: bool = False) -> str:
    form = {
        "name": name,
        "dataset": "pets",
        "prefix": "val/",
        "classes": "cat, dog",
        "annotators": "admin, alice",
    }
    for field, value in form.items():
        c.find(f"#create-form [name={field}]").send_keys(value)
    if task_size is not None:
        c.find("#create-form [name=task_size]").clear()
        c.find("#create-form [name=task_size]").send_keys(task_size)
    if claim:
        Select(c.find("#create-form [name=assign]")).select_by_value("claim")
    c.find("#create-form button[type=submit]").click()
    _wait_text(c, "#create-msg", f"Created {name} with")
    return c.find("#create-msg").text


def _styled(c: Chrome) -> tuple[str, str]:
    """The form message's class and the colour it is shown in."""
    m = c.find("#create-msg")
    color = m.value_of_css_property("color")  # rgba(163, 78, 0, 1)
    return m.get_attribute("class"), color.replace("rgba", "rgb").replace(", 1)", ")")


def test_a_project_for_two_annotators_says_who_has_no_task(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env):
        made = c.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "api('POST', '/api/users', {name: 'alice', role: 'annotator', password: 'alice-password'})"
            ".then(() => done('ok'), e => done(String(e)));"
        )
        assert made == "ok", made
        said = _create(c, "pets-val")
        assert said == (
            "Created pets-val with 4 items. alice has no task: 1 task of up to 50 items for 2 annotators; "
            "a task size of 2 or less gives each one a task."
        ), said
        c.check("newuser25-idle-annotator")
        # the project was made: a warning, styled as one (orange), not as a refusal (it was red)
        assert _styled(c) == ("msg warn", "rgb(163, 78, 0)"), _styled(c)
        assert _create(c, "pets-val-1", task_size="1") == "Created pets-val-1 with 4 items."
        assert _styled(c)[0] == "msg ok", _styled(c)
        # taken one at a time, one task for two: one of them finds none left to take
        assert _create(c, "pets-val-c", claim=True) == (
            "Created pets-val-c with 4 items. 1 task of up to 50 items for 2 annotators: 1 of them will find "
            "no task to take; a task size of 2 or less gives each one a task."
        )
