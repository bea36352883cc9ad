"""newuser44: LabelX's annotation page by keyboard, in headless Chromium.

* Enter on a button reached with Tab ("Skip", "← Prev") did not press it: the page's key
  handler took every Enter for "confirm the label and go to the next item" and swallowed it,
  so a keyboard user could press no button with Enter. A button focused from the keyboard now
  takes its Enter; one focused by a mouse click does not (Enter after clicking still confirms).
* The item list was mouse-only: no Tab stop, no arrow keys. It is a listbox now: Tab reaches
  the current item, ↑/↓ (Home/End) move through the list, Enter opens the item focused.
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser_labelx import _wait_text, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = {
    "name": "keyboard",
    "dataset": "pets",
    "prefix": "train/dog/",
    "annotators": ["admin"],
    "schema": {"kind": "classification", "classes": ["cat", "dog"]},
}


def _active(c: Chrome) -> str:
    return c.driver.execute_script(
        "const a = document.activeElement; return a.id || (a.closest('#items > li') ? 'item:' + a.textContent : a.tagName)"
    )


def _tab_to(c: Chrome, want: str, limit: int = 40) -> None:
    """Press Tab until ``want`` (as ``_active`` names it, or its start) has the focus."""
    for _ in range(limit):
        if _active(c).startswith(want):
            return
        ActionChains(c.driver).send_keys(Keys.TAB).perform()
    raise AssertionError(f"Tab never reached {want!r}; at {_active(c)!r}")


def _open_task(c: Chrome, base: str) -> None:
    """The project's task page, at its first item (a dog)."""
    task = project_in_page(c, PROJECT)["task"]
    c.visit(f"{base}/labelx/tasks/{task}#0")
    _wait_text(c, "#item-key", "train/dog/")


def _key(c: Chrome, key: str) -> None:
    ActionChains(c.driver).send_keys(key).perform()


def test_enter_presses_a_button_reached_by_keyboard(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env) as base:
        _open_task(c, base)
        first = c.find("#item-key").text
        _tab_to(c, "skip")
        _key(c, Keys.ENTER)  # Skip pressed: the item is skipped and the page goes to the next one
        c.until(lambda d: c.find("#item-key").text != first)
        _wait_text(c, "#items li:first-child .dot.skipped", "")
        assert c.find_all("#items li:first-child .dot.skipped"), "Enter on Skip did not skip"
        second = c.find("#item-key").text
        _tab_to(c, "prev")
        _key(c, Keys.ENTER)  # ← Prev pressed
        c.until(lambda d: c.find("#item-key").text == first)
        # a button clicked with the mouse keeps Enter's page-wide meaning: confirm and go on
        c.find("body").send_keys("2")  # label dog: the page goes to the next item
        c.until(lambda d: c.find("#item-key").text == second)
        ActionChains(c.driver).click(c.find("#prev")).perform()
        c.until(lambda d: c.find("#item-key").text == first)
        _key(c, Keys.ENTER)  # confirms the (skipped item's) shown label: goes next, not Prev again
        c.until(lambda d: c.find("#item-key").text != first)
        assert c.find("#item-key").text == second
        c.check()


def test_the_item_list_moves_with_arrow_keys_and_opens_with_enter(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env) as base:
        _open_task(c, base)
        keys = [li.get_attribute("title") for li in c.find_all("#items li")]
        assert len(keys) >= 4 and c.find("#item-key").text == keys[0]
        assert c.find("#items").get_attribute("role") == "listbox"
        _tab_to(c, "item:1. ")  # one Tab stop: the current item
        assert c.find("#items li:first-child").get_attribute("aria-selected") == "true"
        _key(c, Keys.ARROW_DOWN)
        _key(c, Keys.ARROW_DOWN)
        assert _active(c).startswith("item:3. "), _active(c)
        assert c.find("#item-key").text == keys[0]  # moving is not opening
        _key(c, Keys.ARROW_UP)
        assert _active(c).startswith("item:2. "), _active(c)
        _key(c, Keys.ENTER)  # opens the focused item, not "confirm and next"
        c.until(lambda d: c.find("#item-key").text == keys[1])
        assert c.find("#items li:nth-child(2)").get_attribute("aria-selected") == "true"
        assert c.find_all("#items li:first-child .dot.todo") or not c.find_all(
            "#items li:first-child .dot.annotated"
        )
        _key(c, Keys.END)
        assert _active(c).startswith(f"item:{len(keys)}. "), _active(c)
        _key(c, Keys.ENTER)
        c.until(lambda d: c.find("#item-key").text == keys[-1])
        # the page's own keys still work with the focus in the list: a class key labels the item
        _key(c, Keys.HOME)
        assert _active(c).startswith("item:1. "), _active(c)
        c.save_view("newuser44-item-list-focus")
        c.check()
