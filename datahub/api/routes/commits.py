"""POST /v1/datasets/{name}/commits: a change set against a base version becomes the next version."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from fastapi import APIRouter, status

from datahub.api.access import Principal
from datahub.api.deps import PrincipalDep, ServicesDep, WritableDataset
from datahub.api.schemas import ChangeIn, CommitCreate, PutChange, VersionPublic, to_change, version_public
from datahub.catalog.model import Change
from datahub.errors import AccessDenied

router = APIRouter(prefix="/v1/datasets/{name}", tags=["commits"])


@router.post("/commits", status_code=status.HTTP_201_CREATED)
def commit(
    body: CommitCreate, dataset: WritableDataset, services: ServicesDep, principal: PrincipalDep
) -> VersionPublic:
    """Atomic: a stale ``base`` gives 409 stale_base and nothing is written."""
    version = services.catalog.commit(
        dataset.name,
        _allowed(body.changes, principal, dataset.name),
        base=body.base,
        message=body.message,
        author=principal.name,
        commit_id=body.commit_id,
    )
    return version_public(version)


def _allowed(changes: Iterable[ChangeIn], principal: Principal, dataset: str) -> Iterator[Change]:
    """A ``file://`` URL names the server's own disk, which readers would then read through
    the server's cache: only global admins (and local mode) may record one over HTTP."""
    for change in changes:
        if isinstance(change, PutChange) and change.record.url.startswith("file:") and not principal.is_admin:
            raise AccessDenied(
                f"record {change.record.key!r} for dataset {dataset!r} points at a server-local file "
                f"({change.record.url}); only global admins may commit file:// URLs over HTTP",
                dataset=dataset,
                key=change.record.key,
            )
        yield to_change(change)
