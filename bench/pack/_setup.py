"""Shared set-up for the pack benchmarks: a fresh home, photos on disk, an imported version."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from datahub.catalog import Catalog, open_catalog
from datahub.config import Config, load_config
from datahub.ingest.importer import import_source
from datahub.pack.image import synthetic_photo
from datahub.storage import StoreRegistry

MACHINE = "Debian 12 VM, 2 cores (shared with other jobs), 24 GiB"


def fresh_home(prefix: str) -> tuple[Path, Config, Catalog]:
    home = Path(tempfile.mkdtemp(prefix=prefix))
    config = load_config(env={}, overrides={"home": str(home / "var")})
    return home, config, open_catalog(config.resolved_catalog_url)


def photo_files(root: Path, count: int, distinct: int, width: int, height: int) -> Path:
    """``count`` JPEG files cycling over ``distinct`` generated photos; returns a manifest."""
    root.mkdir(parents=True, exist_ok=True)
    pool = [synthetic_photo(width, height, seed) for seed in range(distinct)]
    lines = []
    for i in range(count):
        path = root / f"c{i % 10}" / f"{i:06d}.jpg"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(pool[i % distinct])
        lines.append(json.dumps({"url": path.as_uri(), "key": path.relative_to(root).as_posix(),
                                 "labels": {"class": i % 10}}))  # fmt: skip
    manifest = root.parent / f"{root.name}.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def import_photos(config: Config, catalog: Catalog, manifest: Path, dataset: str) -> int:
    with StoreRegistry(config) as stores:
        return import_source(catalog, config, stores, str(manifest), dataset).version.seq
