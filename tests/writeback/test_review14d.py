"""review14d: adversarial checks of the flusher's second fence check (``FileStream``'s
``before_last``, e42f76a) and of ``datahub cache flush`` under the writer lease (e69d934).

Two "nodes" are two homes sharing one SQLite catalog and one objects bucket, as in
``test_lease.py``, whose helpers these reuse."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import load_config
from datahub.errors import StorageError
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace, writer_lease
from tests.faults import FlakyProxy
from tests.servers import S3Endpoint
from tests.writeback.conftest import CHUNK, write
from tests.writeback.flushed import files, only_copy, s3_copies
from tests.writeback.test_lease import Clock, catalog, clock, node, wait_fenced

__all__ = ["catalog", "clock"]  # fixtures


# The takeovers here move the catalog's clock; the holder's own renewals run on the real one.
# test_lease's 3 s ttl fenced node a for time (a renewal 2.5 s late) before its upload began on
# a loaded machine (suite17's timeline), and the test then checked nothing; 9 s did too at load
# 20 (flaky21: a's renewal thread woke 4.8 s late, its call took 1 ms, before a's first PUT).
# Expiry is not what these check: the default ttl, and the holder's renewal that learns of the
# takeover is run at once (``_renews_now``) instead of waited for (every ttl / 3).
TAKEOVER_TTL = 30.0


def _s3_node(tmp_path: Path, name: str, bucket: str, endpoint_url: str, endpoint: S3Endpoint, **s3_settings):
    """A node whose objects live in ``bucket``, reached through ``endpoint_url``."""
    s3 = endpoint.s3_config_overrides()["s3"] | {"endpoint_url": endpoint_url, **s3_settings}
    config = load_config(
        env={},
        overrides={"home": str(tmp_path / name), "objects_url": f"s3://{bucket}/objects", "s3": s3,
                   "cache": {"page_size": CHUNK, "flush_interval": 3600}},
    )  # fmt: skip
    return config, StoreRegistry(config)


def test_an_s3_put_retried_after_the_lease_was_taken_over_does_not_replace_the_new_holders_file(
    tmp_path: Path, catalog: SQLiteCatalogStore, clock: Clock, moto_endpoint: S3Endpoint
) -> None:
    """Node a flushes model.bin to S3 through a proxy; its fence checks pass (lease held), the
    store reads the body, and its first PUT is answered 503 (SlowDown) only once, meanwhile, a's
    lease lapsed at the catalog, node b (straight to the server) took the workspace over,
    wrote model.bin and flushed it, and a's renewal learnt it lost the lease. The
    store's retry must not land a's older bytes over b's acknowledged ones."""
    bucket = moto_endpoint.new_bucket("rv14d")
    with FlakyProxy(moto_endpoint.url) as proxy:
        config_a, stores_a = _s3_node(tmp_path, "a", bucket, proxy.url, moto_endpoint)
        config_b, stores_b = _s3_node(tmp_path, "b", bucket, moto_endpoint.url, moto_endpoint)
        ws_a = open_workspace("shared", config_a, stores_a, lease=catalog, lease_ttl=TAKEOVER_TTL)
        write(ws_a, "model.bin", b"node a's older bytes")
        took_over: list[BaseException | None] = []

        def first_put_of_the_file(method: str, path: str) -> bool:
            if (
                method != "PUT"
                or not re.search(r"/workspaces/shared/(j-[0-9a-f]+/)?model\.bin$", path.split("?")[0])
                or took_over
            ):
                return False
            try:  # while a's first PUT of model.bin waits for its answer
                _take_over(ws_a, clock, catalog, config_b, stores_b)
                took_over.append(None)
            except BaseException as exc:  # reported by the test, not lost in the proxy's thread
                took_over.append(exc)
            return True  # answered 503: a transient failure the store retries

        proxy.match = first_put_of_the_file
        proxy.fail_more(1)
        flusher = threading.Thread(target=_flush_ignoring_the_fence, args=(ws_a,))
        flusher.start()
        flusher.join(120)
        assert not flusher.is_alive()
        _close_fenced(ws_a, stores_a, stores_b)
    assert took_over == [None], took_over
    assert proxy.failed == 1
    held = s3_copies(moto_endpoint.client(), bucket, "objects/workspaces/shared/", "model.bin")
    assert list(held.values()) == [b"node b's acknowledged bytes"]  # a's retried put landed nowhere


def _take_over(ws_a, clock: Clock, catalog: SQLiteCatalogStore, config_b, stores_b) -> None:
    """a's lease lapses at the catalog; node b opens the workspace, writes model.bin and
    flushes it; then a's next renewal learns it lost the lease."""
    clock.now += 60
    ws_b = open_workspace("shared", config_b, stores_b, lease=catalog)
    try:
        write(ws_b, "model.bin", b"node b's acknowledged bytes")
        ws_b.flush()
    finally:
        ws_b.close()
    _renews_now(ws_a)


def _renews_now(ws) -> None:
    """``ws``'s next lease renewal (the step its thread runs every ttl / 3, ``WriterLease.renew``)
    run here at once, then its fence must be closed: the renewal was refused, the lease taken.
    The lease is the one ``writer_lease`` names, still renewed by its thread. (It was looked for
    in ``gc.get_objects()``: a dead ``weakref.proxy`` any earlier test of the worker left there
    raised ReferenceError at ``isinstance``, flake22.)"""
    lease = writer_lease(ws)
    assert lease is not None and lease._thread.is_alive(), f"{ws.what} holds no renewed lease"
    lease.renew()
    wait_fenced(ws)


def _close_fenced(ws_a, *stores) -> None:
    try:
        ws_a.close()
    except StorageError:
        pass  # fenced: expected
    for store in stores:
        store.close()


