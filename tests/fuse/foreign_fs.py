"""A tiny FUSE file system that is not datahub's, for tests/fuse/test_gaps26_umount.py: a user's
own mount (an sshfs, a FUSE file system of theirs) that ``datahub umount`` must leave alone.

    python -m tests.fuse.foreign_fs MOUNTPOINT

Its root holds one file, ``hello.txt`` (``b"not datahub's\\n"``) and one directory, ``sub``.
It mounts as ``fsname=me@elsewhere:/data,subtype=foreign`` (the kernel shows type
``fuse.foreign``), prints ``ready`` once mounted and serves until unmounted (exit 0).
"""

from __future__ import annotations

import errno
import stat
import sys

import pyfuse3
import trio

HELLO = b"not datahub's\n"
FILE, SUB = pyfuse3.ROOT_INODE + 1, pyfuse3.ROOT_INODE + 2
NAMES = {b"hello.txt": FILE, b"sub": SUB}


class ForeignFS(pyfuse3.Operations):
    def _attr(self, ino: int) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = ino
        if ino == FILE:
            e.st_mode, e.st_nlink, e.st_size = stat.S_IFREG | 0o644, 1, len(HELLO)
        else:
            e.st_mode, e.st_nlink, e.st_size = stat.S_IFDIR | 0o755, 2, 0
        return e

    async def getattr(self, inode, ctx=None):
        if inode not in (pyfuse3.ROOT_INODE, FILE, SUB):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(inode)

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE or name not in NAMES:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(NAMES[name])

    async def opendir(self, inode, ctx):
        return inode

    async def readdir(self, fh, start_id, token):
        if fh != pyfuse3.ROOT_INODE:
            return
        for i, (name, ino) in enumerate(NAMES.items()):
            if i >= start_id and not pyfuse3.readdir_reply(token, name, self._attr(ino), i + 1):
                return

    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode)

    async def read(self, fh, off, size):
        return HELLO[off : off + size]


def main() -> int:
    mountpoint = sys.argv[1]
    options = set(pyfuse3.default_options) | {"fsname=me@elsewhere:/data", "subtype=foreign"}
    pyfuse3.init(ForeignFS(), mountpoint, options)
    print("ready", flush=True)
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
