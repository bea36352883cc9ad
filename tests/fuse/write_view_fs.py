"""A tiny pyfuse3 file system for tests/fuse/test_perf41d_write_view.py: what a WRITE handler
is handed, and what happens when it keeps it.

    python -m tests.fuse.write_view_fs MOUNTPOINT OUT_DIR {trio,dispatch}

Every name in the root directory is a file (LOOKUP answers any name, nothing is listed), held
in memory, opened with direct I/O (each ``write(2)`` is WRITEs, each ``read(2)`` READs). A
WRITE's handler copies the bytes in (``bytes(buf)``) and appends what it was handed to
``OUT_DIR/handed`` (one line per WRITE: the type's name and, for a memoryview, ``ro`` or
``rw``). By name, the handler also keeps something that still names the request's bytes after
it returns (a bug of a file system, which pyfuse3 must refuse loudly in a dispatching thread):
- ``keep-slice-*``: a slice of the memoryview (it holds the view's managed buffer, not the view);
- ``keep-view-*``: the memoryview itself (pyfuse3 releases it when the handler returns: a
  WRITE to ``probe-*`` then appends to ``OUT_DIR/probe`` what reading the kept view gave,
  ``released`` for the ValueError of a released view);
- ``keep-export-*``: an iterator holding a buffer taken from the view (``Struct.iter_unpack``).
``dispatch``: pyfuse3's C threads run the handlers (``pyfuse3.dispatch``, as workspace mounts
do); ``trio``: the trio loop does. When ``pyfuse3.main`` raises, the kept object's first bytes
are printed (``kept: <hex>``: the buffer it names must still hold the WRITE's bytes, never
another request's), then the dispatch counters, and the process exits 3.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
from pathlib import Path

import pyfuse3
import trio

from tests.fuse.session_loop_fs import flat_attr


class WriteViewFS(pyfuse3.Operations):
    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out
        self.inodes: dict[str, int] = {}
        self.names: dict[int, str] = {}
        self.data: dict[int, bytearray] = {}
        self.kept: list[object] = []

    def _attr(self, ino: int) -> pyfuse3.EntryAttributes:
        return flat_attr(ino, 0 if ino == pyfuse3.ROOT_INODE else len(self.data[ino]))

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
        text = os.fsdecode(name)
        ino = self.inodes.setdefault(text, len(self.inodes) + 2)
        self.names[ino] = text
        self.data.setdefault(ino, bytearray())
        return self._attr(ino)

    async def getattr(self, inode, ctx=None):
        if inode != pyfuse3.ROOT_INODE and inode not in self.data:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(inode)

    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode, direct_io=True)

    async def read(self, fh, off, size):
        return bytes(self.data[fh][off : off + size])

    async def write(self, fh, off, buf, cached=False, sync=False):
        kind = type(buf).__name__
        if isinstance(buf, memoryview):
            kind += " ro" if buf.readonly else " rw"
        with open(self.out / "handed", "a") as f:
            f.write(f"{kind}\n")
        data = self.data[fh]
        if len(data) < off:
            data.extend(bytes(off - len(data)))
        data[off : off + len(buf)] = bytes(buf)
        name = self.names[fh]
        if name.startswith("probe-"):
            for kept in self.kept:
                try:
                    seen = bytes(kept[:16]).hex()
                except ValueError:
                    seen = "released"
                with open(self.out / "probe", "a") as f:
                    f.write(f"{seen}\n")
        if name.startswith("keep-slice-"):
            self.kept.append(buf[:16])
        elif name.startswith("keep-view-"):
            self.kept.append(buf)
        elif name.startswith("keep-export-"):
            self.kept.append(struct.Struct("16s").iter_unpack(buf[: len(buf) // 16 * 16]))
        return len(buf)

    async def flush(self, fh):
        pass

    async def release(self, fh):
        pass

    async def forget(self, inode_list):
        pass


def _first_bytes(kept: object) -> bytes:
    if isinstance(kept, memoryview):
        return bytes(kept[:16])
    return next(kept)[0]  # an iter_unpack iterator


def main() -> None:
    mountpoint, out, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    fs = WriteViewFS(out)
    if mode == "dispatch":
        pyfuse3.passthrough_fastloop(True)
        pyfuse3.dispatch(2)
    pyfuse3.init(fs, mountpoint, {"fsname=writeview"})
    code = 0
    try:
        trio.run(pyfuse3.main, 1, 2)
    except Exception as exc:  # the session's end: an OSError (in trio's group)
        errs = [exc] if isinstance(exc, OSError) else list(getattr(exc, "exceptions", []))
        print(f"main raised: errno {next(e.errno for e in errs if isinstance(e, OSError))}", flush=True)
        for kept in fs.kept:
            print(f"kept: {_first_bytes(kept).hex()}", flush=True)
        print(f"dispatch_kept: {pyfuse3.passthrough_stats()['dispatch_kept']}", flush=True)
        code = 3
    finally:
        pyfuse3.close(unmount=code != 0)
    sys.exit(code)


if __name__ == "__main__":
    main()
