"""/v1/remote/leases/{name}: workspace writer leases for ``datahub.catalog.http_store``.

Who may take one: a caller who may write what the workspace writes into the catalog, its
commit target (``commitTo``), which the lease keeps (``datahub.catalog.leases``): the writer
role on the target the lease already names and on the one the request names, if any. A
workspace that names no target writes only the platform's objects bucket, with a node's own
credentials the server cannot see: its lease is a global admin's (local mode: the local
admin). Why: any authenticated token could take any workspace's lease for an hour and renew it
for ever, so a token with no role anywhere refused another tenant's writer (review14c). A
missing target counts as writable by a caller who may create it (the mount's commit creates
it). A lapsed lease passes to anyone allowed by the same rule: a replacement node, with a
token that may commit what the dead one committed, takes over. A global admin may also break
a lease (``/break``): take it from whoever holds it, naming the target it commits into now if
that was wrong (``datahub.catalog.leases.broken``).

The server appends the caller's principal to the holder it records, so the Conflict another
node sees names who holds it, and a caller cannot pose as another principal. Renewing needs
the owner id, which only the holder knows, and the take's rule on the lease's target: the id
proves who holds the lease, the role that it may still write the workspace (a writer whose
role was revoked kept it for ever by renewing; lease16). Releasing needs the owner id only:
it gives the lease up. ``GET`` shows a lease, without its owner id, to who may take it, and
``GET /v1/remote/leases`` lists those bound to an existing dataset, and those the caller took
for one not created yet (every lease to a global admin), a bounded page at a time.
"""

from __future__ import annotations

import time
from dataclasses import asdict

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, Field

from datahub.api.access import Principal, can, require, require_creatable
from datahub.api.deps import PrincipalDep, Services, ServicesDep
from datahub.api.schemas import NAME_SHAPE, RequestModel, Whole
from datahub.catalog.leases import LIST_PAGE, MAX_TTL, Lease, holds, lost, retargeted, shown
from datahub.errors import AccessDenied, Conflict, DatasetNotFound, InvalidInput, NotFound
from datahub.validation import check_name

router = APIRouter(prefix="/v1/remote/leases", tags=["remote store"], include_in_schema=False)
Owner = Field(min_length=1, max_length=128)
Target = Field("", max_length=63, description="the workspace's commit target (commitTo); '': none")


class LeaseTake(RequestModel):
    owner: str = Owner
    holder: str = Field(max_length=160)
    ttl: float = Field(gt=0, le=MAX_TTL)
    dataset: str = Target


class LeaseRenew(RequestModel):
    owner: str = Owner
    epoch: Whole = Field(ge=1)
    ttl: float = Field(gt=0, le=MAX_TTL)
    dataset: str | None = Field(
        None, max_length=63, description="renew only if the lease names this commit target ('': none)"
    )


class LeaseRelease(RequestModel):
    owner: str = Owner
    epoch: Whole = Field(ge=1)


class LeaseBreak(RequestModel):
    dataset: str = Target
    at_once: bool = False


class LeasePublic(BaseModel):
    """A lease as its holder sees it (the owner id is its own)."""

    name: str = Field(json_schema_extra=NAME_SHAPE)
    owner: str
    holder: str
    epoch: int
    expires: float
    dataset: str


class LeaseShown(BaseModel):
    """A lease as ``GET`` shows it: never the owner id (the holder's secret); ``state`` on the
    server's clock (``datahub.catalog.leases.state``)."""

    name: str = Field(json_schema_extra=NAME_SHAPE)
    holder: str
    epoch: int
    expires: float
    expires_in: float = Field(
        description="seconds to its expiry on the server's clock (< 0: lapsed; 0: free)"
    )
    dataset: str
    state: str = Field(description="free, broken, held or lapsed (datahub.catalog.leases.state)")


def _public(lease: Lease) -> LeasePublic:
    return LeasePublic(**asdict(lease))


