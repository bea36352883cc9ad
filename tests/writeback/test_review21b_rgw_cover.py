"""Review of ceph41's covered first commits on S3/RGW (review21b): a new small file's cover
record rides in its chunk's PUT as user metadata. What must hold, on a real S3 server (moto):
the metadata a PUT sends stays within S3's 2 KB of user metadata whatever the path (long,
non-ASCII, quotes), a record past it falls back to the synced commit (the close
still succeeds, nothing truncated); a covered file renamed, unlinked, truncated or written
again before its deferred commit reaches LMDB is, after a kill -9 (``abandon``), exactly what
the last acknowledged operation left; and a node that adopts the lost journal sees the same."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.storage.s3put import RECORD_META
from datahub.writeback import default_target, workspace_dir
from datahub.writeback.adopt import adopt_journal
from datahub.writeback.packs import cover_seed, decode_cover
from tests.writeback.conftest import Env, make_env, write
from tests.writeback.test_cover import _another_boot, _in_journal, _journal_dir
from tests.writeback.test_nodeloss20 import _files

AWS_USER_METADATA = 2048  # bytes of user metadata names and values AWS keeps (RGW alike)


@pytest.fixture
def moto_env(tmp_path: Path, moto_endpoint) -> Iterator[Env]:
    env = make_env(tmp_path, moto_endpoint, shared_s3=True)
    yield env
    env.close()


def read_back(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 30)


def test_a_records_metadata_stays_within_s3s_limit_and_one_past_it_commits_synced(moto_env: Env) -> None:
    """moto keeps metadata of any size, so the test measures what each PUT stored: every
    chunk's user metadata within 2 KB; paths whose record cannot fit are still acknowledged
    (the synced commit, not deferred) and survive a kill -9 with their bytes."""
    ws = moto_env.open()
    ws.journal.defer_seconds = 3600.0
    # the journal keeps paths of up to 511 bytes (names of up to 255); JSON writes each
    # non-ASCII character of them as 6 or 12 bytes, a quote as 2, so these cross the limit
    smiles, accents = "\U0001f600" * 60, "é" * 120
    for directory in ("u", f"u/{smiles}", f"u/{accents}"):
        ws.mkdir(directory)
    names = [f"u/{smiles}/" + "\U0001f600" * k for k in (10, 40, 50, 55, 60, 63)]
    names += [f"u/{accents}/{accents}", "u/" + 'q"\\ ' * 60, "u/" + "n" * 250]
    expected = {}
    for i, path in enumerate(names):
        expected[path] = bytes([i + 1]) * (1000 + i)
        write(ws, path, expected[path])  # the close must succeed either way
    client, bucket = moto_env.endpoint.client(), moto_env.buckets[0]
    covered = []
    for path in names:
        ((key, _),) = ws.journal_record(path)["chunks"].values()
        full = ws.chunks.store._full(key)  # the object key in the bucket
        meta = client.head_object(Bucket=bucket, Key=full).get("Metadata") or {}
        size = sum(len(k.encode()) + len(v.encode()) for k, v in meta.items())
        assert size <= AWS_USER_METADATA, (path, size)
        if meta:
            assert (
                decode_cover(base64.b64decode(meta[RECORD_META]), seed=cover_seed(ws.chunks.journal))["path"]
                == path
            )  # whole
            covered.append(path)
    assert 3 <= len(covered) <= len(names) - 3, covered  # both sides of the limit were written
    ws.abandon()
    ws = moto_env.open()
    for path, data in expected.items():
        assert read_back(ws, path) == data, path


def test_namespace_changes_before_a_covered_commit_reaches_lmdb_survive_a_kill(moto_env: Env) -> None:
    ws = moto_env.open()
    ws.journal.defer_seconds = 3600.0
    for name in ("ren", "gone", "cut", "again", "kept", "onto", "over"):
        write(ws, name, name.encode() * 50)
    assert ws.journal.deferred() == 7
    ws.rename("ren", "ren2")
    write(ws, "ren", b"a new file at the old name")
    ws.rename("over", "onto")  # replaces a covered file by another
    ws.unlink("gone")
    ws.truncate("cut", 7)
    write(ws, "again", b"second version")
    write(ws, "fresh", b"one")
    write(ws, "fresh", b"two, the last acknowledged")
    write(ws, "last", b"only its PUT names it")
    assert ws.journal.deferred() == 1
    ws.abandon()
    ws = moto_env.open()
    names = sorted(name for name, _ in ws.listdir(""))
    assert names == ["again", "cut", "fresh", "kept", "last", "onto", "ren", "ren2"]
    assert read_back(ws, "ren2") == b"ren" * 50
    assert read_back(ws, "ren") == b"a new file at the old name"
    assert read_back(ws, "onto") == b"over" * 50
    assert read_back(ws, "cut") == (b"cut" * 50)[:7]
    assert read_back(ws, "again") == b"second version"
    assert read_back(ws, "fresh") == b"two, the last acknowledged"
    assert read_back(ws, "kept") == b"kept" * 50
    assert read_back(ws, "last") == b"only its PUT names it"


def test_a_power_loss_after_a_rename_brings_back_the_new_file_at_the_old_name(
    moto_env: Env, tmp_path: Path
) -> None:
    """The records of a path's two files both stay in S3: after a power loss that took the
    second file's commit (written into LMDB without a flush) from the journal, recovery writes
    the second again from its PUT and leaves the first where the rename put it."""
    ws = moto_env.open()
    ws.journal.defer_seconds = 3600.0
    write(ws, "a", b"first a")
    ws.rename("a", "b")  # synced: the first a's commit and the rename are durable
    before = tmp_path / "journal-before"
    before.mkdir()
    ws.journal._env.copy(str(before))
    write(ws, "a", b"second a, acknowledged")
    write(ws, "c", b"c, acknowledged")
    ws.journal.settle_deferred()  # in LMDB, its meta page not flushed: the power loss takes it
    ws.abandon()
    _another_boot(_journal_dir(moto_env), before / "data.mdb")
    assert not _in_journal(_journal_dir(moto_env), "c")
    ws = moto_env.open()
    assert _files(ws) == {"a": b"second a, acknowledged", "b": b"first a", "c": b"c, acknowledged"}


def test_another_node_adopts_covered_files_renamed_or_replaced_before_their_commit(
    tmp_path: Path, moto_endpoint
) -> None:
    a_env = make_env(tmp_path / "a", moto_endpoint, shared_s3=True)
    b_env = make_env(tmp_path / "b", moto_endpoint, shared_url=a_env.config.cache.shared_url)
    try:
        a = a_env.open()
        a.journal.defer_seconds = 3600.0
        write(a, "x", b"x, renamed")
        write(a, "w", b"w, unlinked")
        write(a, "r", b"r, first")
        a.rename("x", "y")
        a.unlink("w")
        write(a, "r", b"r, replaced")
        write(a, "z", b"z, only its PUT names it")
        assert a.journal.deferred() >= 1
        lost = a.chunks.journal
        a.abandon()
        shutil.rmtree(workspace_dir(a_env.config, "ws"))
        # node b: a node of the same workspace, under the writer lease and with a's flush target
        # (adoption refuses anything else since lognext21)
        leases = SQLiteCatalogStore(a_env.config.resolved_journal_dir.parent / "catalog.db")
        try:
            b = b_env.open(lease=leases, target_url=default_target(a_env.config, "ws"))
            report = adopt_journal(b, lost, b_env.stores)
            assert not report.dropped
            assert _files(b) == {"y": b"x, renamed", "r": b"r, replaced", "z": b"z, only its PUT names it"}
            b.close()
        finally:
            leases.close()
    finally:
        b_env.close()
        a_env.close()
