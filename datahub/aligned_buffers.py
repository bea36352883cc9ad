"""Reused, page-aligned buffers for ``O_DIRECT`` writes, in transparent huge pages where the
kernel has them: the disk tier's large page files (``datahub.cache.directio``) and write-back
chunk files (``datahub.writeback.chunks``) take them from here.

Why huge pages (direct41, docs/benchmarks.md): a direct write's request carries one segment
per physically contiguous run of its buffer; from base pages that is one per 4 KiB, and the
test VM's virtual disk took 2-5x as long for them as for the same bytes in 2 MiB runs (what
the page cache's large folios give a buffered write-back). So a buffer is private anonymous
memory (a shared one is shmem, whose huge pages are off by default, and is shared with a
forked child: fork25 found a parent and a DataLoader worker filling one buffer at once), one
huge page longer than asked, starting at its first huge page boundary, with
``MADV_HUGEPAGE`` over it; where the kernel gives none, it has base pages. A mapping's pages
are only allocated as far as writes fill it.

Why reused: a new mapping's pages are faulted in at every fill; a kept one is touched once.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import threading
from collections.abc import Iterator
from pathlib import Path

ALIGN = 4096  # covers every logical block size up to 4 KiB
_ROUND = 1 << 20  # new buffers' sizes are whole MiB, so one serves pages of about the same size


def _huge_page_size() -> int:
    """The kernel's transparent huge page size (2 MiB on x86-64), 0 where it has none or one
    larger than 4 MiB (arm64 with 64 KiB pages: 512 MiB): then buffers get base pages."""
    try:
        size = int(Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 0
    return size if 0 < size <= 4 << 20 and (4 << 20) % size == 0 else 0


HUGE = _huge_page_size()  # alignment (and slack) of new buffers; 0: base pages


class AlignedBuffer:
    """One buffer: ``size`` aligned bytes at ``offset`` in ``mapping``."""

    __slots__ = ("mapping", "offset", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.mapping = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.offset = 0
        if HUGE:
            anchor = ctypes.c_char.from_buffer(self.mapping)
            self.offset = -ctypes.addressof(anchor) % HUGE
            del anchor  # releases its export of the mapping (else ``close`` refuses)
            with contextlib.suppress(OSError):  # a kernel without transparent huge pages
                self.mapping.madvise(mmap.MADV_HUGEPAGE, self.offset, size)

    @contextlib.contextmanager
    def region(self, length: int | None = None) -> Iterator[memoryview]:
        """The aligned bytes (the first ``length`` of them), released on exit."""
        end = self.offset + (self.size if length is None else length)
        with memoryview(self.mapping) as whole, whole[self.offset : end] as view:
            yield view

    def close(self) -> None:
        self.mapping.close()


class AlignedBuffers:
    """A pool of at most ``keep`` idle buffers; ``take`` gives one of at least ``size`` bytes."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._idle: list[AlignedBuffer] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> AlignedBuffer:
        with self._lock:
            for i, buf in enumerate(self._idle):
                if buf.size >= size:
                    return self._idle.pop(i)
        return AlignedBuffer(-(-size // _ROUND) * _ROUND)

    def give(self, buf: AlignedBuffer) -> None:
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
