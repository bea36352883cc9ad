"""bytes31: a commit that reads a file back from its workspace acknowledges nothing.

``commit_workspace`` puts each file's blob from the object its flush left; when that object
is no longer what this journal flushed (overwritten by another journal, review17c) it reads
the file from the workspace instead, checked against the flush's digest. It read through a
handle closed with ``with``, and a handle's close commits the file (``FileHandle.close``):
the bytes a writer had half written, unacknowledged, were committed there, then flushed,
and the next version held a generation no fsync or close of the writer acknowledged (found
by ``test_review14wb.py``'s race in a full run: "version 5 holds bytes no fsync
acknowledged")."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from datahub.errors import ObjectChanged
from datahub.workspaces import commit_workspace
from tests.writeback.conftest import CHUNK, Env

SIZE = 3 * CHUNK + 123


def _generation(n: int) -> bytes:
    return (n.to_bytes(8, "little") * (SIZE // 8 + 1))[:SIZE]


def _write(fh, staged: bool, data: bytes, offset: int = 0) -> None:
    if staged:
        os.pwrite(fh.staged_fd, data, offset)
    else:
        fh.write(offset, data)


def _replace_flushed_object(ws) -> None:
    """What another node's journal did to a workspace object named by workspace (review17c)."""
    origin = ws.flusher.origin
    other = b"another journal's bytes"
    origin.put(ws.flusher.origin_key("ckpt"), io.BytesIO(other), size=len(other))


def _version_bytes(env: Env, catalog, seq: int) -> bytes:
    rec = catalog.get_record("fb", seq, "ckpt")
    store, key = env.stores.for_url(rec.url)
    return store.read(key, etag=rec.etag)


@pytest.mark.parametrize("staged", [False, True], ids=["buffered", "staged"])
def test_a_commit_reading_back_a_half_written_file_commits_none_of_it(
    env: Env, catalog, staged: bool
) -> None:
    ws = env.open()
    fh = ws.open("ckpt", create=True, truncate=True, staged=staged)
    _write(fh, staged, _generation(1))
    fh.fsync()  # generation 1 acknowledged
    ws.flush()
    _replace_flushed_object(ws)
    _write(fh, staged, _generation(2)[:CHUNK])  # generation 2 begun: nothing acknowledges it
    with pytest.raises(ObjectChanged):  # the workspace's bytes are not what was flushed: commit again
        commit_workspace(ws, catalog, "fb")
    assert ws.flush().uploaded == 0, "the commit's read-back acknowledged the half-written generation"
    fh.fsync()  # the writer's own acknowledgement of what it wrote
    _write(fh, staged, _generation(2)[CHUNK:], CHUNK)
    fh.close()
    version = commit_workspace(ws, catalog, "fb")
    assert _version_bytes(env, catalog, version.seq) == _generation(2)


@pytest.mark.parametrize("staged", [False, True], ids=["buffered", "staged"])
def test_a_commit_reads_an_unchanged_file_back_from_its_workspace(env: Env, catalog, staged: bool) -> None:
    """The read-back still serves the commit when the workspace holds the flushed bytes,
    with a writer's handle open and nothing acknowledged twice."""
    ws = env.open()
    fh = ws.open("ckpt", create=True, truncate=True, staged=staged)
    _write(fh, staged, _generation(1))
    fh.fsync()
    ws.flush()
    _replace_flushed_object(ws)
    version = commit_workspace(ws, catalog, "fb")
    data = _version_bytes(env, catalog, version.seq)
    assert data == _generation(1)
    assert (
        catalog.get_record("fb", version.seq, "ckpt").checksum == f"sha256:{hashlib.sha256(data).hexdigest()}"
    )
    assert ws.flush().uploaded == 0
    fh.close()


def test_an_adoptions_comparison_with_a_file_being_written_acknowledges_none_of_it(tmp_path) -> None:
    """Adoption compares each file the workspace already has at a lost node's path; that read
    closed its handle with a commit too, and acknowledged what this node's writer had half
    written (then refused the adoption for the difference it had just made permanent)."""
    from datahub.errors import Conflict
    from datahub.writeback.adopt import adopt_journal
    from tests.writeback.test_nodeloss20 import Nodes, _lost_node_a, _put

    n = Nodes(tmp_path, {})
    try:
        journal = _lost_node_a(n, lambda a: _put(a, "ckpt", b"node a's bytes"))
        b = n.open("b")
        try:
            _put(b, "ckpt", b"node a's bytes")  # the same bytes, acknowledged here too
            writer = b.open("ckpt")
            writer.write(0, b"NODE")  # begun, not acknowledged
            with pytest.raises(Conflict, match="'ckpt'"):
                adopt_journal(b, journal, n.stores["b"])
            writer.close(commit=False)  # the writer never acknowledges it
            with b.open("ckpt") as fh:
                assert fh.read(0, 100) == b"node a's bytes"
        finally:
            b.close()
    finally:
        n.close()
