"""newuser44: LabelX's "New project" form on an empty version says what to do, in Chromium.

A project of ``empty@v2`` (its one record removed) was refused with "no records of empty@v2
match the prefix/filter; check them with `datahub ls empty@v2`": the form had no prefix or
filter, and that listing lists nothing. The message under the form now says the version holds
no records, names the commands that add some (as ``make run`` types them) and the earlier
version that holds records.
"""

from __future__ import annotations

import pytest

from datahub.catalog import Delete
from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env, jpeg, put
from tests.browser.labelx_signin import signed_in
from tests.browser.test_newuser_labelx import _wait_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CLI = ".venv/bin/datahub --home /srv/var"  # as make run sets it (datahub.demo.serve_api)


def test_the_new_project_form_on_an_empty_version_says_what_to_do(chrome: Chrome, env: Env) -> None:  # noqa: F811
    env.catalog.create_dataset("empty")
    env.catalog.commit("empty", [put(env.objects, "a.jpg", jpeg((1, 2, 3)))])
    env.catalog.commit("empty", [Delete("a.jpg")], message="emptied")
    c = chrome
    with signed_in(c, env, cli=CLI):
        _wait_text(c, "#projects", "No projects yet")
        for name, value in {"name": "nothing", "dataset": "empty", "classes": "cat, dog"}.items():
            c.find(f"#create-form [name={name}]").send_keys(value)
        c.find("#create-form button[type=submit]").click()
        _wait_text(c, "#create-msg", "holds no records")
        said = c.find("#create-msg").text
        assert said == (
            "project 'nothing' would have nothing to label: empty@v2 holds no records. Add records to "
            f"empty with {CLI} import SRC --to empty or {CLI} commit empty --changes FILE.jsonl, then "
            "create the project on the new version, or on v1, which holds 1 record (the Version field, "
            "or --version 1)"
        ), said
        codes = [e.text for e in c.find_all("#create-msg code")]  # the commands, shown as code
        assert codes == [f"{CLI} import SRC --to empty", f"{CLI} commit empty --changes FILE.jsonl"], codes
        assert "No projects yet" in c.find("#projects").text  # nothing made
        c.check("newuser44-empty-version", page_error=c.driver.current_url.rstrip("/") + "/api/projects")
        c.save_view("newuser44-empty-version-view")
