"""review17a: a commit's pin of a content whose blob is already stored (pinblobs16, the lead's
``_repair_lost_etags``), attacked with blobs that do not hold their digest's bytes.

A commit trusted a stored blob without reading it (``datahub.workspaces._pin_blobs``: one
stat), and ``put_once`` never replaces one; since blobverify18 a stored blob is proven to hold
its content (``datahub.storage.blobs``: its md5 etag on S3, else one read hashed). A blob left short by an earlier writer (a torn
copy on a file system that lost its tail, a hand-made object, another writer of the store)
was so kept for ever, and every file of that content committed since pointed at it: its
record named the short object's etag with the file's own size, and a reader got the short
object's bytes under a checksum they do not have.

Also takeover16's per-journal chunk prefixes over the shared tiers deployments use (S3 in
csi/deploy/config.yaml, moto and Ceph RGW; a RADOS pool), where a recovery finds chunks by
listing the workspace's prefix and RADOS chunks carry their cover records: these pass.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import load_config
from datahub.errors import ObjectChanged
from datahub.ingest.blobs import blob_key
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectStore
from tests.writeback import test_takeover16
from tests.writeback.conftest import CHUNK, Env, remove_bucket, write
from tests.writeback.test_commit_history import read_version
from tests.writeback.test_lease import Clock
from tests.writeback.test_takeover16 import Nodes, _read

CONTENT = b"the output of epoch 7\n" * 500


def _plant(env: Env, ws, data: bytes) -> None:
    """Put ``data`` where the blob of CONTENT lives, as an earlier writer left it."""
    ws.blobs.put(blob_key(hashlib.sha256(CONTENT).hexdigest()), data)


def test_a_short_blob_already_stored_is_not_what_a_new_commit_records(env: Env, catalog) -> None:
    """Before: the commit recorded the 7 KB short blob for the 11 KB file, and the read under
    the record's etag returned the short bytes. Now a stored blob whose size is not the file's
    is written again with the file's bytes (its size alone tells it is not that content)."""
    from datahub.workspaces import commit_workspace

    ws = env.open()
    _plant(env, ws, CONTENT[:7000])
    write(ws, "metrics.txt", CONTENT)
    write(ws, "copy.txt", CONTENT)
    version = commit_workspace(ws, catalog, "outputs")
    assert read_version(env, catalog, "outputs", version.seq) == {"metrics.txt": CONTENT, "copy.txt": CONTENT}


def test_a_record_that_named_the_short_blob_fails_rather_than_serving_its_bytes(env: Env, catalog) -> None:
    """An older version that recorded the short blob (its size and etag) gets ObjectChanged once
    the blob is written again, never the new bytes under the old record's size."""
    from datahub.catalog import Put, Record
    from datahub.workspaces import commit_workspace

    ws = env.open()
    _plant(env, ws, CONTENT[:7000])
    key = blob_key(hashlib.sha256(CONTENT).hexdigest())
    short = ws.blobs.stat(key)
    catalog.create_dataset("older")
    url = ws.blobs.url_for(key)
    old = catalog.commit("older", [Put(Record("a.txt", url, short.etag, 7000))], base=0, message="short")
    write(ws, "metrics.txt", CONTENT)
    commit_workspace(ws, catalog, "outputs")
    with pytest.raises(ObjectChanged):
        read_version(env, catalog, "older", old.seq)


def test_a_blob_of_the_right_size_but_other_bytes_is_not_what_a_new_commit_records(env: Env, catalog) -> None:
    """Before (blobverify18): one stat, the size matched, and the record served the X's. Now the
    blob on this local store is read and hashed (once), found wrong, and written again."""
    from datahub.workspaces import commit_workspace

    ws = env.open()
    _plant(env, ws, b"X" * len(CONTENT))
    write(ws, "metrics.txt", CONTENT)
    version = commit_workspace(ws, catalog, "outputs")
    assert read_version(env, catalog, "outputs", version.seq) == {"metrics.txt": CONTENT}


@pytest.fixture
def s3_env(tmp_path: Path, moto_endpoint) -> Iterator[Env]:
    """Workspace objects and blobs in a moto bucket (the shared tier stays local)."""
    bucket = moto_endpoint.new_bucket("blobs18")
    overrides = {
        "home": str(tmp_path / "var"),
        "objects_url": f"s3://{bucket}/objects",
        "cache": {"page_size": CHUNK, "flush_interval": 3600},
        **moto_endpoint.s3_config_overrides(),
    }
    config = load_config(env={}, overrides=overrides)
    e = Env(config, StoreRegistry(config), endpoint=moto_endpoint, buckets=[bucket])
    yield e
    e.close()


def _blob_reads(monkeypatch: pytest.MonkeyPatch, blobs: ObjectStore) -> list[str]:
    """The keys read from the blob store (by either read call)."""
    reads: list[str] = []
    for name in ("read", "read_chunks"):
        real = getattr(blobs, name)
        monkeypatch.setattr(
            blobs, name, lambda key, *a, _real=real, **k: reads.append(key) or _real(key, *a, **k)
        )
    return reads


def test_a_blob_of_the_right_size_but_other_bytes_in_s3_is_not_what_a_new_commit_records(
    s3_env: Env, catalog
) -> None:
    """On S3 the stored blob's etag (md5 of the X's) is not the flush's (md5 of the file):
    read, found wrong, written again."""
    from datahub.workspaces import commit_workspace

    ws = s3_env.open()
    _plant(s3_env, ws, b"X" * len(CONTENT))
    write(ws, "metrics.txt", CONTENT)
    version = commit_workspace(ws, catalog, "outputs")
    assert read_version(s3_env, catalog, "outputs", version.seq) == {"metrics.txt": CONTENT}


