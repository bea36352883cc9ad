"""LabelX's Submit for review sends one submit a click, and says so when nothing new went.

A double-click on Submit sent two submits: the button stayed enabled until the first one's
answer came back, so the second click's request found every item already submitted and its
banner read "0 items submitted for review", a wrong count shown over the right one. The
button is now disabled while its request is in flight, and a submit that finds nothing new
(another tab, or another window, submitted the task first) says so in words.
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.action_chains import ActionChains

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import _wait_text, label_by_key, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = {
    "name": "submit-once",
    "dataset": "pets",
    "prefix": "val/",
    "annotators": ["admin"],
    "schema": {"kind": "classification", "classes": [{"name": "cat", "key": "c"}, "dog"]},
}

# every submit the page sends is counted, and held back 0.5 s so that a second click lands
# while the first is surely in flight
COUNT_SUBMITS = (
    "window.submits = 0; window.inflight = 0; const f = window.fetch;"
    "window.fetch = (u, o) => (o && o.method === 'POST' && String(u).endsWith('/submit'))"
    " ? (window.submits++, window.inflight++, new Promise(r => setTimeout(r, 500))"
    "    .then(() => f(u, o)).finally(() => window.inflight--)) : f(u, o);"
)
ANSWERED = (
    "return window.submits > 0 && window.inflight === 0"
    " && document.getElementById('banner').textContent.includes('submitted')"
)


def _labelled_task(c: Chrome, base: str, name: str) -> tuple[int, int]:
    made = project_in_page(c, {**PROJECT, "name": name})
    task, total = made["task"], made["total"]
    c.visit(f"{base}/labelx/tasks/{task}")
    _wait_text(c, "#item-key", "val/")
    label_by_key(c, "c", total)
    _wait_text(c, "#save-state", "Saved")
    return task, total


def test_a_double_click_on_submit_sends_one_submit(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-newuser42-1-login") as base:
        task, total = _labelled_task(c, base, "submit-once")
        c.driver.execute_script(COUNT_SUBMITS)
        ActionChains(c.driver).double_click(c.find("#submit")).perform()
        c.until(lambda d: d.execute_script(ANSWERED))
        assert c.driver.execute_script("return window.submits") == 1  # 2 before the fix
        _wait_text(c, "#banner", f"{total} items submitted for review")
        assert c.find("#submit").get_attribute("disabled")  # nothing left to submit
        c.check("lx-newuser42-2-submitted-once")


def test_a_submit_that_finds_nothing_new_says_so(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-newuser42-3-login") as base:
        task, total = _labelled_task(c, base, "submit-elsewhere")
        # the task is submitted elsewhere (another tab): this page still shows it labelled
        done = c.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "api('POST', `/api/tasks/${arguments[0]}/submit`).then(done, e => done(String(e)));",
            task,
        )
        assert done == {"submitted": total}, done
        c.find("#submit").click()
        _wait_text(c, "#banner", "Nothing new submitted")
        banner = c.find("#banner").text
        assert "0 items" not in banner, banner
        assert "already" in banner, banner
        c.check("lx-newuser42-4-nothing-new")
