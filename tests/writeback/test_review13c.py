"""review13c: adversarial checks of ``Workspace.revert(path, file_id=...)`` (revertid13) and the
view's revert-once and dupfd13 rules: a short handle's file renamed and unlinked, two short
handles of one file, a crash after a refused close, and (the defect found) another handle
whose bytes a refused close's revert dropped: its close returned 0 with them gone. Each ordering is made by calling the operations in that order; a revert
that never returns is caught by running it in a thread with a deadline (a hang, not timing)."""

from __future__ import annotations

import os
import threading

import pytest

from datahub.errors import NoSpace
from datahub.writeback import Workspace
from fuse_adapter.quota import Quota
from fuse_adapter.tree import ROOT_INODE
from fuse_adapter.workspace import WorkspaceView
from tests.writeback.conftest import Env


def _record_of(ws: Workspace, file_id: int) -> dict | None:
    with ws.journal.read() as txn:
        return txn.file(file_id)


def _revert_returns(ws: Workspace, path: str, file_id: int) -> list:
    """Run the revert in a thread; what it returned (or raised), or [] if it never returned."""
    out: list = []

    def run() -> None:
        try:
            out.append(ws.revert(path, file_id=file_id))
        except Exception as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    return out


def test_a_created_file_renamed_and_unlinked_while_open_is_reverted(env: Env) -> None:
    """Created, never fsynced, renamed then unlinked while the short handle is open: the
    revert drops its changes and returns (no name: None), never loops."""
    ws = env.open()
    short = ws.open("new", create=True)
    short.write(0, b"refused bytes")
    ws.rename("new", "moved")
    ws.unlink("moved")
    out = _revert_returns(ws, "new", short.file_id)
    assert out == [None], f"the revert of a nameless created file returned {out!r} ([]: it never returned)"
    with pytest.raises(NoSpace):
        short.write(0, b"more")
    short.close()
    assert _record_of(ws, short.file_id) is None
    ws.close()


def test_a_created_file_unlinked_while_open_is_reverted(env: Env) -> None:
    """The same with no rename: created, written, unlinked while open, then reverted."""
    ws = env.open()
    short = ws.open("new", create=True)
    short.write(0, b"refused bytes")
    ws.unlink("new")
    out = _revert_returns(ws, "new", short.file_id)
    assert out == [None], f"the revert of a nameless created file returned {out!r} ([]: it never returned)"
    short.close()
    assert _record_of(ws, short.file_id) is None
    ws.close()


def _view(env: Env, limit: int = 64):
    return WorkspaceView(env.open(), quota=Quota(limit))


def _acked(view: WorkspaceView) -> int:
    """Create "f" holding b"acked", acknowledged by its close; its inode."""
    fh, _, _, _ = view.create(ROOT_INODE, "f", exclusive=False)
    view.write(fh, 0, b"acked")
    view.flush(fh)
    view.release(fh)
    return view.lookup(ROOT_INODE, "f").ino


def _content(ws: Workspace, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size)


def test_two_short_handles_of_one_file_commit_nothing_of_theirs(env: Env) -> None:
    """Both handles ran out of space; each close is refused, and what either wrote (also
    after the other's refused close) is never committed: the file stays as acknowledged,
    and the quota counts only that."""
    view = _view(env)
    ino = _acked(view)
    a, _, _ = view.open(ino, truncate=False)
    b, _, _ = view.open(ino, truncate=False)
    for h in (a, b):
        view.write(h, 0, b"x" * 20)
        with pytest.raises(NoSpace):
            view.write(h, 0, os.urandom(100))
    with pytest.raises(NoSpace):
        view.flush(a)
    view.write(b, 0, b"after a")  # through b, after a's refused close
    with pytest.raises(NoSpace):
        view.flush(b)
    view.write(a, 0, b"dup of a")  # a dup of a's descriptor writes on
    view.release(b)
    with pytest.raises(NoSpace):
        view.flush(a)
    view.release(a)
    assert _content(view.ws, "f") == b"acked"
    assert view.quota is not None and view.quota.used == 5
    view.ws.close()


