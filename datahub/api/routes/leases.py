"""/v1/remote/leases/{name}: workspace writer leases for ``datahub.catalog.http_store``.

Who may: any authenticated caller (in local mode, the local admin). A workspace is not a
catalog object with an access list: a node writes it with its own object-store credentials
(``objects/workspaces/<name>``), and ``commitTo`` is checked where the commit happens. So a
lease grants nothing a caller could not already do; it only makes two writers of one
workspace refuse each other. The server appends the caller's principal to the holder it
records, so the Conflict another node sees names who holds it, and a caller cannot pose as
another principal. Renewing or releasing needs the owner id, which only the holder knows.
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, Field

from datahub.api.deps import PrincipalDep, ServicesDep
from datahub.api.schemas import NAME_SHAPE, RequestModel, Whole
from datahub.catalog.leases import MAX_TTL, Lease
from datahub.validation import check_name

router = APIRouter(prefix="/v1/remote/leases", tags=["remote store"], include_in_schema=False)
Owner = Field(min_length=1, max_length=128)


class LeaseTake(RequestModel):
    owner: str = Owner
    holder: str = Field(max_length=160)
    ttl: float = Field(gt=0, le=MAX_TTL)


class LeaseRenew(RequestModel):
    owner: str = Owner
    epoch: Whole = Field(ge=1)
    ttl: float = Field(gt=0, le=MAX_TTL)


class LeaseRelease(RequestModel):
    owner: str = Owner
    epoch: Whole = Field(ge=1)


class LeasePublic(BaseModel):
    """A lease as its holder sees it (the owner id is its own)."""

    name: str = Field(json_schema_extra=NAME_SHAPE)
    owner: str
    holder: str
    epoch: int
    expires: float


def _public(lease: Lease) -> LeasePublic:
    return LeasePublic(
        name=lease.name, owner=lease.owner, holder=lease.holder, epoch=lease.epoch, expires=lease.expires
    )


@router.post("/{name}")
def acquire(name: str, body: LeaseTake, principal: PrincipalDep, services: ServicesDep) -> LeasePublic:
    holder = f"{body.holder} [{principal.name}]"
    return _public(
        services.catalog.store.acquire_lease(check_name(name, "workspace"), body.owner, holder, body.ttl)
    )


@router.post("/{name}/renew")
def renew(name: str, body: LeaseRenew, principal: PrincipalDep, services: ServicesDep) -> LeasePublic:
    del principal  # authenticated; the owner id is what proves the lease is the caller's
    return _public(
        services.catalog.store.renew_lease(check_name(name, "workspace"), body.owner, body.epoch, body.ttl)
    )


@router.post("/{name}/release", status_code=status.HTTP_204_NO_CONTENT)
def release(name: str, body: LeaseRelease, principal: PrincipalDep, services: ServicesDep) -> Response:
    del principal
    services.catalog.store.release_lease(check_name(name, "workspace"), body.owner, body.epoch)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
