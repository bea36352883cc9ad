"""POST /v1/datasets/{name}/commits: a change set against a base version becomes the next version."""

from __future__ import annotations

import io
from typing import IO, Annotated

from fastapi import APIRouter, Depends, Request, status

from datahub.api.commit_body import CommitBody
from datahub.api.deps import LineageDep, PrincipalDep, ServicesDep, WritableDataset
from datahub.api.limits import body_file
from datahub.api.record_urls import commit_rule
from datahub.api.schemas import VersionPublic, version_public

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
    """Atomic: a stale ``base`` gives 409 stale_base and nothing is written. A put whose URL
    the caller may not record (``datahub.api.record_urls``) gives 403 and nothing is written."""
    body = CommitBody(raw)
    version = services.catalog.commit(
        dataset.name,
        commit_rule(services, principal, dataset).changes(body.changes()),
        base=body.fields.base,
        message=body.fields.message,
        author=principal.name,
        commit_id=body.fields.commit_id,
    )
    return version_public(view.version(version))
