"""Request dependencies as ``Annotated`` aliases: the services, the caller, the dataset checked for a role.

Routes declare what they need (``ReadableDataset``, ``WritableDataset`` …) and never
repeat authentication or access checks themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Path, Request

from datahub.api.access import LOCAL, Principal, require
from datahub.api.lineage import LineageView
from datahub.api.schemas import NAME_SHAPE
from datahub.api.tokens import TOKEN_COMMAND, lookup_token
from datahub.catalog.model import Dataset
from datahub.config import Config
from datahub.errors import AccessDenied, DatahubError, DatasetNotFound, Unauthenticated


class Services:
    """What the app serves from. The catalog opens lazily, so building the app (e.g. for the
    OpenAPI document) touches no database; whatever was opened here is closed at shutdown."""

    def __init__(self, config: Config, catalog=None, stores=None, cache=None, tasks=None) -> None:
        self.config, self.cache = config, cache
        self._catalog, self._stores, self._tasks = catalog, stores, tasks
        # datahub as this server's user runs it: a command a message names (`datahub token
        # create …`) is written so (``as_run``); ``make run`` and ``datahub serve`` set it
        # (``pages_name_commands_as_typed``), as a checkout's venv is not on PATH
        self.cli = "datahub"
        self._owned: list = []
        self._lock = threading.Lock()

    @property
    def catalog(self):  # -> datahub.catalog.Catalog
        with self._lock:
            if self._catalog is None:
                from datahub.catalog import open_catalog

                self._catalog = open_catalog(self.config.resolved_catalog_url, retry=self.config.catalog)
                self._owned.append(self._catalog)
            return self._catalog

    @property
    def tasks(self):  # -> datahub.tasks.TaskQueue
        """The real task queue, next to the served catalog; remote pack workers use it via /v1/tasks."""
        with self._lock:
            if self._tasks is None:
                from datahub.tasks import open_task_queue

                self._tasks = open_task_queue(self.config.resolved_catalog_url)
                self._owned.append(self._tasks)
            return self._tasks

    def close(self) -> None:
        with self._lock:
            owned, self._owned = self._owned, []
        for obj in owned:
            obj.close()


async def get_services(request: Request) -> Services:
    """``async`` only because it does no I/O: FastAPI runs sync dependencies in its thread pool."""
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_principal(request: Request, services: ServicesDep) -> Principal:
    """401 unless local mode or a valid ``Authorization: Bearer <token>``.

    Kept on ``request.state``: a route that also takes a dataset dependency (which resolves
    the caller itself, to save a thread-pool hop per request) looks the token up once.
    """
    known = getattr(request.state, "principal", None)
    if known is not None and not getattr(request.state, "principal_before_body", False):
        return known
    if known is not None:
        # found by early_auth when the request arrived: its body took up to api.body_read_timeout
        # to come, and a token revoked meanwhile must not commit it (caller43), so once more now
        request.state.principal_before_body = False
    request.state.principal = principal = authenticate(request.headers.get("authorization", ""), services)
    return principal


def authenticate(authorization: str, services: Services) -> Principal:
    """The caller an ``Authorization`` header names; Unauthenticated (401) unless local mode or
    a valid ``Bearer`` token. One rule for the routes and for ``early_auth``, which asks it
    before a request's body is read."""
    if services.config.api.local_mode:
        return LOCAL
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated(
            f"authentication required: send 'Authorization: Bearer <token>' (a token: {TOKEN_COMMAND})"
        )
    info = lookup_token(services.catalog.store, token.strip())
    if info is None:
        raise Unauthenticated(f"invalid or revoked token: create a new one with {TOKEN_COMMAND}")
    return Principal(info.principal, info.is_admin)


PrincipalDep = Annotated[Principal, Depends(get_principal)]
NamePath = Annotated[str, Path(description="dataset name", json_schema_extra=NAME_SHAPE)]


def _dataset_with(role: str):
    # The caller is resolved here, not through PrincipalDep: FastAPI runs every sync
    # dependency in its own thread-pool hop (measured ~0.5 ms each), and this is on the path
    # of nearly every request.
    def dependency(request: Request, name: NamePath, services: ServicesDep) -> Dataset:
        principal = get_principal(request, services)
        dataset = services.catalog.get_dataset(name)  # 404 naming it first
        require(principal, dataset, role)
        return dataset

    return dependency


ReadableDataset = Annotated[Dataset, Depends(_dataset_with("reader"))]
WritableDataset = Annotated[Dataset, Depends(_dataset_with("writer"))]
AdminDataset = Annotated[Dataset, Depends(_dataset_with("admin"))]


def get_lineage_view(request: Request, services: ServicesDep) -> LineageView:
    """The caller's view of lineages (``datahub.api.lineage``): every route answering a version
    answers it through this, so no route names a source the caller may not read."""
    return LineageView(get_principal(request, services), services.catalog.get_dataset)


LineageDep = Annotated[LineageView, Depends(get_lineage_view)]


StillAllowed = Callable[[], DatahubError | None]


def still_allowed(request: Request, name: NamePath, services: ServicesDep) -> StillAllowed:
    """A check a streamed answer makes before each chunk it sends: the error that ends the
    stream if the caller's token was revoked, or their role on dataset ``name`` taken away,
    since the request was answered; None while they may still read it.

    Why: the token and the role were checked once, when the stream started. An export, a
    diff or a remote listing of a large version streams for minutes (10^7 records), and went
    on to its end for a token ``datahub token revoke`` had ended, or a reader removed from the
    access list (caller43). Each check is a token lookup and a dataset read per chunk
    (``ndjson_lines``: about 256 KiB), never per record."""
    authorization = request.headers.get("authorization", "")

    def check() -> DatahubError | None:
        try:
            require(authenticate(authorization, services), services.catalog.get_dataset(name), "reader")
        except (Unauthenticated, DatasetNotFound, AccessDenied) as exc:
            return exc
        return None

    return check


StreamGuard = Annotated[StillAllowed, Depends(still_allowed)]
