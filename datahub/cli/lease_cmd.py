"""``datahub lease list|prune``, ``datahub lease show|break NAME``: workspaces' writer leases, for the operator.

Why: a name squatted by the wrong caller, a node known to be gone, or a lease from before
schema 7 with no commit target is freed or bound only by a global admin's break, and before
this the only way was a hand-made ``POST /v1/remote/leases/{name}/break``; ``list`` finds the
names to look at (who holds what, lapsing when) without knowing them first. They go
through the catalog the configuration names: an embedded one directly (whoever has its file
is its admin), a remote one (``--catalog http://…``) over the API's routes, which decide who
may (docs/api.md, "Workspace writer leases"). The owner id, the holder's secret, is never shown.
"""

from __future__ import annotations

import argparse
import time

from datahub.console.context import CliContext
from datahub.console.context import shown as for_terminal
from datahub.errors import NotFound
from datahub.words import counted


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lease", help="list, show, break or prune workspaces' writer leases")
    lsub = p.add_subparsers(dest="lease_command", metavar="ACTION", required=True)
    ls = lsub.add_parser(
        "list",
        help="every workspace's writer lease: holder, commit target, epoch, seconds to expiry, state",
        description="Over the API: every lease to a global admin, else those of the commit "
        "targets the token may write (as 'lease show' answers name by name).",
    )
    ls.set_defaults(func=list_)
    s = lsub.add_parser("show", help="who holds a workspace's writer lease, until when, for which target")
    s.add_argument("name", help="the workspace")
    s.set_defaults(func=show)
    b = lsub.add_parser(
        "break",
        help="take a workspace's writer lease from whoever holds it (a global admin's)",
        description="The holder can no longer renew it and fences at its next renewal; the "
        "lease is free at the expiry it had, or at once with --at-once.",
    )
    b.add_argument("name", help="the workspace")
    b.add_argument(
        "--dataset",
        default="",
        help="bind the workspace to this commit target (default: keep the one it names)",
    )
    b.add_argument(
        "--at-once",
        action="store_true",
        help="free it now: only for a holder known to write nothing (a dead node, a squatter)",
    )
    b.set_defaults(func=break_)
    pr = lsub.add_parser(
        "prune",
        help="delete free leases and those lapsed a day (or --lapsed-for) ago (on the catalog itself)",
        description="A pruned name forgets its commit target: its next take is as of a name never "
        "leased (whoever may write the target it names). Held leases, and broken ones before their "
        "expiry, are kept.",
    )
    pr.add_argument(
        "--lapsed-for",
        type=float,
        default=None,
        metavar="N",
        help="prune leases lapsed at least N seconds ago (default 86400, at least 3600)",
    )
    pr.set_defaults(func=prune)


LIST_COLUMNS = ("name", "dataset", "holder", "epoch", "expires_in", "state")


def list_(args: argparse.Namespace, ctx: CliContext) -> int:
    """Every lease, read a page at a time (the store answers at most ``LIST_PAGE``; over the API
    it follows the server's ``next``) until a short page, the end."""
    from datahub.catalog.leases import LIST_PAGE, shown

    del args
    now = time.time()  # as ``show``: on this machine's clock (over the API, expiries are the server's)
    rows, after = [], ""
    while True:
        page = ctx.catalog.store.list_leases(after, LIST_PAGE)
        rows += [shown(lease, now) for lease in page]
        if len(page) < LIST_PAGE:
            break
        after = page[-1].name
    ctx.emit(rows, columns=LIST_COLUMNS)
    return 0


def prune(args: argparse.Namespace, ctx: CliContext) -> int:
    """Every lease, a page (one bounded store call) at a time, each page's prunable ones deleted."""
    from datahub.catalog.leases import LIST_PAGE, PRUNE_LAPSED

    lapsed_for = PRUNE_LAPSED if args.lapsed_for is None else args.lapsed_for
    pruned: list[str] = []
    after: str | None = ""
    while after is not None:
        gone, after = ctx.catalog.store.prune_leases(after, LIST_PAGE, lapsed_for)
        pruned += gone
    ctx.emit(
        {"pruned": len(pruned), "names": pruned},
        text=f"pruned {counted(len(pruned), 'writer lease')}: free, or lapsed {lapsed_for:g} s ago or more",
    )
    return 0


def show(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.catalog.leases import shown  # not for `datahub --help` (tests/test_startup.py)

    lease = ctx.catalog.store.lease(args.name)
    if lease is None:
        raise _none(args.name)
    ctx.emit(shown(lease, time.time()))  # on this machine's clock
    return 0


def break_(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.catalog.leases import shown

    lease = ctx.catalog.store.break_lease(args.name, args.dataset, at_once=args.at_once)
    if lease is None:
        raise _none(args.name, " (nothing to break)")
    view = shown(lease, time.time())
    when = (
        "free now"
        if view["state"] in ("free", "lapsed")
        else f"held until {_utc(lease.expires)}, then free (its holder fences at its next renewal)"
    )
    target = f"commit target {lease.dataset!r}" if lease.dataset else "no commit target"
    ctx.emit(
        view,
        text=f"broke the writer lease of workspace {lease.name!r} ({for_terminal(lease.holder)}, epoch {lease.epoch}, "
        f"{target}): nobody renews it; {when}",
    )
    return 0


def _none(name: str, why: str = "") -> NotFound:
    return NotFound(
        f"workspace {name!r} has no writer lease{why}: it was never opened for writing, or (over "
        "the API) this token may not see it: only a global admin and the writers of its commit "
        "target may",
        workspace=name,
    )


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