def _require_writer(
    principal: Principal, services: Services, name: str, bound: str, dataset: str, *, leased: bool
) -> None:
    """AccessDenied (or the 404 of a named dataset the caller may not read) unless ``principal``
    may write the commit target the lease names (``bound``) and the one it asks for; a
    workspace with neither, or one leased before (``leased``) with no target, is a global
    admin's. Why the second: a lease bound to no target is an admin's no-target workspace (or
    one leased before targets were recorded); taking it naming a dataset of one's own made
    the name first come again after every release (review15a)."""
    if principal.is_admin:
        return
    if not (bound or dataset):
        raise AccessDenied(
            f"workspace {name!r} names no commit target, so it writes only the platform's objects "
            f"bucket and its writer lease is a global admin's to take over the API; mount it with "
            f"--commit-to a dataset {principal.name!r} may write (a CSI volume: commitTo), or use an "
            "admin token",
            workspace=name,
        )
    if leased and not bound:
        raise AccessDenied(
            f"workspace {name!r} was leased with no commit target (an admin's workspace, or one "
            "leased before the catalog recorded targets, schema 7), so only a global admin may "
            f"take its writer lease: {_BIND.format(name=name)}, then its writers take it",
            workspace=name,
        )
    if dataset:
        _require_target(principal, services, dataset)
    if bound and bound != dataset:
        try:
            _require_target(principal, services, bound)
        except (AccessDenied, DatasetNotFound):
            raise AccessDenied(
                f"workspace {name!r} commits into a dataset {principal.name!r} may not write (its "
                "writer lease names it), so this token may not take the lease: ask an admin of that "
                "dataset for the writer role, or a global admin to break the lease if the name was "
                f"taken by the wrong caller: 'datahub lease break {name} --dataset TARGET --at-once'",
                workspace=name,
            ) from None


# how a global admin binds a lease to its commit target (docs/cli.md, "Writer leases")
_BIND = (
    "a global admin binds it to the dataset it commits into with 'datahub lease break {name} "
    '--dataset TARGET\' (POST /v1/remote/leases/{name}/break with {{"dataset": ...}})'
)


def _require_target(principal: Principal, services: Services, target: str) -> None:
    """The writer role on ``target``; a missing one counts if the caller may create it (the
    workspace's commit creates it). One hidden from the caller is a missing dataset's 404, but
    its message says so and names the grant: "create it first" sent a node whose role was
    taken away to create a dataset that exists."""
    try:
        found = services.catalog.get_dataset(target)
    except DatasetNotFound:
        require_creatable(principal, target)
        return
    if not can(principal, found, "reader"):
        # a name the caller may not create answers as a missing one does (403), not 404: else a
        # bucket snapshot's name (s3.<bucket>.<prefix>) told whether it exists (review15a)
        require_creatable(principal, target)
        raise DatasetNotFound(
            f"commit target {target!r} is missing or not visible to {principal.name!r} (a dataset the "
            "caller holds no role on answers as a missing one), so this token may not take the "
            "writer lease of a workspace committed into it: ask the dataset's admins for the writer "
            f"role (datahub dataset update {target} --grant {principal.name}=writer)",
            dataset=target,
        )
    require(principal, found, "writer")


@router.post("/{name}")
def acquire(name: str, body: LeaseTake, principal: PrincipalDep, services: ServicesDep) -> LeasePublic:
    name = check_name(name, "workspace")
    dataset = check_name(body.dataset, "commit target dataset") if body.dataset else ""
    _check_holder(name, body.holder)
    store = services.catalog.store
    current = store.lease(name)
    bound = current.dataset if current else ""
    _require_writer(principal, services, name, bound, dataset, leased=current is not None)
    holder = f"{body.holder} [{principal.name}]"
    return _public(store.acquire_lease(name, body.owner, holder, body.ttl, dataset, bound=bound))


class LeaseList(BaseModel):
    """A page of ``GET /v1/remote/leases``: ask again with ``after=next`` until ``next`` is null."""

    leases: list[LeaseShown]
    next: str | None = Field(description="the name to continue after; null: no lease follows")


