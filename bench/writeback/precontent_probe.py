"""Does the kernel ask before a staged file is written? A fanotify pre-content probe.

    sudo .venv/bin/python bench/writeback/precontent_probe.py [--dir DIR]

Issue 41, blocker (a): the watcher (``datahub/writeback/modwatch.py``) hears a write only
after it, so a call that crosses a staged file's reservation is refused. A pre-content
fanotify event (``FAN_PRE_ACCESS``, Linux >= 6.14, with the written range) would come
*before* the write, the writer blocked until the answer: the daemon could reserve first
and never refuse. Two cases, each with a ``FAN_CLASS_PRE_CONTENT`` group (needs
CAP_SYS_ADMIN) and a mark on the file system's files made before the files are opened:
- ``plain``: an anonymous file (``O_TMPFILE`` in ``--dir``) marked, written through a
  second descriptor opened after the mark;
- ``passthrough``: a workspace mount with ``--passthrough`` (as ``mount_writes.py``), a
  file created through it, its staged inode marked (through the daemon's /proc fd
  links), then written through the mount (the kernel writes the staged file as the FUSE
  file's backing file).
Printed: the events seen (mask, writer pid, the range record) for each case.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import select
import shutil
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_writes import Mount

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
FAN_CLASS_PRE_CONTENT, FAN_CLOEXEC, FAN_NONBLOCK, FAN_MARK_ADD, FAN_ALLOW = 0x08, 1, 2, 1, 1
FAN_PRE_ACCESS = 0x00100000
_META = struct.Struct("IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid


def mark(group: int, fd: int) -> None:
    if _libc.fanotify_mark(group, FAN_MARK_ADD, FAN_PRE_ACCESS, fd, None) != 0:
        raise OSError(ctypes.get_errno(), "fanotify_mark")


def events_during(group: int, write) -> list[tuple[str, int, str]]:
    """Every event of ``group`` (each allowed) while ``write()`` runs and a second after."""
    seen: list[tuple[str, int, str]] = []
    done = threading.Event()

    def answer() -> None:
        end = None
        while end is None or time.monotonic() < end:
            if done.is_set() and end is None:
                end = time.monotonic() + 1.0
            if not select.select([group], [], [], 0.1)[0]:
                continue
            buf, pos = os.read(group, 65536), 0
            while pos < len(buf):
                length, _v, _r, meta, mask, efd, pid = _META.unpack_from(buf, pos)
                seen.append((hex(mask), pid, buf[pos + meta : pos + length].hex()))
                os.write(group, struct.pack("iI", efd, FAN_ALLOW))
                os.close(efd)
                pos += length

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        write()
    finally:
        done.set()
        thread.join()
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp")
    args = ap.parse_args()
    group = _libc.fanotify_init(
        FAN_CLASS_PRE_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK, os.O_RDWR | os.O_LARGEFILE
    )
    if group < 0:
        raise SystemExit(
            f"fanotify_init: {os.strerror(ctypes.get_errno())} (pre-content needs CAP_SYS_ADMIN)"
        )
    print(f"# kernel {os.uname().release}, writer pid {os.getpid()}")
    root = Path(tempfile.mkdtemp(prefix="precontent-", dir=args.dir))
    anchor = os.open(root, os.O_TMPFILE | os.O_RDWR, 0o600)
    mark(group, anchor)  # the file system has a pre-content watcher before the files below are opened
    plain = os.open(f"/proc/self/fd/{anchor}", os.O_RDWR)
    print("plain:", events_during(group, lambda: os.pwrite(plain, b"x" * (1 << 20), 5 << 20)))
    m = Mount(root, "pt", ["--passthrough"])
    try:
        time.sleep(1)
        fd = os.open(m.mnt / "f", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        links = [p for p in glob.glob(f"/proc/{m.pid}/fd/*") if "writeback-staging" in os.readlink(p)]
        staged = os.open(links[0], os.O_RDONLY)
        mark(group, staged)
        print("passthrough:", events_during(group, lambda: os.write(fd, b"y" * (1 << 20))))
        os.close(fd)
        os.close(staged)
    finally:
        m.umount()
        os.close(plain)
        os.close(anchor)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
