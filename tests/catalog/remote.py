"""A real ``datahub serve`` (uvicorn on 127.0.0.1, a free port) over SQLite, and the
HttpCatalogStore that talks to it: the conformance suite's ``http`` store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datahub.api import create_app
from datahub.api.server import ApiServer
from datahub.api.tokens import issue_token
from datahub.catalog import Catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import load_config


class ServedStore(HttpCatalogStore):
    """An HttpCatalogStore that also owns the server it talks to (closed with it)."""

    def __init__(self, server: ApiServer, backing: Catalog, token: str, **options: Any) -> None:
        super().__init__(server.url, token=token, **options)
        self.server, self.backing, self.token = server, backing, token

    def close(self) -> None:
        super().close()
        self.server.stop()
        self.backing.close()


def serve(
    tmp_path: Path, store_options: dict[str, Any] | None = None, tasks: Any = None
) -> tuple[ApiServer, Catalog, str]:
    """An API server (not local mode: a real admin token) over a fresh SQLite catalog
    (and ``tasks``, a TaskQueue, as its task queue if given)."""
    config = load_config(env={}, overrides={"home": str(tmp_path / "served")})
    config.api.host, config.api.port, config.api.local_mode = "127.0.0.1", 0, False
    config.home_path.mkdir(parents=True, exist_ok=True)
    backing = Catalog(SQLiteCatalogStore(config.home_path / "catalog.db", **(store_options or {})))
    token = issue_token(backing.store, "root", admin=True)[0]
    server = ApiServer(create_app(config, catalog=backing, tasks=tasks), config)
    server.start()
    return server, backing, token


def served_store(tmp_path: Path, store_options: dict[str, Any] | None = None, **options: Any) -> ServedStore:
    server, backing, token = serve(tmp_path, store_options)
    return ServedStore(server, backing, token, **options)
