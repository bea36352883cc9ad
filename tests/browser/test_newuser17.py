"""What a new user met in LabelX (newuser17), in headless Chromium: the login form that forgot
the user name after a wrong password, and the dashboard's assignee dropdown whose refusal was
an ``alert()`` box with the message's backticks as literal text."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from datahub.cli.serve_cmd import build_app
from datahub.demo import labelx_admin
from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env, serving
from tests.browser.labelx_signin import drop_labelx_session
from tests.browser.test_newuser_labelx import project_in_page, signed_in


@contextmanager
def _labelx(env: Env) -> Iterator[tuple[str, str]]:
    """``make run``'s LabelX over ``env``: yields its URL and the demo admin's password."""
    env.config.home_path.mkdir(parents=True, exist_ok=True)
    password = labelx_admin(env.config).read_text().strip()
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    try:
        with serving(app) as base:
            yield f"{base}/labelx", password
    finally:
        cache.close()


def _cat_dog_project(c: Chrome, name: str, prefix: str) -> dict:
    """A cat/dog project over pets' records under ``prefix``, one task for the admin."""
    schema = {"kind": "classification", "classes": [{"name": "cat"}, {"name": "dog"}]}
    body = {"name": name, "dataset": "pets", "prefix": prefix, "schema": schema, "annotators": ["admin"]}
    return project_in_page(c, body)


