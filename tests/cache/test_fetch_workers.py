"""Fetch worker processes (datahub.cache.fetch_workers): real worker processes, a real
local directory and a real moto server on loopback as origins, a real stalling server
where a worker must be caught mid-fetch. Nothing is mocked; only "returned before a
generous guard" is asserted, never a duration."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.cache import open_cache
from datahub.cache.fetch_workers import FetchWorkers
from datahub.cache.metrics import fetch_workers_text
from datahub.cache.pages import page_key
from datahub.cache.scheduler import OriginScheduler
from datahub.cache.stats import read_snapshots, stats_dir
from datahub.cli.main import main
from datahub.config import Config, load_config
from datahub.errors import ObjectChanged, TransientStorageError
from datahub.storage import StoreRegistry
from tests.cache.conftest import put_objects, wait_for, with_cache
from tests.storage.stallserver import StallingServer

PAGE = 64 * 1024
GUARD = 60.0


def _config(tmp_path: Path, workers: int, **s3: object) -> Config:
    config = load_config(env={}, overrides={"home": str(tmp_path / "var"), **s3})
    return with_cache(
        config,
        page_size=PAGE,
        ram_bytes=8 << 20,
        disk_bytes=64 << 20,
        readahead_bytes=0,
        fetch_workers=workers,
    )


def _stalled(config: Config, server: StallingServer, timeout: float) -> Config:
    """``config`` with its S3 origin at ``server``: one attempt, read and total ``timeout``."""
    update = {
        "endpoint_url": server.url,
        "max_attempts": 1,
        "read_timeout": timeout,
        "total_timeout": timeout,
    }
    return config.model_copy(update={"s3": config.s3.model_copy(update=update)})


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _page_files(config: Config) -> list[Path]:
    return [p for p in (Path(config.resolved_disk_dir) / "pages").rglob("*.page")]


def _leftovers(config: Config) -> list[Path]:
    return list((Path(config.resolved_disk_dir) / "tmp").iterdir())


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Config, StoreRegistry, list]]:
    config = _config(tmp_path, 2)
    with StoreRegistry(config) as stores:
        root = tmp_path / "origin"
        root.mkdir()
        objects = put_objects(
            stores.store(root.as_uri()), [1, 5000, PAGE - 1, PAGE, 3 * PAGE + 17] * 4, seed=3
        )
        yield config, stores, objects


def test_right_bytes_from_a_local_origin_fetched_by_workers(local) -> None:
    config, stores, objects = local
    with open_cache(config, stores, fetch_workers=True) as cache:
        pids = cache.fetch_workers.pids()
        assert len(pids) == 2
        for ref, data in objects:
            assert cache.read(ref) == data
            assert cache.read(ref, 7, 3000) == data[7:3007]
        stats = cache.stats()["fetch_workers"]
        pages = sum(-(-len(d) // PAGE) for _, d in objects)
        assert stats["running"] == 2 and stats["fetches"] == pages and stats["failovers"] == 0
        assert cache.stats()["origin"]["fetches"] == pages  # the daemon's origin counted them
        cache.maintain()  # writes the stats snapshot `datahub cache stats` and /metrics read
        text = fetch_workers_text(read_snapshots(stats_dir(config)))
        assert f'datahub_cache_fetch_worker_pages_total{{pid="{os.getpid()}"}} {pages}' in text
        assert f'datahub_cache_fetch_workers{{pid="{os.getpid()}"}} 2' in text
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["--home", config.home, "cache", "stats"]) == 0
        assert f"fetch workers of pid {os.getpid()}: 2 running of 2, {pages} pages" in out.getvalue()
        # the disk tier knows every page the workers wrote, and reads it back verified
        disk = cache.fetch_workers.disk
        ram = cache.tiers[0]
        for ref, data in objects:
            key = page_key(ref, PAGE, 0)
            assert disk.contains(key)
            ram.delete(key)
            assert disk.get(key) == data[:PAGE]
        # a one-page object's file is a verified backing file as written (no read back)
        small = next(r for r, d in objects if 0 < len(d) <= PAGE)
        verifications = cache.passthrough.backing.verifications
        fd = cache.passthrough.fd(small)
        assert fd is not None and fd >= 0
        os.close(fd)
        assert cache.passthrough.backing.verifications == verifications
    assert not any(_alive(p) for p in pids)
    assert _leftovers(config) == []


def test_right_bytes_from_moto_and_a_changed_object_is_the_same_typed_error(
    tmp_path: Path, moto_endpoint
) -> None:
    bucket = moto_endpoint.new_bucket("workers")
    results = {}
    for workers in (0, 2):
        config = _config(tmp_path / str(workers), workers, **moto_endpoint.s3_config_overrides())
        with StoreRegistry(config) as stores:
            store = stores.store(f"s3://{bucket}/w{workers}")
            objects = put_objects(store, [3000, PAGE + 5, 2 * PAGE], seed=workers)
            with open_cache(config, stores, fetch_workers=True) as cache:
                assert (cache.fetch_workers is None) == (workers == 0)
                for ref, data in objects[:2]:
                    assert cache.read(ref) == data
                changed_ref, _ = objects[2]
                store.put("obj/00002.bin", b"another object " * 100)  # replaced behind the snapshot
                with pytest.raises(ObjectChanged) as caught:
                    cache.read(changed_ref)
                results[workers] = caught.value
                assert all(not t.contains(page_key(changed_ref, PAGE, 0)) for t in cache.tiers)
                if workers:
                    assert cache.stats()["fetch_workers"]["fetches"] == 1 + 2
    assert type(results[0]) is type(results[2])
    assert results[0].code == results[2].code
    assert set(results[2].details) == set(results[0].details)  # the same fields (url, etag)
    assert "changed since it was recorded" in str(results[0]) and "changed since it was recorded" in str(
        results[2]
    )


def test_a_worker_killed_mid_fetch_leaves_no_page_and_the_read_succeeds(
    tmp_path: Path, moto_endpoint
) -> None:
    """The workers' origin never answers (a stalling server); the daemon's own registry
    reaches moto. A worker killed with SIGKILL while it waits leaves no file, and the read
    is fetched by the daemon: right bytes. The worker is restarted."""
    bucket = moto_endpoint.new_bucket("killed")
    config = _config(tmp_path, 1, **moto_endpoint.s3_config_overrides())
    with StallingServer() as server, StoreRegistry(config) as stores:
        [(ref, data)] = put_objects(stores.store(f"s3://{bucket}/d"), [PAGE - 100])
        stalled = _stalled(config, server, 120.0)
        cache = open_cache(config, stores)
        cache.fetch_workers = FetchWorkers(stalled, 1, cache.tiers[1])
        try:
            [pid] = cache.fetch_workers.pids()
            got: dict = {}
            reader = threading.Thread(target=lambda: got.setdefault("data", cache.read(ref)), daemon=True)
            reader.start()
            wait_for(lambda: server.accepted >= 1, GUARD, "the worker's request to reach the origin")
            os.kill(pid, signal.SIGKILL)
            reader.join(GUARD)
            assert not reader.is_alive(), "the read did not return before the guard"
            assert got["data"] == data
            stats = cache.stats()["fetch_workers"]
            assert stats["failovers"] == 1 and stats["fetches"] == 0
            wait_for(lambda: cache.fetch_workers.stats()["deaths"] == 1, GUARD, "the death to be seen")
            wait_for(lambda: cache.fetch_workers.stats()["restarts"] == 1, GUARD, "the worker's restart")
            # the page file is the daemon's (right bytes), nothing else was left
            assert [p.read_bytes() for p in _page_files(config)] == [data]
            assert _leftovers(config) == []
            new = cache.fetch_workers.pids()
        finally:
            cache.close()
        assert not _alive(pid) and not any(_alive(p) for p in new)


def test_the_scheduler_limit_holds_across_workers(tmp_path: Path, moto_endpoint) -> None:
    """Eight readers, two workers, an origin limit of 3: the stalling origin sees three
    requests, never more; the rest wait in the daemon's scheduler, not in the workers.

    The origin holds the requests (timeouts far beyond the check: nothing can end one before
    the check but a fourth request, which is what it looks for), then ends them itself: each
    reader in turn gets the same typed error as in-process, and the origin sees eight
    requests in all, one per reader."""
    bucket = moto_endpoint.new_bucket("limit")
    config = _config(tmp_path, 2, **moto_endpoint.s3_config_overrides())
    config = with_cache(config, origin_concurrency=3, origin_max_concurrency=3)
    with StallingServer() as server, StoreRegistry(config) as stores:
        objects = put_objects(stores.store(f"s3://{bucket}/d"), [5000] * 8)
        stalled = _stalled(config, server, GUARD)
        cache = open_cache(config, stores)
        cache.origin.scheduler = OriginScheduler(3, maximum=3)
        cache.fetch_workers = FetchWorkers(stalled, 2, cache.tiers[1])
        results: list = []
        try:
            threads = [
                threading.Thread(target=lambda r=r: results.append(_read_or_error(cache, r)), daemon=True)
                for r, _ in objects
            ]
            for t in threads:
                t.start()
            wait_for(lambda: server.accepted >= 3, GUARD, "three requests at the origin")
            assert cache.origin.scheduler.stats()["in_flight"]["demand"] == 3
            assert server.accepted == 3
            server.release()
            for t in threads:
                t.join(GUARD)
            assert not any(t.is_alive() for t in threads)
        finally:
            cache.close()
        assert server.accepted == 8
        # the workers' origin failed: the same typed error as in-process, for every reader
        assert len(results) == 8 and all(isinstance(e, TransientStorageError) for e in results), results


def test_a_worker_whose_origin_stalls_times_out_as_in_process(tmp_path: Path, moto_endpoint) -> None:
    """A read timeout in a worker is the daemon's error as in-process: TransientStorageError
    saying the origin stalled (``timed_out``: the scheduler takes it as congestion)."""
    bucket = moto_endpoint.new_bucket("stall")
    config = _config(tmp_path, 1, **moto_endpoint.s3_config_overrides())
    with StallingServer() as server, StoreRegistry(config) as stores:
        [(ref, _)] = put_objects(stores.store(f"s3://{bucket}/d"), [5000])
        stalled = _stalled(config, server, 0.5)
        with StoreRegistry(stalled) as stalled_stores, open_cache(stalled, stalled_stores) as in_process:
            errors = [_read_or_error(in_process, ref)]
        cache = open_cache(config, stores)
        cache.fetch_workers = FetchWorkers(stalled, 1, cache.tiers[1])
        try:
            errors.append(_read_or_error(cache, ref))
        finally:
            cache.close()
        assert server.accepted == 2
    for error in errors:
        assert isinstance(error, TransientStorageError) and error.details.get("timed_out"), errors
    assert type(errors[0]) is type(errors[1]) and errors[0].code == errors[1].code


def _read_or_error(cache, ref):
    try:
        return cache.read(ref)
    except Exception as exc:  # what a reader gets is the assertion
        return exc


def test_no_worker_is_left_after_close_or_when_the_daemon_dies(tmp_path: Path) -> None:
    config = _config(tmp_path, 2)
    with StoreRegistry(config) as stores:
        cache = open_cache(config, stores, fetch_workers=True)
        pids = cache.fetch_workers.pids()
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        cache.close()
        assert not any(_alive(p) for p in pids)
    # a daemon killed outright: its workers see their request pipe end and exit
    script = (
        "import sys, time\n"
        "from datahub.config import load_config\n"
        "from datahub.storage import StoreRegistry\n"
        "from datahub.cache import open_cache\n"
        f"c = load_config(env={{}}, overrides={{'home': {str(tmp_path / 'var2')!r}}})\n"
        "c = c.model_copy(update={'cache': c.cache.model_copy(update={'fetch_workers': 2})})\n"
        "cache = open_cache(c, StoreRegistry(c), fetch_workers=True)\n"
        "print(*cache.fetch_workers.pids(), flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path.cwd())
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2
        proc.kill()
        proc.wait(GUARD)
        wait_for(lambda: not any(_alive(p) for p in pids), GUARD, "the workers of a killed daemon to exit")
    finally:
        proc.kill()
        proc.wait()


def test_a_page_file_altered_after_the_worker_wrote_it_never_reaches_a_reader(local, monkeypatch) -> None:
    """The state check (dev, ino, size, ctime) has a window before the read back: bytes
    changed in it (here: one byte flipped by whoever reads the file back) fail the worker's
    checksum, and the daemon fetches the page itself."""
    config, stores, objects = local
    with open_cache(config, stores, fetch_workers=True) as cache:
        disk = cache.fetch_workers.disk
        real = disk.load_written

        def altered(key, size, state):
            data = real(key, size, state)
            return None if data is None else bytes([data[0] ^ 0xFF]) + data[1:]

        monkeypatch.setattr(disk, "load_written", altered)
        ref, data = next((r, d) for r, d in objects if len(d) > 1)
        assert cache.read(ref) == data
        stats = cache.stats()["fetch_workers"]
        assert stats["failovers"] >= 1 and stats["fetches"] == 0
