"""What newuser34 met running a version page's PyTorch script over a version of files that are
not pictures: ``BadImage: image '' cannot be decoded (UnidentifiedImageError: cannot identify
image file <_io.BytesIO object at 0x…>)``, naming no record, no version and nothing to do. The
default transform now names the record's key and version and says to give a ``transform=``
(or choose the image records), for ``VersionDataset`` and ``PackedDataset`` alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.errors import BadImage
from datahub.pack import PackSpec, pack
from datahub.torch import CacheSource
from tests.pack.conftest import import_manifest, write_source

RAW = {"meta/info.json": b'{"split": "train"}'}


def test_the_default_transform_names_the_record_it_cannot_decode(tmp_path: Path) -> None:
    from datahub.torch import PackedDataset, VersionDataset

    config = load_config(env={}, overrides={"home": str(tmp_path / "var")})
    catalog = open_catalog(config.resolved_catalog_url)
    source = CacheSource(config)
    try:
        import_manifest(catalog, config, write_source(tmp_path / "src", 1, extra=RAW), "photos")
        pack(config, catalog, "photos", "photos-packed", PackSpec.parse(non_image="copy"), workers=0)
        raw = VersionDataset.from_catalog(catalog, "photos", "v1", source, prefix="meta/")
        packed = PackedDataset.open(catalog, source, "photos-packed", "v1", cache_dir=tmp_path / "shards")
        copied = next(i for i in range(len(packed)) if packed.locate(i)[1] == "meta/info.json")
        for dataset, index, how in (
            (raw, 0, "VersionDataset.from_catalog"),
            (packed, copied, "PackedDataset.open"),
        ):
            with pytest.raises(BadImage) as caught:
                dataset[index]
            message = caught.value.message
            assert "'meta/info.json'" in message, message
            assert ("photos@v1" if dataset is raw else "photos-packed@v1") in message, message
            assert f"give {how} a transform=" in message and "BytesIO" not in message, message
        # the transform it names reads the file; the pictures still decode by default
        as_json = VersionDataset.from_catalog(
            catalog, "photos", "v1", source, prefix="meta/", transform=lambda data, labels: json.loads(data)
        )
        assert as_json[0] == {"split": "train"}
        image, _ = VersionDataset.from_catalog(catalog, "photos", "v1", source, prefix="img/")[0]
        assert image.shape[0] == 3
    finally:
        source.close()
        catalog.close()
