"""A reviewer's home card lists a project's first six tasks: with 27 it said "27 tasks" above
six rows and nothing of the rest, which read as tasks gone missing (newuser71). It now says how
many more the dashboard holds."""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import signed_in
from tests.browser.test_newuser_labelx import _wait_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SETUP = """
const done = arguments[arguments.length - 1];
api('POST', '/api/projects', {name: 'many', dataset: 'pets', task_size: 1,
    schema: {kind: 'classification', classes: ['cat', 'dog']}})
  .then(p => done(p.item_count), e => done(String(e)));
"""


def test_a_card_says_how_many_more_tasks_its_dashboard_holds(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env, "lx-more-1-login"):
        items = c.driver.execute_async_script(SETUP)
        assert isinstance(items, int) and items > 6, items
        c.visit(c.driver.current_url)
        _wait_text(c, "[data-project=many]", f"{items} tasks")
        c.check("lx-more-2-home")
        rows = c.find_all("[data-project=many] a[data-task]")
        assert len(rows) == 6
        more = c.find("[data-project=many] .more-tasks").text
        assert more == f"{items - 6} more tasks on its dashboard", more
