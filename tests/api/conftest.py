"""The real app on a real SQLite catalog, with authentication on and a few principals.

- ``admin``: global admin token;
- ``owner``: created ``pets`` (so admin of it); ``alice``: reader; ``bob``: writer;
- ``eve``: a valid token with no role on ``pets``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from datahub.api import create_app
from datahub.api.tokens import issue_token
from datahub.catalog import Catalog, open_catalog
from datahub.catalog.model import Put, Record
from datahub.config import Config

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette prefers httpx2 for its TestClient; httpx is what we have
    from fastapi.testclient import TestClient


def record(key: str, cls: str = "cat", size: int = 10) -> Record:
    return Record(key, f"file:///data/{key}", f"etag-{key}", size, "", {"split": "train"}, {"class": cls})


PETS_V1 = [record(f"img/{i:03d}.jpg", "cat" if i % 2 else "dog") for i in range(25)]


@dataclass
class Api:
    client: TestClient
    catalog: Catalog
    tokens: dict[str, str]
    config: Config

    def as_(self, who: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}

    def get(self, path: str, who: str | None = "admin", **kw):
        return self.client.get(path, headers=self.as_(who), **kw)

    def post(self, path: str, who: str | None = "admin", **kw):
        return self.client.post(path, headers=self.as_(who), **kw)

    def put(self, path: str, who: str | None = "admin", **kw):
        return self.client.put(path, headers=self.as_(who), **kw)

    def patch(self, path: str, who: str | None = "admin", **kw):
        return self.client.patch(path, headers=self.as_(who), **kw)

    def delete(self, path: str, who: str | None = "admin", **kw):
        return self.client.delete(path, headers=self.as_(who), **kw)


@pytest.fixture
def api(config: Config) -> Iterator[Api]:
    config.api.max_body_bytes = 64 * 1024
    with api_for(config) as api:
        yield api


@contextmanager
def api_for(config: Config) -> Iterator[Api]:
    """The app of the ``api`` fixture, on ``config`` as the caller set it."""
    config.api.local_mode = False
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    tokens = {
        "admin": issue_token(catalog.store, "root", admin=True)[0],
        **{who: issue_token(catalog.store, who)[0] for who in ("owner", "alice", "bob", "eve")},
    }
    catalog.create_dataset("pets", owner="owner", acl={"alice": "reader", "bob": "writer"})
    catalog.commit("pets", (Put(r) for r in PETS_V1), message="v1", author="owner")
    app = create_app(config, catalog=catalog)
    # loopback, as a real client of a server bound to 127.0.0.1 (a local-mode app refuses other hosts)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield Api(client, catalog, tokens, config)
    catalog.close()
