"""LabelX's Submit waits for the last label's save, in headless Chromium.

Submit is enabled as soon as every item of the task is labelled in the page, while the save of
the last label (a PUT the page sends in the background) may still be on its way. The submit
used to go out at once: the server submitted the items it had, without the last label, and
then refused that label's save ("can no longer be changed"): a label the annotator gave, lost
(found by suite17 as a flaky wait in test_labelx_keys). Here that save is held back for 1.5 s
in the page, so the submit always overtook it before the fix.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import _wait_text, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = {
    "name": "submit-waits",
    "dataset": "pets",
    "prefix": "val/",
    "annotators": ["admin"],
    "schema": {"kind": "classification", "classes": [{"name": "cat", "key": "c"}, "dog"]},
}

SLOW_SAVES = (
    "const f = window.fetch;"
    "window.fetch = (u, o) => (o && o.method === 'PUT')"
    " ? new Promise(r => setTimeout(r, 1500)).then(() => f(u, o)) : f(u, o);"
)


def test_submit_waits_for_the_last_labels_save(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-submit17-1-login") as base:
        made = project_in_page(c, PROJECT)
        task, total = made["task"], made["total"]
        assert total >= 2, made
        c.visit(f"{base}/labelx/tasks/{task}")
        _wait_text(c, "#item-key", "val/")
        for _ in range(total - 1):  # every item but the last, saved as usual
            shown = c.find("#item-key").text
            c.find("body").send_keys("c")
            c.until(lambda d, shown=shown: d.find_element("css selector", "#item-key").text != shown)
        _wait_text(c, "#save-state", "Saved")
        c.driver.execute_script(SLOW_SAVES)
        c.find("body").send_keys("c")  # the last label: its save now takes 1.5 s
        c.until(lambda d: not d.find_element("css selector", "#submit").get_attribute("disabled"))
        c.find("#submit").click()  # while that save is in flight
        _wait_text(c, "#banner", f"{total} items submitted for review")
        view = c.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "api('GET', `/api/tasks/${arguments[0]}`).then(done, e => done(String(e)));",
            task,
        )
        assert isinstance(view, dict), view
        labels = {i["key"]: (i["status"], i["value"]) for i in view["items"]}
        assert len(labels) == total
        assert all(v == ("submitted", "cat") for v in labels.values()), labels
        c.check("lx-submit17-2-submitted")
