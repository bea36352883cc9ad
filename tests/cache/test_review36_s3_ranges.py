"""review36: ``datahub://`` reads of an S3 object give the bytes S3 gives for the same range.

A plain model: boto3's ``get_object`` of the record's object with a ``Range`` header. Ranges
start and end at, just before and just after page boundaries, and span several pages; read as
``cat_file`` (start, end), as ``read_block`` and as ``open`` + ``seek`` + ``read``."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import Put, Record, open_catalog
from datahub.config import load_config
from datahub.errors import DatahubError
from datahub.fs import DatahubFileSystem
from tests.cache.conftest import with_cache

PAGE = 1024
SIZES = {"empty": 0, "one": 1, "page": PAGE, "page1": PAGE + 1, "pages": 3 * PAGE - 1, "big": 5 * PAGE + 7}


@pytest.fixture(scope="module")
def s3_version(moto_endpoint, tmp_path_factory):
    home = tmp_path_factory.mktemp("review36-s3") / "var"
    config = load_config(env={}, overrides={"home": str(home), **moto_endpoint.s3_config_overrides()})
    config.home_path.mkdir(parents=True)
    bucket = moto_endpoint.new_bucket("r36")
    client = moto_endpoint.client()
    rng = random.Random(36)
    puts = []
    for key, size in SIZES.items():
        body = rng.randbytes(size)
        etag = client.put_object(Bucket=bucket, Key=f"src/{key}", Body=body)["ETag"].strip('"')
        puts.append(Put(Record(key, f"s3://{bucket}/src/{key}", etag, size)))
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("ds")
    catalog.commit("ds", puts, message="v1")
    catalog.close()
    fs = DatahubFileSystem(with_cache(config, page_size=PAGE, readahead_bytes=0))
    yield fs, client, bucket
    fs.close()


def _model(client, bucket: str, key: str, start: int, end: int) -> bytes:
    """S3's own answer for bytes [start, end) of the object (clamped as a slice is)."""
    size = SIZES[key]
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    if start >= end:
        return b""
    return client.get_object(Bucket=bucket, Key=f"src/{key}", Range=f"bytes={start}-{end - 1}")["Body"].read()


def _offset() -> st.SearchStrategy[int]:
    near_page = st.builds(lambda p, d: max(0, p * PAGE + d), st.integers(0, 6), st.integers(-2, 2))
    return st.one_of(near_page, st.integers(0, 6 * PAGE))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(sorted(SIZES)), start=_offset(), length=st.integers(0, 3 * PAGE + 2))
def test_ranges_read_as_s3_gives_them(s3_version, key, start, length) -> None:
    fs, client, bucket = s3_version
    want = _model(client, bucket, key, start, start + length)
    assert fs.cat_file(f"ds@1/{key}", start, start + length) == want
    assert fs.read_block(f"ds@1/{key}", start, length) == want
    with fs.open(f"ds@1/{key}", "rb") as f:
        f.seek(start)
        assert f.read(length) == want
        assert f.tell() == start + len(want) if start < SIZES[key] else True


@pytest.mark.parametrize("delta", [-5, -1, 1, 5, -PAGE, PAGE])
def test_a_record_whose_size_disagrees_with_its_object_never_reads_other_bytes(s3_version, delta) -> None:
    """A record claiming ``big``'s object with another size: every byte read is the object's
    byte at that offset, and a read that reaches the record's end fails (ObjectChanged)."""
    fs, client, bucket = s3_version
    head = fs.catalog.store.head("ds")
    big = fs.catalog.get_record("ds", head, "big")
    key = f"odd{delta}"
    fs.catalog.commit("ds", [Put(Record(key, big.url, big.etag, big.size + delta))], message=key)
    whole = _model(client, bucket, "big", 0, SIZES["big"])
    for start, length in ((0, 10), (PAGE - 3, 6), (SIZES["big"] - 12, 24), (0, 10 * PAGE)):
        reads = (
            lambda s=start, n=length: fs.cat_file(f"ds/{key}", s, s + n),
            lambda s=start, n=length: fs.open(f"ds/{key}", "rb").read(s + n)[s:],
        )
        for read in reads:
            try:
                got = read()
            except DatahubError as exc:
                assert exc.code == "object_changed"
                continue
            assert got == whole[start : start + len(got)]
