"""Object keys in record URLs: any legal S3 key round-trips, old stored URLs keep their meaning.

Issue 12 item 9: keys with ``?`` or ``#`` were imported and committed as raw URLs that every
reader then refused ("no query or fragment allowed"), so those versions could not be read.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datahub.errors import InvalidInput
from datahub.storage import LocalStore, MemoryStore, split_object_url
from datahub.storage.s3 import S3Store
from datahub.storage.urls import decode_key, encode_key
from datahub.validation import MAX_KEY_BYTES
from tests.storage.conftest import make_config

# Any legal S3 key: non-empty valid UTF-8 of at most 1,024 bytes (no lone surrogates).
legal_keys = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=300).filter(
    lambda k: len(k.encode()) <= MAX_KEY_BYTES and not k.endswith("/")
)


@pytest.fixture
def s3_store(tmp_path: Path):
    store = S3Store("bucket", "", make_config(tmp_path).s3)  # url_for sends no request
    yield store
    store.close()


@given(key=legal_keys)
def test_any_legal_s3_key_round_trips(key: str) -> None:
    assert decode_key(encode_key(key)) == key
    url = f"s3://bucket/{encode_key(key)}"
    assert split_object_url(url) == ("s3://bucket", key)


def test_store_urls_round_trip(s3_store, tmp_path: Path) -> None:
    for key in ("q?x=1", "hash#frag", "pct%41", "a%25b", "/lead", "sp ace/ü.jpg", "tab\there"):
        assert split_object_url(s3_store.url_for(key)) == ("s3://bucket", key)
    for key in ("q?x=1", "hash#frag", "pct%41", "sp ace/ü.jpg"):
        assert split_object_url(MemoryStore("urls-test").url_for(key)) == ("memory://urls-test", key)
        root, path = split_object_url(LocalStore(tmp_path).url_for(key))
        assert (root, "/" + path) == ("file:///", str(tmp_path / key))


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("s3://b/a/b.jpg", "a/b.jpg"),  # no escapable character: written as before
        ("s3://b/pct%41", "pct%41"),  # an old raw '%' that starts no escape stays literal
        ("s3://b/50%off.jpg", "50%off.jpg"),
        ("s3://b/q?x=1", "q?x=1"),  # old raw '?' and '#': part of the key, now readable
        ("s3://b/hash#frag", "hash#frag"),
        ("s3://b/q%3Fx=1", "q?x=1"),  # the escapes datahub writes today
        ("s3://b/pct%2541", "pct%41"),
        ("s3://b/q%3fx", "q%3fx"),  # escapes are upper-case hex only
    ],
)
def test_stored_s3_urls_keep_their_meaning(url: str, key: str) -> None:
    assert split_object_url(url) == ("s3://b", key)


@pytest.mark.parametrize("url", ["file:///data/q?x=1", "file:///data/h#f", "memory://m/k#f", "s3://b?x/k"])
def test_urls_that_cannot_round_trip_are_refused(url: str) -> None:
    with pytest.raises(InvalidInput, match="percent-encode|names no bucket"):
        split_object_url(url)
