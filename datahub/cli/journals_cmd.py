"""``datahub cache journals`` and ``datahub cache forget-journal NAME JOURNAL_ID --yes``.

Why: every workspace journal writes under its own prefix of the shared tier
(``writeback/<workspace>/j-<journal id>/``, docs/writeback.md "Each journal's own chunk
prefix") and flushes into its own folder of the flush target (``<target>/j-<journal id>/``),
and a node that never comes back leaves both there: nothing but an operator can tell that
node is gone. ``journals`` shows every shared-tier prefix (``datahub.writeback.journals``);
``forget-journal`` deletes one and the journal's flushed files (never another journal's:
only names under its own folder), behind guards so that nothing acknowledged is lost by accident
(promise 3): never this node's own journal; never while anyone else holds the workspace's
writer lease, this node's own mount included (the command takes it in its own name, so the
catalog judges it: ``LeaseGuard``), and not at all without a lease to ask unless ``--force``; and only after printing what goes (objects, bytes, the paths
its cover records name) with ``--yes``. ``cache_cmd`` adds these under ``cache``.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time
import uuid

from datahub.console.context import CliContext, shown
from datahub.errors import Conflict, DatahubError, InvalidInput, NotFound
from datahub.validation import check_name
from datahub.words import counted

log = logging.getLogger(__name__)

JOURNAL_COLUMNS = ("workspace", "journal", "objects", "bytes", "newest", "this_node", "covers", "forgotten")
SHOWN_PATHS = 20  # cover-record paths printed in text (all of them with --json)


def add_journals_parsers(subparsers: argparse._SubParsersAction) -> None:
    """``cache journals``, ``cache forget-journal`` and ``cache adopt-journal`` on ``datahub
    cache``'s subparsers."""
    ls = subparsers.add_parser(
        "journals",
        help="every workspace journal's prefix in the shared tier: objects, bytes, newest, this node's",
        description="One row per journal prefix (writeback/<workspace>/j-<id>/) of the configured "
        "shared tier, and one for keys from before journal ids; 'covers' counts the cover records "
        "its packs (or RADOS xattrs) hold, the small files a recovery could name.",
    )
    ls.add_argument("--workspace", "-w", metavar="NAME", help="only this workspace (default: all)")
    ls.set_defaults(func=journals)
    fj = subparsers.add_parser(
        "forget-journal",
        help="delete a retired node's journal prefix from the shared tier and its flushed files "
        "(needs --yes)",
        description="Deletes the journal's prefix of the shared tier and its own folder of the "
        "flush target (<objects_url>/workspaces/<name>/j-<id>/, or under --target). Refused for "
        "this node's own journal and while anyone else holds the workspace's writer lease (another "
        "node, or a mount of the workspace on this node: unmount it first); "
        "prints what it deletes, including the paths the journal's cover records name "
        "(acknowledged small files, lost if that node never flushed them) and its flushed files "
        "(lost unless committed). Run it again to finish a delete that was cut short.",
    )
    fj.add_argument("workspace", metavar="NAME", help="the workspace")
    fj.add_argument("journal", metavar="JOURNAL_ID", help="the journal id, as `cache journals` shows it")
    fj.add_argument(
        "--yes", action="store_true", help="delete (without it: show what would go, delete nothing)"
    )
    fj.add_argument(
        "--target",
        metavar="URL",
        help="the flush target the workspace was opened with, if not the default "
        "(<objects_url>/workspaces/<name>): the journal's flushed files are under <URL>/j-<id>/",
    )
    fj.add_argument(
        "--drop-marker",
        action="store_true",
        help="also delete the journal's marker (left by an earlier run that found no flushed files "
        "under its target) although none are found under this one: the journal flushed nothing, "
        "or its folder is known gone",
    )
    fj.add_argument(
        "--force",
        action="store_true",
        help="delete although no writer lease can tell whether that node is gone (no catalog, or "
        "the workspace has no lease)",
    )
    fj.set_defaults(func=forget_journal)
    aj = subparsers.add_parser(
        "adopt-journal",
        help="take a lost node's acknowledged files into this node's workspace, rebuilt from the "
        "shared tier alone",
        description="Rebuilds journal JOURNAL_ID of workspace NAME (another node's, lost with its "
        "disk) from its shared log and cover records in the shared tier, checks every chunk its "
        "files name, and writes those files into this node's journal of the workspace, under its "
        "writer lease (free or lapsed: the lost node's lease must have run out; refused without a "
        "catalog to hold it; after a break --at-once, or a release less than 30 s ago, it first waits "
        "out the old holder's fence, up to 30 s), then flushes them. The lost journal's own next open is refused from then on. "
        "Nothing is written if an acknowledged file's bytes cannot be proven whole (unless "
        "--partial); run it again after a crash. Unmount the workspace here first.",
    )
    aj.add_argument("workspace", metavar="NAME", help="the workspace")
    aj.add_argument(
        "journal", metavar="JOURNAL_ID", help="the lost journal's id, as `cache journals` shows it"
    )
    aj.add_argument(
        "--force", action="store_true", help="adopt although another journal adopted it (or began to)"
    )
    aj.add_argument(
        "--replace",
        action="store_true",
        help="take the lost journal's bytes where this node's journal holds other bytes at the same "
        "path (without it such a path refuses the adoption: this node's file may be newer)",
    )
    aj.add_argument(
        "--partial",
        action="store_true",
        help="adopt every file whose bytes are whole and list each one that is not (path, why; "
        "also kept in the adoption marker in the shared tier); without it one such file refuses "
        "the whole adoption",
    )
    aj.set_defaults(func=adopt_journal)


