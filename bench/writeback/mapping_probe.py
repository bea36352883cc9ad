"""What the daemon can observe of a staged file's last writer going away (issue 41).

    sudo .venv/bin/python bench/writeback/mapping_probe.py

A C program maps a passthrough file shared and writable, closes its descriptor, stores
through the mapping, msyncs and unmaps. The mapping holds the kernel's *backing* file
(opened by ``backing_file_open`` for the FUSE open, fs/backing-file.c), not the FUSE file,
so RELEASE reaches the daemon at close(2). This experiment mounts a workspace with
``--passthrough``, runs that sequence, and prints at each step what an observer holding
only an ``O_PATH`` reference to the staged inode sees:

- the inotify events on the staged inode (``IN_CLOSE_WRITE`` when a writable struct file
  of it is finally released, e.g. the mapping's backing file at munmap);
- whether a read lease (``F_SETLEASE F_RDLCK`` on a read-only reopen) is refused, which
  the kernel does while any writable open of the inode exists (``i_writecount > 0``,
  fs/locks.c ``check_conflicting_open``), mappings' backing files included.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import select
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # tests.pagecache
from mount_writes import Mount

from tests.pagecache import libc

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_OPEN = 0x2, 0x4, 0x8, 0x10, 0x20
IN_DELETE_SELF, IN_IGNORED = 0x400, 0x8000
NAMES = {
    IN_MODIFY: "MODIFY",
    IN_ATTRIB: "ATTRIB",
    IN_CLOSE_WRITE: "CLOSE_WRITE",
    IN_CLOSE_NOWRITE: "CLOSE_NOWRITE",
    IN_OPEN: "OPEN",
    IN_DELETE_SELF: "DELETE_SELF",
    IN_IGNORED: "IGNORED",
}
libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]


def staged_fds(pid: int) -> list[str]:
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if "staging" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                found.append(f"/proc/{pid}/fd/{fd}")
    return found


def events(ifd: int, wait: float = 0.3) -> list[str]:
    out = []
    while select.select([ifd], [], [], wait)[0]:
        buf = os.read(ifd, 4096)
        pos = 0
        while pos < len(buf):
            _wd, mask, _cookie, length = struct.unpack_from("iIII", buf, pos)
            pos += 16 + length
            out.append("|".join(n for bit, n in NAMES.items() if mask & bit) or hex(mask))
        wait = 0.05
    return out


def lease_refused(opath: int) -> str:
    fd = os.open(f"/proc/self/fd/{opath}", os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as exc:
        return f"refused ({os.strerror(exc.errno)}): a writable open exists"
    else:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return "granted: no writable open left"
    finally:
        os.close(fd)


def main() -> None:
    signal.signal(signal.SIGIO, signal.SIG_IGN)  # a broken lease signals its holder
    root = Path(tempfile.mkdtemp(prefix="mapping-probe-"))
    m = Mount(root, "probe", ["--passthrough"])
    try:
        print(f"kernel {os.uname().release}; daemon pid {m.pid}")
        size = 1 << 20
        fd = os.open(m.mnt / "raw", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.ftruncate(fd, size)
        addr = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        staged = staged_fds(m.pid)
        print("daemon's staged files:", staged)
        opath = os.open(staged[0], os.O_PATH)
        ifd = libc.inotify_init1(os.O_CLOEXEC)
        mask = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_OPEN | IN_DELETE_SELF
        wd = libc.inotify_add_watch(ifd, f"/proc/self/fd/{opath}".encode(), mask)
        print("inotify watch on the staged inode:", "ok" if wd >= 0 else os.strerror(ctypes.get_errno()))
        print("mapped, descriptor open:   lease", lease_refused(opath), "| events", events(ifd))
        os.close(fd)
        deadline = time.monotonic() + 10
        while staged_fds(m.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("after close(2)+RELEASE:    daemon holds", staged_fds(m.pid), end=" ")
        print("| lease", lease_refused(opath), "| events", events(ifd))
        ctypes.memset(addr, 0x5A, size)
        print("after stores:              lease", lease_refused(opath), "| events", events(ifd))
        libc.msync(addr, size, 4)
        print("after msync(MS_SYNC):      lease", lease_refused(opath), "| events", events(ifd))
        libc.munmap(addr, size)
        print("after munmap:              lease", lease_refused(opath), "| events", events(ifd))
        data = os.pread(os.open(f"/proc/self/fd/{opath}", os.O_RDONLY), 16, 0)
        print("staged bytes after munmap:", data)
    finally:
        m.umount()


if __name__ == "__main__":
    main()
