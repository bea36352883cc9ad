"""Opening dataset files so that a warm read asks a datahub mount nothing.

Why an explicit buffer size: Python 3.11's ``open(path, "rb")`` (``buffering=-1``) calls
``isatty()`` on every file it opens, an ``ioctl(TCGETS)`` that the kernel forwards to a FUSE
daemon as ``FUSE_IOCTL`` on every call (Linux has no flag that remembers the daemon's
refusal: docs/fuse.md, "The one request left"). On a datahub mount a warm file is
otherwise opened and read by the kernel alone (zero-message opens, kept page cache), so
that ioctl is the only round trip left per file, and it halves a warm epoch with many
reader threads on few cores. With an explicit ``buffering`` Python never asks ``isatty``.
``OPEN_BUFFER`` is what the default picks on a mount anyway (its ``st_blksize``, 1 MiB).
CPython 3.14 drops the call for regular files (gh-90102); these helpers cost nothing there.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, BinaryIO

#: the buffer Python's open() would choose on a datahub mount (st_blksize): same reads, no isatty()
OPEN_BUFFER = 1 << 20


def open_file(path: str | os.PathLike[str]) -> BinaryIO:
    """``open(path, "rb")`` without the ``isatty()`` ioctl (a buffered reader, as usual)."""
    return open(path, "rb", buffering=OPEN_BUFFER)


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The whole file, with no ``isatty()`` ioctl."""
    with open_file(path) as fh:
        return fh.read()


_STATX_MNT_ID_UNIQUE = 0x4000  # Linux 6.8+: a mount's 64-bit id, never reused
_AT_EMPTY_PATH, _AT_STATX_DONT_SYNC = 0x1000, 0x4000
_STX_MASK, _STX_MNT_ID = 0, 144  # offsets in struct statx (256 bytes)
_libc = ctypes.CDLL(None, use_errno=True)


def mount_id(fd: int) -> int | None:
    """The unique id of the mount ``fd`` lies on (``statx`` ``STATX_MNT_ID_UNIQUE``), or None
    where the kernel has none (before Linux 6.8) or glibc has no ``statx``.

    Why this and not ``st_dev``: a FUSE mount's device number is freed at its unmount and
    handed to the next mount, so a directory mounted again usually has the same ``st_dev``;
    the unique mount id never repeats. Asked with ``AT_STATX_DONT_SYNC`` and no attribute of
    the file, so a FUSE daemon gets no request."""
    statx = getattr(_libc, "statx", None)
    if statx is None:
        return None
    buf = ctypes.create_string_buffer(256)
    flags = _AT_EMPTY_PATH | _AT_STATX_DONT_SYNC
    if statx(fd, b"", flags, _STATX_MNT_ID_UNIQUE, buf) != 0:
        return None
    raw = buf.raw
    if not int.from_bytes(raw[_STX_MASK : _STX_MASK + 4], "little") & _STATX_MNT_ID_UNIQUE:
        return None
    return int.from_bytes(raw[_STX_MNT_ID : _STX_MNT_ID + 8], "little")


def image_loader(path: str | os.PathLike[str]) -> Any:
    """torchvision's default ``ImageFolder`` loader (PIL, converted to RGB) without the
    ``isatty()`` ioctl: ``ImageFolder(root, loader=image_loader)`` (docs/torch.md)."""
    from PIL import Image

    with open_file(path) as fh:
        return Image.open(fh).convert("RGB")
