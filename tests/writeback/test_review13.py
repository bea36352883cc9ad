"""Adversarial cases of what this stop merged in the write-back core (review13).

revert13 made ``Workspace.revert`` one step with respect to the file's commits, and recovery
drop ``unacked`` records. The first test showed what the revert still got wrong from the FUSE
view: it was asked by *path*, and re-resolved the path, so a revert meant for one handle's
file acted on whatever file a concurrent rename put there (revertid13 fixed it: the view
reverts by its handle's file id, ``tests/writeback/test_revert_by_id.py``). The others pin down cases the
brief named where an acknowledged file must survive a crash whole (they pass: recovery drops
only records that nothing acknowledged).
"""

from __future__ import annotations

import os

import pytest

from datahub.errors import NoSpace
from fuse_adapter.quota import Quota
from fuse_adapter.tree import ROOT_INODE
from fuse_adapter.workspace import WorkspaceView
from tests.writeback.conftest import CHUNK, Env


def _content(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size)


def test_a_revert_for_a_short_handle_never_touches_the_file_a_rename_put_at_its_path(env: Env) -> None:
    view = WorkspaceView(env.open(), quota=Quota(64))
    fh_y, _, _, _ = view.create(ROOT_INODE, "other", exclusive=False)
    view.write(fh_y, 0, b"acked")
    view.flush(fh_y)  # acknowledged: "acked"
    view.write(fh_y, 0, b"rewritten, closed")  # not yet: its close below acknowledges it
    fh_x, _, _, _ = view.create(ROOT_INODE, "out", exclusive=False)
    with pytest.raises(NoSpace):
        view.write(fh_x, 0, os.urandom(100))  # past the quota: this handle is short
    ws = view.ws
    rename = ws.rename

    def rename_then_release(old: str, new: str) -> None:
        rename(old, new)  # "other" replaces "out" in the workspace ...
        view.release(fh_x)  # ... and X's release runs on another FUSE thread before the view moves

    ws.rename = rename_then_release
    view.rename(ROOT_INODE, "other", ROOT_INODE, "out", noreplace=False)
    view.flush(fh_y)  # returns: the close succeeded
    view.release(fh_y)
    assert _content(ws, "out") == b"rewritten, closed", "a close that returned 0 lost its bytes"
    ws.close()


def test_a_file_fsynced_then_renamed_while_another_handle_is_open_survives_a_crash(env: Env) -> None:
    """Its fsync acknowledged it; the rename and a namespace operation beside it leave it
    acknowledged, under its new name, whatever the second handle did after."""
    ws = env.open()
    data = os.urandom(2 * CHUNK + 3)
    first = ws.open("out.bin", create=True)
    second = ws.open("out.bin")
    first.write(0, data)
    first.fsync()
    ws.rename("out.bin", "final.bin")
    second.write(0, b"never acknowledged")
    ws.mkdir("d")  # a namespace operation journals created files: none here is unacked
    ws2 = env.crash_and_reopen(ws)
    assert _content(ws2, "final.bin") == data
    ws2.close()


def test_an_acked_file_opened_with_o_trunc_and_a_rename_beside_is_whole_after_a_crash(env: Env) -> None:
    """O_TRUNC of an acknowledged file is an unacknowledged change like any write: a crash
    before its close leaves the last acknowledged bytes, not an absent or empty file."""
    ws = env.open()
    data = os.urandom(CHUNK + 11)
    with ws.open("model.pt", create=True) as fh:
        fh.write(0, data)
    again = ws.open("model.pt", create=True, truncate=True)
    again.write(0, b"half")
    with ws.open("tmp", create=True) as other:
        other.write(0, b"x")
    ws.rename("tmp", "tmp2")
    ws2 = env.crash_and_reopen(ws)
    assert _content(ws2, "model.pt") == data
    ws2.close()


def test_a_file_closed_through_a_second_handle_is_acknowledged_though_a_namespace_operation_journaled_it(
    env: Env,
) -> None:
    """Created through one handle, journaled unacked by a mkdir, then closed through another
    handle of the same file: that close acknowledged it, so recovery keeps it."""
    ws = env.open()
    data = os.urandom(3 * CHUNK)
    creator = ws.open("a.bin", create=True)
    creator.write(0, data)
    ws.mkdir("d")  # journals a.bin, empty and unacked
    assert ws.journal_record("a.bin").get("unacked")
    with ws.open("a.bin"):
        pass  # its close commits the file, unchanged by this handle
    assert not ws.journal_record("a.bin").get("unacked")
    ws.rename("a.bin", "d/a.bin")
    ws2 = env.crash_and_reopen(ws)
    assert _content(ws2, "d/a.bin") == data
    ws2.close()
