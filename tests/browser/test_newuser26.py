"""What newuser26 met with the back button in headless Chromium.

Chromium keeps a page left by a link in its back/forward cache, scripts and all, and the back
button shows it as it was left: LabelX's project list said "Task 1 0/4" after the task's
items were labelled, and after "Log out" (or "Sign out" in the dataset browser) the back
button showed the signed-out user's projects and datasets again. Such a page now loads again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.common.exceptions import TimeoutException

from datahub.api.tokens import issue_token
from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env, browser_app, pets_env, serving, token_sign_in
from tests.browser.labelx_signin import signed_in
from tests.browser.test_newuser_labelx import _wait_text, project_in_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MARK = "window.newuser26_left = true"  # a global of the page as it was left: gone once it loads again
LEFT = "return window.newuser26_left === true"


#: the project both LabelX walks make: the validation images of ``pets``, two classes
PETS_VAL = {
    "name": "pets-val",
    "dataset": "pets",
    "prefix": "val/",
    "schema": {"kind": "classification", "classes": ["cat", "dog"]},
    "annotators": ["admin"],
}


def _back(c: Chrome, shows, said: str) -> None:
    """Press the back button and wait until the page there ``shows`` what it should; fail
    with ``said`` (and what the page shows) when it stays the page as it was left."""
    c.driver.back()
    try:
        c.until(lambda d: not d.execute_script(LEFT) and shows(d))
    except TimeoutException:
        kept = c.driver.execute_script(LEFT)
        raise AssertionError(
            f"{said}: {c.driver.current_url} shows {c.find('body').text[:300]!r}"
            + (" (the page as it was left, from the back/forward cache)" if kept else "")
        ) from None
    c.settle()


def test_back_to_labelx_projects_shows_the_labels_given_and_not_after_log_out(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    c = chrome
    with signed_in(c, env):
        made = project_in_page(c, PETS_VAL)
        total = made["total"]
        c.driver.refresh()
        _wait_text(c, "#projects", f"0/{total}")
        c.driver.execute_script(MARK)
        c.find("a[data-task]").click()
        c.wait_for_url(lambda url: "/tasks/" in url)
        _wait_text(c, "#item-key", "val/")
        for _ in range(2):  # a class key labels the item and goes on to the next
            shown = c.find("#item-key").text
            c.find("body").send_keys("1")
            c.until(lambda d, shown=shown: d.find_element("css selector", "#item-key").text != shown)
        _wait_text(c, "#save-state", "Saved")
        c.driver.execute_script(MARK)

        _back(
            c,
            lambda d: f"2/{total}" in d.find_element("css selector", "#projects").text,
            f"back from the task, the project list does not show its 2 labelled items (2/{total})",
        )
        c.check("newuser26-back-to-projects")

        c.driver.execute_script(MARK)
        c.find("#logout").click()
        c.wait_for_url(lambda url: url.endswith("/login"))
        _back(
            c,
            lambda d: "/login" in d.current_url,
            "back after Log out shows the signed-out user's page, not the login form",
        )
        assert "pets-val" not in c.find("body").text


def test_back_after_signing_out_of_the_dataset_browser_asks_to_sign_in(
    chrome: Chrome,  # noqa: F811
    tmp_path: Path,
) -> None:
    c = chrome
    with (
        pets_env(tmp_path, local_mode=False, in_ram=True) as env,
        browser_app(env) as app,
        serving(app) as base,
    ):
        c.visit(f"{base}/")
        token_sign_in(c, issue_token(env.catalog.store, "alice")[0])
        assert "pets" in c.find("main").text
        c.driver.execute_script(MARK)
        c.find("form.inline button").click()  # sign out
        c.wait_for_url(lambda url: "/login" in url)
        _back(
            c,
            lambda d: "/login" in d.current_url,
            "back after Sign out shows the datasets the signed-out token could read",
        )
        assert "pets" not in c.find("main").text
        c.check("newuser26-back-after-sign-out")


def test_a_label_refused_as_stale_in_a_second_tab_shows_what_the_item_holds(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    """The same task open in two tabs: the first labels an item 'cat', the second (which read it
    before) presses 'dog' on it. The second tab's save is refused (409, a newer version); the
    page showed its own 'dog' from then on, read-only ("Another user is editing this item."),
    and only a reload showed 'cat'. It now takes the item as the server has it and says so."""
    c = chrome
    with signed_in(c, env):
        made = project_in_page(c, PETS_VAL)
        task = c.driver.current_url.rstrip("/") + f"/tasks/{made['task']}"
        first = c.driver.current_window_handle
        c.driver.get(task)
        _wait_text(c, "#item-key", "val/")
        key = c.find("#item-key").text
        c.driver.switch_to.new_window("tab")
        second = c.driver.current_window_handle
        c.driver.get(task)
        _wait_text(c, "#item-key", key)

        c.driver.switch_to.window(first)
        c.find("body").send_keys("1")  # cat, then the next item
        c.until(lambda d: d.find_element("css selector", "#item-key").text != key)
        _wait_text(c, "#save-state", "Saved")

        c.driver.switch_to.window(second)
        c.find("body").send_keys("2")  # dog, on what this tab read before the first one's save
        _wait_text(c, "#save-state", "Not saved")
        c.find("body").send_keys("p")  # back to the item
        _wait_text(c, "#item-key", key)
        shown = c.find("#current").text
        assert shown == "Label: cat", (
            f"{key} shows {shown!r} after its save was refused; the server holds cat"
        )
        said = c.find("#banner").text  # still about the refused save
        assert f"Not saved: {key} changed since this page read it" in said, said
        assert "it holds cat (annotated) now, as shown; your label dog was not saved" in said, said
        assert "Another user is editing" not in said
        c.find("body").send_keys("2")  # the item is editable: dog now, on the version the page took
        c.until(lambda d: d.find_element("css selector", "#item-key").text != key)
        _wait_text(c, "#save-state", "Saved")
        items = c.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "api('GET', `/api/tasks/${arguments[0]}`).then(v => done(v.items), e => done(String(e)));",
            made["task"],
        )
        item = next(i for i in items if i["key"] == key)
        assert item["value"] == "dog", item
        refused = task.split("/labelx/")[0] + f"/labelx/api/items/{item['id']}"
        # the refused save is its one console entry; axe-core is given to the first tab only (chrome.py)
        c.check("newuser26-second-tab", axe=False, page_error=refused)
        c.driver.close()
        c.driver.switch_to.window(first)
