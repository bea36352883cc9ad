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
copied into a page-aligned buffer from a small pool (``datahub.aligned_buffers``: huge pages), padded to :data:`ALIGN`, written at
offset 0, and the file is then truncated to its exact length. A file system without
``O_DIRECT`` (tmpfs) refuses the open with EINVAL; the caller then writes buffered.
"""

from __future__ import annotations

import errno
import os

from datahub.aligned_buffers import ALIGN, AlignedBuffers

DIRECT_MIN_BYTES = 1024 * 1024
_POOL_KEEP = 4  # idle buffers kept for reuse (each as large as the largest page seen)


_buffers = AlignedBuffers(keep=_POOL_KEEP)
os.register_at_fork(after_in_child=_buffers.after_fork_in_child)


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def write_direct(fd: int, header: bytes, data: bytes, what: str) -> None:
    """Write ``header + data`` as the whole file behind ``fd`` (opened with ``O_DIRECT``)."""
    length = len(header) + len(data)
    padded = _round_up(length, ALIGN)
    buf = _buffers.take(padded)
    try:
        with buf.region(padded) as view:
            view[: len(header)] = header
            view[len(header) : length] = data
            if padded > length:
                view[length:padded] = bytes(padded - length)
            written = os.write(fd, view)
    finally:
        _buffers.give(buf)
    if written != padded:  # a short write: the file system is full
        raise OSError(errno.ENOSPC, f"short write of page file {what}")
    if padded != length:
        os.ftruncate(fd, length)
