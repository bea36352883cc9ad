"""An open of a staged file served while the last release of its previous staged file runs
(flake17): the new handle's backing file must be its own staged file.

Why: the kernel sends RELEASE after close(2) returned, and the mount serves it on a worker
thread, so ``open(O_TRUNC)`` right after a close can be served between that release's
close of the old staged file and its drop of the inode's backing record. The open then
took the old record's backing id: the kernel wrote the new bytes into the closed staged
file, the close committed the new, empty one and returned 0, and the bytes were gone (a
fresh suite: tests/fuse/test_workspace_revert12.py's close past its reservation did not
fail for space; through a mount with that release delayed: ``write; open(O_TRUNC);
write; close`` left an empty file, acknowledged).

``Kernel`` holds its own reference to each backing file (a ``dup``), as the kernel does,
so a write through a backing id lands in the file that id names, whatever the daemon
closed since. The release is interleaved with the open in one thread: the open runs right
after the workspace released the file, before the view's release goes on.
"""

from __future__ import annotations

import os

from datahub.writeback.files import OpenFile
from fuse_adapter.tree import ROOT_INODE
from fuse_adapter.workspace import WorkspaceView
from tests.writeback.conftest import Env


class Kernel:
    """BACKING_OPEN and BACKING_CLOSE: each backing id holds its file open until closed."""

    def __init__(self) -> None:
        self.files: dict[int, int] = {}  # backing id -> the kernel's own descriptor of the file
        self.next_id = 1

    def open(self, fd: int) -> int:
        self.files[self.next_id] = os.dup(fd)
        self.next_id += 1
        return self.next_id - 1

    def close(self, backing_id: int) -> None:
        os.close(self.files.pop(backing_id))

    def write(self, backing_id: int, data: bytes) -> None:
        """A passthrough handle's write: into the file its backing id names."""
        os.pwrite(self.files[backing_id], data, 0)


def test_a_truncating_open_during_the_last_release_of_a_staged_file_writes_its_own_staged_file(
    env: Env,
) -> None:
    kernel = Kernel()
    view = WorkspaceView(env.open())
    view.passthrough_on(kernel)
    released = view.ws._release
    reopened: list[tuple[int, int, bool]] = []

    def release_then_open(of: OpenFile) -> None:
        released(of)  # the old staged file's last reference: it is closed here
        if not reopened:  # the OPEN another worker thread serves meanwhile
            reopened.append(view.open(ino, truncate=True))

    view.ws._release = release_then_open  # bound by every handle opened from now on
    fh, st, backing, _ = view.create(ROOT_INODE, "ckpt.bin", exclusive=False)
    ino = st.ino
    kernel.write(backing, b"acknowledged")
    view.flush(fh)
    view.release(fh)
    assert reopened, "the release never closed the staged file: the test checks nothing"
    fh2, backing2, direct = reopened[0]
    assert backing2 and not direct
    kernel.write(backing2, b"new bytes")
    view.flush(fh2)  # the close(2) of the new handle: acknowledged
    view.release(fh2)
    assert kernel.files == {}, "a backing id outlived every handle of its file"
    with view.ws.open("ckpt.bin") as handle:
        assert handle.read(0, 100) == b"new bytes"
