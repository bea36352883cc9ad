"""A commit whose head names a content's blob under two etags, the blob gone, must still land
(blobs17, from review17a). ``_repair_lost_etags`` stat'ed the blob to repair the etags, the
stat raised ObjectNotFound, and every commit of the workspace failed until someone stepped in.
Now the content is pinned again from the workspace's own object (its bytes checked against the
sha256 its flush recorded), or, if that is gone too, the records stay as they were and a
warning says which file and what to do."""

from __future__ import annotations

import logging

import pytest

from datahub.errors import ObjectNotFound
from tests.writeback.conftest import Env
from tests.writeback.test_repair_etags16 import SAME, _damaged


def _damaged_and_gone(env: Env, catalog):
    """test_repair_etags16's damaged head (16 files of one content, half their records naming
    an etag the blob never had, as a commit before pinblobs16 left them), its blob deleted."""
    from datahub.ingest.blobs import blob_key

    ws, _stale = _damaged(env, catalog)
    [record, *_] = catalog.list_records("copies", 2)
    store, key = env.stores.for_url(record.url)
    assert key.endswith(blob_key(record.checksum.removeprefix("sha256:")))
    store.delete(key)
    return ws, store, key


def _read_all(env: Env, catalog, seq: int) -> dict[str, bytes]:
    out = {}
    for record in catalog.list_records("copies", seq):
        store, key = env.stores.for_url(record.url)
        out[record.key] = store.read(key, etag=record.etag)
    return out


def test_a_gone_blob_is_pinned_again_from_the_workspace_and_the_commit_lands(env: Env, catalog) -> None:
    """Before: ObjectNotFound from commit_workspace, at this commit and every later one."""
    from datahub.workspaces import commit_workspace

    ws, store, key = _damaged_and_gone(env, catalog)
    with pytest.raises(ObjectNotFound):
        _read_all(env, catalog, 2)
    version = commit_workspace(ws, catalog, "copies")
    assert version.seq == 3
    assert _read_all(env, catalog, 3) == {f"copy{i:02d}.txt": SAME for i in range(16)}
    assert store.read(key) == SAME
    assert commit_workspace(ws, catalog, "copies").seq == 3  # nothing left to repair


def test_a_gone_blob_the_workspace_no_longer_holds_leaves_the_records_and_says_so(
    env: Env, catalog, caplog: pytest.LogCaptureFixture
) -> None:
    """The workspace's object of the content is gone too (deleted behind the flusher) and its
    chunks were evicted from the shared tier (since review17c a commit reads a file whose object
    changed from the workspace's own chunks): the commit lands without touching those records
    and names the file and what to do."""
    from datahub.workspaces import commit_workspace

    ws, _store, _key = _damaged_and_gone(env, catalog)
    ws.flush()
    ws.flusher.evict(0)  # the workspace holds the content nowhere but its objects
    origin = env.origin()
    for info in list(origin.list()):
        origin.delete(info.key)
    before = {r.key: r for r in catalog.list_records("copies", 2)}
    with caplog.at_level(logging.WARNING, logger="datahub.workspaces"):
        head = commit_workspace(ws, catalog, "copies")
    assert head.seq == 2  # nothing to commit: the records stay as they were
    assert {r.key: r for r in catalog.list_records("copies", 2)} == before
    [warning] = [m for m in caplog.messages if "is gone" in m]
    assert "restore the blob" in warning and "copy00.txt" in warning
