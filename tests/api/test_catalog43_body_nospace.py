"""A request body the server cannot store because its temporary directory is full.

The body limits middleware spools every body (RAM up to 1 MiB, then a temporary file). A full
temporary directory raised a bare ``OSError: [Errno 28]`` out of it: a 500 with no datahub
error, which the remote catalog retried into ``catalog_unavailable`` as if the server were down
(catalog43's report). It is now 507 ``no_space`` naming the directory, nothing is changed, and
the remote catalog raises NoSpace at once.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from datahub.api import create_app
from datahub.api.server import ApiServer
from datahub.api.tokens import issue_token
from datahub.catalog import Catalog, open_catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.catalog.model import Put, Record
from datahub.config import Config
from datahub.errors import NoSpace
from tests.ingest.test_catalog43_nospace import fill
from tests.tmpfs import small_tmpfs

N = 20_000  # a commit body of ~2.4 MB: past the 1 MiB kept in RAM, so it spills to a file


@pytest.fixture
def served(config: Config) -> Iterator[tuple[ApiServer, str, Catalog]]:
    config.api.port = 0
    config.api.local_mode = False
    config.api.max_body_bytes = 16 * 1024 * 1024
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    token = issue_token(catalog.store, "root", admin=True)[0]
    catalog.create_dataset("pets")
    with ApiServer(create_app(config, catalog=catalog), config) as server:
        yield server, token, catalog
    catalog.close()


@pytest.fixture
def full_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "tmp", "1m") as fs:
        fill(fs)
        monkeypatch.setattr(tempfile, "tempdir", str(fs))
        yield fs
        monkeypatch.undo()


def _body() -> bytes:
    changes = [
        {
            "op": "put",
            "record": {"key": f"img/{i:06d}.jpg", "url": f"s3://b/img/{i}.jpg", "etag": f"e{i}", "size": 1},
        }
        for i in range(N)
    ]
    return json.dumps({"changes": changes}).encode()


def test_a_body_that_fills_the_servers_temporary_directory_is_507_naming_it(served, full_tmp) -> None:
    server, token, catalog = served
    body = _body()
    assert len(body) > 1024 * 1024
    r = httpx.post(
        f"{server.url}/v1/datasets/pets/commits",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 507, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == "no_space"
    assert str(full_tmp) in error["message"] and "nothing was changed" in error["message"]
    assert catalog.store.head("pets") == 0


def test_the_remote_catalog_raises_nospace_not_catalog_unavailable(served, tmp_path, full_tmp) -> None:
    server, token, catalog = served
    remote = Catalog(HttpCatalogStore(server.url, token=token))
    try:
        changes = (Put(Record(f"img/{i:06d}.jpg", f"s3://b/img/{i}.jpg", f"e{i}", 1)) for i in range(N))
        # the client's own spool of the body goes to memory first (8 MiB): only the server's fills up
        with pytest.raises(NoSpace) as raised:
            remote.commit("pets", changes)
        assert str(full_tmp) in raised.value.message
    finally:
        remote.close()
    assert catalog.store.head("pets") == 0
