"""LabelX's annotation page tells which key does what, in headless Chromium.

The page is keyboard-first, but its only help was a collapsed "Keyboard" line written by hand:
it said "1…9" for classes whose keys are the schema's (a letter here), and left out Enter and
Esc. Now a visible "Keyboard shortcuts ?" button and the ``?`` key open a dialog listed from
the table the key handler itself reads, with each class's own key; while it is open, keys do
not label the item behind it. And a key or button that cannot act here ("Next" on an item
with no label yet) says what to do instead of only blinking the image.
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.keys import Keys

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import _wait_text, label_by_key, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = {
    "name": "keys",
    "dataset": "pets",
    "prefix": "val/",
    "annotators": ["admin"],
    "schema": {"kind": "classification", "classes": [{"name": "cat", "key": "c"}, "dog"]},
}


def _rows(c: Chrome) -> dict[str, str]:
    """The help's rows: the keys as shown (joined by spaces) -> what they do."""
    rows = {}
    for tr in c.find_all("#keys-list tr"):
        keys = " ".join(k.text for k in tr.find_elements("css selector", "th kbd"))
        rows[keys] = tr.find_element("css selector", "td").text
    return rows


def _help_open(c: Chrome) -> bool:
    return c.driver.execute_script("return document.getElementById('keys').open")


def test_the_keys_are_listed_from_the_schema_and_the_handler(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-keys-1-login") as base:
        task = project_in_page(c, PROJECT)["task"]
        c.visit(f"{base}/labelx/tasks/{task}")
        _wait_text(c, "#item-key", "val/")
        first = c.find("#item-key").text

        # "Next" (and Enter) on an item with no label yet: the bar says what to do (it blinked)
        c.find("#next").click()
        _wait_text(c, "#hint", "No label to confirm yet: pick a class first")
        assert c.find("#item-key").text == first
        c.find("body").send_keys("a")
        _wait_text(c, "#hint", "This item has no suggestion to take.")
        c.check("lx-keys-2-hint")

        # a visible way in, for whoever does not know the ? key
        opener = c.find("#keys-open")
        assert opener.is_displayed() and "?" in opener.text

        c.find("body").send_keys("?")
        c.until(lambda d: _help_open(c))
        c.check("lx-keys-3-help")  # axe-core with the dialog on top
        rows = _rows(c)
        # each class by its own key (not "1…9"), then every key the handler acts on
        assert rows["c"] == "label cat and go to the next item"
        assert rows["2"] == "label dog and go to the next item"
        for keys in ("Enter", "N →", "P ←", "S", "A", "Z U Ctrl+Z", "?"):
            assert keys in rows, f"{keys!r} is not in the help: {rows}"
        # keys acting where the focus is: the item list (a listbox) and a Tab-focused button
        assert rows["↑ ↓ Home End"] == "in the item list: move; Enter opens the item"
        assert rows["Tab Enter"].startswith("press the button Tab reached")
        assert "D Del" not in rows and "Esc" not in rows  # box keys: detection projects only
        assert not c.find("#keys-mouse").is_displayed()

        # the dialog is on top: a class key does not label the item behind it; ? closes it
        c.driver.switch_to.active_element.send_keys("c")
        assert _help_open(c) and c.find("#item-key").text == first
        c.driver.switch_to.active_element.send_keys("?")
        c.until(lambda d: not _help_open(c))

        # what the help says is what the key does
        c.find("body").send_keys("c")
        c.until(lambda d: d.find_element("id", "item-key").text != first)
        _wait_text(c, "#save-state", "Saved")
        c.find("#items li").click()
        _wait_text(c, "#current", "cat")

        # at a phone's width the hint wraps in its bar, and the help opens by touch, fits the
        # window, and Esc closes it
        c.driver.set_window_size(390, 844)
        c.find("#items li:nth-child(2)").click()
        c.find("#next").click()
        _wait_text(c, "#hint", "No label to confirm yet")
        wide = c.driver.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert wide[0] <= wide[1], f"the page scrolls sideways ({wide[0]} px in {wide[1]})"
        c.find("#keys-open").click()
        c.until(lambda d: _help_open(c))
        c.check()
        box = c.driver.execute_script(
            "const r = document.getElementById('keys').getBoundingClientRect();"
            "return [r.left, r.right, window.innerWidth];"
        )
        assert box[0] >= 0 and box[1] <= box[2], f"the help does not fit a phone: {box}"
        in_view = c.driver.execute_script(
            "const h = window.innerHeight, t = document.getElementById('keys-title').getBoundingClientRect(),"
            " b = document.getElementById('keys-close').getBoundingClientRect();"
            "return t.top >= 0 && b.bottom <= h;"
        )
        assert in_view, "the help's title or its Close button is out of view"
        c.driver.switch_to.active_element.send_keys(Keys.ESCAPE)
        c.until(lambda d: not _help_open(c))

        # the rest by key, then submitted: the page says so (the item's own "can no longer be
        # changed" banner replaced that message at once)
        label_by_key(c, "2", 3)
        # as in test_newuser_labelx: Submit is enabled while the last label's save is in flight
        _wait_text(c, "#save-state", "Saved")
        c.find("#submit").click()
        _wait_text(c, "#banner", "4 items submitted for review")
        c.check()
