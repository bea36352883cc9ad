"""What a new user of ``make run`` meets in LabelX, page by page, in headless Chromium.

The demo's first admin (``datahub.demo.labelx_admin``: a random password in a 0600 file the
login page names) signs in, creates a project through the home page's form, labels its task
by keyboard, submits it, accepts it on the review page and commits it from the dashboard.
Every page on the way is held to the dataset browser's bar (``Chrome.check``): no alert, no
console error, no serious or critical axe-core violation.
"""

from __future__ import annotations

from datahub.catalog import Patch
from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import signed_in


def _wait_text(c: Chrome, css: str, text: str) -> None:
    c.until(lambda d: text in d.find_element("css selector", css).text)
    c.settle()


def project_in_page(c: Chrome, project: dict) -> dict:
    """Create ``project`` through the page's own ``api()`` (the signed-in session), and
    return its id, the version it labels, and its first task's id and item count."""
    made = c.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "api('POST', '/api/projects', arguments[0]).then(p => api('GET', `/api/projects/${p.id}/tasks`)"
        ".then(t => done({id: p.id, version: p.version, task: t[0].id, total: t[0].total})),"
        " e => done(String(e)));",
        project,
    )
    assert isinstance(made, dict), made
    return made


def label_by_key(c: Chrome, key: str, items: int) -> None:
    """Press a class key on ``items`` items in turn (a class key sets the label and moves on),
    then wait until the task can be submitted."""
    for _ in range(items):
        shown = c.find("#item-key").text
        c.find("body").send_keys(key)
        c.until(
            lambda d, shown=shown: (
                d.find_element("css selector", "#item-key").text != shown
                or not d.find_element("css selector", "#submit").get_attribute("disabled")
            )
        )
    c.until(lambda d: not d.find_element("css selector", "#submit").get_attribute("disabled"))


