"""Writer leases: one holder per name (a workspace) among every node that shares the catalog.

Why in the catalog: a workspace's one-writer rule used to be a ``flock`` in the node's own
journal directory, so two nodes (two CSI node plugins, two ``datahub mount --workspace`` on
two machines) sharing one catalog and one objects bucket both wrote the workspace, and the
last flush silently replaced the other's acknowledged files. The catalog is the one thing
they share; a lease there makes the second opener anywhere fail (docs/writeback.md, "One writer").

A lease row is (name, owner, holder, epoch, expires, dataset). ``owner`` is the holder's
secret id (the journal's, ``datahub.writeback.lease``), never shown to others; ``holder``
says who it is for people (host, pid); ``epoch`` grows each time another owner takes the
lease; ``expires`` is a time on the store's clock; ``dataset`` is the workspace's commit
target (``commitTo``), what it writes into the catalog: kept when the lease is released or
lapses, so the API knows whose workspace a name is (a caller needs the writer role on it to
take the lease, ``datahub.api.routes.leases``), and replaced only by a take that names
another. Every store applies the same rule (``decide``): a lease may be taken when it is
free, lapsed, or already the caller's; renewed and released only by its owner at its epoch;
broken (no longer renewable, freed at its expiry or at once, on the commit target the break
names) by whoever may (the API: a global admin).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from datahub.errors import Conflict, InvalidInput
from datahub.validation import check_name, check_text

MAX_TTL = 3600.0
MAX_HOLDER = 256
# the owner of an unbroken lease read over the API, which never sends the holder's secret id
HIDDEN_OWNER = "(hidden)"
# the most leases one ``list_leases`` call (and one ``GET /v1/remote/leases`` page) answers:
# any token may add rows, so no call reads them all (review17d); ``prune_leases`` reads as many
LIST_PAGE = 1000
# how long a lease must have lapsed before ``prune_leases`` may delete it, at least: a holder
# fences itself ``ttl - ttl/6`` after its last renewal began (on its own clock), and no ttl is
# over MAX_TTL, so a lease lapsed this long has no holder left that still writes
PRUNE_LAPSED = 86400.0


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    owner: str
    holder: str
    epoch: int
    expires: float
    dataset: str = ""  # the workspace's commit target ("": none known)


# (the lease now, or None if there is none; the store's clock) -> the lease to store, or None
LeaseChange = Callable[["Lease | None", float], "Lease | None"]


def check_request(name: str, owner: str, holder: str, ttl: float, dataset: str = "") -> None:
    """InvalidInput for a lease request no store should keep (bounded strings, a sane ttl)."""
    check_name(name, "workspace")
    if dataset:
        check_name(dataset, "commit target dataset")
    if not owner or len(owner) > 128 or not owner.isascii() or not owner.isprintable():
        raise InvalidInput(f"lease of {name!r}: the owner id must be 1-128 printable ASCII characters")
    check_text(holder, f"lease of {name!r}: holder:")
    if len(holder) > MAX_HOLDER:
        raise InvalidInput(f"lease of {name!r}: the holder description is over {MAX_HOLDER} characters")
    if not 0 < ttl <= MAX_TTL:
        raise InvalidInput(f"lease of {name!r}: ttl must be in (0, {MAX_TTL:g}] seconds, not {ttl!r}")


def prunable(lease: Lease, now: float, lapsed_for: float = PRUNE_LAPSED) -> bool:
    """Whether ``prune_leases`` may delete ``lease`` at ``now``: free (released, or broken at
    once: no owner id renews it, ``holds``), or lapsed at least ``lapsed_for`` seconds ago. Never
    a held or broken one before its expiry: a live writer may still hold it. A holder that
    renews a deleted lease is refused (``renewed`` of None) and fences, so a wrong guess fails
    closed; the next take starts at epoch 1, under the rule for a name never leased."""
    return freed_at(lease) <= now - lapsed_for if lease.expires <= 0 else lease.expires <= now - lapsed_for


def freed_at(lease: Lease) -> float:
    """When a free lease was released or broken at once: ``expires`` holds minus that time (0:
    freed before 2026-11-30, when no time was kept; taken as long ago). Why keep it: a prune
    of a lease freed a moment ago (a workspace between two jobs) dropped its commit target,
    and the next take, under the rule for a name never leased, let anyone with a writer role
    on some dataset claim the name (review18c)."""
    return -lease.expires


def check_prune(limit: int, lapsed_for: float) -> None:
    """InvalidInput for a prune that could delete a lease a live holder may renew (lapsed less
    than the longest ttl ago), or for a page outside 1..``LIST_PAGE``."""
    check_page(limit)
    if not lapsed_for >= MAX_TTL:
        raise InvalidInput(
            f"a lease may be pruned once lapsed at least {MAX_TTL:g} s (the longest ttl), not {lapsed_for!r}"
        )


def check_page(limit: int) -> None:
    """InvalidInput for a page size outside 1..``LIST_PAGE``. Why: SQLite's ``LIMIT -1`` and
    MongoDB's ``limit(0)`` mean no limit, the whole table the page exists to bound."""
    if not 1 <= limit <= LIST_PAGE:
        raise InvalidInput(f"a page of writer leases holds 1 to {LIST_PAGE} of them, not {limit!r}")


