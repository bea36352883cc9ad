"""review15c: adversarial reads of integrity15's read path (a record whose size is not its
object's, the extra byte asked for at a record's end).

- The one extra byte asked for past a correct record's end is past the object's end: every
  store answers it short (S3 through moto, file://, the memory store), and the record reads
  whole, in every origin read mode.
- A record one byte longer than its object fails with ObjectChanged, never reads short.
- A correct record whose read merges into the fetch of the same page for a record that claims
  a shorter size (the same URL and etag) gets its own bytes: the short record's
  ObjectChanged is not the correct record's answer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from datahub.cache import open_cache
from datahub.config import Config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry, drop_memory_space
from datahub.storage.base import ObjectRef, ObjectStore
from tests.cache.conftest import merged_reads, put_objects, with_cache
from tests.cache.test_integrity15 import READS
from tests.servers import S3Endpoint
from tests.storage.conftest import make_config

PAGE = 4096


@dataclass
class Origin:
    """Where the test's objects live, and the config that reaches it."""

    kind: str
    root: str
    config: Config


@pytest.fixture(
    params=[
        "s3",
        "file",
        "memory",
        pytest.param("ceph", marks=pytest.mark.ceph),
        pytest.param("rados", marks=pytest.mark.ceph),
    ]
)
def origin(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Origin]:
    """Each store that answers a range running past an object's end its own way: moto and
    Ceph's RGW (S3), a directory (file://), the memory store, a RADOS pool."""
    kind = request.param
    if kind in ("s3", "ceph"):
        endpoint: S3Endpoint = request.getfixturevalue("moto_endpoint" if kind == "s3" else "ceph_endpoint")
        yield Origin(kind, f"s3://{endpoint.new_bucket('r15c')}/data", make_config(tmp_path, endpoint))
    elif kind == "rados":  # the session Ceph's librados pool, a fresh prefix per test
        ceph = request.getfixturevalue("ceph_cluster")
        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.syspath_prepend(ceph.vars["CEPH_PYLIB"])  # Debian's python3-rados
        pythonpath = os.environ.get("PYTHONPATH")  # and a fetch worker's, another process
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [ceph.vars["CEPH_PYLIB"], pythonpath])))
        monkeypatch.setenv("CEPH_CONF", ceph.vars["CEPH_CONF"])
        yield Origin(
            kind, f"rados://{ceph.vars['CEPH_POOL']}/r15c-{uuid.uuid4().hex[:12]}", make_config(tmp_path)
        )
    elif kind == "memory":
        space = f"r15c-{uuid.uuid4().hex[:12]}"
        yield Origin(kind, f"memory://{space}/data", make_config(tmp_path))
        drop_memory_space(space)
    else:
        yield Origin(kind, (tmp_path / "objects").as_uri(), make_config(tmp_path))


#: object sizes whose last page ends inside a page: one byte, one short of a page, a page and one
SIZES = [PAGE + 1, 2 * PAGE - 1, 3 * PAGE + 5]


@pytest.mark.parametrize("reads", list(READS))
def test_a_correct_records_last_page_reads_whole_though_the_extra_byte_is_past_the_end(
    origin: Origin, reads: str
) -> None:
    """The range of a record's last page asks for one byte past the object's end: each store
    answers the bytes it has (no 416, no error), and the last byte alone, a read running
    past the end, page reads and whole reads give the object's bytes."""
    workers = "fetch_workers" in READS[reads]
    if workers and origin.kind == "memory":
        pytest.skip("a fetch worker is another process, and the memory store lives in this one")
    config = with_cache(origin.config, page_size=PAGE, ram_bytes=1 << 20, disk_bytes=1 << 20, **READS[reads])
    with StoreRegistry(config) as registry, open_cache(config, registry, fetch_workers=workers) as cache:
        objects = put_objects(registry.store(origin.root), SIZES, seed=3)
        for ref, data in objects:
            assert cache.read(ref, ref.size - 1, 1) == data[-1:]
            assert cache.read(ref, ref.size - 2, 100) == data[-2:]
            assert b"".join(cache.read(ref, i, PAGE) for i in range(0, ref.size, PAGE)) == data
            assert cache.read(ref) == data
        for ref, data in put_objects(registry.store(origin.root), SIZES, seed=5, prefix="cold"):
            assert cache.read(ref) == data  # cold, whole: streamed in the stream mode


