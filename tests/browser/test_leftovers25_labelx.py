"""What an annotator meets in LabelX says what they can do (leftovers25): the dashboard told
them to run ``labelx preannotate``, an admin's command, and the 403 page of another
annotator's task said only "assigned to someone else"."""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import signed_in, type_sign_in
from tests.browser.test_newuser_labelx import project_in_page

pytestmark = [pytest.mark.browser]

CLI = "./.venv/bin/datahub --home var"


def test_an_annotator_is_told_what_they_can_do(chrome: Chrome, env: Env) -> None:  # noqa: F811
    from labelx.auth import hash_password
    from labelx.deps import labelx_db_path
    from labelx.store import LabelStore

    c = chrome
    with signed_in(c, env, "lo25-lx-login", cli=CLI) as base:
        store = LabelStore(labelx_db_path(env.config))
        try:
            for name in ("ann", "bob"):
                store.create_user(name, "annotator", hash_password(f"{name}-password-1"))
            schema = {"kind": "classification", "classes": [{"name": "cat"}, {"name": "dog"}]}
            body = {"name": "val-two", "dataset": "pets", "prefix": "val/", "schema": schema,
                    "annotators": ["ann", "bob"], "task_size": 1}  # fmt: skip
            made = project_in_page(c, body)
            tasks = store.list_tasks(made["id"], assignee=None)
            bobs = next(t["id"] for t in tasks if t["assignee"] == "bob")
        finally:
            store.close()
        # the admin's dashboard names the command, as before
        c.driver.get(f"{base}/labelx/projects/{made['id']}")
        c.until(lambda d: d.find_element("css selector", "#suggestions").text)
        assert f"{CLI} labelx preannotate val-two --predictions preds.jsonl" in c.find("#suggestions").text

        c.driver.delete_all_cookies()
        c.visit(f"{base}/labelx/login")
        type_sign_in(c, "ann", "ann-password-1")
        c.driver.get(f"{base}/labelx/projects/{made['id']}")
        c.until(lambda d: d.find_element("css selector", "#suggestions").text)
        said = c.find("#suggestions").text
        assert "preannotate val-two" not in said and CLI not in said, said
        assert "an admin attaches a model's predictions to this project" in said, said
        c.screenshot("lo25-lx-annotator-dashboard")

        c.visit(f"{base}/labelx/tasks/{bobs}", "lo25-lx-bobs-task", error_page=True)
        message = c.find(".error-message")
        assert message.get_attribute("data-code") == "access_denied", message.text
        assert message.text == (
            f"task {bobs} of val-two is assigned to bob, and only its annotator (or an admin) labels "
            "it: open your own tasks from the project's page (Projects, then val-two), or ask an "
            "admin to assign it to you"
        )
