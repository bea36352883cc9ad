"""A preview made without a cache reads a record of an objects-store blob replaced by its own
bytes, as the mount does (``datahub.cache.selfverify``, blobs17): it failed with ObjectChanged
for good (leftovers18). A blob under that name with other bytes still fails."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from PIL import Image

from datahub.config import load_config
from datahub.errors import ObjectChanged
from datahub.ingest.blobs import blob_key
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef
from datahub.web.images import ImageSource

STALE = '"0123456789abcdef0123456789abcdef"'


def _png(colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), colour).save(out, "PNG")
    return out.getvalue()


def test_a_preview_reads_a_blob_replaced_by_its_own_bytes_and_not_one_of_other_bytes(tmp_path: Path) -> None:
    stores = StoreRegistry(load_config(env={}, overrides={"home": str(tmp_path / "var")}))
    try:
        objects = stores.store(stores.config.resolved_objects_url)
        good, bad = _png("red"), _png("blue")
        refs = {}
        for name, data, stored in (("good", good, good), ("bad", bad, bytes(len(bad)))):
            key = blob_key(hashlib.sha256(data).hexdigest())
            objects.put(key, stored)  # "bad": the right size, not its name's bytes
            refs[name] = ObjectRef(objects.url_for(key), STALE, len(data))
        source = ImageSource(tmp_path / "previews", stores=stores)
        assert source.read(refs["good"]) == good
        with Image.open(io.BytesIO(source.preview(refs["good"], "thumb"))) as im:
            assert im.size == (40, 30) and im.convert("RGB").getpixel((20, 15))[0] > 200
        with pytest.raises(ObjectChanged):
            source.preview(refs["bad"], "thumb")
    finally:
        stores.close()
