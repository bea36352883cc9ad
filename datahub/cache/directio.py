"""Writing large page files with ``O_DIRECT``: the disk tier should not fill the page cache.

Why: a page written through the page cache is cached twice (in the RAM tier and in the
kernel's page cache) and costs the kernel a fresh page-cache page per 4 KiB. Streaming a
512 MiB object into the cache through buffered writes cost the daemon about 1 s of system
time on the benchmark VM (``dd`` of 512 MiB: 0.9-1.2 s sys buffered, 0.04 s with
``oflag=direct``), on two cores shared with the reader and the endpoint, and the duplicate
pages push the reader's own page cache out. Small pages are cheaper buffered (a direct
write waits for the device, and its alignment padding is relative overhead), so only
pages of at least :data:`DIRECT_MIN_BYTES` go direct.

``O_DIRECT`` needs an aligned buffer, offset and length: the header and the data are
copied into a page-aligned buffer from a small pool, padded to :data:`ALIGN`, written at
offset 0, and the file is then truncated to its exact length. A file system without
``O_DIRECT`` (tmpfs) refuses the open with EINVAL; the caller then writes buffered.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading

ALIGN = 4096  # covers every logical block size up to 4 KiB
DIRECT_MIN_BYTES = 1024 * 1024
_POOL_KEEP = 4  # idle buffers kept for reuse (each as large as the largest page seen)


class AlignedBuffers:
    """Page-aligned anonymous buffers (``mmap``), reused so their memory is touched once."""

    def __init__(self, keep: int = _POOL_KEEP) -> None:
        self._keep = keep
        self._idle: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> mmap.mmap:
        with self._lock:
            for i, buf in enumerate(self._idle):
                if len(buf) >= size:
                    return self._idle.pop(i)
        # MAP_PRIVATE: Python's default for an anonymous map is MAP_SHARED, which a forked
        # child (a DataLoader worker) shares with its parent: both took the same pooled buffer
        # and filled it at once, and a page file got the other process's bytes
        return mmap.mmap(-1, _round_up(size, 1 << 20), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

    def give(self, buf: mmap.mmap) -> None:
        with self._lock:
            if len(self._idle) < self._keep:
                self._idle.append(buf)
                return
        buf.close()

    def after_fork_in_child(self) -> None:
        """A forked child starts with an empty pool and a fresh lock (a parent thread may have
        held it at the fork); the inherited buffers are the parent's to reuse."""
        self._idle = []
        self._lock = threading.Lock()


_buffers = AlignedBuffers()
os.register_at_fork(after_in_child=_buffers.after_fork_in_child)


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def write_direct(fd: int, header: bytes, data: bytes, what: str) -> None:
    """Write ``header + data`` as the whole file behind ``fd`` (opened with ``O_DIRECT``)."""
    length = len(header) + len(data)
    padded = _round_up(length, ALIGN)
    buf = _buffers.take(padded)
    try:
        buf[: len(header)] = header
        buf[len(header) : length] = data
        if padded > length:
            buf[length:padded] = bytes(padded - length)
        with memoryview(buf) as whole, whole[:padded] as view:
            written = os.write(fd, view)
    finally:
        _buffers.give(buf)
    if written != padded:  # a short write: the file system is full
        raise OSError(errno.ENOSPC, f"short write of page file {what}")
    if padded != length:
        os.ftruncate(fd, length)
