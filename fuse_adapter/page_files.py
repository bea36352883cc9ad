"""Finding a file's verified page file to hand to pyfuse3's C tables: the one look-up of
passthrough opens (``passthrough``) and of READs answered in C (``fastread``).

A file verified before is looked up inline, on the FUSE loop (metadata only: open +
getxattr + fstat of its page file). The one exception to "the loop does in-memory work
only": measured, a thread hop doubles the daemon's CPU per open (docs/benchmarks.md), and
the calls wait for the disk only when the page file's entry is not cached. A file that
needs reading is checked in a worker thread; a cold one-page file is fetched whole there
first (the request's own work, done once), so even this handle is served from the page
file. Its errors are the request's (ESTALE for a changed object, EIO, ...).

No pyfuse3 here: ``run`` is the shim's worker-thread runner, so this runs in plain tests.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: ``await run(fn, *args)``: ``fn(*args)`` in a worker thread (the shim's limiter)
Run = Callable[..., Awaitable[Any]]


class BackingFiles(Protocol):
    """The view's verified page files (``readonly.ReadOnlyView``)."""

    def backing_fd(self, ino: int, *, verify: bool = True, fetch: bool = False) -> int | None: ...
    def backing_unchanged(self, ino: int, fd: int) -> bool: ...
    def backing_check(self, ino: int, fd: int) -> bool: ...


def _backing_fd(files: BackingFiles, ino: int, verify: bool) -> int | None:
    """A backing file (-1: not verified yet, -2: not cached, with ``verify=False``), or
    None on any trouble."""
    try:
        return files.backing_fd(ino, verify=verify, fetch=False)
    except Exception as exc:  # the open still succeeds, through the daemon
        log.warning("passthrough open of inode %d: %s; reading through the daemon", ino, exc)
        return None


async def verified_fd(files: BackingFiles, ino: int, run: Run) -> int | None:
    """A descriptor of ``ino``'s verified page file (the caller owns it), or None."""
    fd = _backing_fd(files, ino, False)
    if fd == -1:
        fd = await run(_backing_fd, files, ino, True)
    elif fd == -2:
        fd = await run(lambda: files.backing_fd(ino, fetch=True))
    return fd if fd is None or fd >= 0 else None


def still_verified(files: BackingFiles, ino: int, fd: int) -> bool:
    """Whether ``fd``, just published for ``ino``, is still in the state it was verified
    in: one ``fstat`` of it, no data read, no file opened by name (each system call on the
    loop hands the GIL to the fetch threads). ``fd`` belongs to the C table now; only a
    change the C code finds at an open closes it, and then this ``fstat`` fails or sees
    another file, so the answer is False and the request takes the ordinary path: never a
    wrong yes."""
    try:
        return files.backing_unchanged(ino, fd)
    except Exception as exc:  # the open still succeeds, through the daemon
        log.warning("passthrough open of inode %d: %s; reading through the daemon", ino, exc)
        return False
