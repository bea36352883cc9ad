"""LabelX's "Submit for review" on a task whose items were all skipped, in headless Chromium.

It sends only labelled items, so with every item skipped it stays disabled: the page said
nothing of why, and the button looked broken. The controls now say it beside the button (and
the button is described by that line for a screen reader). With the labelled items sent, the
line says where they are (in review, accepted, rejected): it said "already sent for review" of
items accepted (newuser73).
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import _wait_text, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = {
    "name": "all-skipped",
    "dataset": "pets",
    "prefix": "val/",
    "annotators": ["admin"],
    "schema": {"kind": "classification", "classes": ["cat", "dog"]},
}


def test_submit_says_why_it_is_disabled_when_every_item_is_skipped(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-newuser31-1-login") as base:
        made = project_in_page(c, PROJECT)
        task, total = made["task"], made["total"]
        c.visit(f"{base}/labelx/tasks/{task}")
        _wait_text(c, "#item-key", "val/")
        assert c.find("#submit-why").text == ""  # items to label: the progress bar says so
        for _ in range(total):  # S skips an item and goes to the next
            c.find("body").send_keys("s")
        _wait_text(c, "#progress", f"{total} / {total}")
        _wait_text(c, "#save-state", "Saved")
        assert c.find("#submit").get_attribute("disabled")
        _wait_text(c, "#submit-why", "Nothing to submit: every item is skipped")
        assert c.find("#submit-why").text == (
            "Nothing to submit: every item is skipped, and only labelled items go to review. A skipped "
            "item keeps the dataset's label; label one to submit it."
        )
        assert c.find("#submit").get_attribute("aria-describedby") == "submit-why"
        c.check("lx-newuser31-2-all-skipped")
        c.find("body").send_keys("1")  # a label on the last item: it can be submitted
        c.until(lambda d: not d.find_element("css selector", "#submit").get_attribute("disabled"))
        assert c.find("#submit-why").text == ""
        # sent, then reviewed: the line says where the labelled item is, not that its review is to
        # come ("already sent for review" of an item accepted, newuser73)
        c.find("#submit").click()
        _wait_text(c, "#banner", "1 item submitted for review")
        why = (
            "Nothing new to submit: every labelled item has been sent for review ({});"
            " skipped items stay out of review."
        )
        _wait_text(c, "#submit-why", why.format("1 in review"))
        accepted = c.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "(async () => { for (const it of await api('GET', `/api/projects/${arguments[0]}/review`))"
            "  await api('POST', `/api/items/${it.id}/review`, {version: it.version, accept: true}); })()"
            ".then(() => done('ok'), e => done(String(e)));",
            made["id"],
        )
        assert accepted == "ok", accepted
        c.visit(f"{base}/labelx/tasks/{task}")
        _wait_text(c, "#submit-why", why.format("1 accepted"))
        assert c.find("#submit-why").text == why.format("1 accepted")