def test_a_short_handle_renamed_and_unlinked_is_refused_and_refunded(env: Env) -> None:
    """Through the view: renamed, then unlinked while its handle is short: the close is
    refused, nothing of it is committed, and the quota is back to zero."""
    view = _view(env)
    fh, _, _, _ = view.create(ROOT_INODE, "f", exclusive=False)
    view.write(fh, 0, b"y" * 30)
    with pytest.raises(NoSpace):
        view.write(fh, 0, os.urandom(100))
    view.rename(ROOT_INODE, "f", ROOT_INODE, "g", noreplace=False)
    view.unlink(ROOT_INODE, "g")
    with pytest.raises(NoSpace):
        view.flush(fh)
    file_id = view._handles[fh][1].file_id
    view.release(fh)
    assert _record_of(view.ws, file_id) is None
    assert view.quota is not None and view.quota.used == 0
    view.ws.close()


@pytest.mark.parametrize("other_open", [False, True])
def test_a_crash_between_a_refused_close_and_the_release_keeps_the_acknowledged_file(
    env: Env, other_open: bool
) -> None:
    """kill -9 after the refused close, with a dup still writing (and, or not, another
    handle open): after recovery the file is what its last close acknowledged."""
    view = _view(env)
    ino = _acked(view)
    a, _, _ = view.open(ino, truncate=False)
    if other_open:
        view.open(ino, truncate=False)
    view.write(a, 0, b"z" * 20)
    with pytest.raises(NoSpace):
        view.write(a, 0, os.urandom(100))
    with pytest.raises(NoSpace):
        view.flush(a)
    view.write(a, 0, b"dup bytes")
    with pytest.raises(NoSpace):
        view.flush(a)
    ws = env.crash_and_reopen(view.ws)
    assert _content(ws, "f") == b"acked"
    ws.close()


def _a_short_and_b_wrote(view: WorkspaceView) -> tuple[int, int]:
    """Two handles of "f" (acknowledged b"acked"): b wrote b"B's bytes" within the quota,
    a's write went past it (a is short)."""
    ino = _acked(view)
    a, _, _ = view.open(ino, truncate=False)
    b, _, _ = view.open(ino, truncate=False)
    view.write(b, 0, b"B's bytes")
    with pytest.raises(NoSpace):
        view.write(a, 0, os.urandom(100))
    return a, b


def _close_refused(view: WorkspaceView, fh: int) -> bool:
    try:
        view.flush(fh)
    except NoSpace:
        return True
    return False


def test_another_handles_writes_before_a_refused_close_are_not_lost_behind_a_close_of_0(env: Env) -> None:
    """Handle b wrote (within the quota) before handle a's close was refused for space; a's
    revert drops every change since the last acknowledgement, b's too. b's close must then
    not return 0 with its bytes gone: either they are kept or its close is refused."""
    view = _view(env)
    a, b = _a_short_and_b_wrote(view)
    with pytest.raises(NoSpace):
        view.flush(a)
    view.release(a)
    refused = _close_refused(view, b)
    view.release(b)
    if not refused:
        assert _content(view.ws, "f") == b"B's bytes", "a close that returned 0 lost its bytes"
    view.ws.close()


def test_a_close_racing_the_revert_that_dropped_its_bytes_is_refused(env: Env) -> None:
    """b's close passed its check for space, then a's refused close reverted the file
    (dropping b's bytes) before b's commit: b's close must not return 0. The order is forced
    with a hook at b's commit, not by timing."""
    view = _view(env)
    a, b = _a_short_and_b_wrote(view)
    handle_b = view._handles[b][1]
    commit = handle_b.fsync

    def revert_first() -> None:
        with pytest.raises(NoSpace):
            view.flush(a)  # a's close: refused, the file goes back to "acked"
        commit()

    handle_b.fsync = revert_first
    refused = _close_refused(view, b)
    handle_b.fsync = commit
    view.release(a)
    view.release(b)
    if not refused:
        assert _content(view.ws, "f") == b"B's bytes", "a close that returned 0 lost its bytes"
    view.ws.close()
