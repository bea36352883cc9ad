"""LabelX's annotate page says "Saved" only after a save, in headless Chromium.

It said "Saved" as it opened, before anything was changed, so a user who had changed nothing
read that something had been saved. It says nothing now until a save happened.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.test_newuser33_commit import PROJECT
from tests.browser.test_newuser_labelx import _wait_text, project_in_page, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_annotate_page_says_saved_only_after_a_save(chrome: Chrome, env: Env) -> None:  # noqa: F811
    """It said "Saved" as it opened, before anything was changed; now nothing until a save."""
    c = chrome
    with signed_in(c, env, "lx-newuser33-5-login") as base:
        made = project_in_page(c, PROJECT | {"name": "save-state"})
        c.visit(f"{base}/labelx/tasks/{made['task']}")
        _wait_text(c, "#item-key", "val/")
        assert c.find("#save-state").text == ""
        assert c.find("#save-state").get_attribute("data-state") is None
        c.check("lx-newuser33-6-opened")
        c.find("body").send_keys("2")  # a class key: labelled and saved
        _wait_text(c, "#save-state", "Saved")
        assert c.find("#save-state").get_attribute("data-state") == "saved"
