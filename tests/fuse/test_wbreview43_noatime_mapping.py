"""wbreview43: a staged file mapped through a descriptor opened with ``O_NOATIME``
(``--passthrough``).

A staged file tells that it may be mapped by its atime (``mmap`` touches it; the daemon's own
descriptor is ``O_NOATIME``): only then is it written back before each copy, so a store into a
page already dirty at a commit faults and moves mtime, and only then is it kept past its last
close while a mapping holds it (docs/writeback.md, "Shared writable mmaps"). The kernel opens
a passthrough handle's backing file with the caller's flags, so a mapping made through an
``O_NOATIME`` descriptor moved no atime, and both went wrong: the close after such a store
returned 0 with the older bytes committed (read back so, and after kill -9), and stores made
after the last close were dropped with the staged file. Fixed in ``WorkspaceView._noatime``:
a staged file opened with ``O_NOATIME`` is treated as mapped.
"""

from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough
from tests.pagecache import _libc  # its mmap/munmap are typed for pointers

pytestmark = [pytest.mark.fuse, pytest.mark.usefixtures("needs_passthrough")]

PAGES = 4 * mmap.PAGESIZE


class _Mapping:
    """A shared writable mapping of ``PAGES`` bytes of a descriptor, as a C program makes it:
    it holds no descriptor of its own (Python's ``mmap`` keeps a dup of the descriptor until
    closed, and 3.11 has no ``trackfd=False``)."""

    def __init__(self, fd: int) -> None:
        self.addr = _libc.mmap(None, PAGES, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if self.addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")

    def store(self, offset: int, data: bytes) -> None:
        ctypes.memmove(self.addr + offset, data, len(data))

    def unmap(self) -> None:
        assert _libc.munmap(self.addr, PAGES) == 0


def test_stores_into_pages_dirty_at_a_commit_are_committed_by_the_next_close(env: FuseEnv) -> None:
    name = "w43noatime"
    mnt = env.mountpoint(name)
    with env.mounted(mnt, "--workspace", name, "--passthrough") as proc:
        _wait_passthrough(env, mnt)
        path = mnt / "weights.bin"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOATIME, 0o644)
        os.ftruncate(fd, PAGES)
        m = _Mapping(fd)
        m.store(0, b"first...")
        os.close(os.open(path, os.O_WRONLY))  # a writer's close commits "first..."
        m.store(0, b"second..")  # the same page, still dirty: no fault, no timestamp moves
        m.unmap()
        os.close(fd)  # returns 0: "second.." is the file
        assert path.read_bytes()[:8] == b"second.."
        _kill_9(proc)
        assert _remounted(env, mnt, name)["weights.bin"][:8] == b"second.."


def test_a_mapping_that_outlives_the_last_close_keeps_the_staged_file(env: FuseEnv) -> None:
    name = "w43noatime2"
    mnt = env.mountpoint(name)
    log = env.root / f"mount-{mnt.name}.log"
    with env.mounted(mnt, "--workspace", name, "--passthrough") as proc:
        _wait_passthrough(env, mnt)
        path = mnt / "out.bin"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOATIME, 0o644)
        os.ftruncate(fd, PAGES)
        m = _Mapping(fd)
        os.close(fd)  # the last close: the mapping holds the staged file
        # the mount says so at the RELEASE (before, it let the staged file go with the stores)
        wait_until(lambda: "is still mapped after its last close" in log.read_text(), 30)
        m.store(mmap.PAGESIZE, b"stored")
        m.unmap()
        want = bytes(mmap.PAGESIZE) + b"stored" + bytes(PAGES - mmap.PAGESIZE - 6)
        ack = os.open(path, os.O_WRONLY)  # a reopen shares the kept staged file
        os.fsync(ack)  # acknowledges what the file holds
        os.close(ack)
        assert path.read_bytes() == want
        _kill_9(proc)
        assert _remounted(env, mnt, name)["out.bin"] == want
