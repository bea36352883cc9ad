"""commit_workspace: a flushed workspace becomes a dataset version pointing at origin objects."""

from __future__ import annotations

import hashlib

from datahub.workspaces import commit_workspace
from tests.writeback.conftest import Env, write


def test_commit_creates_versions_with_only_the_changes(env: Env, catalog) -> None:
    ws = env.open()
    ws.mkdir("ckpt")
    write(ws, "ckpt/a", b"epoch-1")
    write(ws, "log.txt", b"loss=1.0")
    v1 = commit_workspace(ws, catalog, "run-7", message="epoch 1", author="trainer")
    assert v1.seq == 1 and v1.record_count == 2 and ws.dirty() == []
    rec = catalog.get_record("run-7", 1, "ckpt/a")
    assert rec.checksum == "sha256:" + hashlib.sha256(b"epoch-1").hexdigest()
    origin, _ = env.stores.for_url(rec.url)
    assert origin.read(_key(rec.url, env), etag=rec.etag) == b"epoch-1"

    write(ws, "ckpt/b", b"epoch-2")
    write(ws, "log.txt", b"loss=0.5")
    ws.unlink("ckpt/a")
    v2 = commit_workspace(ws, catalog, "run-7", message="epoch 2")
    assert (v2.seq, v2.added, v2.removed, v2.modified) == (2, 1, 1, 1)
    assert sorted(r.key for r in catalog.list_records("run-7", 2)) == ["ckpt/b", "log.txt"]
    assert catalog.get_record("run-7", 1, "ckpt/a").size == 7  # version 1 is unchanged
    assert commit_workspace(ws, catalog, "run-7").seq == 2  # nothing changed: no new version


def _key(url: str, env: Env) -> str:
    _store, key = env.stores.for_url(url)
    return key


def test_a_reverted_file_is_committed_as_its_last_acknowledged_state(env: Env, catalog) -> None:
    """docs/writeback.md, "Out of space at close": a version committed from the workspace
    holds what the last fsync acknowledged, never the changes a revert dropped."""
    ws = env.open()
    fh = ws.open("ckpt", create=True)
    fh.write(0, b"epoch-1")
    fh.fsync()
    fh.write(0, b"half-written epoch-2")
    ws.revert("ckpt")
    fh.close()
    commit_workspace(ws, catalog, "run-8")
    rec = catalog.get_record("run-8", 1, "ckpt")
    assert rec.checksum == "sha256:" + hashlib.sha256(b"epoch-1").hexdigest() and rec.size == 7


def test_an_empty_workspace_commits_nothing_and_does_not_fail(env: Env, catalog) -> None:
    """A job that wrote no file: no version (an empty change set makes none), and no error,
    which failed the unmount (a CSI workspace whose pod wrote nothing was never unpublished)."""
    ws = env.open()
    ws.mkdir("logs")  # a directory is no record
    assert commit_workspace(ws, catalog, "run-empty") is None
    assert catalog.get_dataset("run-empty").name == "run-empty"
    assert list(catalog.log("run-empty")) == []
    write(ws, "logs/a.txt", b"now one")
    assert commit_workspace(ws, catalog, "run-empty").seq == 1


def test_a_record_naming_another_files_checksum_is_never_reused_for_it(env: Env, catalog) -> None:
    """review13: the head's blob records were reused by (checksum, size) alone. A writer
    commits a record pointing at a blob of its own bytes under the victim's checksum; the
    next workspace commit pointed the victim's unchanged file at those bytes."""
    import io

    from datahub.catalog import Put, Record
    from datahub.ingest.blobs import blob_key

    victim, evil = b"victim", b"evil!!"  # the same size
    ws = env.open()
    write(ws, "a.txt", victim)
    commit_workspace(ws, catalog, "run-x")
    evil_sha = hashlib.sha256(evil).hexdigest()
    info = ws.blobs.put(blob_key(evil_sha), io.BytesIO(evil), len(evil))
    forged = Record(
        "zz", ws.blobs.url_for(blob_key(evil_sha)), info.etag, len(evil),
        checksum="sha256:" + hashlib.sha256(victim).hexdigest(),
    )  # fmt: skip
    catalog.commit("run-x", [Put(forged)])
    write(ws, "b.txt", b"a change, so the next commit writes a version")
    version = commit_workspace(ws, catalog, "run-x")
    record = catalog.get_record("run-x", version.seq, "a.txt")
    origin, key = env.stores.for_url(record.url)
    assert origin.read(key) == victim
