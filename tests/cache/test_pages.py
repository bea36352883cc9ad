from __future__ import annotations

import os

from datahub.cache.pages import PageKey, decode_page, encode_page, page_count, page_length, pages_of
from datahub.storage.base import ObjectRef


def test_page_arithmetic() -> None:
    ref = ObjectRef("file:///x", "e", 2500)
    assert page_count(2500, 1000) == 3 and page_count(0, 1000) == 0 and page_count(1000, 1000) == 1
    assert [page_length(ref, 1000, i) for i in range(3)] == [1000, 1000, 500]
    assert [k.index for k in pages_of(ref, 1000)] == [0, 1, 2]


def test_keys_name_url_etag_page_size_and_index() -> None:
    base = PageKey("s3://b/k", "e1", 4096, 0)
    others = [
        PageKey("s3://b/k2", "e1", 4096, 0),
        PageKey("s3://b/k", "e2", 4096, 0),
        PageKey("s3://b/k", "e1", 8192, 0),
        PageKey("s3://b/k", "e1", 4096, 1),
    ]
    assert len({base.digest, *(k.digest for k in others)}) == 5
    assert base.object_id == others[2].object_id == others[3].object_id != others[1].object_id


def test_roundtrip_and_every_kind_of_damage_is_detected() -> None:
    key = PageKey("file:///data/a.bin", "etag", 1024, 3)
    data = os.urandom(700)
    blob = encode_page(key, data)
    assert decode_page(key, blob) == (data, None)
    # flip every byte of the data part, and a sample of header bytes
    for pos in list(range(len(blob) - len(data), len(blob), 37)) + list(range(0, len(blob) - len(data), 5)):
        damaged = bytearray(blob)
        damaged[pos] ^= 0x41
        assert decode_page(key, bytes(damaged))[0] is None, pos
    assert decode_page(key, blob[:-1])[1].startswith("truncated")
    assert decode_page(key, blob + b"x")[1].startswith("truncated")
    assert "another page" in decode_page(PageKey(key.url, "other", 1024, 3), blob)[1]
    assert decode_page(key, b"")[0] is None
