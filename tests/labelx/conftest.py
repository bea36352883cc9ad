"""LabelX fixtures: a real SQLite catalog, a dataset of real JPEGs in a file:// store, the app.

Nothing is mocked: images are read through the real StoreRegistry and TieredCache, labels
are committed through the real catalog.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from datahub.cache import open_cache
from datahub.catalog import Put, Record, open_catalog
from datahub.config import Config
from datahub.storage import StoreRegistry, open_store
from labelx.app import create_labelx_app
from labelx.auth import hash_password
from tests.ram import ram_dir

PASSWORD = "correct horse battery"
COLORS = [
    "red",
    "green",
    "blue",
    "yellow",
    "purple",
    "orange",
    "white",
    "black",
    "gray",
    "cyan",
    "pink",
    "brown",
]


@dataclass
class Env:
    config: Config
    catalog: object
    stores: StoreRegistry
    cache: object
    dataset: str
    keys: list[str]


def jpeg(color: str, size: tuple[int, int] = (320, 240)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "JPEG")
    return out.getvalue()


@pytest.fixture
def env(config: Config, tmp_path: Path) -> Iterator[Env]:
    """Dataset ``pets`` v1: 12 JPEGs; the first already labelled ``class=cat`` in the version.
    The JPEGs are in ``ram_dir`` (two fsyncs a put on disk; it says why); the catalog stays at
    ``tmp_path / "catalog.db"``, where tests open it from the CLI."""
    with ram_dir(tmp_path) as data:
        yield from _pets(config, tmp_path, open_store((data / "objects").as_uri(), config))


def _pets(config: Config, tmp_path: Path, objects) -> Iterator[Env]:
    records = []
    for i, color in enumerate(COLORS):
        key = f"img/{i:04d}.jpg"
        info = objects.put(key, jpeg(color))
        labels = {"class": "cat"} if i == 0 else {}
        records.append(Record(key, objects.url_for(key), info.etag, info.size, labels=labels, meta={"i": i}))
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    catalog.create_dataset("pets", description="pet pictures")
    catalog.commit("pets", [Put(r) for r in records], message="import")
    stores = StoreRegistry(config)
    cache = open_cache(config, stores)
    try:
        yield Env(config, catalog, stores, cache, "pets", [r.key for r in records])
    finally:
        cache.close()
        stores.close()
        catalog.close()


_HASHES: dict[str, str] = {}  # scrypt is deliberately slow: hash each test user's password once


def add_users(app, **users: str) -> None:
    store = app.state.labelx.store
    for name, role in users.items():
        if name not in _HASHES:
            _HASHES[name] = hash_password(PASSWORD)
        store.create_user(name, role, _HASHES[name])


@pytest.fixture
def app(env: Env):
    app = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    add_users(app, admin="admin", alice="annotator", bob="annotator", rita="reviewer")
    yield app
    app.state.labelx.store.close()


def login_csrf_cookie(app) -> str:
    """The name of ``app``'s sign-in form cookie: ``labelx_login_csrf_<instance>`` (caller72: each
    labelx.db its own, so two LabelX servers on one host keep their forms apart)."""
    return app.state.labelx.auth.login_csrf_cookie


def session_cookie(app) -> str:
    """The name of ``app``'s session cookie: ``labelx_session_<instance>`` (caller44: each
    labelx.db its own, so two LabelX servers on one host keep their sign-ins apart)."""
    return app.state.labelx.auth.session_cookie


class Session:
    """A logged-in browser-like client: cookie session + the page's CSRF token."""

    def __init__(self, app, name: str, password: str = PASSWORD) -> None:
        self.client = TestClient(app, base_url="http://127.0.0.1")
        page = self.client.get("/login").text
        token = re.search(r'name="csrf" value="([^"]+)"', page)[1]
        resp = self.client.post(
            "/login", data={"name": name, "password": password, "csrf": token}, follow_redirects=False
        )
        assert resp.status_code == 303 and resp.headers["location"].endswith("/"), resp.text
        home = self.client.get("/").text
        self.csrf = re.search(r'"csrf": "([^"]+)"', home)[1]

    def get(self, path: str, **kw):
        return self.client.get(path, **kw)

    def send(self, method: str, path: str, json=None, **kw):
        headers = {"X-CSRF-Token": self.csrf, **kw.pop("headers", {})}
        return self.client.request(method, path, json=json, headers=headers, **kw)

    def post(self, path: str, json=None, **kw):
        return self.send("POST", path, json, **kw)

    def put(self, path: str, json=None, **kw):
        return self.send("PUT", path, json, **kw)


def ok(resp, status: int = 200):
    assert resp.status_code == status, resp.text
    return resp.json()


SCHEMA = {"kind": "classification", "classes": ["cat", "dog", "bird"]}


def make_project(admin: Session, name: str = "pets-cls", **extra) -> dict:
    body = {"name": name, "dataset": "pets", "schema": SCHEMA, "task_size": 6, "annotators": ["alice", "bob"]}
    return ok(admin.post("/api/projects", body | extra), 201)
