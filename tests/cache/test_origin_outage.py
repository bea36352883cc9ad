"""Reads across an origin outage through the cache (issue 23): a refused connection is not
remembered, so the first read after the origin comes back reaches it; a stalled origin's
timeout is remembered for a fixed time, and a reader that keeps retrying sees the origin
again once that time is up. Real moto behind a real TCP proxy that refuses or stalls.
Only "returned before a generous guard" is asserted about time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import urllib3
from botocore.credentials import Credentials

from bench.outage_proxy import OutageProxy
from datahub.cache import open_cache
from datahub.catalog import Put, Record, open_catalog
from datahub.config import load_config
from datahub.errors import TransientStorageError
from datahub.fs import DatahubFileSystem
from datahub.storage import StoreRegistry
from datahub.storage.s3get import LeanGetter, timed_out
from tests.cache.conftest import put_objects, with_cache
from tests.storage.stallserver import StallingServer
from tests.storage.test_s3_stall import run_guarded

GUARD = 30.0  # seconds a retrying reader may take to see a recovered origin (the memory is STALL_MEMORY)
#: seconds a stall is remembered here (``cache.stall_memory_seconds``, 5 s by default): the
#: read asked again at once still meets the memory, and a retrying reader waits less of it out
STALL_MEMORY = 2.0


@pytest.fixture
def outage(tmp_path: Path, moto_endpoint):
    bucket = moto_endpoint.new_bucket("outage")
    base = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    with StoreRegistry(base) as registry:
        objects = put_objects(registry.store(f"s3://{bucket}/data"), [3000, 70_000, 5])
    with OutageProxy(moto_endpoint.url) as proxy:
        s3 = base.s3.model_copy(
            update={"endpoint_url": proxy.url, "max_attempts": 2, "read_timeout": 60.0, "total_timeout": 1.0}
        )
        config = with_cache(
            base.model_copy(update={"s3": s3}),
            page_size=1 << 20,
            ram_bytes=1 << 22,
            disk_bytes=1 << 22,
            stall_memory_seconds=STALL_MEMORY,
        )
        with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
            yield proxy, cache, objects


def test_a_refused_connection_is_not_a_timeout() -> None:
    """urllib3 2.x makes NewConnectionError a ConnectTimeoutError: the lean GET called a
    refused connection a timeout, and the cache then remembered it like a stall."""
    with StallingServer() as server:
        url = server.url  # nothing listens there once the block is left
    getter = LeanGetter(
        url,
        "us-east-1",
        lambda: Credentials("test", "test"),
        path_style=True,
        connect_timeout=5.0,
        read_timeout=5.0,
        max_pool_connections=2,
    )
    try:
        with pytest.raises(TransientStorageError) as refused:
            getter.get("bucket", "img/a.jpg", None, "etag")
    finally:
        getter.close()
    assert not refused.value.details.get("timed_out"), refused.value


def test_a_stall_is_a_timeout() -> None:
    with StallingServer() as server:
        try:
            urllib3.PoolManager().request("GET", server.url, retries=False, timeout=urllib3.Timeout(read=0.3))
        except urllib3.exceptions.HTTPError as exc:
            assert timed_out(exc), type(exc)
        else:
            raise AssertionError("a stalled server answered")


def test_the_first_read_after_a_refusing_origin_recovers_reaches_it(outage) -> None:
    proxy, cache, objects = outage
    (ref, data), *_ = objects
    proxy.set_mode("refuse")
    error = run_guarded(lambda: cache.read(ref))
    assert isinstance(error, TransientStorageError), error
    assert not error.details.get("timed_out")
    proxy.set_mode("up")
    assert cache.read(ref) == data  # at once: nothing remembered the refusal


def test_a_reader_polling_across_a_stall_sees_the_origin_return(outage) -> None:
    proxy, cache, objects = outage
    (ref, data), *_ = objects
    assert cache.origin.stalls.seconds == STALL_MEMORY  # the setting reached the process's origin
    proxy.set_mode("stall")
    error = run_guarded(lambda: cache.read(ref))
    assert isinstance(error, TransientStorageError) and error.details.get("timed_out"), error
    asked = proxy.accepted
    # Asked again at once (as the kernel re-asks a failed readahead): the memory answers.
    again = run_guarded(lambda: cache.read(ref))
    assert isinstance(again, TransientStorageError) and "not asked again" in str(again), again
    assert proxy.accepted == asked
    proxy.set_mode("up")
    recovered = time.monotonic()
    while True:  # a DataLoader retrying its sample several times a second
        try:
            got = cache.read(ref)
            break
        except TransientStorageError:
            assert time.monotonic() - recovered < GUARD, "the remembered timeout never expired"
            time.sleep(0.25)
    assert got == data


def test_an_answer_from_the_origin_forgets_its_stalls(outage) -> None:
    """Once the origin answers a request that began after a stall was remembered, every
    remembered stall of that origin is forgotten: warm-up or another reader brings the
    news, and a retrying reader does not wait out the memory."""
    proxy, cache, objects = outage
    (ref, data), (other, other_data), _ = objects
    proxy.set_mode("stall")
    error = run_guarded(lambda: cache.read(ref))
    assert isinstance(error, TransientStorageError) and error.details.get("timed_out"), error
    proxy.set_mode("up")
    assert cache.read(other) == other_data
    assert cache.read(ref) == data


def test_datahub_urls_read_right_after_a_refusing_origin_comes_back(tmp_path: Path, moto_endpoint) -> None:
    """The same through fsspec's ``datahub://``: the path a DataLoader without a mount takes."""
    bucket = moto_endpoint.new_bucket("outage-fs")
    base = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    with StoreRegistry(base) as registry:
        [(ref, data)] = put_objects(registry.store(f"s3://{bucket}/data"), [20_000])
    catalog = open_catalog(base.resolved_catalog_url)
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(Record("a.bin", ref.url, ref.etag, ref.size))], message="first")
    catalog.close()
    with OutageProxy(moto_endpoint.url) as proxy:
        s3 = base.s3.model_copy(update={"endpoint_url": proxy.url, "max_attempts": 2, "total_timeout": 1.0})
        fs = DatahubFileSystem(with_cache(base.model_copy(update={"s3": s3}), page_size=1 << 20))
        try:
            proxy.set_mode("refuse")
            error = run_guarded(lambda: fs.cat_file("ds@v1/a.bin"))
            assert isinstance(error, OSError | TransientStorageError), error
            proxy.set_mode("up")
            assert fs.cat_file("ds@v1/a.bin") == data
        finally:
            fs.close()
