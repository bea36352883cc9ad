"""Bind a directory BENEATH the mount on top of a path, so the top can then be detached.

Why: repairing a volume whose mount process died used to unmount the target first and bind
the new view seconds later, once the new process served. For those seconds the target was
the node's plain directory, and a container whose volume mount propagates (HostToContainer)
wrote its files there, was told they were written, and lost them under the new bind (csi14).
Mounted beneath the dead view, the new one is uncovered by the detach of the dead one: the
target never shows the directory under it.

Linux 6.5 and later: ``open_tree(2)`` clones the source into a detached mount,
``mount_setattr(2)`` makes that clone read-only before anyone sees it, and ``move_mount(2)``
with ``MOVE_MOUNT_BENEATH`` attaches it under the top mount. The node image's util-linux
(2.38) has no ``--beneath``, so the system calls are made here through libc's ``syscall``. A kernel that
refuses (older: EINVAL for the unknown flag, ENOSYS without the calls) gets False, with
nothing changed, and the caller falls back to unmounting first.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

from datahub.errors import DatahubError

# system call numbers: one table for every architecture since Linux 5.1 (asm-generic)
_OPEN_TREE, _MOVE_MOUNT, _MOUNT_SETATTR = 428, 429, 442
_ARCHES = frozenset({"x86_64", "aarch64"})  # the ones the node image is built for

# include/uapi/linux/fcntl.h and include/uapi/linux/mount.h
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_OPEN_TREE_CLONE = 1
_MOVE_MOUNT_F_EMPTY_PATH = 0x00000004
_MOVE_MOUNT_BENEATH = 0x00000200
_MOUNT_ATTR_RDONLY = 0x00000001

#: what a kernel without the calls (ENOSYS) or without MOVE_MOUNT_BENEATH (EINVAL) answers
REFUSED = frozenset({errno.EINVAL, errno.ENOSYS})


class _MountAttr(ctypes.Structure):
    """``struct mount_attr`` (MOUNT_ATTR_SIZE_VER0: 32 bytes)."""

    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _Refused(Exception):
    """The kernel does not offer what is needed (nothing was changed)."""


def _call(number: int, *args: object) -> int:
    """``syscall(number, args...)``, each integer passed as a full ``long`` (the C varargs ABI)."""
    longs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = _libc.syscall(ctypes.c_long(number), *longs)
    if result < 0:
        code = ctypes.get_errno()
        if code in REFUSED:
            raise _Refused(os.strerror(code))
        raise OSError(code, os.strerror(code))
    return result


def bind_beneath(source: str, target: str, *, readonly: bool) -> bool:
    """Bind ``source`` beneath the mount on top of ``target`` (read-only from the start if asked).

    Returns False, having changed nothing, when this kernel cannot (the caller falls back);
    raises DatahubError for any other failure. ``target`` must be a mount point.
    """
    if platform.machine() not in _ARCHES:
        return False
    try:
        fd = _call(_OPEN_TREE, _AT_FDCWD, os.fsencode(source), _OPEN_TREE_CLONE | os.O_CLOEXEC)
    except _Refused:
        return False
    except OSError as exc:
        raise DatahubError(f"cloning the mount at {source} failed: {exc.strerror}") from exc
    try:  # until it is moved, the clone is detached: closing the fd drops it
        if readonly:
            attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
            _call(_MOUNT_SETATTR, fd, b"", _AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr))
        flags = _MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_BENEATH
        _call(_MOVE_MOUNT, fd, b"", _AT_FDCWD, os.fsencode(target), flags)
    except _Refused:
        return False
    except OSError as exc:
        raise DatahubError(f"mounting {source} beneath the mount at {target} failed: {exc.strerror}") from exc
    finally:
        os.close(fd)
    return True
