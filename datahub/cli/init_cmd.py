"""``datahub init``: create the embedded default's state (catalog file, object directory) and say where."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import unquote, urlsplit

from datahub.console.context import CliContext, create_home


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="create the catalog and object directory (idempotent)")
    p.set_defaults(func=run, creates_catalog=True)


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    config = ctx.config
    create_home(config)
    objects = config.resolved_objects_url
    if objects.startswith("file://"):
        Path(unquote(urlsplit(objects).path)).mkdir(parents=True, exist_ok=True)
    datasets = len(ctx.catalog.list_datasets())  # opening the catalog creates its schema
    ctx.emit(
        {
            "home": str(config.home_path),
            "catalog": config.resolved_catalog_url,
            "objects": objects,
            "api": f"http://{config.api.host}:{config.api.port}",
            "local_mode": config.api.local_mode,
            "datasets": datasets,
        }
    )
    return 0
