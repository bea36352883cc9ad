"""review18a: namespace operations racing a staged file's last RELEASE (flake17's window).

flake17 fixed an ``open(O_TRUNC)`` served between the workspace's close of the old staged
file and the view's drop of its backing record. The same window, entered by an unlink and a
create of the name, by a rename of the file away and a truncating open of it, and by a rename
of another file over the name: each new handle must write its own staged file, the bytes a
close acknowledged must be the file's, and no backing id may outlive its handles. These held
(no defect); kept because they are cheap (no mount: ``Kernel`` stands in for BACKING_OPEN).
"""

from __future__ import annotations

import pytest

from datahub.writeback.files import OpenFile
from fuse_adapter.tree import ROOT_INODE
from fuse_adapter.workspace import WorkspaceView
from tests.writeback.conftest import Env
from tests.writeback.test_staged_release_race import Kernel


def unlink_and_create(view: WorkspaceView, ino: int) -> tuple[int, int, str]:
    view.unlink(ROOT_INODE, "ckpt.bin")
    fh, _st, backing, _direct = view.create(ROOT_INODE, "ckpt.bin", exclusive=True)
    return fh, backing, "ckpt.bin"


def rename_away_and_truncate(view: WorkspaceView, ino: int) -> tuple[int, int, str]:
    view.rename(ROOT_INODE, "ckpt.bin", ROOT_INODE, "old.bin", noreplace=True)
    fh, backing, _direct = view.open(ino, truncate=True)
    return fh, backing, "old.bin"


def rename_over_and_truncate(view: WorkspaceView, ino: int) -> tuple[int, int, str]:
    view.rename(ROOT_INODE, "other.bin", ROOT_INODE, "ckpt.bin", noreplace=False)
    fh, backing, _direct = view.open(view.lookup(ROOT_INODE, "ckpt.bin").ino, truncate=True)
    return fh, backing, "ckpt.bin"


@pytest.mark.parametrize("between", [unlink_and_create, rename_away_and_truncate, rename_over_and_truncate])
def test_a_namespace_change_during_the_last_release_of_a_staged_file_keeps_each_files_bytes(
    env: Env, between
) -> None:
    kernel = Kernel()
    view = WorkspaceView(env.open())
    view.passthrough_on(kernel)
    with view.ws.open("other.bin", create=True) as other:
        other.write(0, b"other file")
    released = view.ws._release
    reopened: list[tuple[int, int, str]] = []

    def release_then_change(of: OpenFile) -> None:
        released(of)
        if not reopened and of.path == "ckpt.bin":  # served by another worker thread meanwhile
            reopened.append(between(view, ino))

    view.ws._release = release_then_change
    fh, st, backing, _ = view.create(ROOT_INODE, "ckpt.bin", exclusive=False)
    ino = st.ino
    kernel.write(backing, b"acknowledged")
    view.flush(fh)
    view.release(fh)
    assert reopened, "the release never closed the staged file: the test checks nothing"
    fh2, backing2, path = reopened[0]
    assert backing2 and backing2 != backing
    kernel.write(backing2, b"new bytes")
    view.flush(fh2)
    view.release(fh2)
    assert kernel.files == {}, "a backing id outlived every handle of its file"
    with view.ws.open(path) as handle:
        assert handle.read(0, 100) == b"new bytes"
    if between is rename_away_and_truncate:
        with view.ws.open("other.bin") as handle:
            assert handle.read(0, 100) == b"other file"
