"""/v1/datasets: create, list (only what the caller may read), describe, update."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Header, Response, status
from pydantic import WithJsonSchema

from datahub.api.access import can, creating, require_creatable, role_rank
from datahub.api.deps import AdminDataset, LineageDep, PrincipalDep, ReadableDataset, ServicesDep
from datahub.api.schemas import (
    DatasetAccess,
    DatasetCreate,
    DatasetPublic,
    DatasetUpdate,
    ErrorBody,
    dataset_public,
)
from datahub.catalog.model import ROLES, Dataset
from datahub.errors import AccessDenied, InvalidInput, PreconditionFailed
from datahub.validation import check_principal

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])
_ETAG = re.compile(r'"r(\d{1,18})"')
# What expected_revision takes, for the schema: exactly one entity tag once the list is split at
# commas and blank items (Python's whitespace, as str.strip sees it) are dropped. Any such tag is
# well formed; one that names no current revision answers 412.
_SP = "[\\t-\\r\\x1c- \\x85\\xa0]"
IF_MATCH_PATTERN = f"^({_SP}*,)*[^,]*[^,\\t-\\r\\x1c- \\x85\\xa0][^,]*(,{_SP}*)*$"


def etag(dataset: Dataset) -> str:
    """A strong entity tag naming the dataset's revision (its fields, not its versions)."""
    return f'"r{dataset.revision}"'


def expected_revision(if_match: str | None, dataset: Dataset) -> int | None:
    """The revision an ``If-Match`` header demands: None for no header or ``*``. A weak or
    foreign tag matches no revision (If-Match compares strongly): 412 at once, saying so."""
    if if_match is None or if_match.strip() == "*":
        return None
    tags = [t.strip() for t in if_match.split(",") if t.strip()]
    if len(tags) != 1:
        raise InvalidInput(
            f'If-Match for dataset {dataset.name!r} must be one ETag as GET returned it (e.g. "r3") or *',
            dataset=dataset.name,
        )
    if m := _ETAG.fullmatch(tags[0]):
        return int(m.group(1))
    raise PreconditionFailed(
        f"If-Match {tags[0][:80]!r} names no revision of dataset {dataset.name!r} (its ETag is now "
        f"{etag(dataset)}); send the ETag GET returned, or * to update whatever the revision",
        dataset=dataset.name,
        revision=dataset.revision,
    )


def check_acl(acl: dict[str, str]) -> dict[str, str]:
    """The one principal rule for access-list keys (``*`` aside), for every route that writes one."""
    for principal in acl:
        if principal != "*":
            check_principal(principal)
    return acl


@router.get("")
def list_datasets(services: ServicesDep, principal: PrincipalDep, view: LineageDep) -> list[DatasetPublic]:
    catalog = services.catalog
    return [
        dataset_public(view.dataset(d), catalog.store.head(d.name))
        for d in catalog.list_datasets()
        if can(principal, d, "reader")
    ]


@router.post("", status_code=status.HTTP_201_CREATED)
def create_dataset(body: DatasetCreate, services: ServicesDep, principal: PrincipalDep) -> DatasetPublic:
    """Any authenticated caller may create a dataset, but only a global admin one named like a
    bucket snapshot (`s3.…`, `memory.…`, `file.…`, `rados.…`: 403, docs/api.md "Access lists");
    the creator becomes its owner (admin)."""
    require_creatable(principal, body.name)
    with creating(principal, body.name, services.catalog.get_dataset):
        dataset = services.catalog.create_dataset(
            body.name,
            description=body.description,
            source=body.source,
            owner=principal.name,
            acl=check_acl(body.acl),
        )
    return dataset_public(dataset, 0)


@router.get("/{name}")
def get_dataset(
    dataset: ReadableDataset, services: ServicesDep, response: Response, view: LineageDep
) -> DatasetPublic:
    response.headers["ETag"] = etag(dataset)
    return dataset_public(view.dataset(dataset), services.catalog.store.head(dataset.name))


@router.get("/{name}/access")
def caller_access(dataset: ReadableDataset, principal: PrincipalDep) -> DatasetAccess:
    """The caller's principal and highest role on the dataset, as the server decides it.

    Why: a client that writes later, on someone else's behalf, asks before it takes the job.
    A CSI node plugin published a workspace volume whose ``commitTo`` its token could only
    read; the commit at unpublish was refused, every retry too, and the pod hung in
    Terminating. Computing the role from ``acl`` and ``owner`` on the client would repeat this
    module's rule and miss global admins. A dataset the caller may not read is 404, as on
    every route."""
    return DatasetAccess(
        dataset=dataset.name, principal=principal.name, role=ROLES[role_rank(principal, dataset)]
    )


@router.patch(
    "/{name}",
    responses={
        412: {"model": ErrorBody, "description": "If-Match names a revision the dataset is no longer at"}
    },
)
def update_dataset(
    body: DatasetUpdate,
    dataset: AdminDataset,
    services: ServicesDep,
    principal: PrincipalDep,
    response: Response,
    view: LineageDep,
    if_match: Annotated[
        str | None,
        Header(description='ETag from GET ("r3"), or *: 412 if the dataset changed since'),
        # schema only: expected_revision checks it, with its clear 400 (not a generic 422). A
        # header is a string or absent, never JSON null: with a "null" type in the schema a
        # client sent the text `If-Match: null` as valid (issue 37 item 8), answered 412
        WithJsonSchema({"type": "string", "pattern": IF_MATCH_PATTERN}),
    ] = None,
) -> DatasetPublic:
    """Write only the fields sent, atomically; with If-Match, only if the revision still matches.
    ``sources`` only from a global admin: they say which storage the platform reads on behalf
    of the dataset's writers, which a dataset's own admin (any tenant) must not decide."""
    fields = body.model_dump(exclude_none=True)
    if "sources" in fields and not principal.is_admin:
        raise AccessDenied(
            f"only global admins may set the sources of dataset {dataset.name!r} (the storage prefixes "
            "its writers may commit record URLs under); ask one to add the prefix",
            dataset=dataset.name,
        )
    if "acl" in fields:
        check_acl(fields["acl"])
    if "owner" in fields and fields["owner"]:
        check_principal(fields["owner"])
    updated = services.catalog.update_dataset(
        dataset.name, expected_revision=expected_revision(if_match, dataset), **fields
    )
    response.headers["ETag"] = etag(updated)
    return dataset_public(view.dataset(updated), services.catalog.store.head(dataset.name))