def _shared(ctx: CliContext):
    return ctx.stores.shared_store(ctx.config.resolved_shared_url)


def journals(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.writeback.journals import journal_prefixes

    workspace = check_name(args.workspace, "workspace") if args.workspace else None
    rows = [entry.as_dict() for entry in journal_prefixes(ctx.config, _shared(ctx), workspace)]
    if ctx.json_output:
        ctx.emit(rows)
        return 0
    shown = [
        row
        | {
            "journal": row["journal"] or "(before ids)",
            "newest": _utc(row["newest"]),
            "this_node": "yes" if row["this_node"] else "",
            "forgotten": "marker" if row["forgotten"] else "",
        }
        for row in rows
    ]
    ctx.emit(shown, columns=JOURNAL_COLUMNS)
    if not rows:
        ctx.emit(None, text=f"no journal prefixes in {ctx.config.resolved_shared_url}")
    return 0


def forget_journal(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.writeback.journals import check_journal_id, journal_prefix

    name, journal = check_name(args.workspace, "workspace"), check_journal_id(args.journal)
    what = f"journal {journal} of workspace {name!r}"
    store = _shared(ctx)
    entry = journal_prefix(ctx.config, store, name, journal)
    if entry.this_node:
        raise Conflict(
            f"{what} is this node's own journal: its prefix holds the chunks of this node's files "
            "(flushed or not) and only its own recovery may judge them; forget it from another "
            "node once this one is retired",
            workspace=name,
            journal=journal,
        )
    guard = LeaseGuard(ctx, name, what, force=args.force)
    try:
        return _forget(args, ctx, store, entry, guard)
    finally:
        guard.release()


def adopt_journal(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.workspaces import leased
    from datahub.writeback import open_workspace
    from datahub.writeback.adopt import adopt_journal as adopt
    from datahub.writeback.adopt import await_fenced
    from datahub.writeback.journals import check_journal_id

    name, journal = check_name(args.workspace, "workspace"), check_journal_id(args.journal)
    lease = ctx.catalog.store if leased(ctx.config.resolved_catalog_url) else None
    before = lease.lease(name) if lease is not None else None  # broken at once? (``await_fenced``)
    ws = open_workspace(name, ctx.config, ctx.stores, background=False, lease=lease)
    with ws:  # its close flushes the adopted files to the origin
        if lease is not None:
            await_fenced(ws, lease, before)
        report = adopt(ws, journal, ctx.stores, force=args.force, replace=args.replace, partial=args.partial)
    row = report.to_dict()
    if ctx.json_output:
        ctx.emit(row)
        return 0
    if report.already:
        ctx.emit(None, text=f"journal {journal} of workspace {name!r} was adopted here already")
        _not_adopted(ctx, report.not_adopted)
        return 0
    ctx.emit(
        None,
        text=f"adopted journal {journal} of workspace {name!r}: {counted(len(report.files), 'file')} "
        f"({counted(report.bytes, 'byte')}), {counted(report.directories, 'directory')}; "
        f"{counted(report.covers, 'small file')} from "
        f"cover records; left out (their first close never returned): {', '.join(report.dropped) or 'none'}",
    )
    _not_adopted(ctx, report.not_adopted)
    return 0


def _not_adopted(ctx: CliContext, items: list[dict]) -> None:
    """The files a ``--partial`` adoption left out, each on a line of its own (another node's
    names: ``shown`` makes any control character visible)."""
    for item in items:
        ctx.emit(None, text=f"not adopted (its bytes are not whole): {shown(item['path'])}: {item['why']}")


def _forget(args: argparse.Namespace, ctx: CliContext, store, entry, guard: LeaseGuard) -> int:
    from datahub.writeback import default_target
    from datahub.writeback.journals import (
        cover_records,
        drop_marker,
        forget_objects,
        journal_objects,
        mark_forgotten,
        marked_folder,
    )
    from datahub.writeback.journals import forget_journal as forget

    name, journal, what = guard.name, entry.journal, guard.what
    guard.check()
    target = args.target or default_target(ctx.config, name)
    flushed = journal_objects(ctx.stores, target, name, journal)
    if not entry.objects and not entry.forgotten:  # only its prefix shows the folder is this workspace's
        found = f"{counted(flushed.objects, 'file')} under {flushed.url}/, but " if flushed.objects else ""
        raise NotFound(
            f"{what}: {found}nothing under {entry.prefix} in {ctx.config.resolved_shared_url}, so "
            "no journal of that id is shown to be this workspace's (already forgotten, or a wrong id, "
            "or another workspace's journal flushing to that target: `datahub cache journals` lists "
            "them); nothing deleted",
            workspace=name,
            journal=journal,
        )
    marked = marked_folder(store, entry)
    # the folder is gone once the one a run found non-empty is empty now (the marker named it)
    gone = flushed.objects > 0 or marked == flushed.url or args.drop_marker
    if not entry.objects and not flushed.objects and not gone:
        raise NotFound(
            f"{what}: already forgotten, or a wrong id: only its marker is left under {entry.prefix} in "
            f"{ctx.config.resolved_shared_url} "
            + (
                f"(its flushed files were under {marked}/), "
                if marked
                else "(no run found its flushed files), "
            )
            + f"and nothing is under {flushed.url}/: if the workspace flushed to a target of its own, "
            "run again with --target URL; if the journal flushed nothing, or its folder is known gone, "
            "add --drop-marker; nothing deleted",
            workspace=name,
            journal=journal,
        )
    records = list(cover_records(store, entry))
    entry.covers, paths = len(records), sorted({record["path"] for record in records})
    plan = entry.as_dict() | {
        "cover_paths": paths,
        "flushed_url": flushed.url,
        "flushed_objects": flushed.objects,
        "flushed_bytes": flushed.bytes,
        "flushed_paths": sorted(flushed.sizes),
        "marked_flushed_url": marked,
    }
    if not (args.yes and ctx.json_output):  # with --json, one document: the plan and what went
        ctx.emit(plan, text=_plan_text(entry, paths, flushed, ctx.config.resolved_shared_url))
    total = entry.objects + flushed.objects
    if not args.yes:
        raise InvalidInput(
            f"nothing deleted: add --yes to delete {what} ({counted(total, 'object')}) once that node "
            "is retired and the files above are flushed and committed, or not needed",
            workspace=name,
            journal=journal,
        )
    with ctx.progress(total, f"forget {what}") as progress:
        # the marker first, naming the folder if found non-empty: the prefix, which ties the
        # folder to this workspace (above), outlives the delete while the folder may be
        # elsewhere (a wrong --target: review19a); then the flushed files, the prefix's
        # other objects, and the marker last, once the folder is gone
        guard.check()
        if flushed.objects or not entry.forgotten:
            mark_forgotten(store, entry, flushed.url if flushed.objects else marked)
        files, fbytes = forget_objects(
            ctx.stores, flushed, lambda size: progress.update(1, size), guard.check
        )
        objects, nbytes = forget(
            store,
            entry,
            lambda size: progress.update(1, size),
            guard.check,  # renewed before each batch
        )
        if gone:
            guard.check()
            drop_marker(store, entry)
    kept = (
        ""
        if gone
        else f"; its marker {entry.marker} stays: no flushed files were under {flushed.url}/, so if "
        "the workspace flushed to a target of its own, run again with --target URL (or add "
        "--drop-marker if the journal flushed nothing)"
    )
    ctx.emit(
        plan
        | {"deleted_objects": objects + files, "deleted_bytes": nbytes + fbytes, "marker_kept": not gone},
        text=f"deleted {what}: {counted(objects, 'object')}, {counted(nbytes, 'byte')} under {entry.prefix}; "
        f"{counted(files, 'flushed file')}, {counted(fbytes, 'byte')} under {flushed.url}/{kept}",
    )
    return 0


def _plan_text(entry, paths: list[str], flushed, shared_url: str) -> str:
    files = sorted(flushed.sizes)
    lines = [
        f"journal {entry.journal} of workspace {entry.workspace!r}: {counted(entry.objects, 'object')}, "
        f"{counted(entry.bytes, 'byte')} under {entry.prefix} in {shared_url} (newest {_utc(entry.newest)})",
        f"its cover records name {counted(len(paths), 'small file')}, acknowledged by that node and lost "
        "if it did not flush them:",
        *(f"  {shown(path)}" for path in paths[:SHOWN_PATHS]),  # another node's names: one line each
    ]
    if len(paths) > SHOWN_PATHS:
        lines.append(f"  ... and {len(paths) - SHOWN_PATHS} more (--json lists them all)")
    lines += [
        f"its flushed files: {counted(flushed.objects, 'object')}, {counted(flushed.bytes, 'byte')} under {flushed.url}/ "
        "(lost unless committed):",
        *(f"  {shown(path)}" for path in files[:SHOWN_PATHS]),
    ]
    if len(files) > SHOWN_PATHS:
        lines.append(f"  ... and {len(files) - SHOWN_PATHS} more (--json lists them all)")
    return "\n".join(lines)


class LeaseGuard:
    """Holds the workspace's writer lease, in this run's own name, while a journal is deleted.

    Why a take, not a look: a lease's expiry is a time on the catalog's clock (the SQLite host's,
    the MongoDB server's, the API server's: ``datahub.catalog.leases``), and judging it on this
    machine's clock let a clock 2 minutes ahead see a live node's renewed lease as lapsed and
    delete that node's acknowledged chunks (review17f). Taking the lease under an owner id of
    this run lets the catalog judge it on its own clock: refused (Conflict) while anyone else
    holds it.

    Why its own name, always: only the owner at its epoch may renew or release a lease, so
    while this run holds it no one else can free it, and a renewal at the same epoch before
    each batch proves nobody held it in between (an epoch grows with every other owner's take).
    A lease this node's mount holds is refused like any other holder's, with "unmount it here
    first": renewed under the mount's id (as before guard19), the mount's unmount freed it
    mid-delete and the node being retired could take it back between two batches while its
    folder was deleted (review18c); taken under the mount's id when free and released at the
    end, it freed the lease under a mount of this node started meanwhile (review18a). Taking
    it from a mount that still writes would fence that mount (its writes fail), so the command
    asks for the unmount instead. A free or lapsed lease is taken under this run's id, so a
    mount of the workspace starting anywhere meanwhile (this node's too) is refused until the
    delete ends.

    No lease to ask (an embedded catalog that does not exist, or a workspace never leased):
    refused unless ``force``; over the API always, since the server answers "none" for a lease
    this token may not see. Forced with a catalog but no row (``lease prune`` deletes free
    ones), the name is taken all the same: the guard must hold it, or the node being retired
    takes it back mid-delete (review18c). The same rule holds on every catalog (SQLite,
    MongoDB, the API): each applies ``leases.decide``, ``renewed`` and ``released``."""

    def __init__(self, ctx: CliContext, name: str, what: str, *, force: bool) -> None:
        self.ctx, self.name, self.what, self.force = ctx, name, what, force
        self.owner = uuid.uuid4().hex
        self.holder = f"host {socket.gethostname()} pid {os.getpid()} (datahub cache forget-journal)"
        self.taken = None  # the lease this run holds

    def check(self) -> None:
        """Take the lease, then renew it at the epoch taken; Conflict if anyone else holds it, or
        held it since the last check, on the catalog's clock."""
        from datahub.workspaces import leased
        from datahub.writeback.lease import LEASE_TTL

        name, what = self.name, self.what
        url = self.ctx.config.resolved_catalog_url
        store = self.ctx.catalog.store if leased(url) else None
        if self.taken is not None:
            self._renew(store, LEASE_TTL)
            return
        lease = store.lease(name) if store is not None else None
        if lease is None and url.startswith(("http://", "https://")):
            raise Conflict(  # the API answers "none" for a lease this token may not see: never --force
                f"{what}: the catalog at {url} shows this token no writer lease of {name!r}, and over "
                "the API that may be one it may not see (a lease is shown to a global admin and the "
                "writers of its commit target only); run this with a global admin's token in "
                "$DATAHUB_API_TOKEN (if it is one, the workspace's nodes lease it in another catalog: "
                "point --catalog at theirs)",
                workspace=name,
            )
        if lease is None and not self.force:
            raise Conflict(
                f"{what}: no writer lease of {name!r} to tell whether the node that wrote it is gone "
                "(no catalog here, the workspace was never opened with one, or `datahub lease prune` "
                "deleted it); check that node is retired, then add --force",
                workspace=name,
            )
        if lease is None and store is None:
            return  # forced, with no catalog to hold the name in
        # forced with a catalog but no row (never leased, or pruned: leftovers18) the name is
        # taken as a free one is, so the node being retired cannot take it back mid-delete
        # (review18c); Conflict below if a node took it since it was read
        dataset = lease.dataset if lease is not None else ""
        try:
            self.taken = store.acquire_lease(name, self.owner, self.holder, LEASE_TTL, dataset)
        except Conflict:
            lease = lease or store.lease(name)  # no row when read: whoever took it since
            if lease is None:  # refused, yet no row to name: the catalog's own words
                raise
            raise self._refused(lease) from None

    def _renew(self, store, ttl: float) -> None:
        """The lease renewed at the epoch this run took it at. Why not a take again: a take is
        granted on a free or lapsed lease, so one that lapsed during a batch, was taken by the
        node being retired and freed again would be taken back silently; a renewal is refused
        once any other owner took it (a higher epoch), and the delete stops."""
        try:
            self.taken = store.renew_lease(self.name, self.owner, self.taken.epoch, ttl)
        except Conflict as exc:
            self.taken = None  # not ours any more: nothing to release
            raise Conflict(
                f"{self.what}: the writer lease of {self.name!r} that this command held for the delete "
                f"is no longer its own ({exc.message}); nothing more is deleted. Check that the node "
                f"being retired is gone (`datahub lease show {self.name}`), then run this again to "
                "finish the delete",
                workspace=self.name,
            ) from None

    def _refused(self, lease) -> Conflict:
        """Conflict naming who holds the lease and what to do; for this node's own mount, unmount."""
        from datahub.catalog.leases import shown  # here: `datahub --help` imports no pydantic

        name, what = self.name, self.what
        if self._mounted_here(lease):
            return Conflict(
                f"{what}: a mount of workspace {name!r} on this node holds its writer lease "
                f"({lease.holder}, epoch {lease.epoch}); the delete must hold the lease in its own name "
                "from the first batch to the last, and that mount's unmount would free it while the "
                "journal is half deleted, letting the node being retired take it back: unmount the "
                "workspace here (or, if that mount is gone, wait for its lease to lapse: `datahub "
                f"lease show {name}`), then run this again",
                workspace=name,
                holder=lease.holder,
            )
        state = "broken" if shown(lease, time.time())["state"] == "broken" else "held"  # not a time
        return Conflict(
            f"{what}: the writer lease of {name!r} is {state} by {lease.holder} (epoch {lease.epoch}, "
            "as the catalog judges it on its own clock), so that node may still be writing under "
            "this journal; unmount the workspace there, or wait for its lease to lapse (`datahub "
            f"lease show {name}`), or, if that node is gone for good, free it (`datahub lease "
            f"break {name} --at-once`), then run this again",
            workspace=name,
            holder=lease.holder,
        )

    def _mounted_here(self, lease) -> bool:
        """Whether the lease's owner id is this node's journal's (a mount here holds it)."""
        from datahub.writeback import workspace_dir

        mine = workspace_dir(self.ctx.config, self.name) / "lease-owner"
        local = mine.read_text().strip() if mine.is_file() else ""
        return bool(local) and lease.owner == local

    def release(self) -> None:
        """Free the lease this run took (a failure leaves it to lapse within its ttl)."""
        if self.taken is None:
            return
        try:
            self.ctx.catalog.store.release_lease(self.name, self.owner, self.taken.epoch)
        except DatahubError as exc:
            log.warning(
                "%s: could not release the writer lease of %r (%s); it lapses by itself",
                self.what,
                self.name,
                exc,
            )
        self.taken = None


def check_lease(ctx: CliContext, name: str, what: str, *, force: bool) -> None:
    """One look through a ``LeaseGuard`` (the listing's refusal; tests): Conflict unless no
    other node holds the workspace's writer lease, judged by the catalog; a lease taken for the
    look is released at once."""
    guard = LeaseGuard(ctx, name, what, force=force)
    try:
        guard.check()
    finally:
        guard.release()


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else "-"
