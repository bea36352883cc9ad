"""The page cache seen from a test: which pages of a file are resident, and pinning them.

Plain ``mmap`` + ``mincore``/``mlock`` through libc: mapping a file read-only faults nothing
in and sends no request to a FUSE daemon, and the mapping keeps the file (and its dentry)
referenced after its descriptor is closed.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
# mmap(2), msync(2) and munmap(2) as C code calls them: no duplicate descriptor kept (Python's
# mmap module keeps one, which changes when FUSE's RELEASE comes); shared by the mapping tests
# and bench/writeback/mapping_probe.py
libc = _libc


def _map_fd(fd: int, size: int, name: object) -> int:
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr == _MAP_FAILED:
        raise OSError(ctypes.get_errno(), f"mmap {name}")
    return addr


def _map(path: Path) -> tuple[int, int]:
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        return _map_fd(fd, size, path), size
    finally:
        os.close(fd)


def _resident(addr: int, size: int, name: object) -> int:
    try:
        vec = ctypes.create_string_buffer(-(-size // mmap.PAGESIZE))
        if _libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), f"mincore {name}")
        return sum(b & 1 for b in vec.raw)
    finally:
        _libc.munmap(addr, size)


def resident_pages(path: Path) -> int:
    """How many of the file's pages are in the page cache now."""
    addr, size = _map(path)
    return _resident(addr, size, path)


def resident_pages_of(fd: int, size: int) -> int:
    """``resident_pages`` of an open descriptor's first ``size`` bytes: no path lookup and no
    open, so it works while a FUSE daemon is stopped (a stat or open would wait for it)."""
    return _resident(_map_fd(fd, size, f"fd {fd}"), size, f"fd {fd}")


@contextmanager
def pinned_in_page_cache(paths: list[Path]) -> Iterator[None]:
    """mmap + mlock each (already warm) file, so reclaim cannot drop its cached pages."""
    mappings: list[tuple[int, int]] = []
    try:
        for path in paths:
            addr, size = _map(path)
            mappings.append((addr, size))
            if _libc.mlock(addr, size) != 0:
                raise OSError(ctypes.get_errno(), f"mlock {path}")
        yield
    finally:
        for addr, size in mappings:
            _libc.munmap(addr, size)


def read_unbuffered(path: Path) -> bytes:
    """A file's bytes through ``os.open``/``os.read``: no ``isatty`` ioctl, unlike ``open()``,
    so a warm read sends nothing to a FUSE daemon."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