def _flush_ignoring_the_fence(ws) -> None:
    try:
        ws.flush()
    except StorageError:
        pass  # recording the upload (or the upload itself) is fenced


def _flush_cli(tmp_path: Path, home: str, catalog_url: str) -> subprocess.CompletedProcess:
    """``datahub cache flush --workspace shared`` as node ``home`` runs it, in its own process."""
    config = tmp_path / f"{home}-{len(catalog_url)}.toml"
    config.write_text(
        f'home = "{tmp_path / home}"\n'
        f'objects_url = "{(tmp_path / "objects").as_uri()}"\n'
        f'catalog_url = "{catalog_url}"\n'
        f"[cache]\npage_size = {CHUNK}\nflush_interval = 3600.0\n"
        "[catalog]\nretry_backoff = 0.01\n"  # the catalog that does not answer: a short schedule
    )
    argv = [sys.executable, "-c", "from datahub.cli.main import main; raise SystemExit(main())"]
    argv += ["--config", str(config), "cache", "flush", "--workspace", "shared"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])


def test_the_flush_command_on_a_node_that_lost_the_workspace_pushes_nothing(
    tmp_path: Path, catalog: SQLiteCatalogStore, clock: Clock
) -> None:
    """e69d934 through the command itself (its test calls ``flush_workspace``): node b's
    journal holds a file its fenced close could not push; a took the workspace over and
    flushed its own. ``datahub cache flush`` on b exits 4 naming the holder while a holds
    it, and 7 naming the server when the catalog it takes the lease at does not answer
    (never a flush without the lease); the bucket keeps a's bytes either way."""
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    ws_b = open_workspace("shared", config_b, stores_b, lease=catalog, lease_ttl=TAKEOVER_TTL)
    write(ws_b, "model.bin", b"node b's bytes, never pushed")
    clock.now += 60  # b's lease lapsed at the catalog
    ws_a = open_workspace("shared", config_a, stores_a, lease=catalog)
    try:
        _renews_now(ws_b)
        with pytest.raises(StorageError):
            ws_b.close()  # its final flush is fenced: the file stays dirty in b's journal
        write(ws_a, "model.bin", b"node a's acknowledged bytes")
        ws_a.flush()
        held_elsewhere = _flush_cli(tmp_path, "b", f"sqlite:///{tmp_path / 'catalog.db'}")
        down = _flush_cli(tmp_path, "b", "http://127.0.0.1:9")
    finally:
        ws_a.close()
        stores_a.close()
        stores_b.close()
    assert held_elsewhere.returncode == 4, held_elsewhere.stderr
    assert "open for writing elsewhere" in held_elsewhere.stderr
    assert "Traceback" not in held_elsewhere.stderr
    assert down.returncode == 7, down.stderr
    assert "http://127.0.0.1:9" in down.stderr and "Traceback" not in down.stderr
    held = only_copy(tmp_path / "objects" / "workspaces" / "shared", "model.bin")
    assert held == b"node a's acknowledged bytes"  # b's flush pushed nothing


@pytest.mark.parametrize("origin", ["local", "s3-multipart"])
def test_an_upload_fenced_at_its_last_chunk_leaves_nothing_and_counts_nothing(
    tmp_path: Path, catalog: SQLiteCatalogStore, clock: Clock, moto_endpoint: S3Endpoint, origin: str
) -> None:
    """Node a's upload of a 6 MiB file passes the fence before it starts; while it reads its
    first chunk, b takes the workspace over and flushes the same path. a's stream then
    refuses its last chunk (e42f76a): the store's put fails from inside its read. Nothing
    of a's may stay: no temporary file beside the object (local), no multipart upload
    left open (S3), the object is b's, and a's flush reports the failure and no upload."""
    if origin == "local":
        (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    else:
        bucket = moto_endpoint.new_bucket("rv14d")
        small = {"multipart_threshold": 1024**2, "multipart_chunk": 5 * 1024**2}
        config_a, stores_a = _s3_node(tmp_path, "a", bucket, moto_endpoint.url, moto_endpoint, **small)
        config_b, stores_b = _s3_node(tmp_path, "b", bucket, moto_endpoint.url, moto_endpoint, **small)
    ws_a = open_workspace("shared", config_a, stores_a, lease=catalog, lease_ttl=TAKEOVER_TTL)
    write(ws_a, "model.bin", os.urandom(6 * 1024**2))
    real_get = ws_a.chunks.get
    reads: list[str] = []

    def get_taking_over_first(key: str, length: int, path: str) -> bytes:
        if not reads:  # the first chunk a's upload reads: b takes over meanwhile
            _take_over(ws_a, clock, catalog, config_b, stores_b)
        reads.append(key)
        return real_get(key, length, path)

    ws_a.chunks.get = get_taking_over_first
    try:
        with pytest.raises(StorageError):
            ws_a.flush()
        assert reads, "a's upload never read a chunk: the test checks nothing"
        assert ws_a.flusher.last_error is not None and "lease" in ws_a.flusher.last_error
        assert ws_a.dirty() == ["model.bin"]
    finally:
        ws_a.chunks.get = real_get
        _close_fenced(ws_a, stores_a, stores_b)
    if origin == "local":
        folder = tmp_path / "objects" / "workspaces" / "shared"
        assert files(folder) == ["model.bin"]  # no temporary file of a's beside it
        assert only_copy(folder, "model.bin") == b"node b's acknowledged bytes"
    else:
        client = moto_endpoint.client()
        assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
        held = s3_copies(client, bucket, "objects/workspaces/shared/", "model.bin")
        assert list(held.values()) == [b"node b's acknowledged bytes"]
