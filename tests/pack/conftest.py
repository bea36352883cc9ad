"""A source dataset of generated photos (plus odd records), imported through a manifest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datahub.catalog import Catalog, open_catalog
from datahub.config import Config
from datahub.ingest.importer import import_source
from datahub.pack.image import synthetic_photo
from datahub.storage import StoreRegistry


def write_source(root: Path, photos: int, *, extra: dict[str, bytes] | None = None) -> Path:
    """Photos ``img/00000.jpg`` … (label = seed % 3) plus ``extra`` files; returns the manifest."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    files = {f"img/{i:05d}.jpg": (synthetic_photo(320 + 8 * (i % 5), 240, i), i % 3) for i in range(photos)}
    files.update({key: (data, -1) for key, data in (extra or {}).items()})
    for key, (data, label) in sorted(files.items()):
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        lines.append({"url": path.as_uri(), "key": key, "labels": {"class": label}})
    manifest = root.parent / f"{root.name}.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return manifest


def import_manifest(catalog: Catalog, config: Config, manifest: Path, dataset: str) -> int:
    with StoreRegistry(config) as stores:
        report = import_source(catalog, config, stores, str(manifest), dataset)
    return report.version.seq


@contextmanager
def packed_photos(config: Config, root: Path, photos: int) -> Iterator[Catalog]:
    """A catalog holding ``photos`` (``photos`` synthetic pictures) and ``photos-packed`` (them
    resized to 48x32 in 50 KB shards): the small packed version the PackedDataset tests read."""
    from datahub.pack import PackSpec, pack

    cat = open_catalog(config.resolved_catalog_url)
    try:
        import_manifest(cat, config, write_source(root / "src", photos), "photos")
        pack(
            config,
            cat,
            "photos",
            "photos-packed",
            PackSpec.parse(resize="48x32", shard_size="50KB"),
            workers=0,
        )
        yield cat
    finally:
        cat.close()


@pytest.fixture
def catalog(config: Config) -> Iterator[Catalog]:
    cat = open_catalog(config.resolved_catalog_url)
    yield cat
    cat.close()
