"""Adversarial reads of the cache (integrity15): a record whose size is not its object's.

A record names its bytes by (URL, etag, size). The etag ties it to one object version, but
nothing ties the size to that version's length: a commit over HTTP (or a client that took
the size before its upload ended) can record an object with a size shorter than it is.
What a reader may get: the whole object's bytes, or an error; never a prefix of the object
handed out as the file (promise 2; docs/cache.md, "The read path").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cache import open_cache
from datahub.config import Config, load_config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef, ObjectStore
from tests.cache.conftest import merged_reads, put_objects, with_cache
from tests.servers import S3Endpoint

PAGE = 4096


def _config(tmp_path: Path, moto_endpoint: S3Endpoint, **cache: object) -> Config:
    base = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    return with_cache(base, page_size=PAGE, ram_bytes=1 << 20, disk_bytes=1 << 20, **cache)


#: (the object's length, the length its record claims): the record's last page short or
#: full, the object one byte or pages longer. The last three are records of whole pages: no
#: range ends inside a page and the pages' names (URL, etag, page size, index) are the
#: object's own; they read as that prefix until shortrec15 (a strict xfail before), when the
#: read of a record's last page came to know it is the last (``datahub.cache.pages.ends``).
SHORTER = [
    (3 * PAGE + 5, 2 * PAGE + 7),
    (3 * PAGE + 5, 3 * PAGE + 4),
    (5 * PAGE, 2 * PAGE + 1),
    (3 * PAGE + 5, 2 * PAGE),
    (3 * PAGE + 5, PAGE),
    (4 * PAGE, 3 * PAGE),
]


#: how the pages come from the origin: one request per page, readahead runs of several
#: pages, one stream per reader, a fetch worker process
READS = {
    "pages": {"readahead_bytes": 0, "stream_min_bytes": 0},
    "readahead": {"readahead_bytes": 16 * PAGE, "stream_min_bytes": 0},
    "stream": {"readahead_bytes": 16 * PAGE, "stream_min_bytes": PAGE},
    "fetch-worker": {"readahead_bytes": 0, "stream_min_bytes": 0, "fetch_workers": 1},
}


@pytest.mark.parametrize("reads", list(READS))
@pytest.mark.parametrize("url", ["s3", "file"])
@pytest.mark.parametrize(("real", "claimed"), SHORTER)
def test_a_record_shorter_than_its_object_is_never_served_as_a_prefix(
    tmp_path: Path, moto_endpoint: S3Endpoint, url: str, real: int, claimed: int, reads: str
) -> None:
    """Every read of a record that claims fewer bytes than its object (same URL, same etag)
    fails with ObjectChanged: whole, page by page, its last page alone, and streamed. Before,
    a one-page object failed (its whole answer was longer than the record) but a larger one
    returned its first ``claimed`` bytes as the file, a truncated image or shard with no
    error, because a ranged answer that ends where it was asked to says nothing of what
    follows."""
    config = _config(tmp_path, moto_endpoint, **READS[reads])
    root = (
        f"s3://{moto_endpoint.new_bucket('short')}/data" if url == "s3" else (tmp_path / "objects").as_uri()
    )
    workers = "fetch_workers" in READS[reads]
    with StoreRegistry(config) as registry, open_cache(config, registry, fetch_workers=workers) as cache:
        ((ref, data),) = put_objects(registry.store(root), [real], seed=real + claimed)
        short = ObjectRef(ref.url, ref.etag, claimed)
        with pytest.raises(ObjectChanged):
            cache.read(short)
        with pytest.raises(ObjectChanged):
            cache.read(short, claimed - 3, 3)  # the last page alone
        with pytest.raises(ObjectChanged):
            b"".join(cache.read(short, i, PAGE) for i in range(0, claimed, PAGE))
        assert cache.read(ref) == data  # the record that names the object whole reads it


def test_a_reader_merged_into_another_records_fetch_of_a_page_never_gets_its_length(
    tmp_path: Path, source: ObjectStore
) -> None:
    """Two records name one object version (same URL and etag) with different sizes: the
    object's own and a shorter one. Their last pages have one name, so a read of the short
    record that arrives while the whole record's fetch of that page is under way waits for it
    (single flight) and used to be handed that page: its slice of it, the object's bytes cut
    at the short record's end, with no error. A real mount did this whenever its warm-up
    fetched the page first (tests/fuse/test_integrity15.py)."""
    ((ref, data),) = put_objects(source, [2 * 1024 + 500], seed=15)  # three 1 KiB pages
    short = ObjectRef(ref.url, ref.etag, 2 * 1024 + 7)
    whole_tail, short_tail = merged_reads(tmp_path, source, (ref, 2048, 500), (short, 2048, 7))
    assert whole_tail == data[2048:]
    assert isinstance(short_tail, ObjectChanged), short_tail
