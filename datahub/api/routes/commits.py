"""POST /v1/datasets/{name}/commits: a change set against a base version becomes the next version."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import IO, Annotated

from fastapi import APIRouter, Depends, Request, status

from datahub.api.access import Principal
from datahub.api.commit_body import CommitBody
from datahub.api.deps import LineageDep, PrincipalDep, ServicesDep, WritableDataset
from datahub.api.limits import body_file
from datahub.api.schemas import ChangeIn, PutChange, VersionPublic, to_change, version_public
from datahub.catalog.model import Change
from datahub.errors import AccessDenied

router = APIRouter(prefix="/v1/datasets/{name}", tags=["commits"])


async def _body_file(request: Request) -> IO[bytes]:
    """The body as the body-limits middleware spooled it (a file: its bytes are not in RAM)."""
    spooled = body_file(request.scope)
    return spooled if spooled is not None else io.BytesIO(await request.body())


# The body is parsed by CommitBody from its spooled file, one change at a time, not by FastAPI
# into one model of the whole list (about 18x the body in memory); the OpenAPI still documents CommitCreate
# (see datahub.api.openapi).
COMMIT_REQUEST_BODY = {
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CommitCreate"}}},
    "required": True,
}


@router.post(
    "/commits", status_code=status.HTTP_201_CREATED, openapi_extra={"requestBody": COMMIT_REQUEST_BODY}
)
def commit(
    raw: Annotated[IO[bytes], Depends(_body_file)],
    dataset: WritableDataset,
    services: ServicesDep,
    principal: PrincipalDep,
    view: LineageDep,
) -> VersionPublic:
    """Atomic: a stale ``base`` gives 409 stale_base and nothing is written."""
    body = CommitBody(raw)
    version = services.catalog.commit(
        dataset.name,
        _allowed(body.changes(), principal, dataset.name),
        base=body.fields.base,
        message=body.fields.message,
        author=principal.name,
        commit_id=body.fields.commit_id,
    )
    return version_public(view.version(version))


# Storage only the deployment itself reaches: the server's disk (file://) and its Ceph pool
# (rados://, the shared cache tier, read with the server's and the nodes' Ceph identity).
_SERVER_LOCAL = {"file": "a server-local file", "rados": "an object in the deployment's own Ceph pool"}


def _allowed(changes: Iterable[ChangeIn], principal: Principal, dataset: str) -> Iterator[Change]:
    """A ``file://`` or ``rados://`` URL names the deployment's own storage, which readers
    would then read through the server's cache or a node's: only global admins (and local
    mode) may record one over HTTP."""
    for change in changes:
        # schemes are case-insensitive (the storage layer reads FILE:// as file://), so is this
        scheme = change.record.url.partition("://")[0].lower() if isinstance(change, PutChange) else ""
        if scheme in _SERVER_LOCAL and not principal.is_admin:
            raise AccessDenied(
                f"record {change.record.key!r} for dataset {dataset!r} points at {_SERVER_LOCAL[scheme]} "
                f"({change.record.url}); only global admins may commit {scheme}:// URLs over HTTP",
                dataset=dataset,
                key=change.record.key,
            )
        yield to_change(change)
