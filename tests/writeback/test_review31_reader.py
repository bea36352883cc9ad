"""review31: a reader's close (an ``O_RDONLY`` handle's FLUSH, and its RELEASE) commits nothing.
Before, it committed the shared open file as it was, with a writer's half-written rewrite in
it: that became the file's acknowledged state, which a crash brought back in place of the
last close's content and to which the writer's close refused for space "reverted". The
view-level side of tests/fuse/test_review31_reader_close.py (real mounts)."""

from __future__ import annotations

import pytest

from datahub.errors import NoSpace
from fuse_adapter.quota import Quota
from fuse_adapter.workspace import WorkspaceView
from tests.writeback.conftest import Env
from tests.writeback.test_review13c import _acked, _content


def _reader_closes(view: WorkspaceView, ino: int) -> None:
    """``md5sum f``: an O_RDONLY open, a read, its close (FLUSH) and RELEASE."""
    reader, _, _ = view.open(ino, truncate=False, writable=False)
    assert view.read(reader, 0, 100) == b"half"  # it sees the writer's bytes, as readers do
    if not view.flush_is_done(reader):  # what the FUSE layer asks first (``WorkspaceOps.flush``)
        view.flush(reader)
    view.release(reader)


def test_a_readers_close_does_not_acknowledge_a_writers_half_written_rewrite(env: Env) -> None:
    view = WorkspaceView(env.open(), quota=Quota(64))
    ino = _acked(view)  # "f" holds b"acked", acknowledged by its close
    writer, _ = view.open(ino, truncate=True)[:2]
    view.write(writer, 0, b"half")  # not acknowledged
    _reader_closes(view, ino)
    with pytest.raises(NoSpace):
        view.write(writer, 4, b"x" * 100)  # past the quota
    with pytest.raises(NoSpace):
        view.flush(writer)  # refused: back to the last acknowledged state
    view.release(writer)
    assert _content(view.ws, "f") == b"acked"
    view.ws.close()


def test_a_crash_after_a_readers_close_keeps_the_last_acknowledged_file(env: Env) -> None:
    ws = env.open()
    view = WorkspaceView(ws)
    ino = _acked(view)
    writer, _ = view.open(ino, truncate=True)[:2]
    view.write(writer, 0, b"half")
    _reader_closes(view, ino)
    again = env.crash_and_reopen(ws)
    assert _content(again, "f") == b"acked"
    again.close()


def test_a_readers_fsync_still_commits_the_file(env: Env) -> None:
    """fsync(2) of a read-only descriptor asks for the file's durability (Linux syncs the
    inode's data whoever wrote it): it still commits."""
    ws = env.open()
    view = WorkspaceView(ws)
    ino = _acked(view)
    writer, _ = view.open(ino, truncate=True)[:2]
    view.write(writer, 0, b"half")
    reader, _, _ = view.open(ino, truncate=False, writable=False)
    view.fsync(reader)
    view.release(reader)
    again = env.crash_and_reopen(ws)
    assert _content(again, "f") == b"half"
    again.close()
