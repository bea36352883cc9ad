"""LabelX shows a record's label as the dataset has it, also one that is not a project class.

``pets``' ``val/`` records say ``bird``; a project of classes cat and dog showed "Label: —"
and no "In pets@v2: bird" for them, so the annotator never learnt what a picked class would
replace at commit. Now the annotation page says it, marked as not one of the project's
classes and what happens to it (in the notice colour: it was red, as an error, newuser73), and
the review card says what accepting replaces; once committed, the page names the version holding it.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import EVIL, EVIL_KEY, Env
from tests.browser.test_newuser_labelx import _wait_text, label_by_key, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = {
    "name": "birds-as-pets",
    "dataset": "pets",
    "prefix": "val/",
    "annotators": ["admin"],
    "schema": {"kind": "classification", "classes": ["cat", "dog"]},
}


def test_a_label_that_is_not_a_class_is_shown_and_what_a_commit_does_to_it(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-foreign-1-login") as base:
        made = project_in_page(c, PROJECT)
        pid, version, task, total = made["id"], made["version"], made["task"], made["total"]
        c.visit(f"{base}/labelx/tasks/{task}")
        _wait_text(c, "#existing", f"In pets@v{version}: bird (not one of this project's classes)")
        assert "Kept unless you pick a class" in c.find("#existing").text
        assert c.find("#existing").is_displayed()
        # a notice of what a commit does, styled as one (--warn), not red as an error (newuser73)
        color = c.find("#existing").value_of_css_property("color")
        assert color in ("rgba(163, 78, 0, 1)", "rgb(163, 78, 0)"), color
        assert c.find("#current").text == "Label: —"  # no class fits: nothing is preset
        c.check("lx-foreign-2-annotate")

        label_by_key(c, "2", total)
        _wait_text(c, "#save-state", "Saved")
        c.find("#submit").click()
        _wait_text(c, "#item-status", "submitted")
        # sent: no class can be picked here any more, and the note no longer says to (newuser73)
        _wait_text(c, "#existing", "the label sent for review replaces it when the labels are committed")
        assert "unless you pick a class" not in c.find("#existing").text
        c.visit(f"{base}/labelx/projects/{pid}/review")
        _wait_text(c, "#count", f"{total} waiting")
        was = {
            n.get_attribute("data-item"): n.find_element("css selector", ".was").text
            for n in c.find_all(".rcard")
        }
        tail = " (not one of this project's classes); accepting replaces it at commit"
        # the hostile label of the fixture's hostile record is shown as text, like the others
        assert was == {key: f"was: {EVIL if key == EVIL_KEY else 'bird'}{tail}" for key in was}
        assert len(was) == total and EVIL_KEY in was
        c.check("lx-foreign-3-review")

        # accepted, the dashboard says what the commit does to those labels before it is made
        c.find("#accept-all").click()
        c.find("#accept-all-yes").click()
        _wait_text(c, "#count", "0 waiting")
        c.visit(f"{base}/labelx/projects/{pid}")
        _wait_text(
            c, "#commit-unfit", f"The next commit replaces {total} labels of pets@v{version} that are not"
        )
        c.check("lx-foreign-4-dashboard")
        c.visit(f"{base}/labelx/tasks/{task}")
        _wait_text(c, "#existing", "the label accepted replaces it when the labels are committed")

        # committed: it still said the label "replaces it when the labels are committed" (newuser74)
        made_seq = c.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"api('POST', '/api/projects/{pid}/commit', {{}}).then(v => done(v.seq), e => done(String(e)));"
        )
        assert isinstance(made_seq, int), made_seq
        c.visit(f"{base}/labelx/tasks/{task}")
        _wait_text(c, "#existing", f"; the label accepted is committed: pets@v{made_seq} holds it.")
        assert "when the labels are committed" not in c.find("#existing").text
