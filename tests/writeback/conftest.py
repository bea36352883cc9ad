"""Fixtures for write-back tests: a workspace factory over local dirs or real S3 servers.

``Env`` bundles a Config and a StoreRegistry. ``env.open()`` opens the workspace "ws"
(small chunks so multi-chunk logic is exercised by small files); ``env.reopen()`` drops
the current one the way a crash would and opens it again.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from datahub.config import Config, load_config
from datahub.errors import ObjectChanged, StorageError
from datahub.storage import StoreRegistry
from datahub.writeback import Workspace, open_workspace
from datahub.writeback.journal import Journal
from tests.servers import S3Endpoint

CHUNK = 4096
#: names of the threads a workspace starts (flusher, lease renewal, journal committer, the
#: staged files' watcher and lingering files' prober, the flush server and its pools)
DATAHUB_THREADS = ("flusher-", "flush-", "lease-", "journal-", "datahub-")


def left_running(before: set[threading.Thread], prefixes: tuple[str, ...] = ("",)) -> list[str]:
    """Threads started since ``before`` (named with one of ``prefixes``) that do not end: each
    is given 10 s (one that was stopped may still be finishing a call; one nobody stopped
    never ends)."""
    new = [t for t in threading.enumerate() if t not in before and t.name.startswith(prefixes)]
    for thread in new:
        thread.join(10)
    return [t.name for t in new if t.is_alive()]


@pytest.fixture(autouse=True, scope="module")
def no_workspace_thread_outlives_the_module() -> Iterator[None]:
    """Every workspace a test module opened stopped its threads once closed or abandoned.
    Why: a flusher left by a close that failed (flake17) ran on beside every later module
    of its worker; caught here, a leak is reported by the module that made it, not left to
    surprise a later one that counts the process's threads or descriptors."""
    before = set(threading.enumerate())
    yield
    assert left_running(before, DATAHUB_THREADS) == [], "a workspace's threads outlived this module"


@dataclass
class Env:
    config: Config
    stores: StoreRegistry
    target_url: str | None = None
    opened: list[Workspace] = field(default_factory=list)
    endpoint: S3Endpoint | None = None
    buckets: list[str] = field(default_factory=list)  # removed at close (the Ceph test OSD is small)

    def open(self, name: str = "ws", **kwargs) -> Workspace:
        kwargs.setdefault("target_url", self.target_url)
        ws = open_workspace(name, self.config, self.stores, **kwargs)
        self.opened.append(ws)
        return ws

    def crash_and_reopen(self, ws: Workspace, **kwargs) -> Workspace:
        ws.abandon()
        return self.open(ws.name, **kwargs)

    def origin(self):
        """The objects of the default workspace's journal: its own folder of the flush target
        (``<target>/j-<journal id>``), as the journal last opened flushes there."""
        for ws in reversed(self.opened):
            if ws.name == "ws":
                return ws.flusher.origin
        url = self.target_url or f"{self.config.resolved_objects_url}/workspaces/ws"
        return self.stores.store(url)

    def origin_files(self) -> dict[str, str]:
        """key -> sha256 of every object in the flush target."""
        store = self.origin()
        return {info.key: hashlib.sha256(store.read(info.key)).hexdigest() for info in store.list()}

    def shared_keys(self) -> list[str]:
        store = self.stores.store(self.config.resolved_shared_url)
        return [info.key for info in store.list("writeback/")]

    def close(self) -> None:
        for ws in self.opened:
            try:
                ws.abandon() if not ws._closed else None
            except Exception:
                pass
        self.stores.close()
        if self.endpoint is not None:
            for bucket in self.buckets:
                remove_bucket(self.endpoint, bucket)


def remove_bucket(endpoint: S3Endpoint, bucket: str) -> None:
    client = endpoint.client()
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        client.delete_bucket(Bucket=bucket)
    except Exception:
        pass  # best effort: cleanup must not turn a passing test into a failure


def make_env(tmp_path: Path, endpoint: S3Endpoint | None = None, *, shared_s3: bool = False,
             origin_s3: bool = False, **cache) -> Env:  # fmt: skip
    overrides: dict = {
        "home": str(tmp_path / "var"),
        "cache": {"page_size": CHUNK, "flush_interval": 3600, **cache},
    }
    target = None
    buckets = []
    if endpoint is not None:
        overrides.update(endpoint.s3_config_overrides())
        if shared_s3:
            buckets.append(endpoint.new_bucket("wbshared"))
            overrides["cache"]["shared_url"] = f"s3://{buckets[-1]}/node-a"
        if origin_s3:
            buckets.append(endpoint.new_bucket("wborigin"))
            target = f"s3://{buckets[-1]}/out"
    config = load_config(env={}, overrides=overrides)
    return Env(config, StoreRegistry(config), target, endpoint=endpoint, buckets=buckets)