def taker_of(holder: str) -> str:
    """The principal the API server appended to ``holder`` (``host NAME pid N [PRINCIPAL]``),
    "" if none. A principal has no ``[`` (``validation.PRINCIPAL_PATTERN``), so it is the text
    after the holder's last one; the stores index it to list a caller the leases it took."""
    head, bracket, tail = holder.rpartition(" [")
    return tail[:-1] if bracket and tail.endswith("]") and "[" not in tail else ""


# (a commit target, or None: the taker's leases bound to no existing dataset; a name the page
# must stay below, or None) -> at most a page of those leases named after the page's ``after``
PageRead = Callable[[str | None, str | None], list[Lease]]


def visible_page(read: PageRead, targets: Collection[str], taker: str, limit: int) -> list[Lease]:
    """The first ``limit`` leases, by name, of those bound to ``targets`` and (``taker``) those
    ``taker`` took for a dataset that does not exist: one indexed range read per target and one
    for the taker, each at most ``limit`` rows and, once a page is full, only below its last
    name. Why: a caller's page costs reads of what it may see, never of the leases hidden
    from it, which any token may add by the thousand (leasefilter18)."""
    page: dict[str, Lease] = {}
    below: str | None = None
    for target in [*sorted(set(targets) - {""}), *([None] if taker else [])]:
        for lease in read(target, below):
            page[lease.name] = lease
        if len(page) >= limit:
            page = {name: page[name] for name in sorted(page)[:limit]}
            below = max(page)
    return [page[name] for name in sorted(page)[:limit]]


def decide(
    current: Lease | None,
    name: str,
    owner: str,
    holder: str,
    ttl: float,
    now: float,
    dataset: str = "",
    bound: str | None = None,
) -> Lease:
    """The lease after ``owner`` asks for ``name`` at ``now`` for commit target ``dataset`` ("":
    keep the one it has); Conflict if someone else holds it.

    ``bound``: the commit target the caller's access was checked against (the API reads the
    lease, checks, then takes it); Conflict if the lease names another by now, so a check
    never lets a take through on a target that changed in between (None: nothing checked)."""
    target = current.dataset if current else ""
    if bound is not None and bound != target:
        raise retargeted(name)
    dataset = dataset or target
    if current is None:
        return Lease(name, owner, holder, 1, now + ttl, dataset)
    if current.owner == owner:
        return Lease(name, owner, holder, current.epoch, now + ttl, dataset)
    if current.expires > now:
        raise held(current, now)
    return Lease(name, owner, holder, current.epoch + 1, now + ttl, dataset)


def renewed(
    current: Lease | None,
    name: str,
    owner: str,
    epoch: int,
    ttl: float,
    now: float,
    bound: str | None = None,
) -> Lease:
    """The lease renewed for ``ttl`` more seconds; Conflict if it is no longer ``owner``'s at ``epoch``
    (taken over after it lapsed, or released).

    ``bound``: the commit target the renewal was authorised for (the API checked the caller's
    role on it; a holder took the lease for it); Conflict if the lease names another by now,
    so a renewal checked against dataset A never extends a lease a take with the same owner id
    bound to B in between (lease17; None: nothing checked)."""
    if current is None or not holds(current, owner, epoch):
        raise lost(name, epoch, current, now)
    if bound is not None and bound != current.dataset:
        raise retargeted(name, renewing=True)
    return Lease(name, owner, current.holder, epoch, now + ttl, current.dataset)


