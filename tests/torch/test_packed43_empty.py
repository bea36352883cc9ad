"""packed43: a packed version without a sample (its pack skipped every record) is refused by
``PackedDataset.open`` naming the version and the skipped records. It was a dataset of length
0, and a DataLoader died inside torch with ``ValueError: num_samples=0``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.config import Config
from datahub.errors import InvalidInput
from datahub.pack import PackSpec, pack
from datahub.torch import CacheSource
from tests.pack.conftest import import_manifest


def test_a_packed_version_without_samples_is_refused_naming_why(config: Config, tmp_path: Path) -> None:
    from datahub.torch import PackedDataset

    root = tmp_path / "src"
    (root / "img").mkdir(parents=True)
    lines = []
    for i in range(2):  # zero-byte pictures: the pack skips them (--on-corrupt skip)
        (root / f"img/{i}.jpg").write_bytes(b"")
        lines.append({"url": (root / f"img/{i}.jpg").as_uri(), "key": f"img/{i}.jpg", "labels": {}})
    manifest = tmp_path / "src.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    catalog = open_catalog(config.resolved_catalog_url)
    source = CacheSource(config)
    try:
        import_manifest(catalog, config, manifest, "photos")
        assert pack(config, catalog, "photos", "out", PackSpec.parse(), workers=0).samples == 0
        with pytest.raises(InvalidInput) as refused:
            PackedDataset.open(catalog, source, "out", cache_dir=tmp_path / "shards")
    finally:
        source.close()
        catalog.close()
    message = refused.value.message
    assert "out@v1 holds no samples" in message and "'img/0.jpg': bad_image" in message
    assert "pack it again" in message
