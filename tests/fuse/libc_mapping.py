"""A read-only shared mapping made through libc, for tests that need a handle held open past
its close(2): the kernel sends that handle's RELEASE only at munmap, which makes the late
RELEASE deterministic (review19d, release19). Python's ``mmap.mmap`` would keep a duplicate
of the descriptor, whose close is a FLUSH of its own."""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable

from tests.pagecache import _libc as _LIBC  # mmap and munmap declared once


def map_shared_readonly(fd: int, length: int) -> Callable[[], None]:
    """Map ``length`` bytes of ``fd``; returns the munmap (which sends the handle's RELEASE
    once ``fd`` itself is closed)."""
    addr = _LIBC.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()

    def unmap() -> None:
        assert _LIBC.munmap(addr, length) == 0

    return unmap