@router.get("")
def list_(
    principal: PrincipalDep,
    services: ServicesDep,
    after: str = Query("", max_length=63, description="list the leases named after this one"),
    limit: int = Query(LIST_PAGE, ge=1, le=LIST_PAGE, description="at most this many leases"),
) -> LeaseList:
    """Every lease to a global admin; to anyone else those bound to a dataset they may write
    (``GET /{name}`` shows them those too), and those they took for a dataset not created yet
    (``_listed_to``), so a token with no role anywhere lists nothing (promise 5: a lease bound
    to a dataset the caller may not read, or to no target, is not listed). In name order, a
    page of at most ``limit``. The store filters (``CatalogStore.list_leases``, by index):
    ``next`` is the last lease of a full page, one the caller sees, never a hidden name (a
    scan window filtered here answered the last hidden lease read, so a token with no role
    walked every workspace name, review18b), and a page reads what the caller may see, not
    the leases hidden from it (review17d)."""
    store = services.catalog.store
    if principal.is_admin:
        read = store.list_leases(after, limit)
    else:
        targets = [d.name for d in services.catalog.list_datasets() if can(principal, d, "writer")]
        read = store.list_leases(after, limit, targets=targets, taker=principal.name)
    now, listed, rows = time.time(), {}, []
    for lease in read:
        # the route's own rule again, one role check per target: a dataset created since the
        # store's read, or the caller's lease an admin rebound to a name it may not create
        if lease.dataset not in listed:
            listed[lease.dataset] = _listed_to(principal, services, lease.name, lease.dataset)
        shows = listed[lease.dataset]
        if shows or (shows is None and lease.holder.endswith(f" [{principal.name}]")):
            rows.append(LeaseShown(**shown(lease, now)))
    return LeaseList(leases=rows, next=read[-1].name if len(read) == limit else None)


def _listed_to(principal: Principal, services: Services, name: str, target: str) -> bool | None:
    """Whether the list shows ``principal`` the leases bound to ``target``; None: only those it
    took (the holder ends with the principal the server appended), the target being a dataset
    that does not exist. Why: any token may create such a name, so the take's rule lets any
    token take (and ``GET``) the lease by name; listed to every token, a workspace's holder
    (host, pid, principal) and the dataset its first commit will create were shown to tokens
    with no role anywhere, which needed no name to ask for (review17d)."""
    if principal.is_admin:
        return True
    if not _may_take(principal, services, name, target):
        return False
    try:
        services.catalog.get_dataset(target)
    except DatasetNotFound:
        return None
    return True


def _check_holder(name: str, holder: str) -> None:
    """InvalidInput for a holder that is not one printable line. Why: the holder is the taker's
    own text, shown to others (the next taker's Conflict in its terminal and its node's log,
    ``datahub lease show``): a newline forged a line there, an escape sequence rewrote an
    admin's terminal (review17b). A node's holder is ``host NAME pid N``."""
    if not holder.isprintable():
        raise InvalidInput(
            f"lease of {name!r}: the holder must be one line of printable characters (a node sends "
            f"'host NAME pid N'), not {holder[:160]!r}",
            workspace=name,
        )


@router.get("/{name}")
def show(name: str, principal: PrincipalDep, services: ServicesDep) -> LeaseShown:
    """The lease to a global admin and to a caller who may take it; to anyone else the 404 of a
    name nobody leased (the take's rule keeps who holds it from a stranger, review15a)."""
    name = check_name(name, "workspace")
    current = services.catalog.store.lease(name)
    if current is None or not _may_take(principal, services, name, current.dataset):
        raise NotFound(f"workspace {name!r} has no writer lease", workspace=name)
    return LeaseShown(**shown(current, time.time()))