#: (the object's length, the length its record claims): one byte more; a last page that
#: starts where the object ends (S3 answers its range 416)
LONGER = [(3 * PAGE + 5, 3 * PAGE + 6), (2 * PAGE, 2 * PAGE + 5)]


@pytest.mark.parametrize(("real", "claimed"), LONGER)
@pytest.mark.parametrize("reads", list(READS))
def test_a_record_longer_than_its_object_fails(origin: Origin, reads: str, real: int, claimed: int) -> None:
    """A record that claims more bytes than its object holds: its last page comes short or
    empty, so each read that reaches it fails with ObjectChanged, never reads as a shorter
    file; the record that names the object as it is reads whole."""
    workers = "fetch_workers" in READS[reads]
    if workers and origin.kind == "memory":
        pytest.skip("a fetch worker is another process, and the memory store lives in this one")
    config = with_cache(origin.config, page_size=PAGE, ram_bytes=1 << 20, disk_bytes=1 << 20, **READS[reads])
    with StoreRegistry(config) as registry, open_cache(config, registry, fetch_workers=workers) as cache:
        ((ref, data),) = put_objects(registry.store(origin.root), [real], seed=4)
        long = ObjectRef(ref.url, ref.etag, claimed)
        with pytest.raises(ObjectChanged):
            cache.read(long)
        with pytest.raises(ObjectChanged):
            cache.read(long, long.size - 1, 1)
        assert cache.read(ref) == data


def test_a_correct_record_merged_into_a_short_records_failing_fetch_reads_its_bytes(
    tmp_path: Path, source: ObjectStore
) -> None:
    """A record claiming fewer bytes than its object (committed over HTTP by any writer whose
    sources allow the URL) leads the fetch of the object's last page; a reader of the record
    that names the object whole merges into that fetch (single flight: one page name for
    both). The short record's fetch fails with ObjectChanged, as it must; the whole record's
    reader must still get its bytes, not that error (the object did not change)."""
    ((ref, data),) = put_objects(source, [2 * 1024 + 500], seed=15)  # three 1 KiB pages
    short = ObjectRef(ref.url, ref.etag, 2 * 1024 + 7)
    short_tail, whole_tail = merged_reads(tmp_path, source, (short, 2048, 7), (ref, 2048, 500))
    assert isinstance(short_tail, ObjectChanged), short_tail
    assert whole_tail == data[2048:]


@pytest.mark.parametrize("order", ["short-first", "whole-first"])
def test_a_warm_up_of_a_short_record_beside_its_whole_record_caches_nothing_wrong(
    tmp_path: Path, moto_endpoint: S3Endpoint, order: str
) -> None:
    """A warm-up (``prefetch``, what a mount's warm-up and ``datahub cache warm`` run) of a
    record shorter than its object, with the record naming the object whole in the same set:
    afterwards the short record's every read fails while the whole one reads whole."""
    config = with_cache(
        make_config(tmp_path, moto_endpoint), page_size=PAGE, ram_bytes=1 << 20, disk_bytes=1 << 20
    )
    with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
        store = registry.store(f"s3://{moto_endpoint.new_bucket('warm')}/data")
        ((ref, data),) = put_objects(store, [3 * PAGE + 5], seed=6)
        short = ObjectRef(ref.url, ref.etag, 2 * PAGE + 9)
        alone = cache.prefetch([short])
        assert alone.failed == 1 and [url for url, _ in alone.errors] == [ref.url], alone
        # Beside the whole record, the report may count the short record's last page as cached (the whole record's
        # page of that name is held, at its own length): what matters is what reads get.
        cache.prefetch([short, ref] if order == "short-first" else [ref, short])
        with pytest.raises(ObjectChanged):
            cache.read(short, 2 * PAGE, 9)
        with pytest.raises(ObjectChanged):
            cache.read(short)
        assert cache.read(ref) == data
