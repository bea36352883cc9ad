"""What a new user met in LabelX and the dataset browser (newuser16), in headless Chromium."""

from __future__ import annotations

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env, put
from tests.browser.labelx_signin import type_sign_in
from tests.browser.test_newuser_labelx import project_in_page, signed_in


def _console_errors(c: Chrome) -> list[dict]:
    return [e for e in c.driver.get_log("browser") if e["level"] == "SEVERE"]


def _val_project(c: Chrome, name: str, annotator: str = "admin") -> dict:
    """A cat/dog project over pets' ``val/`` records, one task for ``annotator``."""
    return project_in_page(
        c,
        {
            "name": name,
            "dataset": "pets",
            "prefix": "val/",
            "schema": {"kind": "classification", "classes": [{"name": "cat"}, {"name": "dog"}]},
            "annotators": [annotator],
        },
    )


def _all_dog_and_submitted(c: Chrome, task: int) -> list[dict]:
    """Label every item of ``task`` dog and submit it, through the signed-in page's ``api()``;
    returns the task's items as they are then."""
    items = c.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "(async () => { const v = await api('GET', `/api/tasks/${arguments[0]}`);"
        " for (const it of v.items) await api('PUT', `/api/items/${it.id}`, {version: it.version, value: 'dog'});"
        " await api('POST', `/api/tasks/${arguments[0]}/submit`);"
        " return api('GET', `/api/tasks/${arguments[0]}`); })().then(v => done(v.items), e => done(String(e)));",
        task,
    )
    assert isinstance(items, list) and all(i["status"] == "submitted" for i in items), items
    return items


def test_a_picture_that_cannot_be_shown_says_why_and_cannot_be_labelled_unseen(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    """An image that fails to decode: the annotation page showed a broken-image icon and nothing
    else (the server's reason, "not an image LabelX can show; skip the item (S)", went unread),
    and a class key labelled the picture nobody saw and moved on."""
    env.catalog.commit(
        "pets", [put(env.objects, "val/0-broken.jpg", b"not a jpeg at all")], message="a bad one"
    )
    c = chrome
    with signed_in(c, env, "newuser16-lx-login"):
        made = _val_project(c, "val-check")
        keys = [r.key for r in env.catalog.list_records("pets", made["version"], prefix="val/")]
        broken = keys.index("val/0-broken.jpg")
        c.driver.get(f"{c.driver.current_url.split('/labelx')[0]}/labelx/tasks/{made['task']}#{broken}")
        c.until(lambda d: d.find_element("css selector", "#item-key").text == "val/0-broken.jpg")
        c.until(lambda d: d.find_element("css selector", "#banner").is_displayed())
        c.screenshot("newuser16-lx-broken")
        banner = c.find("#banner").text
        assert "not an image LabelX can show" in banner and "skip the item (S)" in banner, banner
        assert not c.find("#image").is_displayed()  # no broken-image icon
        # the one console error is the picture's own 400, which the banner explains
        errors = _console_errors(c)
        assert errors and all("/image?size=preview" in e["message"] for e in errors), errors
        assert not c.axe()

        c.find("body").send_keys("2")  # a class key: refused, the item stays unlabelled and shown
        c.until(lambda d: d.find_element("css selector", "#hint").text)
        assert (
            c.find("#hint").text
            == "The picture could not be shown, so it cannot be labelled here: S skips it."
        )
        assert c.find("#item-key").text == "val/0-broken.jpg"
        assert c.find("#current").text == "Label: —"

        c.find("body").send_keys("s")  # skipping it works and moves on
        c.until(lambda d: d.find_element("css selector", "#item-key").text != "val/0-broken.jpg")
        c.until(lambda d: d.find_element("css selector", "#save-state").text == "Saved")
        assert c.find("#image").is_displayed() and not c.find("#banner").is_displayed()
        c.check("newuser16-lx-after-skip")
        task = c.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"api('GET', '/api/tasks/{made['task']}').then(v => done(v.items), e => done(String(e)));"
        )
        assert [(i["status"], i["value"]) for i in task if i["key"] == "val/0-broken.jpg"] == [
            ("skipped", None)
        ]


