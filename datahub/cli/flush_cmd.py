"""``datahub cache flush [--workspace NAME]``: upload acknowledged workspace files to the origin now.

The cache engineer's ``cache_cmd`` calls ``add_flush_parser`` on its subparsers. A workspace
held open by another process (a FUSE mount, a training job) is flushed by that process,
asked over its flush socket; a workspace nobody holds is opened and flushed here.
"""

from __future__ import annotations

import argparse

from datahub.console.context import CliContext, shown
from datahub.errors import InvalidInput, NotFound


def add_flush_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "flush",
        help="upload dirty write-back workspace files to the object store now",
        description="Flush write-back workspaces: every acknowledged file reaches the object store "
        "before this returns (deletes and renames included).",
    )
    # the name as a word too: `datahub cache flush ws` was "unrecognized arguments" under the
    # top-level usage, which never said which workspaces there are (leftovers18)
    parser.add_argument("name", nargs="?", metavar="WORKSPACE", help="only this workspace (default: all)")
    parser.add_argument("--workspace", "-w", metavar="NAME", help="the same as WORKSPACE")
    parser.set_defaults(func=handle_flush)
    return parser


def handle_flush(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.workspaces import leased
    from datahub.writeback import flush_workspace, list_workspaces

    if args.name and args.workspace and args.name != args.workspace:
        raise InvalidInput(
            f"two workspaces named: {args.name!r} and --workspace {args.workspace!r}; flush one at a "
            "time, or all of them with `datahub cache flush`"
        )
    wanted = args.name or args.workspace
    known = list_workspaces(ctx.config)
    if wanted and wanted not in known:
        there = ", ".join(known[:10]) + (", …" if len(known) > 10 else "") if known else "none"
        raise NotFound(
            f"workspace {shown(wanted)!r} not found under {ctx.config.resolved_journal_dir} "
            f"(workspaces there: {there}); `datahub cache flush` with no name flushes all of them",
            workspace=wanted,
        )
    names = [wanted] if wanted else known
    lease = ctx.catalog.store if leased(ctx.config.resolved_catalog_url) else None
    rows = []
    for name in names:
        with ctx.progress(None, f"flush {name}") as progress:
            report = flush_workspace(name, ctx.config, ctx.stores, progress=progress, lease=lease)
        row = {k: v for k, v in report.to_dict().items() if k != "errors"}
        rows.append({**row, "seconds": round(report.seconds, 3)})
    ctx.emit(rows, columns=["workspace", "uploaded", "uploaded_bytes", "deleted", "still_dirty", "seconds"])
    return 0
