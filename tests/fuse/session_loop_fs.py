"""A tiny pyfuse3 file system for tests/fuse/test_session_loop.py: the session loop under test
with handlers the test can hold.

    python -m tests.fuse.session_loop_fs MOUNTPOINT GATES_DIR MAX_TASKS {trio,trio-no-fastloop,asyncio,dispatch}

The root directory holds every file of these forms (LOOKUP answers them at once, nothing
is listed); a READ returns the file's N bytes (``b"x" * N``, direct I/O: every read is a
request):
- ``size-N``: answered at once (the READ handler never suspends);
- ``nap-N``: after a 1 ms sleep (it suspends once, briefly);
- ``gate-NAME-N``: once ``GATES_DIR/NAME`` exists (it suspends until then; it makes
  ``GATES_DIR/NAME.held`` first);
- ``boom-N``: never: the READ handler raises RuntimeError, an exception no handler may let
  out (pyfuse3 then ends the session: ``main()`` raises).
Any other name is ENOENT. The gates hold READs, not LOOKUPs: the kernel runs one LOOKUP at a
time per directory here, so a held LOOKUP would hold every other one in the kernel itself.
Runs until unmounted; exits 0 when pyfuse3.main returns. ``trio-no-fastloop``: trio, with
pyfuse3's loop reading /dev/fuse itself (as workspace mounts do) instead of from the C
reader thread's queue. ``dispatch``: pyfuse3's C threads (at most MAX_TASKS) run the handlers
themselves (``pyfuse3.dispatch``, dispatch.h, as workspace mounts do); a handler's wait there
is a blocking ``time.sleep`` after ``pyfuse3.dispatch_blocking()``.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from pathlib import Path

import pyfuse3


def flat_attr(ino: int, size: int) -> pyfuse3.EntryAttributes:
    """Attributes of a one-level test file system (the root, or a file of ``size`` bytes) that the
    kernel keeps no attribute or entry cache of, so every request reaches the daemon."""
    e = pyfuse3.EntryAttributes()
    e.st_ino = ino
    e.entry_timeout = e.attr_timeout = 0
    if ino == pyfuse3.ROOT_INODE:
        e.st_mode, e.st_nlink, e.st_size = stat.S_IFDIR | 0o755, 2, 0
    else:
        e.st_mode, e.st_nlink, e.st_size = stat.S_IFREG | 0o644, 1, size
    return e


class GatedFS(pyfuse3.Operations):
    def __init__(self, gates: Path, sleep) -> None:
        super().__init__()
        self.gates = gates
        self.sleep = sleep
        self.inodes: dict[str, int] = {}
        self.sizes: dict[int, int] = {}
        self.names: dict[int, str] = {}

    def _attr(self, ino: int) -> pyfuse3.EntryAttributes:
        return flat_attr(ino, 0 if ino == pyfuse3.ROOT_INODE else self.sizes[ino])

    async def lookup(self, parent_inode, name, ctx=None):
        text = os.fsdecode(name)
        kind, _, size = text.rpartition("-")
        known = kind.partition("-")[0] in ("size", "nap", "gate", "boom")
        if parent_inode != pyfuse3.ROOT_INODE or not known:
            raise pyfuse3.FUSEError(errno.ENOENT)
        ino = self.inodes.setdefault(text, len(self.inodes) + 2)
        self.names[ino] = text
        self.sizes[ino] = int(size)
        return self._attr(ino)

    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode, direct_io=True)

    async def read(self, fh, off, size):
        kind, _, rest = self.names[fh].partition("-")
        if kind == "boom":
            raise RuntimeError(f"{self.names[fh]}: a bug of the handler")
        if kind == "nap":
            await self.sleep(0.001)
        elif kind == "gate":
            gate = rest.rpartition("-")[0]
            (self.gates / f"{gate}.held").touch()
            while not (self.gates / gate).exists():
                await self.sleep(0.005)
        return b"x" * max(0, min(size, self.sizes[fh] - off))

    async def flush(self, fh):
        pass

    async def release(self, fh):
        pass

    async def getattr(self, inode, ctx=None):
        if inode != pyfuse3.ROOT_INODE and inode not in self.sizes:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(inode)

    async def forget(self, inode_list):
        pass


async def _blocking_sleep(seconds: float) -> None:
    """The wait of a handler run by a dispatching thread: it blocks, and says so first."""
    assert pyfuse3.dispatch_blocking(), "not in a dispatching thread"
    time.sleep(seconds)


def main() -> None:
    mountpoint, gates, max_tasks, mode = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if mode == "asyncio":
        import asyncio

        from pyfuse3 import asyncio as pyfuse3_asyncio

        pyfuse3_asyncio.enable()
        fs = GatedFS(gates, asyncio.sleep)
    else:
        import trio

        fs = GatedFS(gates, _blocking_sleep if mode == "dispatch" else trio.sleep)
        if mode == "trio-no-fastloop" and pyfuse3.FASTLOOP:
            pyfuse3.passthrough_fastloop(False)
        if mode == "dispatch":
            pyfuse3.passthrough_fastloop(True)
            pyfuse3.dispatch(max_tasks)
    pyfuse3.init(fs, mountpoint, {"fsname=sessionloop"})
    try:
        if mode == "asyncio":
            asyncio.run(pyfuse3.main(1, max_tasks))
        else:
            trio.run(pyfuse3.main, 1, max_tasks)
    finally:
        pyfuse3.close(unmount=False)


if __name__ == "__main__":
    main()