def test_a_review_card_whose_picture_cannot_be_shown_says_why(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    """An item labelled through the API (or on the annotation page before it refused that): its
    review card showed a broken-image icon above "dog" and Accept, as if the picture were slow."""
    env.catalog.commit(
        "pets", [put(env.objects, "val/0-broken.jpg", b"not a jpeg at all")], message="a bad one"
    )
    c = chrome
    with signed_in(c, env, "newuser16-lx-login2") as base:
        made = _val_project(c, "val-review")
        _all_dog_and_submitted(c, made["task"])
        c.driver.get(f"{base}/labelx/projects/{made['id']}/review")
        card = '.rcard[data-item="val/0-broken.jpg"]'
        c.until(lambda d: d.find_elements("css selector", f"{card} .unshown"))
        c.screenshot("newuser16-lx-review-broken")
        text = c.find(f"{card} .unshown").text
        assert text.startswith("No picture: the picture of 'val/0-broken.jpg' in project 'val-review'"), text
        assert "not an image LabelX can show" in text, text
        assert not c.find_all(f"{card} img")
        assert len(c.find_all(".rcard img")) == made["total"] - 1  # the others keep their pictures
        errors = _console_errors(c)
        assert errors and all("/image?size=preview" in e["message"] for e in errors), errors
        assert not c.axe()


def test_take_next_task_with_none_left_says_so_in_the_page_not_in_an_alert(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    """An annotator of a round-robin project (every task assigned) pressed "Take next task" on
    the home page or the dashboard: an alert() box said "project 1 has no unassigned task left".
    Then it said so in red, as a failure, with no next step: it is information now (newuser74)."""
    from labelx.auth import hash_password
    from labelx.deps import labelx_db_path
    from labelx.store import LabelStore

    c = chrome
    with signed_in(c, env, "newuser16-lx-login3") as base:
        store = LabelStore(labelx_db_path(env.config))
        try:
            store.create_user("ann", "annotator", hash_password("ann-password-1"))
        finally:
            store.close()
        made = _val_project(c, "val-rr", "ann")
        c.driver.delete_all_cookies()
        c.visit(f"{base}/labelx/login")
        type_sign_in(c, "ann", "ann-password-1")
        for page, button, out in (
            ("/labelx/", '[data-project="val-rr"] button', '[data-project="val-rr"] .take-msg'),
            (f"/labelx/projects/{made['id']}", "#take-task", "#take-msg"),
        ):
            c.driver.get(base + page)
            c.until(lambda d, b=button: d.find_elements("css selector", b))
            c.until(lambda d, b=button: d.find_element("css selector", b).is_displayed())
            c.find(button).click()
            c.until(lambda d, o=out: d.find_element("css selector", o).text)
            c.no_alert()
            assert c.find(out).text == (
                "no task left to take in val-rr: every task has its annotator. Yours to finish: "
                f"task 1 ({made['total']} items to go)"
            ), page
            assert "err" not in c.find(out).get_attribute("class").split(), page
            color = c.driver.execute_script("return getComputedStyle(arguments[0]).color", c.find(out))
            assert color not in ("rgb(201, 42, 42)", "rgba(201, 42, 42, 1)"), (page, color)  # --bad
            assert c.driver.current_url == base + page
            c.screenshot("newuser16-lx-take-" + ("home" if page.endswith("/") else "dashboard"))
            errors = _console_errors(c)  # the take-task request's own 404, which the page explains
            assert all("/take-task" in e["message"] for e in errors), errors
            assert not c.axe()


def test_a_card_another_reviewer_decided_first_says_so_in_the_page_not_in_an_alert(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    """Two reviewers on one queue: the second to press Accept on a card got an alert() box
    ("item 3 cannot be reviewed now …"), which stopped the page until dismissed."""
    c = chrome
    with signed_in(c, env, "newuser16-lx-login4") as base:
        made = _val_project(c, "val-two")
        items = _all_dog_and_submitted(c, made["task"])
        first = items[0]
        c.visit(f"{base}/labelx/projects/{made['id']}/review")
        card = f'.rcard[data-item="{first["key"]}"]'
        c.until(lambda d: d.find_elements("css selector", card))
        other = c.driver.execute_async_script(  # another reviewer accepts it first
            "const done = arguments[arguments.length - 1];"
            "api('POST', `/api/items/${arguments[0]}/review`, {version: arguments[1], accept: true})"
            ".then(r => done(r.status), e => done(String(e)));",
            first["id"],
            first["version"],
        )
        assert other == "accepted", other
        c.find(f"{card} button.good").click()
        c.until(lambda d: d.find_element("css selector", "#review-msg").text)
        c.no_alert()
        assert c.find("#review-msg").text.startswith(
            f"{first['key']}: item {first['id']} cannot be reviewed now"
        )
        c.until(lambda d: not d.find_elements("css selector", card))  # the queue reloaded
        assert c.find("#count").text == f"{len(items) - 1} waiting"
        c.screenshot("newuser16-lx-review-conflict")
        errors = _console_errors(c)  # the review request's own 409, which the page explains
        assert all("/review" in e["message"] for e in errors), errors
        assert not c.axe()
