"""/v1/datasets/{name}/versions: the log, one version (by number, tag or latest), derive."""

from __future__ import annotations

from itertools import islice
from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from datahub.api.access import Principal, can, hidden_target, require, require_creatable, snapshot_name
from datahub.api.deps import LineageDep, PrincipalDep, ReadableDataset, ServicesDep
from datahub.api.schemas import REF_SHAPE, DeriveCreate, VersionPublic, version_public
from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import Dataset
from datahub.errors import DatasetNotFound, InvalidInput

router = APIRouter(prefix="/v1/datasets/{name}/versions", tags=["versions"])
RefPath = Annotated[str, Path(description="version number, tag or 'latest'", json_schema_extra=REF_SHAPE)]


@router.get("")
def list_versions(
    dataset: ReadableDataset,
    services: ServicesDep,
    view: LineageDep,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
) -> list[VersionPublic]:
    """Newest first."""
    return [version_public(view.version(v)) for v in islice(services.catalog.log(dataset.name), limit)]


@router.get("/{ref}")
def get_version(
    dataset: ReadableDataset, ref: RefPath, services: ServicesDep, view: LineageDep
) -> VersionPublic:
    return version_public(view.version(services.catalog.resolve(dataset.name, ref)))


@router.post("/{ref}/derive", status_code=status.HTTP_201_CREATED)
def derive(
    dataset: ReadableDataset,
    ref: RefPath,
    body: DeriveCreate,
    services: ServicesDep,
    principal: PrincipalDep,
    view: LineageDep,
) -> VersionPublic:
    """Commit the records of ``ref`` that match ``where`` as a new version (here or in ``to_dataset``).

    An existing target needs the writer role. A missing ``to_dataset`` is created under the
    same rule as ``POST /v1/datasets``: any caller may, and the caller owns it with an empty
    access list (nothing of the source's owner or ACL is copied, or a reader could mint a
    dataset its source's admins control, or escalate through one). The ref and the filter are
    checked first, so a bad request creates nothing.
    """
    catalog = services.catalog
    source = catalog.resolve(dataset.name, ref)
    where = RecordFilter.parse(body.where)
    if where is None:
        raise InvalidInput("derive needs a filter such as labels.class=cat", dataset=dataset.name)
    if body.to_dataset is None:
        require(principal, dataset, "writer")
    elif snapshot_name(body.to_dataset) and not principal.is_admin:
        try:  # an existing one is written as any other (the writer role); a new one is made here
            catalog.get_dataset(body.to_dataset)
        except DatasetNotFound:
            require_creatable(principal, body.to_dataset)
    version = catalog.derive(
        dataset.name,
        # the ref as given: "latest" of the dataset itself is filtered at the head it commits on
        # (its number, resolved here, made a commit landing meanwhile undone: catalog43)
        ref if ref == "latest" else source.seq,
        where,
        to_dataset=body.to_dataset,
        message=body.message,
        author=principal.name,
        owner=principal.name,
        may_write=lambda target: _may_write_target(principal, target),
    )
    return version_public(view.version(version))


def _may_write_target(principal: Principal, target: Dataset) -> None:
    """The writer role on an existing ``to_dataset``; one the caller may not read is the 404
    of ``hidden_target``, whose message fits a target (docs/api.md "403 or 404")."""
    if not can(principal, target, "reader"):
        # a name the caller could not create (a bucket snapshot's) answers the missing name's
        # 403 first: a 404 for it told which buckets the platform's mounts recorded (review15a)
        require_creatable(principal, target.name)
        raise hidden_target(target.name, principal)
    require(principal, target, "writer")
