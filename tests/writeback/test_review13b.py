"""review13b: adversarial checks of ``commit_workspace`` after the third wave (empty
workspaces, the head's blob records it reuses)."""

from __future__ import annotations

import hashlib

from datahub.catalog import Put, Record
from datahub.ingest.blobs import blob_key
from datahub.workspaces import commit_workspace
from tests.writeback.conftest import Env, write


def _read(env: Env, record: Record) -> bytes:
    origin, key = env.stores.for_url(record.url)
    return origin.read(key, etag=record.etag)


def test_a_workspace_emptied_since_the_head_commits_the_deletions(env: Env, catalog) -> None:
    """An empty workspace returns None only when the dataset has no version: files removed
    since the head are a change, committed as deletes, never dropped."""
    ws = env.open()
    write(ws, "a.txt", b"one")
    write(ws, "b.txt", b"two")
    assert commit_workspace(ws, catalog, "run-del").seq == 1
    ws.unlink("a.txt")
    ws.unlink("b.txt")
    version = commit_workspace(ws, catalog, "run-del")
    assert version is not None and (version.seq, version.removed) == (2, 2)
    assert list(catalog.list_records("run-del", 2)) == []


def test_another_records_etag_is_never_given_to_a_file_of_the_same_blob(env: Env, catalog) -> None:
    """A writer of the dataset (over HTTP too: the blob is one the platform names and the
    checksum its own, the etag is not checked) records the victim's blob under its own key
    with a made-up etag. The head's blob records were reused by (checksum, size) from any
    key, etag included: the victim's unchanged file, and a copy of it, were recorded with the
    writer's etag, and every read of them then failed (the object is not at that etag)."""
    victim = b"victim bytes"
    ws = env.open()
    write(ws, "a.txt", victim)
    commit_workspace(ws, catalog, "run-etag")
    honest = catalog.get_record("run-etag", 1, "a.txt")
    forged = Record("zz", honest.url, '"not-the-etag"', honest.size, checksum=honest.checksum)
    catalog.commit("run-etag", [Put(forged)])
    write(ws, "copy.txt", victim)
    version = commit_workspace(ws, catalog, "run-etag")
    for key in ("a.txt", "copy.txt"):
        record = catalog.get_record("run-etag", version.seq, key)
        assert record.etag == honest.etag, key
        assert _read(env, record) == victim
    assert version.added == 1 and version.modified == 0  # a.txt was kept as it was


def test_a_head_blob_record_of_another_size_is_not_reused(env: Env, catalog) -> None:
    """A record whose URL is the blob its checksum names but whose size is not the blob's
    is not reused for a file of that blob: the file's record has its true size."""
    data = b"twelve bytes"
    ws = env.open()
    write(ws, "a.txt", data)
    commit_workspace(ws, catalog, "run-size")
    honest = catalog.get_record("run-size", 1, "a.txt")
    assert honest.checksum == "sha256:" + hashlib.sha256(data).hexdigest()
    catalog.commit("run-size", [Put(Record("zz", honest.url, honest.etag, 5, checksum=honest.checksum))])
    write(ws, "b.txt", data)
    version = commit_workspace(ws, catalog, "run-size")
    record = catalog.get_record("run-size", version.seq, "b.txt")
    assert record.size == len(data) and _read(env, record) == data
    assert blob_key(hashlib.sha256(data).hexdigest()) in record.url