@router.post("/{name}/renew")
def renew(name: str, body: LeaseRenew, principal: PrincipalDep, services: ServicesDep) -> LeasePublic:
    """The owner id proves the lease is the caller's, and the take's rule that the caller may
    still write what the workspace writes: a holder whose role was revoked is refused (403) and
    fences. The role is checked only for the caller who holds the id, so to anyone else a
    refused renewal stays a 409 that names who holds the lease now only to a caller who may
    take it (review15a)."""
    name = check_name(name, "workspace")
    store = services.catalog.store
    try:
        current = store.lease(name)
        if current is None or not holds(current, body.owner, body.epoch):
            # refused without a renewal: no role was checked, and a take with this owner id
            # in between would make the store's renewal pass (lease17)
            raise lost(name, body.epoch, current, time.time())
        _require_renewer(principal, services, name, current.dataset)
        if body.dataset is not None and body.dataset != current.dataset:
            raise retargeted(name, renewing=True)
        # renewed only if the lease still names the target the role was checked on: a take
        # with the same owner id between the check and here may have rebound it (lease17)
        return _public(store.renew_lease(name, body.owner, body.epoch, body.ttl, bound=current.dataset))
    except Conflict:
        current = store.lease(name)
        if current is None or _may_take(principal, services, name, current.dataset):
            raise
        raise lost(name, body.epoch, None, 0.0) from None


def _require_renewer(principal: Principal, services: Services, name: str, bound: str) -> None:
    """AccessDenied, saying the lease is not renewed and why, unless ``principal`` may take the
    lease it holds. The target is not named: the caller may not read it any more."""
    if _may_take(principal, services, name, bound):
        return
    if not bound:
        why = (
            f"it names no commit target (leased before schema 7, or an admin's workspace), so only a "
            f"global admin renews it: {_BIND.format(name=name)}, then remount it"
        )
    else:
        why = (
            f"{principal.name!r} may no longer write the dataset it commits into (its writer role "
            "was revoked, or it never had it): ask that dataset's admins for the role, then "
            "remount it"
        )
    raise AccessDenied(
        f"the writer lease of workspace {name!r} is not renewed: {why}; the holder stops writing "
        "(what it did not flush stays in its journal) and its lease lapses within its ttl",
        workspace=name,
    )


def _may_take(principal: Principal, services: Services, name: str, bound: str) -> bool:
    """Whether ``principal`` passes the take's check on a lease bound to ``bound``: only such a
    caller learns who holds it (host, pid, principal), sees it (``GET``) or renews it. Why: a
    refused renewal's 409 named the holder to any token, the very thing the take's check keeps
    from a stranger (review15a)."""
    try:
        _require_writer(principal, services, name, bound, "", leased=True)
    except (AccessDenied, DatasetNotFound):
        return False
    return True


@router.post("/{name}/release", status_code=status.HTTP_204_NO_CONTENT)
def release(name: str, body: LeaseRelease, principal: PrincipalDep, services: ServicesDep) -> Response:
    """The owner id alone: releasing only gives the lease up, which a holder whose role was
    revoked should do; a wrong id releases nothing, and the answer is 204 either way."""
    del principal
    services.catalog.store.release_lease(check_name(name, "workspace"), body.owner, body.epoch)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{name}/break", response_model=None)
def break_(
    name: str, body: LeaseBreak, principal: PrincipalDep, services: ServicesDep
) -> LeasePublic | Response:
    """A global admin takes the lease from whoever holds it (its holder fences at its next
    renewal; the lease is free at its expiry, or at once with ``at_once``); 204 if the
    workspace never had one."""
    name = check_name(name, "workspace")
    if not principal.is_admin:
        raise AccessDenied(
            f"only a global admin may break the writer lease of workspace {name!r}; "
            "its holder releases it at unmount, or it lapses within its ttl if that node is gone",
            workspace=name,
        )
    dataset = check_name(body.dataset, "commit target dataset") if body.dataset else ""
    lease = services.catalog.store.break_lease(name, dataset, at_once=body.at_once)
    return Response(status_code=status.HTTP_204_NO_CONTENT) if lease is None else _public(lease)
