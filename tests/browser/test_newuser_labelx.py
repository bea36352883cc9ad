"""What a new user of ``make run`` meets in LabelX, page by page, in headless Chromium.

The demo's first admin (``datahub.demo.labelx_admin``: a random password in a 0600 file the
login page names) signs in, creates a project through the home page's form, labels its task
by keyboard, submits it, accepts it on the review page and commits it from the dashboard.
Every page on the way is held to the dataset browser's bar (``Chrome.check``): no alert, no
console error, no serious or critical axe-core violation.
"""

from __future__ import annotations

from selenium.webdriver.support.ui import WebDriverWait

from datahub.cli.serve_cmd import build_app
from datahub.demo import labelx_admin
from tests.browser.chrome import WAIT, Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env, serving


def _wait_text(c: Chrome, css: str, text: str) -> None:
    WebDriverWait(c.driver, WAIT).until(lambda d: text in d.find_element("css selector", css).text)
    c.settle()


def test_the_demo_admin_labels_reviews_and_commits_on_pages_that_pass_the_checks(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    c = chrome
    env.config.home_path.mkdir(parents=True, exist_ok=True)  # make run's "prepare" step
    password = labelx_admin(env.config).read_text().strip()  # as make run makes it
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    try:
        with serving(app) as base:
            c.visit(f"{base}/labelx/login", "newuser-lx-1-login")
            assert "labelx-admin-password" in c.find("#demo-password").text
            c.find("#name").send_keys("admin")
            c.find("#password").send_keys(password)
            c.find("#login").click()
            c.wait_for_url(lambda url: not url.endswith("/login"))
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
            dashboard = c.find('#projects a.btn[href*="/projects/"]:not([href$="/review"])').get_attribute(
                "href"
            )

            c.find("a[data-task]").click()
            c.wait_for_url(lambda url: "/tasks/" in url)
            _wait_text(c, "#item-key", "val/")
            c.check("newuser-lx-4-annotate")
            items = len(c.find_all("#items li"))
            assert items == n
            for _ in range(items):  # a class key sets the label and moves on
                shown = c.find("#item-key").text
                c.find("body").send_keys("2")
                WebDriverWait(c.driver, WAIT).until(
                    lambda d, shown=shown: (
                        d.find_element("css selector", "#item-key").text != shown
                        or not d.find_element("css selector", "#submit").get_attribute("disabled")
                    )
                )
            WebDriverWait(c.driver, WAIT).until(
                lambda d: not d.find_element("css selector", "#submit").get_attribute("disabled")
            )
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
            WebDriverWait(c.driver, WAIT).until(
                lambda d: len(d.find_elements("css selector", ".rcard.accepted")) == n
            )
            c.check("newuser-lx-8-accepted")

            c.driver.get(dashboard)
            WebDriverWait(c.driver, WAIT).until(lambda d: d.find_elements("css selector", "#tasks select"))
            c.settle()
            c.check("newuser-lx-9-dashboard")
            c.find("#commit-btn").click()
            _wait_text(c, "#commit-msg", "pets@v3")
            c.check("newuser-lx-10-committed")
    finally:
        cache.close()
    assert env.catalog.store.head("pets") == 3
    committed = [r.labels.get("class") for r in env.catalog.list_records("pets", 3, prefix="val/")]
    assert committed == ["dog"] * n
