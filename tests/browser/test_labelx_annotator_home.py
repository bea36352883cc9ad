"""What an annotator's home page says of a project whose tasks are taken one at a time.

The annotator is sent only their own tasks, so the card said "4 items · 0 tasks" beside
"Take next task": a project with nothing to do, it read. It now says whose tasks it counts.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import sign_out_and_in, signed_in
from tests.browser.test_newuser_labelx import _wait_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SETUP = """
const done = arguments[arguments.length - 1];
api('POST', '/api/users', {name: 'alice', role: 'annotator', password: 'alice-password'})
  .then(() => api('POST', '/api/projects', {name: 'claims', dataset: 'pets', prefix: 'val/', assign: 'claim',
    annotators: ['alice'], schema: {kind: 'classification', classes: ['cat', 'dog']}}))
  .then(p => done(p.id), e => done(String(e)));
"""


def test_an_annotator_sees_whose_tasks_the_card_counts(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-annot-1-login") as base:
        assert isinstance(c.driver.execute_async_script(SETUP), int)
        sign_out_and_in(c, "alice", "alice-password")
        _wait_text(c, "[data-project=claims]", "4 items")
        c.check("lx-annot-2-home")
        counts = c.find("[data-project=claims] div.muted").text
        assert counts.endswith(" · 4 items · no task of yours yet"), counts  # was "· 0 tasks"
        take = [b for b in c.find_all("[data-project=claims] button") if b.text == "Take next task"]
        take[0].click()
        c.wait_for_url(lambda url: "/tasks/" in url)
        c.visit(f"{base}/labelx/")
        c.until(lambda d: d.find_elements("css selector", "[data-project=claims] a[data-task]"))
        assert c.find("[data-project=claims] div.muted").text.endswith(" · 4 items · 1 task of yours")
