"""caller34: after "Sign out", the back button never shows a page from the browser's cache.

newuser26 made a page the back/forward cache brings back load again, which covers the minutes
Chromium keeps it there. A page not kept there (evicted after its time or for memory, or never
eligible: an ``unload`` handler, as here) is shown from the HTTP cache on a history navigation
without asking the server, since the pages said nothing of caching: on a shared machine the
next person pressed Back after "Sign out" and read the signed-out person's dataset page. Every
page of both UIs is ``Cache-Control: no-store`` now (``datahub.web.page_headers``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.common.exceptions import TimeoutException

from datahub.api.tokens import issue_token
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import browser_app, pets_env, signed_in_pets

pytestmark = [pytest.mark.browser]


def test_back_after_sign_out_asks_the_server_not_the_cache(chrome: Chrome, tmp_path: Path) -> None:  # noqa: F811
    c = chrome
    with signed_in_pets(c, tmp_path) as (_env, base):
        c.visit(f"{base}/datasets/pets")
        assert "pet pictures" in c.find("main").text
        # out of the back/forward cache, as a page is once its time there is up
        c.driver.execute_script("window.addEventListener('unload', () => {})")
        c.find("form.inline button").click()  # sign out
        c.wait_for_url(lambda url: "/login" in url)
        c.driver.back()
        try:
            c.until(lambda d: "/login" in d.current_url)
        except TimeoutException:
            raise AssertionError(
                f"back after Sign out shows {c.driver.current_url} from the browser's cache: "
                f"{c.find('main').text[:200]!r}"
            ) from None
        assert "pet pictures" not in c.find("body").text


def test_every_page_says_no_store(tmp_path: Path) -> None:
    """The rule itself, without a browser: the pages a signed-in person reads (and their
    redirects and error pages) are never kept; pictures keep their own rules."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    with pets_env(tmp_path, local_mode=False, in_ram=True) as env, browser_app(env) as app:
        token = issue_token(env.catalog.store, "alice")[0]
        client = TestClient(app, base_url="http://127.0.0.1")
        bearer = {"Authorization": f"Bearer {token}"}
        for path in ("/", "/datasets/pets", "/datasets/pets/versions/1", "/datasets/pets/diff", "/login"):
            answer = client.get(path, headers=bearer)
            assert answer.status_code == 200 and answer.headers.get("cache-control") == "no-store", path
        missing = client.get("/datasets/nope", headers=bearer)
        assert missing.status_code == 404 and missing.headers.get("cache-control") == "no-store"
        nowhere = client.get("/no/such/page", headers={**bearer, "Accept": "text/html"})
        assert nowhere.status_code == 404 and nowhere.headers.get("cache-control") == "no-store"
        assert client.get("/datasets/pets", follow_redirects=False).headers["cache-control"] == "no-store"
        chart = client.get("/datasets/pets/versions/1/charts/labels.svg", headers=bearer)
        # asked for again at each use since caller74 (it was private, max-age=3600)
        assert chart.headers["cache-control"] == "private, no-cache" and chart.headers["etag"]