def test_the_demo_admin_labels_reviews_and_commits_on_pages_that_pass_the_checks(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    c = chrome
    with signed_in(c, env, "newuser-lx-1-login"):
        _wait_text(c, "#projects", "No projects yet")
        c.check("newuser-lx-2-home")

        form = {"name": "pets-val", "dataset": "pets", "prefix": "val/", "classes": "cat, dog"}
        for name, value in form.items():
            c.find(f"#create-form [name={name}]").send_keys(value)
        c.find("#create-form [name=annotators]").send_keys("admin")
        c.find("#create-form button[type=submit]").click()
        _wait_text(c, "#create-msg", "Created pets-val with")
        n = len(list(env.catalog.list_records("pets", 2, prefix="val/")))
        _wait_text(c, "#projects", "pets-val")
        c.check("newuser-lx-3-created")
        dashboard = c.find('#projects a.btn[href*="/projects/"]:not([href$="/review"])').get_attribute("href")

        c.find("a[data-task]").click()
        c.wait_for_url(lambda url: "/tasks/" in url)
        _wait_text(c, "#item-key", "val/")
        c.check("newuser-lx-4-annotate")
        items = len(c.find_all("#items li"))
        assert items == n
        label_by_key(c, "2", items)
        _wait_text(c, "#save-state", "Saved")
        c.check("newuser-lx-5-labelled")
        c.find("#submit").click()
        _wait_text(c, "#item-status", "submitted")
        c.check("newuser-lx-6-submitted")

        c.visit(f"{dashboard}/review", "newuser-lx-7-review")
        _wait_text(c, "#count", f"{n} waiting")
        c.check("newuser-lx-7-review")
        c.find("#accept-all").click()
        c.find("#accept-all-yes").click()
        c.until(lambda d: len(d.find_elements("css selector", ".rcard.accepted")) == n)
        _wait_text(c, "#count", "0 waiting")
        assert c.find("#accept-all").get_attribute("disabled")  # nothing left: not a button that does nothing
        c.check("newuser-lx-8-accepted")

        c.driver.get(dashboard)
        c.until(lambda d: d.find_elements("css selector", "#tasks select"))
        c.settle()
        c.check("newuser-lx-9-dashboard")
        # a command is shown as code, not as markdown's backticks
        assert (
            c.find("#suggestions code").text
            == "datahub labelx preannotate pets-val --predictions preds.jsonl"
        )
        assert "`" not in c.find("#suggestions").text
        # someone relabels one of these records at the head meanwhile: the commit is refused,
        # naming it, until the admin ticks "commit over" on purpose
        env.catalog.commit("pets", [Patch("val/001.jpg", labels={"class": "cat"})], message="cli relabel")
        c.find("#commit-btn").click()
        _wait_text(c, "#commit-msg", "1 accepted label(s) of project 'pets-val'")
        assert "val/001.jpg: 'bird' -> 'cat'" in c.find("#commit-msg").text
        refused = dashboard.replace("/labelx/projects/", "/labelx/api/projects/") + "/commit"
        c.check("newuser-lx-10-refused", page_error=refused)  # its 409 is the one console entry
        c.find("#commit-overwrite").click()
        c.find("#commit-btn").click()
        _wait_text(c, "#commit-msg", "pets@v4")
        c.check("newuser-lx-10-committed")
    assert env.catalog.store.head("pets") == 4
    committed = [r.labels.get("class") for r in env.catalog.list_records("pets", 4, prefix="val/")]
    assert committed == ["dog"] * n


def test_a_page_labelx_cannot_show_is_a_page_that_says_why(chrome: Chrome, env: Env) -> None:  # noqa: F811
    """A link to a project that is gone (or a task of someone else's) opened in the browser:
    an error page in LabelX's look with the reason, not the JSON API's error body."""
    c = chrome
    with signed_in(c, env, "newuser-lx-20-login") as base:
        c.visit(f"{base}/labelx/projects/999", "newuser-lx-21-no-project", error_page=True)
        assert c.find(".error-message").text == "no project with id 999"
        assert c.find(".error-message").get_attribute("data-code") == "not_found"
        assert c.find("#projects-link").get_attribute("href") == f"{base}/labelx/"
        c.visit(f"{base}/labelx/tasks/999", "newuser-lx-22-no-task", error_page=True)
        assert "999" in c.find(".error-message").text
        # a mistyped address, and a project id that is not a number: pages too (they were the
        # JSON API's 404 and 400 bodies, shown raw)
        c.visit(f"{base}/labelx/projets", "newuser-lx-23-no-page", error_page=True)
        assert c.find(".error-message").text == "no LabelX page at /labelx/projets: start from your projects"
        assert c.find(".error-message").get_attribute("data-code") == "not_found"
        c.visit(f"{base}/labelx/projects/abc", "newuser-lx-24-bad-id", error_page=True)
        assert c.find(".error-message").get_attribute("data-code") == "invalid_input"
        assert "project_id" in c.find(".error-message").text
        # the JSON API keeps its JSON, whoever asks
        c.driver.get(f"{base}/labelx/api/projects/999")
        assert '"code":"not_found"' in c.find("body").text


def test_labelx_pages_fit_a_phone(chrome: Chrome, env: Env) -> None:  # noqa: F811
    """At 390 px the top bar's "Log out" ran off the bar onto the page (axe: color-contrast),
    the project form was cut off at its second column, and on a task the side panel covered
    the image, fitted to a few pixels beside it. Every page LabelX's admin walks now fits:
    the usual checks, no sideways scroll, and the image to label is in view and large."""
    c = chrome
    with signed_in(c, env, "newuser-lx-30-login") as base:
        c.driver.set_window_size(390, 844)
        c.visit(f"{base}/labelx/")
        for name, value in {
            "name": "phone",
            "dataset": "pets",
            "prefix": "val/",
            "classes": "cat, dog",
        }.items():
            c.find(f"#create-form [name={name}]").send_keys(value)
        c.find("#create-form [name=annotators]").send_keys("admin")
        c.find("#create-form button[type=submit]").click()
        _wait_text(c, "#create-msg", "Created phone with")
        # the message comes first, then the list is fetched again: wait for the new card
        c.until(lambda d: d.find_elements("css selector", "[data-project=phone] a[data-task]"))
        task = c.find("[data-project=phone] a[data-task]").get_attribute("href")
        project = task.rsplit("/tasks/", 1)[0] + "/projects/1"
        for name, url in {
            "home": f"{base}/labelx/",
            "task": task,
            "dashboard": project,
            "review": f"{project}/review",
            "admin": f"{base}/labelx/admin",
        }.items():
            c.visit(url)
            if name == "task":
                _wait_text(c, "#item-key", "val/")
                c.until(lambda d: d.find_element("id", "image").size["width"] > 1)
            c.save_view(f"newuser-lx-phone-{name}")
            c.check()
            wide = c.driver.execute_script(
                "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert wide[0] <= wide[1], f"{url}: the page scrolls sideways ({wide[0]} px in {wide[1]})"
        c.driver.get(task)
        _wait_text(c, "#item-key", "val/")
        c.until(lambda d: d.find_element("id", "image").size["width"] >= 250)
        on_top = c.driver.execute_script(
            "const r = document.getElementById('image').getBoundingClientRect();"
            "const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);"
            "return !!hit && document.getElementById('frame').contains(hit);"
        )
        assert on_top, "the image to label is covered"