def test_a_wrong_password_keeps_the_user_name_and_asks_only_for_the_password(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    c = chrome
    with _labelx(env) as (labelx, password):
        c.visit(f"{labelx}/login")
        c.find("#name").send_keys("admin")
        c.find("#password").send_keys("not the password")
        c.find("#login").click()
        c.wait_for_url(lambda url: url.endswith("/login?error=wrong"))
        c.check("newuser17-login-wrong")
        said = c.driver.execute_script(
            "return getComputedStyle(document.querySelector('.error'), '::after').content"
        )
        assert said == '"Wrong user name or password."', said
        assert c.find("#name").get_attribute("value") == "admin"  # it was empty: typed again
        assert c.find("#password").get_attribute("value") == ""
        assert c.driver.switch_to.active_element == c.find("#password")  # the one left to type

        c.find("#password").send_keys(password)
        c.find("#login").click()
        c.wait_for_url(lambda url: not url.endswith("/login?error=wrong"))
        assert c.driver.current_url == f"{labelx}/"
        # a success forgets it: the next person at this browser finds an empty form
        drop_labelx_session(c)
        c.visit(f"{labelx}/login")
        assert c.find("#name").get_attribute("value") == ""


def test_a_refused_assignee_is_said_in_the_page_with_its_command_as_code(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    c = chrome
    with signed_in(c, env, "newuser17-lx-login") as base:
        made = _cat_dog_project(c, "val-assign", "val/")
        c.driver.get(f"{base}/labelx/projects/{made['id']}")
        c.until(lambda d: d.find_elements("css selector", "#tasks select"))
        c.settle()
        assert not c.find("#assign-msg").is_displayed()  # nothing to say yet: it takes no room
        # an account gone since the page was loaded: the server refuses the name
        c.driver.execute_script(
            "const s = document.querySelector('#tasks select');"
            "s.append(new Option('ghost', 'ghost')); s.value = 'ghost';"
            "s.dispatchEvent(new Event('change'));"
        )
        c.until(lambda d: d.find_element("css selector", "#assign-msg").text)
        page = f"{base}/labelx/api/tasks/{made['task']}/assignee"
        c.check("newuser17-lx-assign-refused", page_error=page)  # no alert(); its 404 is the one entry
        msg = c.find("#assign-msg")
        assert msg.text.startswith("Task 1: no user 'ghost'; create it first"), msg.text
        assert "`" not in msg.text
        assert c.find("#assign-msg code").text == "datahub labelx create-user ghost --role annotator"
        # the dropdown shows the assignee the task still has (read in one script: the table is
        # drawn anew by each refresh), and a later success clears the line
        assignee = "return document.querySelector('#tasks select').value"
        c.until(lambda d: d.execute_script(assignee) == "admin")
        c.driver.execute_script(
            "const s = document.querySelector('#tasks select'); s.value = '';"
            "s.dispatchEvent(new Event('change'));"
        )
        c.until(lambda d: not d.find_element("css selector", "#assign-msg").text)
        c.driver.refresh()
        c.until(lambda d: d.find_elements("css selector", "#tasks select"))
        assert c.driver.execute_script(assignee) == ""  # the server has it unassigned
        c.check()


def test_a_folder_that_holds_nothing_says_where_records_are(
    chrome: Chrome,  # noqa: F811
    server: str,
) -> None:
    """A mistyped folder (``?prefix=train/cta/``, as a hand-edited address or an old link
    gives) showed only "No record here.", where ``datahub ls`` names what is there."""
    c = chrome
    c.visit(f"{server}/datasets/pets/versions/2?prefix=train/cta/", "newuser17-empty-folder")
    said = c.find("#no-records")
    assert said.text == "No record of pets@v2 is under train/cta/. train/ holds: cat/, dog/."
    assert said.find_element("css selector", "code").text == "train/cta/"
    c.find("#no-records a[href*='prefix=train%2Fdog%2F']").click()
    c.wait_for_url(lambda url: "prefix=train%2Fdog%2F" in url)
    assert len(c.find_all("#entries .entry.file")) == 10

    # nothing above but the top level; the filter goes along to where the link leads, and the
    # top level is listed with it (it listed README.txt and val/, which it does not match: newuser43)
    c.visit(f"{server}/datasets/pets/versions/2?prefix=trian/&filter=labels.class%3Dcat")
    assert (
        c.find("#no-records").text
        == "No record of pets@v2 is under trian/. The top level holds (matching labels.class=cat): train/."
    )
    c.find("#nearest").click()
    c.wait_for_url(lambda url: "prefix=&" in url)
    assert c.find("#filter").get_attribute("value") == "labels.class=cat"
    assert [e.text for e in c.find_all("#entries .entry-name")] == ["train/"]

    # a folder that holds records none of which match: the filter's message, and since newuser26
    # the labels those records have
    c.visit(f"{server}/datasets/pets/versions/2?prefix=val/&filter=labels.class%3Dcat")
    assert c.find("#no-records").text.startswith(
        "No record matches labels.class=cat here. The labels of the records here: labels.class: bird, "
    )
    assert not c.find_all("#nearest")


def test_a_refused_api_token_is_said_on_the_admin_page(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    """ "Create token for me" had no error handling: a refusal (here an expired page's CSRF
    token) was an unhandled rejection in the console and the page said nothing."""
    c = chrome
    with signed_in(c, env, "newuser17-lx-login-admin") as base:
        c.visit(f"{base}/labelx/admin")
        c.find("#token-form [name=description]").send_keys("nightly export")
        password = labelx_admin(env.config).read_text().strip()  # asked again (caller37)
        c.find("#token-form [name=password]").send_keys(password)
        c.driver.execute_script("BOOT.csrf = 'from a page loaded before a new login';")
        c.find("#token-form button").click()
        c.until(lambda d: d.find_element("css selector", "#token-msg").text)
        c.check("newuser17-lx-token-refused", page_error=f"{base}/labelx/api/tokens")
        assert "CSRF" in c.find("#token-msg").text, c.find("#token-msg").text
        assert not c.find("#token").is_displayed()

        c.driver.refresh()  # the page's own token again: the token is shown, the line is empty
        c.settle()
        c.find("#token-form [name=password]").send_keys(password)
        c.find("#token-form button").click()
        c.until(lambda d: d.find_element("css selector", "#token").text.startswith("lx_"))
        assert c.find("#token-msg").text == ""
        c.check()


def _scroll_and_current(c: Chrome) -> dict:
    return c.driver.execute_script(
        "const li = document.querySelector('#items li.cur'), side = document.querySelector('.side');"
        "const r = li.getBoundingClientRect(), s = side.getBoundingClientRect();"
        "return {y: window.scrollY, key: document.querySelector('#item-key').textContent,"
        " inside: r.top >= s.top - 1 && r.bottom <= s.bottom + 1};"
    )


def test_labelling_on_a_phone_keeps_the_picture_in_view(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    """On a phone the side panel sits below the picture; keeping the current item of its list
    in view scrolled the window down to the list at every class key, away from the picture."""
    c = chrome
    with signed_in(c, env, "newuser17-lx-login-phone") as base:
        made = _cat_dog_project(c, "train-phone", "train/")
        assert made["total"] == 20
        task = f"{base}/labelx/tasks/{made['task']}"
        c.driver.set_window_size(400, 900)
        c.driver.get(task)
        c.until(lambda d: d.find_element("css selector", "#item-key").text)
        c.settle()
        for n in range(3):
            shown = c.find("#item-key").text
            c.find("body").send_keys("1")
            c.until(lambda d, shown=shown: d.find_element("css selector", "#item-key").text != shown)
            state = _scroll_and_current(c)
            assert state["y"] == 0, (n, state)  # the next picture is where the last one was
        c.save_view("newuser17-lx-phone")

        # beside the picture, the panel scrolls itself to the current item, and only it
        c.driver.set_window_size(1360, 900)
        c.driver.get("about:blank")  # a load of its own: the page reads the item from its hash
        c.driver.get(f"{task}#19")
        c.until(lambda d: d.find_element("css selector", "#item-key").text == "train/dog/009.jpg")
        c.settle()
        state = _scroll_and_current(c)
        assert state["inside"] and state["y"] == 0, state
        c.check("newuser17-lx-last-item")
