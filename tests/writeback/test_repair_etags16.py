"""A version committed before pinblobs16 may hold records of one content naming etags their
blob lost (each file of that content put the blob again). An unchanged file keeps its head
record at the next commit (``_head_blobs``), so every later version carried the damage: the
next workspace commit gives such records the blob's etag back, once the blob is read and its
sha256 checked (``datahub.workspaces._repair_lost_etags``; the lead, from pinblobs16's report)."""

from __future__ import annotations

import dataclasses

from datahub.catalog import Put
from tests.writeback.conftest import Env, unreadable_records, write

SAME = b"one content in every file\n" * 200


def _damaged(env: Env, catalog) -> tuple[object, list[str]]:
    """A workspace of 16 identical files committed (v1), then v2: v1 with half its records
    naming an etag the blob does not have, as the old pin left them."""
    from datahub.workspaces import commit_workspace

    ws = env.open()
    for i in range(16):
        write(ws, f"copy{i:02d}.txt", SAME)
    v1 = commit_workspace(ws, catalog, "copies")
    records = sorted(catalog.list_records("copies", v1.seq), key=lambda r: r.key)
    stale = [dataclasses.replace(r, etag=f"{r.etag}-lost") for r in records[::2]]
    catalog.commit("copies", [Put(r) for r in stale], base=v1.seq, message="as the old pin left it")
    return ws, [r.key for r in stale]


def test_the_next_commit_gives_records_of_one_content_their_blobs_etag_back(env: Env, catalog) -> None:
    """Before: the workspace unchanged, the commit found no change and the head kept its 8
    unreadable records for ever."""
    from datahub.workspaces import commit_workspace

    ws, stale = _damaged(env, catalog)
    assert unreadable_records(env, catalog, "copies", 2, SAME) == sorted(stale)
    v3 = commit_workspace(ws, catalog, "copies")
    assert v3.seq == 3 and unreadable_records(env, catalog, "copies", 3, SAME) == []
    assert commit_workspace(ws, catalog, "copies").seq == 3  # repaired: nothing more to commit


def test_a_blob_that_does_not_hold_its_digests_bytes_gives_no_etag(env: Env, catalog) -> None:
    """The etag is taken only from a blob whose bytes hash to its digest: one overwritten with
    other bytes (by hand, or another writer of the store) leaves the records as they are."""
    from datahub.ingest.blobs import blob_key
    from datahub.workspaces import commit_workspace

    ws, stale = _damaged(env, catalog)
    [record] = [r for r in catalog.list_records("copies", 2) if r.key == stale[0]]
    store, key = env.stores.for_url(record.url)
    assert key.endswith(blob_key(record.checksum.removeprefix("sha256:")))
    store.put(key, b"not the content")
    head = commit_workspace(ws, catalog, "copies")
    assert head.seq == 2  # nothing changed: no record took the overwritten blob's etag
