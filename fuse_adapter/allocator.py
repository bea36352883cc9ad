"""The workspace daemon's C allocator: keep freed megabyte buffers for the next request.

Why (issue 41, docs/writeback.md "Requests answered without a thread hop"): on a workspace
mount's daemon path every WRITE carries up to 1 MiB through several heap buffers: the C
reader's copy of the request, pyfuse3's ``bytes``, the file's 4 MiB chunk buffer (which
lives until its upload). glibc's defaults serve blocks that big with ``mmap`` and give them
back with ``munmap``, or trim the heap's top back to the kernel once 128 KiB are free, so
each new buffer's pages are faulted in and zeroed again and each freed one is unmapped:
measured on this VM as a third of the daemon's CPU per MiB written (3.1 -> 2.1-2.3 ms of
daemon CPU per MiB for 16 MiB files, almost all of it system time in page faults;
docs/benchmarks.md, "writes5"). Setting both thresholds keeps such blocks inside the heap:
a freed chunk buffer is reused by the next one, with its pages still mapped.

The price is memory the process keeps after a burst: up to ``trim`` bytes of free heap top
per malloc arena (the main one and one per thread that allocates, at most 8 per core),
above what is in use. The daemon's own bound (a file's buffer budget, 64 MiB, times the
files written at once) is unchanged. Setting either threshold also switches off glibc's
dynamic mmap threshold, which is why both are set. Not glibc (musl): ``mallopt`` is absent
or ignored and nothing changes.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024**2  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit): 4 MiB chunks fit
TRIM_THRESHOLD = 64 * 1024**2  # one file's buffer budget (writeback DEFAULT_BUFFER_BYTES)


def keep_large_buffers(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Serve blocks below ``mmap_threshold`` from the heap and keep up to ``trim_threshold``
    bytes of its free top; True if the C library took both settings."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
    log.debug("malloc: mmap threshold %d, trim threshold %d: %s", mmap_threshold, trim_threshold, done)
    return done
