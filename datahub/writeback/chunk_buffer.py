"""A chunk's bytes in memory, held in an aligned, huge-page-backed buffer that a chunk file's
``O_DIRECT`` write takes as it is (``chunks._write_new``): no copy at the chunk's write.

Why (perf41c, docs/benchmarks.md): a file written through a workspace mount was copied into
its chunk's ``bytearray`` and, when the chunk was written, once more into an aligned buffer
for ``O_DIRECT`` (``chunks._write_direct``): 9 % of the daemon's CPU for 16 MiB files. A
``ChunkBuffer`` is that aligned buffer from the start, so the WRITE's bytes are copied once,
into memory the disk can take.

Which buffers are ones (``OpenFile``): only a chunk on a local shared tier (the only tier
written with ``O_DIRECT``) once it holds at least ``PROMOTE`` bytes (a chunk that size is a
file of its own, never a pack member: ``packs.PACK_CHUNK_MAX``). A smaller one stays a
``bytearray``: a buffer's memory is its whole capacity in huge pages once touched, which
for a 100 KB file would be twenty times its bytes. A ``bytearray`` that grows to
``PROMOTE`` is copied in once (nothing to copy when a file is written in 1 MiB calls: the
first write is the promotion).

Only ``len(self)`` bytes are ever read: a buffer is reused (``_POOL``) and holds an earlier
chunk's bytes past its length, so every way of growing it writes the bytes it grows by
(``put`` refuses a start past the end; ``extend`` writes its bytes).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Iterator

from datahub.aligned_buffers import ALIGN, AlignedBuffer
from datahub.errors import InvalidInput

PROMOTE = 1 << 20  # a chunk buffer of this many bytes or more is a ChunkBuffer (packs.PACK_CHUNK_MAX)
_KEEP = 4  # idle buffers kept per capacity for the next chunk (bounded: 4 chunks of memory)


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
        if len(idle) < _KEEP:
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
    """Up to ``capacity`` bytes of one chunk, aligned to ``ALIGN`` (``O_DIRECT``'s alignment),
    in transparent huge pages where the kernel has them (``datahub.aligned_buffers``). The
    parts of ``bytearray``'s interface ``OpenFile`` uses: ``len``, ``extend``, ``del b[n:]``,
    ``bytes(b)``; ``put`` writes in place; ``view`` lends the bytes (released on exit, and
    the buffer must outlive it: the caller holds a reference to it meanwhile)."""

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
        if mem is not None:
            _POOL.give(mem)
