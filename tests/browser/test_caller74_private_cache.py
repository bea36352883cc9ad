"""caller74: a signed-in person's pictures are never shown again from the browser's cache
without asking the server.

The dataset browser's thumbnails were ``Cache-Control: private, max-age=604800, immutable``,
its charts ``private, max-age=3600`` and LabelX's item images ``private, max-age=86400``: once
fetched, Chromium answered them from its HTTP cache for up to a week without a request, so
after "Sign out" (or after the person's role on the dataset was removed) the next person on
a shared machine still saw a private dataset's images. Now every per-user picture is
``Cache-Control: private, no-cache`` with a strong ETag (``datahub.web.revalidate``): the
browser asks each time, the server checks who asks first, and a request whose
``If-None-Match`` names the bytes it would send is a 304 without them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from labelx.app import create_labelx_app
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import browser_app, pets_env, serving, signed_in_pets
from tests.browser.labelx_signin import type_sign_in
from tests.labelx.conftest import PASSWORD, Session, add_users, make_project

pytestmark = [pytest.mark.browser]

# what the page's fetch() (default cache mode: the HTTP cache's rules) got for the URL
FETCH = (
    "const done = arguments[arguments.length - 1];"
    "fetch(arguments[0], {credentials: 'same-origin'}).then("
    "  r => r.arrayBuffer().then(b => done([r.status, r.headers.get('content-type') || '', b.byteLength])),"
    "  e => done([0, String(e), 0]))"
)


def fetched(c: Chrome, url: str) -> tuple[int, str, int]:
    status, media, size = c.driver.execute_async_script(FETCH, url)
    return status, media, size


def test_browser_pictures_are_not_shown_from_the_cache_after_sign_out(chrome: Chrome, tmp_path: Path) -> None:  # noqa: F811
    c = chrome
    pictures = ("/thumbs/pets/1/train/dog/000.jpg", "/datasets/pets/versions/1/charts/labels.svg")
    with signed_in_pets(c, tmp_path) as (_env, base):
        for path in pictures:
            status, media, size = fetched(c, path)
            assert status == 200 and media.startswith("image/") and size > 0, (path, status, media)
            again = fetched(c, path)  # revalidated: the same picture (a 304 reads as the cached 200)
            assert again == (status, media, size), (path, again)
        c.find("form.inline button").click()  # sign out
        c.wait_for_url(lambda url: "/login" in url)
        for path in pictures:
            status, media, _ = fetched(c, path)
            assert not media.startswith("image/"), (
                f"{path} shown from the cache after Sign out: {status} {media}"
            )


@contextmanager
def labelx_for_admin(tmp_path: Path) -> Iterator[tuple[object, Session]]:
    """A LabelX app over the pets dataset (which ``admin`` may read), its users, and the
    admin's API session."""
    with pets_env(tmp_path, local_mode=False, in_ram=True) as env:
        env.catalog.update_dataset("pets", acl={"admin": "reader"})
        app = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores)
        add_users(app, admin="admin", alice="annotator", bob="annotator")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                admin = Session(app, "admin")
            yield app, admin
        finally:
            app.state.labelx.store.close()


def test_labelx_images_are_not_shown_from_the_cache_after_sign_out(chrome: Chrome, tmp_path: Path) -> None:  # noqa: F811
    c = chrome
    with labelx_for_admin(tmp_path) as (app, admin):
        project = make_project(admin, "c74")
        task = admin.get(f"/api/projects/{project['id']}/tasks").json()[0]
        items = admin.get(f"/api/tasks/{task['id']}").json()["items"]
        [item] = [i for i in items if i["key"].endswith(".jpg")][:1]
        with serving(app) as base:
            c.visit(f"{base}/login")
            type_sign_in(c, "admin", PASSWORD)
            path = f"/api/items/{item['id']}/image?size=thumb"
            status, media, size = fetched(c, path)
            assert status == 200 and media == "image/jpeg" and size > 0, (status, media)
            assert fetched(c, path) == (status, media, size)
            c.find("#logout").click()
            c.wait_for_url(lambda url: url.endswith("/login"))
            status, media, _ = fetched(c, path)
            assert media != "image/jpeg", f"{path} shown from the cache after Sign out: {status} {media}"


def test_a_kept_picture_is_a_304_only_for_who_may_still_read_it(tmp_path: Path) -> None:
    """The server's side: the access check comes before the 304, and a 304 sends no bytes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    with pets_env(tmp_path, local_mode=False, in_ram=True) as env, browser_app(env) as app:
        client = TestClient(app, base_url="http://127.0.0.1")
        bearer = {"Authorization": f"Bearer {issue_token(env.catalog.store, 'alice')[0]}"}
        etags = {}
        for path in ("/thumbs/pets/1/train/dog/000.jpg", "/datasets/pets/versions/1/charts/sizes.svg"):
            first = client.get(path, headers=bearer)
            assert first.status_code == 200 and first.headers["cache-control"] == "private, no-cache"
            kept = {**bearer, "If-None-Match": first.headers["etag"]}
            again = client.get(path, headers=kept)
            assert (again.status_code, again.content, again.headers["etag"]) == (
                304,
                b"",
                first.headers["etag"],
            )
            other = client.get(path, headers={**bearer, "If-None-Match": '"another"'})
            assert other.status_code == 200 and other.content == first.content
            etags[path] = first.headers["etag"]
        env.catalog.update_dataset("pets", owner="bob")  # alice's role removed
        for path, etag in etags.items():
            gone = client.get(path, headers={**bearer, "If-None-Match": etag})
            assert gone.status_code == 404 and gone.content != b"", path


def test_labelx_answers_opened_in_the_browser_are_not_shown_after_sign_out(
    chrome: Chrome,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A LabelX API answer opened as a document (a JSON listing, an export): its page was
    ``no-store`` since caller34, its JSON was not, so Back after "Sign out" showed the projects
    (and their tasks, items, labels) from the browser's cache without asking the server."""
    c = chrome
    with labelx_for_admin(tmp_path) as (app, admin):
        make_project(admin, "c74-secret-project")
        with serving(app) as base:
            c.visit(f"{base}/login")
            type_sign_in(c, "admin", PASSWORD)
            c.driver.get(f"{base}/api/projects")
            assert "c74-secret-project" in c.find("body").text
            # out of the back/forward cache, as a document is once its time there is up
            c.driver.execute_script("window.addEventListener('unload', () => {})")
            c.driver.get_log("browser")  # a JSON answer opened as a page asks for /favicon.ico (404)
            c.visit(f"{base}/")
            c.find("#logout").click()
            c.wait_for_url(lambda url: url.endswith("/login"))
            signed_out = c.driver.current_url
            c.driver.execute_script("history.go(-2)")  # back to the JSON answer
            # the cache's copy (the base), or the server's answer: the login page (next=...)
            c.until(lambda d: d.current_url != signed_out)
            c.settle()
            assert "c74-secret-project" not in c.find("body").text, (
                f"Back after Sign out shows {c.driver.current_url} from the browser's cache"
            )
            c.driver.get_log("browser")  # the 401 of the answer asked for again
