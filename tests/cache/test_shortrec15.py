"""A record shorter than its object, the cases integrity15 left (shortrec15).

tests/cache/test_integrity15.py reads such records on every read path (pages, readahead
runs, streams, fetch workers; S3 and file://), records of whole pages included. Here: the
mount's warm-up of such a record, what a record of size 0 is promised, and what is left.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from datahub.cache import pages as fmt
from datahub.cache.pages import page_key, pages_of
from datahub.cache.tiered import TieredCache
from datahub.errors import ObjectChanged
from datahub.storage.base import ObjectRef, ObjectStore
from tests.cache.conftest import put_objects
from tests.cache.test_warmup import recording_cache


@pytest.mark.parametrize("claimed_pages", [1, 2])
def test_warm_up_of_a_record_of_whole_pages_shorter_than_its_object_fails_and_keeps_nothing_of_its_end(
    make_cache: Callable[..., TieredCache], source: ObjectStore, claimed_pages: int
) -> None:
    """A mount's warm-up (``prefetch``) fetches a record's pages before any reader: its fetch
    of the record's last page asks past the record's end like a reader's, so the record fails
    there and a reader after it fails too, instead of finding the prefix cached."""
    cache = make_cache(page_size=1024, readahead_bytes=0, stream_min_bytes=0)
    ((ref, data),) = put_objects(source, [3 * 1024 + 5], seed=claimed_pages)
    short = ObjectRef(ref.url, ref.etag, claimed_pages * 1024)
    report = cache.prefetch([short])
    assert report.failed == 1
    with pytest.raises(ObjectChanged):
        cache.read(short)
    assert cache.read(ref) == data


def test_a_record_of_size_zero_reads_empty_and_asks_the_origin_nothing(
    make_cache: Callable[..., TieredCache], source: ObjectStore
) -> None:
    """Decided (shortrec15): a record of size 0 is not checked against its object. Reading it
    asks nothing, so an empty file costs no request (a dataset of many empty markers would
    otherwise send one GET each); its bytes are none, so no wrong byte can be served, only
    an object that is not empty shown as empty (docs/cache.md, "The read path")."""
    cache = make_cache(page_size=1024)
    ((ref, _),) = put_objects(source, [3000], seed=7)
    assert cache.read(ObjectRef(ref.url, ref.etag, 0)) == b""
    assert cache.origin.counters.fetches == 0


def test_a_small_record_of_a_large_object_asks_for_its_bytes_and_one_more_never_the_whole_body(
    tmp_path: Path, source: ObjectStore
) -> None:
    """A record claiming less than a page of a much larger object used to be read without a
    Range header (its only page, "the whole object"), so the whole body came over before the
    length check refused it: a 1-byte record of a multi-GB object downloaded it all, in every
    mount and preview. Every origin read of a record's last page now asks a bounded range:
    the record's bytes and one more. A true small record reads alike, and reads whole."""
    ((big, _), (small, data)) = put_objects(source, [256 * 1024, 700], seed=5)
    cache, store = recording_cache(tmp_path, source)
    with cache:
        with pytest.raises(ObjectChanged):
            cache.read(ObjectRef(big.url, big.etag, 1))
        assert cache.read(small) == data
        assert [(start, end) for _, start, end, _ in store.log] == [(0, 2), (0, 701)]


@pytest.mark.parametrize("claimed_pages", [1, 2])
@pytest.mark.parametrize("tier", ["ram", "disk"])
def test_a_record_of_whole_pages_is_never_served_as_a_prefix_from_pages_its_object_brought_in(
    make_cache: Callable[..., TieredCache], source: ObjectStore, claimed_pages: int, tier: str
) -> None:
    """The object read whole first (its own record), then a record claiming its first pages:
    every page the short record needs is cached at the length it expects. Its last page used
    to have the same name as the object's page of that index (a strict xfail until
    shortrec15), so it was a hit and the prefix was served. A record of whole pages now
    names its last page apart (``datahub.cache.pages.page_key``): a miss, read from the
    origin with a byte past its end. ``disk``: RAM cleared first, the pages come from disk."""
    cache = make_cache(page_size=1024, readahead_bytes=0, stream_min_bytes=0)
    ((ref, data),) = put_objects(source, [3 * 1024 + 5], seed=3 + claimed_pages)
    assert cache.read(ref) == data
    if tier == "disk":
        for key in pages_of(ref, 1024):
            cache.tiers[0].delete(key)
    with pytest.raises(ObjectChanged):
        cache.read(ObjectRef(ref.url, ref.etag, claimed_pages * 1024))
    assert cache.read(ref) == data


def test_a_record_of_whole_pages_shares_every_page_with_records_that_agree_on_its_size(
    make_cache: Callable[..., TieredCache], source: ObjectStore
) -> None:
    """Naming the last page apart costs nothing to records that agree: an object of whole
    pages read by two records of its true size (a second import, another dataset) is
    fetched once, its last page included."""
    cache = make_cache(page_size=1024, readahead_bytes=0, stream_min_bytes=0)
    ((ref, data),) = put_objects(source, [3 * 1024], seed=11)
    assert cache.read(ref) == data
    fetches = cache.origin.counters.fetches
    assert cache.read(ObjectRef(ref.url, ref.etag, 3 * 1024)) == data
    assert cache.read(ref, 2 * 1024, 1024) == data[2 * 1024 :]
    assert cache.origin.counters.fetches == fetches == 3


def test_a_page_file_names_the_end_of_its_record_and_an_index_rebuilt_from_it_keeps_that() -> None:
    """A disk tier whose index is lost rebuilds it from the page files' headers
    (``PageHeader.key``): a last page of a record of whole pages comes back under its own
    name, not as the object's page of that index, which a longer record would then find."""
    ref = ObjectRef("s3://b/k", "etag", 2048)
    last, inner = page_key(ref, 1024, 1), page_key(ref, 1024, 0)
    assert last.ends_record and not inner.ends_record
    assert last.name != page_key(ObjectRef(ref.url, ref.etag, 3000), 1024, 1).name
    for key in (last, inner):
        header = fmt.parse_header(fmt.encode_header(key, b"x" * 1024))
        assert header is not None and header.key() == key


def test_the_disk_index_keeps_the_name_of_a_page_that_ends_its_record(
    make_cache: Callable[..., TieredCache], source: ObjectStore
) -> None:
    """The disk tier's index (read back at every start and by ``maintain``) gives back the
    last page of a whole-page object under its own name, the others as before."""
    cache = make_cache(page_size=1024, readahead_bytes=0, stream_min_bytes=0)
    ((ref, data),) = put_objects(source, [2 * 1024], seed=12)
    assert cache.read(ref) == data
    disk = cache.tiers[1]
    disk._index.flush(wait=True)
    assert {key for key, _ in disk.index.entries() if key.url == ref.url} == set(pages_of(ref, 1024))
