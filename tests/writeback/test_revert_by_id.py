"""``Workspace.revert`` given a file id (revertid13): it acts on that file wherever it is
now, never on the file another operation put at the path the caller knew (review13's
finding: a revert by path dropped another handle's unsaved writes, and that handle's close
returned 0 with its bytes gone).

Each ordering is forced with a hook at the point where it matters (a rename that committed
and has not yet told the overlay, an unlink before the revert), so nothing depends on timing.
"""

from __future__ import annotations

import os

import pytest

from datahub.errors import NoSpace, NotFound
from datahub.writeback import Workspace
from fuse_adapter.quota import Quota
from fuse_adapter.tree import ROOT_INODE
from fuse_adapter.workspace import WorkspaceView
from tests.writeback.conftest import Env


def _content(ws: Workspace, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size)


def _record_of(ws: Workspace, file_id: int) -> dict | None:
    with ws.journal.read() as txn:
        return txn.file(file_id)


def test_a_revert_finds_its_file_renamed_before_the_overlay_was_told(env: Env) -> None:
    """Neither the caller's path nor the open file's own path names it yet: the revert
    finds it under its new name and puts it back to what its close acknowledged."""
    ws = env.open()
    with ws.open("a", create=True) as fh:
        fh.write(0, b"acknowledged")
    short = ws.open("a")
    short.write(0, b"half-written")
    renamed = ws.overlay.renamed
    outcome: list[bool | None] = []

    def revert_then_tell(old: str, new: str) -> None:
        outcome.append(ws.revert("a", file_id=short.file_id))  # "a" is gone; the overlay says "a"
        renamed(old, new)

    ws.overlay.renamed = revert_then_tell
    ws.rename("a", "b")
    assert outcome == [False], "an acknowledged file was removed, or not found"
    assert short.read(0, 12) == b"acknowledged"
    short.close()  # nothing left to commit
    assert _content(ws, "b") == b"acknowledged"
    ws.close()


def test_a_revert_of_a_replaced_file_leaves_the_file_at_its_old_path_alone(env: Env) -> None:
    """The caller's path now names another open file with unsaved writes: the revert drops
    only its own file's changes, and the other's close keeps every byte."""
    ws = env.open()
    with ws.open("out", create=True) as fh:
        fh.write(0, b"old out")
    with ws.open("other", create=True) as fh:
        fh.write(0, b"acked")
    short = ws.open("out")
    short.write(0, b"refused bytes")
    other = ws.open("other")
    other.write(0, b"rewritten, closed")
    ws.rename("other", "out")  # replaces the short handle's file, which stays open
    assert ws.revert("out", file_id=short.file_id) is None, "the file has no name any more"
    assert short.read(0, 7) == b"old out"  # its own changes went
    other.close()
    assert _content(ws, "out") == b"rewritten, closed", "a close that returned 0 lost its bytes"
    short.close()
    assert _record_of(ws, short.file_id) is None, "the unlinked file outlived its last close"
    ws.close()


def test_an_unlinked_file_nothing_acknowledged_is_forsaken(env: Env) -> None:
    """Journaled empty by a namespace operation, then unlinked while open: its revert drops
    its changes so no later close commits the refused bytes, and its record goes at close."""
    ws = env.open()
    short = ws.open("new", create=True)
    short.write(0, b"refused bytes")
    ws.mkdir("d")  # journals "new", empty and unacknowledged
    ws.unlink("new")
    assert ws.revert("new", file_id=short.file_id) is None
    with pytest.raises(NoSpace):
        short.write(0, b"more")  # nothing of it may be committed any more
    short.close()
    assert _record_of(ws, short.file_id) is None
    ws.close()


def test_a_revert_by_id_of_a_closed_file_acts_where_it_is_now(env: Env) -> None:
    """A closed file is followed by its id too: the acknowledged one moved away is kept as
    it is, the file now at the path is not touched; a deleted one is not found."""
    ws = env.open()
    with ws.open("a", create=True) as fh:
        fh.write(0, b"kept")
        file_id = fh.file_id
    ws.rename("a", "b")
    with ws.open("a", create=True) as fh:
        fh.write(0, b"another file")
    assert ws.revert("a", file_id=file_id) is False
    assert _content(ws, "a") == b"another file"
    assert _content(ws, "b") == b"kept"
    ws.unlink("b")
    with pytest.raises(NotFound):
        ws.revert("a", file_id=file_id)
    assert _content(ws, "a") == b"another file"
    ws.close()


def test_a_short_handle_is_reverted_once_so_writes_made_after_its_failed_close_stay(env: Env) -> None:
    """The view reverts a short handle's file at its first failed close, not again at its
    release: by id it would find the file again (its name is gone from the view's map), and
    drop what another handle wrote since, whose close then returned 0 with its bytes gone."""
    view = WorkspaceView(env.open(), quota=Quota(64))
    fh_a, _, _, _ = view.create(ROOT_INODE, "f", exclusive=False)
    view.write(fh_a, 0, b"acked")
    view.flush(fh_a)
    with pytest.raises(NoSpace):
        view.write(fh_a, 0, os.urandom(100))  # past the quota: this handle is short
    with pytest.raises(NoSpace):
        view.flush(fh_a)  # its close fails for space: "f" is back to "acked"
    fh_b, _, _ = view.open(view.lookup(ROOT_INODE, "f").ino, truncate=False)
    view.write(fh_b, 0, b"later")
    view.release(fh_a)
    view.flush(fh_b)  # returns: the close succeeded
    view.release(fh_b)
    assert _content(view.ws, "f") == b"later", "a close that returned 0 lost its bytes"
    view.ws.close()
