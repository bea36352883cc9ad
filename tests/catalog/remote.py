"""A real ``datahub serve`` (uvicorn on 127.0.0.1, a free port) over SQLite, and the
HttpCatalogStore that talks to it: the conformance suite's ``http`` store.

``SharedServer``: one such server for a test module, serving each test its own fresh SQLite
catalog (the app's services swapped between tests); ``serve``/``served_store``: a server of
one's own, for tests of the server's start, stop or process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datahub.api import create_app
from datahub.api.deps import Services
from datahub.api.server import ApiServer
from datahub.api.tokens import issue_token
from datahub.catalog import Catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import Config, load_config


class ServedStore(HttpCatalogStore):
    """An HttpCatalogStore that also owns the server it talks to (closed with it)."""

    def __init__(self, server: ApiServer, backing: Catalog, token: str, **options: Any) -> None:
        super().__init__(server.url, token=token, **options)
        self.server, self.backing, self.token = server, backing, token

    def close(self) -> None:
        super().close()
        self.server.stop()
        self.backing.close()


class SharedServer:
    """One API server for a module's tests, each test served its own fresh catalog.

    Why: the ``http`` store of the catalog tests (91 tests) started and stopped a server per
    test, 0.2-1.3 s of wall each (uvicorn's thread start, its 0.1 s shutdown tick, the app's
    lifespan) for what each test checks through the HTTP API, not through the server's start.
    The requests still go through the same real uvicorn, middleware and routes; each test's
    catalog, token, home and task queue are its own, as with a server per test: the app reads
    them from ``app.state.services`` per request, which ``store`` replaces before the test's
    first request (tests run one at a time in a process)."""

    def __init__(self, tmp_path: Path) -> None:
        self.config = _served_config(tmp_path)
        self.app = create_app(self.config, catalog=None)
        self.server = ApiServer(self.app, self.config)
        self.server.start()

    def store(
        self, tmp_path: Path, store_options: dict[str, Any] | None = None, **options: Any
    ) -> HttpCatalogStore:
        """A store on this server whose catalog is a fresh SQLite under ``tmp_path``."""
        backing, token, services = self.serve(tmp_path, store_options)
        return _SharedServedStore(self.server, backing, token, services, **options)

    def serve(
        self, tmp_path: Path, store_options: dict[str, Any] | None = None, tasks: Any = None
    ) -> tuple[Catalog, str, Services]:
        """What ``serve`` gives, on this server: a fresh SQLite catalog under ``tmp_path`` (and
        ``tasks`` as its task queue if given), an admin token, and the services now served
        (close them, then the catalog, once the test is done)."""
        config = _served_config(tmp_path)
        backing = Catalog(SQLiteCatalogStore(config.home_path / "catalog.db", **(store_options or {})))
        token = issue_token(backing.store, "root", admin=True)[0]
        services = Services(config, catalog=backing, tasks=tasks)
        self.app.state.services = services
        return backing, token, services

    def stop(self) -> None:
        self.server.stop()


class _SharedServedStore(ServedStore):
    """A ServedStore whose server outlives it: its close ends only its own catalog."""

    def __init__(
        self, server: ApiServer, backing: Catalog, token: str, services: Services, **options: Any
    ) -> None:
        super().__init__(server, backing, token, **options)
        self.services = services

    def close(self) -> None:
        HttpCatalogStore.close(self)
        self.services.close()  # what it opened itself (a task queue), never the test's catalog
        self.backing.close()


def _served_config(tmp_path: Path) -> Config:
    """The served config of ``serve``: not local mode, home under ``tmp_path``/served."""
    config = load_config(env={}, overrides={"home": str(tmp_path / "served")})
    config.api.host, config.api.port, config.api.local_mode = "127.0.0.1", 0, False
    config.home_path.mkdir(parents=True, exist_ok=True)
    return config


def serve(
    tmp_path: Path, store_options: dict[str, Any] | None = None, tasks: Any = None
) -> tuple[ApiServer, Catalog, str]:
    """An API server (not local mode: a real admin token) over a fresh SQLite catalog
    (and ``tasks``, a TaskQueue, as its task queue if given)."""
    config = _served_config(tmp_path)
    backing = Catalog(SQLiteCatalogStore(config.home_path / "catalog.db", **(store_options or {})))
    token = issue_token(backing.store, "root", admin=True)[0]
    server = ApiServer(create_app(config, catalog=backing, tasks=tasks), config)
    server.start()
    return server, backing, token


def served_store(tmp_path: Path, store_options: dict[str, Any] | None = None, **options: Any) -> ServedStore:
    server, backing, token = serve(tmp_path, store_options)
    return ServedStore(server, backing, token, **options)
