"""review19a: attacks on commitmem18's streamed workspace commit (``datahub.commit_base``).

Found and fixed (``commit_base.Writes.note``; older than commitmem18, since review17c's
merge base): a file deleted by a commit whose reply was lost (or whose process was killed
before the journal's record) and then written again with the same bytes was left out of
every later version. Found by a randomised run of writes, deletes, renames, other writers'
changes and failures injected before, inside and after the catalog commit and inside each
of the journal's stores, checked against the three-way rules after each commit that
succeeded (``tests/writeback/commit_fuzz.py``, run by hand: kept out of the suite for its
cost; the test below is its smallest case).

Found (fixed by blobcas19, ``workspaces._Etags``): the repair of
records naming an etag their blob lost (``workspaces._repair_lost_etags``, review16's
damage: ObjectChanged under that etag, carried into every later version; only the cache's
self-verify serves them, at a whole read and hash of the blob once per process) sees one batch
of keys at a time since commitmem18. It repairs a content whose records name two etags; when every
damaged record of a content falls in one batch and its good records in others (a directory
of identical files, keys in a row), each batch sees one etag and nothing is repaired, where
the whole-workspace pin before commitmem18 repaired them. The batch is shrunk to 4 keys so
that 16 files cross it, as 10,000 keys do at the real size.
"""

from __future__ import annotations

import dataclasses

import pytest

from datahub import commit_base
from datahub.catalog import Put
from tests.writeback.conftest import Env, unreadable_records, write

SAME = b"review19a: one content in every file\n" * 100
BATCH = 4


@pytest.mark.parametrize("batch", ["first", "last"])
def test_stale_records_of_one_content_in_a_batch_of_their_own_are_repaired(
    unpacked_env: Env, catalog, monkeypatch: pytest.MonkeyPatch, batch: str
) -> None:
    """Fixed (blobcas19): the commit remembers each content's etags across its batches
    (``workspaces._Etags``); the last batch's stale records are repaired in their batch, the
    first batch's (already spilled) by a second walk (``_repair_earlier``). Both failed before."""
    from datahub import workspaces
    from datahub.workspaces import commit_workspace

    env = unpacked_env
    monkeypatch.setattr(commit_base, "BATCH", BATCH)
    ws = env.open()
    for i in range(16):
        write(ws, f"copy{i:02d}.txt", SAME)
    v1 = commit_workspace(ws, catalog, "copies")
    records = sorted(catalog.list_records("copies", v1.seq), key=lambda r: r.key)
    chosen = records[:BATCH] if batch == "first" else records[-BATCH:]
    stale = [dataclasses.replace(r, etag=f"{r.etag}-lost") for r in chosen]
    catalog.commit("copies", [Put(r) for r in stale], base=v1.seq, message="as the old pin left it")
    assert unreadable_records(env, catalog, "copies", 2, SAME) == [r.key for r in stale]
    head = commit_workspace(ws, catalog, "copies")
    assert head.seq == 3
    assert (
        unreadable_records(env, catalog, "copies", head.seq, SAME) == []
    )  # before commitmem18: repaired (one pin, 16 files)

    def no_second_walk(*args, **kwargs):
        raise AssertionError("a commit without damage walked the head twice")

    monkeypatch.setattr(workspaces, "_repair_earlier", no_second_walk)
    assert commit_workspace(ws, catalog, "copies").seq == head.seq  # nothing left to repair


def test_a_file_deleted_by_a_commit_whose_reply_was_lost_and_written_again_is_committed(
    unpacked_env: Env, catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit deleting ``out/config`` lands, but its reply is lost (or the process is
    killed before ``Base.settle``): the journal still holds the file's one record as settled.
    The workspace writes the same bytes there again (``rm -rf out`` and the same job run
    again, or a rename away and back): the next commit took the file for unchanged since its
    last commit and the head's lack of it for someone else's delete, and left it out of the
    version, an acknowledged file missing for good (fails without the fix in
    ``commit_base.Writes.note``: a key the commit may delete is stored unsettled first)."""
    from datahub.catalog import Catalog
    from datahub.errors import CatalogUnavailable
    from datahub.workspaces import commit_workspace

    ws = unpacked_env.open()
    ws.mkdir("out")
    write(ws, "out/config", SAME)
    write(ws, "out/other", b"other")
    commit_workspace(ws, catalog, "copies")
    ws.unlink("out/config")
    landed = Catalog.commit

    def reply_lost(self, *args, **kwargs):
        landed(self, *args, **kwargs)
        raise CatalogUnavailable("the catalog's reply was lost (injected after the commit landed)")

    with monkeypatch.context() as patched:
        patched.setattr(Catalog, "commit", reply_lost)
        with pytest.raises(CatalogUnavailable):
            commit_workspace(ws, catalog, "copies")
    assert sorted(r.key for r in catalog.list_records("copies")) == ["out/other"]  # the delete landed
    write(ws, "out/config", SAME)
    commit_workspace(ws, catalog, "copies")
    assert sorted(r.key for r in catalog.list_records("copies")) == ["out/config", "out/other"]
