"""Local mode (no tokens, loopback only) answers the programs of this machine, never a web page.

In local mode every caller is the global admin ``local`` (``make run``, ``datahub serve`` on
127.0.0.1). A loopback bind keeps other machines out, but not the web pages of the user's own
browser: any site can send a cross-site POST of ``text/plain`` (no preflight, no CORS), and
the commit routes take a body of any type, so a page the user merely visited while the demo
ran committed records (``file:///…`` ones too: a local admin may) into their datasets. With
DNS rebinding (a site's name re-pointed at 127.0.0.1) its scripts read every answer as well.
Browsers name the page in ``Origin`` and the site in ``Host``; local mode now refuses both
unless they name this machine. With ``--auth`` a bearer token is the credential, which no
other site can make a browser send.
"""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager

import pytest

from datahub.api.tokens import issue_token
from datahub.catalog import open_catalog
from datahub.cli.serve_cmd import build_app
from datahub.config import Config
from datahub.storage import StoreRegistry

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

COMMIT = json.dumps(
    {
        "message": "from a web page",
        "changes": [
            {"op": "put", "record": {"key": "x", "url": "file:///etc/passwd", "etag": "e", "size": 1}}
        ],
    }  # fmt: skip
)
A_PAGE = {"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example"}


@contextmanager
def serving(config: Config, base_url: str = "http://127.0.0.1:8080"):
    """What ``datahub serve`` serves (API, browser, LabelX) on its catalog, with dataset ``pets``."""
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("pets")
    stores = StoreRegistry(config)
    app, cache = build_app(config, catalog, stores)
    try:
        with TestClient(app, base_url=base_url) as client:
            yield client, catalog
    finally:
        cache.close()
        stores.close()
        catalog.close()


@pytest.fixture
def served(config: Config):
    with serving(config) as both:
        yield both


def test_a_web_page_cannot_commit_in_local_mode(served) -> None:
    client, catalog = served
    answer = client.post("/v1/datasets/pets/commits", content=COMMIT, headers=A_PAGE)
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "access_denied"
    assert "https://evil.example" in error["message"] and "--auth" in error["message"]
    remote = client.post("/v1/remote/datasets/pets/commits", content=b"{}\n", headers=A_PAGE)
    assert remote.status_code == 403
    assert catalog.store.head("pets") == 0  # nothing was committed
    for origin in (
        "null",
        "http://127.0.0.1.evil.example",
        "http://localhost.evil.example:8080",
        # a page another program of this machine serves (another port, another loopback name):
        # a web page, not a program (caller34; tests/browser/test_caller34_local_api.py)
        "http://127.0.0.1:3000",
        "http://localhost:8080",
    ):
        refused = client.post(
            "/v1/datasets/pets/commits", content=COMMIT, headers={**A_PAGE, "Origin": origin}
        )
        assert refused.status_code == 403, origin


@pytest.mark.parametrize("path", ["/v1/datasets", "/v1/datasets/pets", "/", "/labelx/login", "/docs"])
def test_a_rebound_site_name_reads_nothing_in_local_mode(served, path: str) -> None:
    """DNS rebinding: the page's own origin now reaches 127.0.0.1, with its site in Host."""
    client, _ = served
    answer = client.get(path, headers={"Host": "evil.example:8080"})
    assert answer.status_code == 403, answer.text
    assert "pets" not in answer.text
    assert "evil.example:8080" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("127.0.0.1:8080", None),
        ("localhost:8080", "http://localhost:8080"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("localhost", None),
    ],
)
def test_this_machines_callers_are_served_in_local_mode(served, host: str, origin: str | None) -> None:
    client, catalog = served
    headers = {"Host": host, **({"Origin": origin} if origin else {})}
    assert client.get("/v1/datasets/pets", headers=headers).status_code == 200
    made = client.post("/v1/datasets/pets/commits", content=COMMIT, headers=headers)
    assert made.status_code == 201, made.text
    assert client.get("/", headers=headers).status_code == 200


def test_with_auth_a_token_is_the_credential_whatever_the_host(config: Config) -> None:
    config.api.local_mode = False
    with serving(config, base_url="http://datahub.example.com") as (client, catalog):
        token = issue_token(catalog.store, "root", admin=True)[0]
        auth = {"Authorization": f"Bearer {token}", "Origin": "https://elsewhere.example"}
        assert client.get("/v1/datasets/pets", headers=auth).status_code == 200
        assert client.get("/v1/datasets/pets").status_code == 401


def test_liveness_answers_any_host(served) -> None:
    """``/healthz`` says only that the process serves; a probe may name any host."""
    client, _ = served
    assert client.get("/healthz", headers={"Host": "evil.example:8080"}).json() == {"status": "ok"}