def test_a_blob_in_s3_holding_the_content_is_proven_by_its_stat_alone(
    s3_env: Env, catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deduplicated commit on S3 reads no blob: its etag is the md5 the flush's own put
    of these bytes got. The record names the stored blob's etag."""
    from datahub.workspaces import commit_workspace

    ws = s3_env.open()
    _plant(s3_env, ws, CONTENT)
    stored = ws.blobs.stat(blob_key(hashlib.sha256(CONTENT).hexdigest()))
    write(ws, "metrics.txt", CONTENT)
    reads = _blob_reads(monkeypatch, ws.blobs)
    version = commit_workspace(ws, catalog, "outputs")
    assert reads == []
    [record] = catalog.list_records("outputs", version.seq)
    assert record.etag == stored.etag
    assert read_version(s3_env, catalog, "outputs", version.seq) == {"metrics.txt": CONTENT}


# --- takeover16 over the shared tiers deployments use (S3: csi/deploy/config.yaml; RADOS) ------
class TierNodes(Nodes):
    """takeover16's nodes a and b with their shared tier in S3 (moto, Ceph RGW) or a RADOS
    pool instead of a local directory: there chunks are objects found by listing a prefix,
    and RADOS chunks carry their cover records in an xattr instead of packs."""

    def __init__(self, tmp_path: Path, shared_url: str, s3: dict) -> None:
        self.tmp = tmp_path
        self.clock = Clock()
        self.catalog = SQLiteCatalogStore(tmp_path / "catalog.db", clock=self.clock)
        self.nodes = {}
        for name in ("a", "b"):
            overrides = {
                "home": str(tmp_path / name),
                "objects_url": (tmp_path / "objects").as_uri(),
                "cache": {"page_size": CHUNK, "flush_interval": 3600, "shared_url": shared_url},
                **s3,
            }
            config = load_config(env={}, overrides=overrides)
            self.nodes[name] = (config, StoreRegistry(config))
        self.tier: ObjectStore | None = self.nodes["a"][1].store(shared_url)

    def shared(self) -> set[str]:
        assert self.tier is not None
        return {info.key for info in self.tier.list("writeback/")}

    def close(self) -> None:
        if self.tier is None:  # closed already (by a takeover16 test run on these nodes)
            return
        for key in self.shared():
            self.tier.delete(key)
        self.tier = None
        super().close()


@pytest.fixture(
    params=[
        "moto",
        pytest.param("ceph", marks=pytest.mark.ceph),
        pytest.param("rados", marks=pytest.mark.ceph),
    ]
)
def tier_nodes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TierNodes]:
    if request.param == "rados":
        ceph = request.getfixturevalue("ceph_cluster")
        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.syspath_prepend(ceph.vars["CEPH_PYLIB"])  # Debian's python3-rados
        monkeypatch.setenv("CEPH_CONF", ceph.vars["CEPH_CONF"])
        n = TierNodes(tmp_path, f"rados://{ceph.vars['CEPH_POOL']}/t-{uuid.uuid4().hex[:12]}", {})
    else:
        endpoint = request.getfixturevalue(f"{request.param}_endpoint")
        bucket = endpoint.new_bucket("tiers")
        n = TierNodes(tmp_path, f"s3://{bucket}/tier", endpoint.s3_config_overrides())
        request.addfinalizer(lambda: remove_bucket(endpoint, bucket))
    yield n
    n.close()


def test_each_nodes_acknowledged_file_survives_the_others_recovery_on_an_object_store_tier(
    tier_nodes: TierNodes,
) -> None:
    """takeover16's reverse takeover and a dead writer's leftover, with the tier listed by
    prefix: a's recovery neither deletes b's acknowledged chunks nor b's leftover upload;
    b's own recovery deletes the leftover and b's file reaches the bucket."""
    nodes = tier_nodes
    ws_a = nodes.open("a")
    write(ws_a, "a.txt", b"node a's file")
    nodes.lapse()
    ws_a.abandon()
    ws_b = nodes.open("b")
    data = b"node b's file, acknowledged before its lease lapsed\n" * 300
    write(ws_b, "b.txt", data)
    leftover = ws_b.chunks.put(10_000, 0, b"x" * CHUNK, "killed.txt")  # its commit never ran
    nodes.lapse()
    ws_b.abandon()
    ws_a = nodes.open("a")  # a's recovery lists the whole workspace prefix
    try:
        assert _read(ws_a, "a.txt") == b"node a's file"
    finally:
        ws_a.close()
    assert leftover in nodes.shared()
    nodes.lapse()
    ws_b = nodes.open("b")
    try:
        assert leftover not in nodes.shared()
        assert _read(ws_b, "b.txt") == data
    finally:
        ws_b.close()
    assert nodes.flushed("b.txt") == data


def test_a_power_loss_recovery_replays_no_other_journals_cover_records_on_an_object_store_tier(
    tier_nodes: TierNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """takeover16's power-loss test with its nodes on this tier: a's recovery after a's machine
    lost power replays cover records of its own prefix only (on RADOS they ride in each chunk
    object's xattr, under the prefix of the journal that wrote it)."""
    monkeypatch.setattr(test_takeover16, "Nodes", lambda _tmp, _layout: tier_nodes)
    test_takeover16.test_a_power_loss_recovery_replays_no_other_journals_cover_records(tmp_path)
