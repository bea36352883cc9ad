"""``datahub migrate``: bring a catalog (SQLite or MongoDB) made by an older datahub up to date.

Why a command: opening an older catalog upgrades its schema at once (cheap DDL on SQLite, new
collections and indexes on MongoDB), but the directory table of a dataset committed before it
existed takes a pass over the dataset's records (at 10^8 records, minutes), which no open
should wait for. Until the pass
is done the dataset lists as before (correct, slower for old versions); the pass is
resumable, so an interrupted run goes on from its last checkpoint when run again.
"""

from __future__ import annotations

import argparse

from datahub.console.context import CliContext, Progress


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "migrate",
        help="fill the directory tables of datasets committed before the catalog kept them (SQLite schema 4, MongoDB; resumable)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    store = ctx.catalog.store
    fill = getattr(store, "fill_directory_tables", None)
    if fill is None:
        ctx.emit({"filled": []}, text="this catalog keeps no directory table: nothing to migrate")
        return 0
    bars: dict[str, tuple[Progress, list[int]]] = {}

    def progress(dataset: str, done: int, total: int) -> None:
        """The pass calls this when it starts (``done`` past 0 if it resumes) and at each
        checkpoint; a bar per pass counts the rows this run reads."""
        if dataset not in bars or done < bars[dataset][1][0]:  # the next dataset, or a pass started over
            for bar, _ in bars.values():
                bar.close()
            bars.clear()
            label = f"migrate {dataset}: directory table, records" + (
                f" (resumed at {done:,})" if done else ""
            )
            bars[dataset] = (ctx.progress(total - done, label), [done])
        bar, seen = bars[dataset]
        bar.update(done - seen[0])
        seen[0] = done

    try:
        filled = fill(progress=progress)
    finally:
        for bar, _ in bars.values():
            bar.close()
    ctx.emit({"filled": filled}, text=f"directory tables filled: {', '.join(filled) or 'none needed'}")
    return 0
