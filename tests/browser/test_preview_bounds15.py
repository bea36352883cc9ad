"""A preview made without a cache reads no more than its record's bytes and one (the lead,
from shortrec15's finding): a record shorter than its object was previewed as the whole
object, and a 1-byte record of a large object downloaded all of it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from datahub.config import load_config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef
from datahub.web.images import ImageSource


def _jpeg(colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), colour).save(out, "JPEG")
    return out.getvalue()


@pytest.fixture
def stores(tmp_path: Path):
    registry = StoreRegistry(load_config(env={}, overrides={"home": str(tmp_path / "var")}))
    yield registry
    registry.close()


def test_a_record_shorter_than_its_object_is_refused_not_previewed(tmp_path: Path, stores) -> None:
    origin = stores.store((tmp_path / "origin").as_uri())
    data = _jpeg("red")
    info = origin.put("img.jpg", data)
    source = ImageSource(tmp_path / "previews", stores=stores)
    whole = ObjectRef(origin.url_for("img.jpg"), info.etag, info.size)
    assert source.read(whole) == data
    short = ObjectRef(origin.url_for("img.jpg"), info.etag, info.size - 100)
    with pytest.raises(ObjectChanged, match="more than"):
        source.read(short)
    longer = ObjectRef(origin.url_for("img.jpg"), info.etag, info.size + 1)
    with pytest.raises(ObjectChanged):
        source.read(longer)


def test_a_one_byte_record_of_a_large_object_reads_two_bytes(tmp_path: Path, stores) -> None:
    origin = stores.store((tmp_path / "origin").as_uri())
    info = origin.put("big.bin", b"\xff" * (8 * 1024**2))
    asked: list[tuple[int, int | None]] = []
    real_for_url = stores.for_url

    def for_url(url: str):
        store, key = real_for_url(url)
        real_read = store.read

        class Counting:
            def read(self, key, start=0, end=None, etag=None):
                asked.append((start, end))
                return real_read(key, start, end, etag=etag)

            def __getattr__(self, name: str):  # the rest is the real store's (its identity)
                return getattr(store, name)

        return Counting(), key

    stores.for_url = for_url
    source = ImageSource(tmp_path / "previews", stores=stores)
    with pytest.raises(ObjectChanged):
        source.read(ObjectRef(origin.url_for("big.bin"), info.etag, 1))
    assert asked == [(0, 2)]
