"""caller34: in local mode, a page another program of this machine serves cannot commit.

Local mode answers the programs of this machine as its global admin, and refused web pages by
their ``Origin``, but took any loopback origin on any port for one of those programs. A page on
another port of 127.0.0.1 (a notebook server rendering a downloaded HTML file, ``python -m
http.server`` in a downloads folder, any dev server) is a web page all the same: its script
sent a ``text/plain`` POST (no preflight) to the API, and the person's browser committed a
record into their dataset. The API answers no CORS preflight, so no page of another origin
could use it for anything but such blind writes. Driven for real: headless Chromium, the page
served by another server on another port, ``make run``'s local mode.
"""

from __future__ import annotations

import json

from datahub.cli.serve_cmd import build_app
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env, serving
from tests.browser.test_caller34_login_csrf import attacker_site


def blind_commit(target: str) -> str:
    """The page: a ``no-cors`` POST of ``text/plain`` (what any page may send without asking),
    then its title says it was sent."""
    body = json.dumps(
        {
            "message": "from a page on another port",
            "changes": [
                {
                    "op": "put",
                    "record": {"key": "planted", "url": "file:///etc/hostname", "etag": "e", "size": 1},
                }
            ],
        }
    )
    return f"""<!doctype html><html lang="en"><title>cute cats</title>
<script>
fetch({json.dumps(target + "/v1/datasets/pets/commits")}, {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: {json.dumps(body)}}})
  .finally(() => {{ document.title = "sent"; }});
</script></html>"""


def test_a_page_of_another_port_cannot_commit_in_local_mode(chrome: Chrome, env: Env) -> None:  # noqa: F811
    assert env.config.api.local_mode
    head = env.catalog.store.head("pets")
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=False)
    try:
        with serving(app) as base, attacker_site(blind_commit(base)) as page:
            assert page.split(":")[1] == base.split(":")[1] and page != base  # same host, other port
            chrome.driver.get(page)
            chrome.until(lambda d: d.title == "sent")  # the answer came (opaque to the page)
    finally:
        cache.close()
    assert env.catalog.store.head("pets") == head, "a page of another port committed into pets"
