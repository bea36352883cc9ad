"""``datahub cache flush [--workspace NAME]``: upload acknowledged workspace files to the origin now.

The cache engineer's ``cache_cmd`` calls ``add_flush_parser`` on its subparsers. A workspace
held open by another process (a FUSE mount, a training job) is flushed by that process,
asked over its flush socket; a workspace nobody holds is opened and flushed here.
"""

from __future__ import annotations

import argparse

from datahub.console.context import CliContext
from datahub.errors import NotFound


def add_flush_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "flush",
        help="upload dirty write-back workspace files to the object store now",
        description="Flush write-back workspaces: every acknowledged file reaches the object store "
        "before this returns (deletes and renames included).",
    )
    parser.add_argument("--workspace", "-w", metavar="NAME", help="only this workspace (default: all)")
    parser.set_defaults(func=handle_flush)
    return parser


def handle_flush(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.workspaces import leased
    from datahub.writeback import flush_workspace, list_workspaces

    names = [args.workspace] if args.workspace else list_workspaces(ctx.config)
    if args.workspace and args.workspace not in list_workspaces(ctx.config):
        raise NotFound(
            f"workspace {args.workspace!r} not found under {ctx.config.resolved_journal_dir}; "
            "`datahub cache flush` without --workspace flushes all of them",
            workspace=args.workspace,
        )
    lease = ctx.catalog.store if leased(ctx.config.resolved_catalog_url) else None
    rows = []
    for name in names:
        with ctx.progress(None, f"flush {name}") as progress:
            report = flush_workspace(name, ctx.config, ctx.stores, progress=progress, lease=lease)
        row = {k: v for k, v in report.to_dict().items() if k != "errors"}
        rows.append({**row, "seconds": round(report.seconds, 3)})
    ctx.emit(rows, columns=["workspace", "uploaded", "uploaded_bytes", "deleted", "still_dirty", "seconds"])
    return 0
