"""What newuser24 met walking ``make run``'s LabelX in headless Chromium.

* The "New project" form's filter placeholder read ``labels.class?  meta.split=train``; typed
  so, it made a project of every record with a class, whatever its split (the filter dropped
  everything after ``?``, silently). It is refused now, naming the comma form.
* "Next →" (and N, →) on a task's last item, "← Prev" (P, ←) on its first, did nothing at
  all: a dead button. The bar now says it is the last (or first) item, and what to do.
* The dashboard's "run datahub labelx preannotate …" named a bare ``datahub``, which is not
  on a ``make run`` user's PATH; it names the command ``make run`` sets, as the dataset
  browser's pages do.
"""

from __future__ import annotations

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import sign_out_and_in, signed_in
from tests.browser.test_newuser_labelx import _wait_text, label_by_key

CLI = ".venv/bin/datahub --home /srv/var"  # as make run sets it (datahub.demo.serve_api)


def test_a_new_users_labelx_walk(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, cli=CLI):
        _wait_text(c, "#projects", "No projects yet")
        placeholder = c.find("#create-form [name=filter]").get_attribute("placeholder")
        assert placeholder == "labels.class?, meta.split=train"
        form = {"name": "pets-val", "dataset": "pets", "classes": "cat, dog", "annotators": "admin"}
        for name, value in form.items():
            c.find(f"#create-form [name={name}]").send_keys(value)
        c.find("#create-form [name=filter]").send_keys("labels.class? meta.split=val")  # as it read
        c.find("#create-form button[type=submit]").click()
        _wait_text(c, "#create-msg", "takes no value")
        assert "write labels.class?,meta.split=val" in c.find("#create-msg").text
        assert "No projects yet" in c.find("#projects").text  # nothing made
        c.check("newuser24-refused-filter", page_error=c.driver.current_url.rstrip("/") + "/api/projects")

        field = c.find("#create-form [name=filter]")
        field.clear()
        field.send_keys("labels.class?, meta.split=val")
        c.find("#create-form button[type=submit]").click()
        _wait_text(
            c, "#create-msg", "Created pets-val with 2 items"
        )  # val/001, val/002 (val/000: split test at v2)
        _wait_text(c, "#projects", "pets-val")
        dashboard = c.find('#projects a.btn[href*="/projects/"]:not([href$="/review"])').get_attribute("href")

        c.find("a[data-task]").click()
        c.wait_for_url(lambda url: "/tasks/" in url)
        _wait_text(c, "#item-key", "val/")
        c.find("body").send_keys("p")  # on the first item
        _wait_text(c, "#hint", "This is the task's first item.")
        items = len(c.find_all("#items li"))
        label_by_key(c, "1", items)  # each labelled cat; the last one stays shown
        last = c.find("#item-key").text
        c.find("#next").click()
        _wait_text(
            c, "#hint", "This is the task's last item: Submit for review sends the task to a reviewer."
        )
        assert c.find("#item-key").text == last
        c.check("newuser24-last-item")

        c.driver.get(dashboard)
        c.until(lambda d: d.find_elements("css selector", "#suggestions code"))
        c.settle()
        assert (
            c.find("#suggestions code").text == f"{CLI} labelx preannotate pets-val --predictions preds.jsonl"
        )
        c.check("newuser24-dashboard")


def test_copy_buttons_work_where_the_page_has_no_clipboard_api(chrome: Chrome, server: str) -> None:  # noqa: F811
    """Served over plain http to another machine (``datahub serve --host 0.0.0.0``), a page is
    not a secure context and has no ``navigator.clipboard``: the snippets' Copy buttons did
    nothing at all. Now the snippet is selected and copied the old way (or the button says to
    press Ctrl+C). Chromium on 127.0.0.1 has the API, so the test takes it away first."""
    c = chrome
    c.visit(f"{server}/datasets/pets/versions/1")
    c.driver.execute_script("Object.defineProperty(navigator, 'clipboard', {value: undefined})")
    for button in c.find_all("button.copy"):
        source = c.find("#" + button.get_attribute("data-copy"))
        button.click()
        c.until(lambda d, b=button: b.text in ("Copied", "Press Ctrl+C"))
        selected = c.driver.execute_script("return window.getSelection().toString()")
        assert selected.strip() == source.get_attribute("textContent").strip()
    c.check("newuser24-copied")


def test_an_annotator_in_no_project_is_told_how_one_gets_in(chrome: Chrome, env: Env) -> None:  # noqa: F811
    """A user the admin made after the project (as newuser24 did, on "Users & tokens") saw
    only "No projects assigned to you yet", with nothing saying how that changes."""
    c = chrome
    with signed_in(c, env, cli=CLI):
        made = c.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "api('POST', '/api/users', {name: 'alice', role: 'annotator', password: 'alice-password'})"
            ".then(() => done('ok'), e => done(String(e)));"
        )
        assert made == "ok", made
        sign_out_and_in(c, "alice", "alice-password")
        _wait_text(c, "#projects", "No projects assigned to you yet")
        assert "assigns you one of its tasks on its dashboard" in c.find("#projects").text
        c.check("newuser24-annotator-home")
