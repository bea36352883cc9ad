"""POST /v1/datasets/{name}/commits: a change set against a base version becomes the next version."""

from __future__ import annotations

from fastapi import APIRouter, status

from datahub.api.deps import PrincipalDep, ServicesDep, WritableDataset
from datahub.api.schemas import CommitCreate, VersionPublic, to_change, version_public

router = APIRouter(prefix="/v1/datasets/{name}", tags=["commits"])


@router.post("/commits", status_code=status.HTTP_201_CREATED)
def commit(
    body: CommitCreate, dataset: WritableDataset, services: ServicesDep, principal: PrincipalDep
) -> VersionPublic:
    """Atomic: a stale ``base`` gives 409 stale_base and nothing is written."""
    version = services.catalog.commit(
        dataset.name,
        (to_change(c) for c in body.changes),
        base=body.base,
        message=body.message,
        author=principal.name,
        commit_id=body.commit_id,
    )
    return version_public(version)
