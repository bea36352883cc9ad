"""Reused, page-aligned buffers for ``O_DIRECT`` writes, in transparent huge pages where the
kernel has them: the disk tier's large page files (``datahub.cache.directio``) and write-back
chunk files (``datahub.writeback.chunks``) take them from here, and a write-back chunk's
bytes in memory are held in one from the start (``ChunkBuffer``).

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
import os
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from datahub.errors import InvalidInput

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


# Idle buffers kept per capacity for the next chunks (bounded: 16 chunks of memory, 64 MiB of
# 4 MiB chunks). 16, not 4 (perf41f): four writers on a RADOS or S3/RGW shared tier hold up to
# 4 x (1 + 3) chunk buffers at once (one filling, the rest uploading); with 4 kept, most were
# mapped afresh and faulted in as huge pages (2 MiB zeroed a fault), and the daemon's kernel
# CPU per MiB rose 40-60 % over the bytearrays it replaced (docs/benchmarks.md, "perf41f").
_KEEP_CHUNKS = 16


class _Pool:
    """Idle buffers by capacity. No lock (``deque``'s append and pop are atomic): a buffer is
    given back from ``ChunkBuffer.__del__``, which the cycle collector may run inside any
    allocation, and so inside a lock this thread holds (``AlignedBuffers``' lock would then
    deadlock)."""

    def __init__(self) -> None:
        self._idle: dict[int, deque[AlignedBuffer]] = {}

    def take(self, capacity: int) -> AlignedBuffer:
        try:
            return self._idle.get(capacity, deque()).pop()
        except IndexError:
            return AlignedBuffer(capacity)

    def give(self, buf: AlignedBuffer) -> None:
        idle = self._idle.setdefault(buf.size, deque())
        if len(idle) < _KEEP_CHUNKS:
            idle.append(buf)
            return
        with contextlib.suppress(BufferError):  # a view still exported: freed when it goes
            buf.close()

    def after_fork_in_child(self) -> None:
        """A forked child starts with no idle buffer (the inherited ones are the parent's)."""
        self._idle = {}


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.after_fork_in_child)


class ChunkBuffer:
    """Up to ``capacity`` bytes of one write-back chunk in an ``AlignedBuffer``, which the
    chunk file's ``O_DIRECT`` write takes as it lies (``datahub.writeback.chunks``). The parts
    of ``bytearray``'s interface ``OpenFile`` uses: ``len``, ``extend``, ``del b[n:]``,
    ``bytes(b)``; ``put`` writes in place; ``view`` lends the bytes (released on exit, and
    the buffer must outlive it: the caller holds a reference to it meanwhile).

    Why (perf41c, docs/benchmarks.md): a file written through a workspace mount was copied
    into its chunk's ``bytearray`` and, at the chunk's write, once more into an aligned
    buffer for ``O_DIRECT``: 9 % of the daemon's CPU for 16 MiB files. This is that aligned
    buffer from the start. Which chunks get one is ``datahub.writeback.files``' choice (a
    local shared tier, 1 MiB and up: a 100 KB file's buffer would cost a huge page).

    Only ``len(self)`` bytes are ever read: a buffer is reused (``_POOL``) and holds an
    earlier chunk's bytes past its length, so every way of growing it writes the bytes it
    grows by (``put`` refuses a start past the end; ``extend`` writes its bytes)."""

    __slots__ = ("_mem", "_len", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = -(-capacity // ALIGN) * ALIGN
        self._mem: AlignedBuffer | None = _POOL.take(self.capacity)
        self._len = 0

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview | ChunkBuffer, capacity: int) -> ChunkBuffer:
        """A new buffer holding a copy of ``data``."""
        buf = cls(capacity)
        if isinstance(data, ChunkBuffer):
            with data.view() as src:
                buf.extend(src)
        else:
            with memoryview(data) as raw, raw.cast("B") as src:
                buf.extend(src)
        return buf

    def __len__(self) -> int:
        return self._len

    @contextlib.contextmanager
    def view(self, start: int = 0, end: int | None = None) -> Iterator[memoryview]:
        """The bytes ``[start:end]`` of the buffer's length, unsigned bytes ('B')."""
        assert self._mem is not None
        end = self._len if end is None else min(end, self._len)
        with self._mem.region() as whole, whole[start:end] as part:
            yield part

    def put(self, at: int, piece: memoryview) -> None:
        """``b[at : at + len(piece)] = piece`` (``at <= len(b)``): one copy of the bytes."""
        if at > self._len:
            raise InvalidInput(
                f"a put at {at} past the end ({self._len}) of a chunk buffer would leave stale bytes"
            )
        end = at + len(piece)
        if end > self.capacity:
            raise InvalidInput(
                f"a put of {len(piece)} bytes at {at} overflows a chunk buffer of {self.capacity}"
            )
        assert self._mem is not None
        with self._mem.region() as whole, whole[at:end] as into:
            if piece.format == "B" and piece.ndim == 1:
                into[:] = piece
            else:
                with piece.cast("B") as flat:
                    into[:] = flat
        self._len = max(self._len, end)

    def extend(self, data: bytes | bytearray | memoryview) -> None:
        with memoryview(data) as raw:
            self.put(self._len, raw)

    def __delitem__(self, key: slice) -> None:
        """Only ``del b[n:]`` (a truncate): the length shrinks, the memory stays."""
        if not isinstance(key, slice) or key.stop is not None or key.step is not None:
            raise InvalidInput("a chunk buffer only cuts its end: del buf[n:]")
        start = key.start or 0
        if start < 0:
            start = max(self._len + start, 0)
        self._len = min(self._len, start)

    def __bytes__(self) -> bytes:
        with self.view() as v:
            return bytes(v)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChunkBuffer):
            other = bytes(other)
        if not isinstance(other, bytes | bytearray | memoryview):
            return NotImplemented
        return bytes(self) == bytes(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a bytearray

    def __del__(self) -> None:
        mem, self._mem = self._mem, None
        if mem is not None and _POOL is not None:  # None: the interpreter's exit cleared the module
            _POOL.give(mem)