#: ``ChunkStore.cover_key`` as a datahub before wbgaps25 had it: none, so it keys no pack record
#: (``packs.COVER_MAGIC_KEYED``); a test that writes as such a datahub sets it on the class
UNKEYED = property(lambda self: None, lambda self, value: None)

LAYOUTS = {"packs": {}, "chunk files": {"writeback_pack_bytes": 0}}


@pytest.fixture
def packs_env(tmp_path: Path) -> Iterator[Env]:
    """One workspace layout, not each: a local shared tier, small chunks in packs (the default)."""
    env = make_env(tmp_path)
    yield env
    env.close()


@pytest.fixture(params=list(LAYOUTS))
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """A local shared tier, once with small chunks in pack files (the default) and once
    with one file per chunk: every property must hold in both layouts."""
    e = make_env(tmp_path, **LAYOUTS[request.param])
    yield e
    e.close()


@pytest.fixture
def unpacked_env(tmp_path: Path) -> Iterator[Env]:
    """A local shared tier with one file per chunk (tests of that layout itself)."""
    e = make_env(tmp_path, writeback_pack_bytes=0)
    yield e
    e.close()


def write(ws: Workspace, path: str, data: bytes) -> None:
    """Create or replace ``path`` with ``data`` in one open/close (one acknowledgement)."""
    with ws.open(path, create=True, truncate=True) as fh:
        fh.write(0, data)


@pytest.fixture
def catalog(tmp_path: Path):
    """An embedded SQLite catalog for commits of workspaces."""
    from datahub.catalog import open_catalog

    cat = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    yield cat
    cat.close()


def objects_of(ws: Workspace, keys) -> set[str]:
    """The shared-tier objects holding these chunks (a chunk file, or the pack it is in)."""
    return {ws.chunks.object_of(key) for key in keys}


@pytest.fixture
def s3_env(tmp_path: Path, s3_endpoint: S3Endpoint) -> Iterator[Env]:
    """Shared tier and origin both on a real S3 server (moto, and Ceph RGW)."""
    e = make_env(tmp_path, s3_endpoint, shared_s3=True, origin_s3=True)
    yield e
    e.close()


def unreadable_records(env: Env, catalog, dataset: str, seq: int, content: bytes) -> list[str]:
    """The keys of version ``seq`` whose record no longer reads (its etag refused), each file
    holding ``content``: what a stale etag left by a commit looks like to a reader."""
    bad = []
    for record in catalog.list_records(dataset, seq):
        store, key = env.stores.for_url(record.url)
        try:
            assert store.read(key, etag=record.etag) == content
        except ObjectChanged:
            bad.append(record.key)
    return sorted(bad)


def content(ws: Workspace, path: str) -> bytes:
    """A workspace file's bytes, read whole through the workspace (not its shared tier)."""
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size)


def assert_holds_exactly(ws: Workspace, files: dict[str, bytes], directory: str = "d") -> None:
    """What a recovery must leave: ``directory`` lists exactly ``files``, each whole, and the
    flusher counts their bytes (a file lost, doubled or torn fails one of the three)."""
    assert sorted(name for name, _ in ws.listdir(directory)) == sorted(p.split("/")[1] for p in files)
    for path, data in files.items():
        assert content(ws, path) == data
    assert ws.flusher.used == sum(len(d) for d in files.values())


@contextmanager
def journal_writes_failing_at(monkeypatch: pytest.MonkeyPatch, stop_at: int | None) -> Iterator[list[int]]:
    """``Journal.write`` fails with StorageError at its ``stop_at``-th call (None: never): a kill
    between two of recovery's commits, for what reaches the journal. Yields ``[calls]``."""
    real_write = Journal.write
    calls = [0]

    def write_or_fail(journal: Journal, doing: str):
        calls[0] += 1
        if calls[0] == stop_at:
            raise StorageError(f"test: recovery stopped at its transaction {stop_at}")
        return real_write(journal, doing)

    monkeypatch.setattr(Journal, "write", write_or_fail)
    try:
        yield calls
    finally:
        monkeypatch.setattr(Journal, "write", real_write)