def retargeted(name: str, *, renewing: bool = False) -> Conflict:
    """A take or renewal refused because the lease's commit target changed since the caller's
    access was checked. The new target is not named: the caller was checked against the old
    one only, and may not read the new one (review15a)."""
    then = (
        "renewed, so the renewal (for the target it had) is refused: stop writing and reopen the workspace"
        if renewing
        else "taken; retry"
    )
    return Conflict(
        f"the commit target of workspace {name!r} changed while its writer lease was being {then}",
        workspace=name,
    )


def holds(current: Lease, owner: str, epoch: int) -> bool:
    """Whether ``owner`` at ``epoch`` may renew ``current``: it is theirs and not released (a
    lapsed one nobody took since is renewed). Why a function: the API checks a renewer's role
    only when this holds, so a stranger's refusal stays the answer of a name nobody leased."""
    return bool(owner) and current.owner == owner and current.epoch == epoch and current.expires > 0


def shown(lease: Lease, now: float) -> dict[str, str | int | float]:
    """The lease for people and tools (``datahub lease show|list``, ``GET /v1/remote/leases``):
    every field but the owner id, the holder's secret; its ``state`` at ``now``, and
    ``expires_in``, the seconds from ``now`` to its expiry (negative: lapsed that long ago; 0
    for one freed), so an operator reads it without comparing clocks."""
    return {
        "name": lease.name,
        "holder": lease.holder,
        "epoch": lease.epoch,
        "expires": max(lease.expires, 0.0),  # a free lease's is minus when it was freed (``freed_at``)
        "expires_in": round(lease.expires - now, 1) if lease.expires > 0 else 0.0,
        "dataset": lease.dataset,
        "state": state(lease, now),
    }


def state(lease: Lease, now: float) -> str:
    """For people: ``free`` (released, or broken at once), ``broken`` (held until its expiry,
    renewable by no one), ``held``, or ``lapsed`` (not renewed in time: free to take)."""
    if lease.expires <= 0:
        return "free"
    if lease.expires <= now:
        return "lapsed"
    return "held" if lease.owner else "broken"


def released(current: Lease | None, owner: str, epoch: int, now: float) -> Lease | None:
    """The lease freed (``expires`` minus ``now``, ``freed_at``; owner and epoch kept, so the next
    owner's epoch is higher), or None (nothing to write) when it is not ``owner``'s at ``epoch``
    any more."""
    if current is None or current.owner != owner or current.epoch != epoch:
        return None
    return Lease(current.name, owner, current.holder, epoch, -now, current.dataset)


def broken(current: Lease | None, dataset: str, at_once: bool, now: float) -> Lease | None:
    """The lease taken from whoever holds it, with ``dataset`` as the workspace's commit target
    ("": the one it has); None when there is no lease.

    For a name held by the wrong caller (who renews it for ever) or by a node known to be gone.
    The owner id is cleared, so no holder renews, releases or takes it back at its epoch: a
    live holder's next renewal is refused and it fences, and the next take is at a higher
    epoch. The lease stays held until the expiry it had, by when a live holder has fenced
    (it fences before its lease can lapse, on its own clock), so a break never makes two
    writers; ``at_once`` frees it now, for a holder known to write nothing any more (a dead
    node, a token that never had the workspace): a live writer would go on until its next
    renewal, and the next holder's recovery would delete its new chunks as orphans."""
    if current is None:
        return None
    expires = -now if at_once else current.expires  # at once: freed now (``freed_at``)
    return Lease(current.name, "", current.holder, current.epoch, expires, dataset or current.dataset)


def held(current: Lease, now: float) -> Conflict:
    left = max(0.0, current.expires - now)
    until = "(broken: it cannot be renewed)" if not current.owner else "unless renewed"
    return Conflict(
        f"workspace {current.name!r} is open for writing elsewhere: {current.holder} holds its "
        f"writer lease (epoch {current.epoch}), which lapses in {left:.0f} s {until} "
        f"(at {time.strftime('%H:%M:%S', time.gmtime(current.expires))} UTC); unmount it there "
        "(or unstage its volume), or wait for the lease to lapse if that node is gone",
        workspace=current.name,
        holder=current.holder,
        epoch=current.epoch,
        lapses_in=round(left, 1),
    )


def lost(name: str, epoch: int, current: Lease | None, now: float) -> Conflict:
    by = (
        f"; {current.holder} holds it now (epoch {current.epoch})"
        if current and current.expires > now
        else ""
    )
    return Conflict(
        f"the writer lease of workspace {name!r} (epoch {epoch}) is no longer ours: it lapsed and was "
        f"taken over, or was released{by}; stop writing and reopen the workspace",
        workspace=name,
        epoch=epoch,
    )
