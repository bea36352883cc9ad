"""``datahub import SRC --to DATASET``: a prefix, directory or manifest becomes a version (only changes)."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlsplit

from datahub.console.context import CliContext, author_or_default
from datahub.words import counted


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="import an s3:// prefix, a local directory or a .jsonl manifest as a new version",
        description="Commits only what changed since the dataset's head; an unchanged source creates no version.",
    )
    p.add_argument("source", help="s3://bucket/prefix, /local/dir, file:///dir or manifest.jsonl")
    p.add_argument("--to", dest="dataset", required=True, help="dataset (created if missing)")
    p.add_argument("--copy", action="store_true", help="copy bytes under the datahub-managed prefix")
    p.add_argument("-m", "--message", default="", help="the new version's message (default: import SRC)")
    p.add_argument("--author", default=None, help="default: the current user")
    p.set_defaults(func=run, creates_catalog=True)


def absolute(source: str) -> str:
    """A local path as the absolute path it names. The dataset's source, the version's message
    and its lineage keep the text given, and a relative one (``datahub import pics --to pics``)
    named nothing once read elsewhere: the browser showed "Source pics", ``log`` "import pics"
    (newuser19). A path that does not exist stays as typed, for the error to quote."""
    if urlsplit(source).scheme or not source:
        return source
    path = Path(source).expanduser()
    return str(path.resolve()) if path.exists() else source


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.ingest import import_source
    from datahub.ingest.sources import describe_source
    from datahub.validation import check_name

    check_name(args.dataset, "dataset")  # before the progress line: a bad name starts nothing
    args.source = absolute(args.source)
    # a missing path or an unknown scheme too: "import /x: 0 0/s stopped by an error" came first
    describe_source(args.source)
    with ctx.progress(None, f"import {args.source}") as progress:
        report = import_source(
            ctx.catalog,
            ctx.config,
            ctx.stores,
            args.source,
            args.dataset,
            copy=args.copy,
            message=args.message,
            author=author_or_default(args.author),
            progress=progress,
        )
    counts = f"{report.added} added, {report.removed} removed, {report.modified} modified"
    if report.version is None and not report.base:
        # an empty source into a dataset with no version: it said "d5 already matches emptydir"
        # of a dataset that did not exist (newuser17); an empty source is most often a typo
        text = (
            f"nothing to import: {report.source} holds no objects (check the path or prefix); "
            f"no version of {report.dataset} created"
        )
    elif report.version is None:
        head = f"{report.dataset}@v{report.base}"
        text = f"no changes: {head} already matches {report.source}; no version created ({counted(report.scanned, 'object')})"
    else:
        text = f"committed {report.dataset}@v{report.version.seq}: {counts} ({counted(report.scanned, 'object')} scanned)"
    ctx.emit(
        {
            "dataset": report.dataset,
            "version": report.version.seq if report.version else None,
            "base": report.base,
            "scanned": report.scanned,
            "added": report.added,
            "removed": report.removed,
            "modified": report.modified,
            "copied_bytes": report.copied_bytes,
        },
        text=text,
    )
    return 0
