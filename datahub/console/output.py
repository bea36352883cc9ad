"""The file a command writes (``-o FILE``), checked before any work is done.

Why: ``datahub export sample -o /no/such/dir/x.ndjson`` and ``datahub labelx export … -o`` into
a missing directory ended in "this is a datahub bug" (a ``FileNotFoundError`` from the temporary
file), and ``-o /`` read the whole version before it failed renaming over the directory
(newuser17). A wrong path is the user's to fix: it is said in words, exit 2, at once.
``written`` writes it whole or not at all, and never renames over a path that is not a
regular file (newuser20). A directory that refuses new files although its mode allows them
(``/proc``, ``/sys``, as root) and a file system that fills while the file is written are
said naming the path, not as "a datahub bug" or a bare "No space left on device" (newuser36).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from datahub.errors import InvalidInput, NoSpace

_FULL = (errno.ENOSPC, errno.EDQUOT)


def _special(target: Path) -> bool:
    """Whether ``target`` (through symlinks) exists and is neither a regular file nor a
    directory: a device, a FIFO, a socket, ``/dev/stdout``'s terminal or pipe."""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def output_file(path: str) -> Path:
    """``path`` as a file this user can create or replace; InvalidInput naming what is wrong
    with it (a directory, a missing or unwritable directory) and what to do otherwise."""
    target = Path(path)
    if _special(target):  # written in place (``written``): its directory's rights do not matter
        if not os.access(target, os.W_OK):
            raise InvalidInput(f"-o {path}: this user may not write it; write elsewhere")
        return target
    target = Path(os.path.realpath(target)) if target.is_symlink() else target
    parent = target.parent
    if target.is_dir():
        raise InvalidInput(f"-o {path}: that is a directory; name a file in it (-o {target / 'NAME'})")
    if parent.exists() and not parent.is_dir():
        raise InvalidInput(f"-o {path}: {parent} is a file, not a directory; write elsewhere")
    if not parent.is_dir():
        raise InvalidInput(
            f"-o {path}: directory {parent} does not exist; create it first or write elsewhere"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidInput(f"-o {path}: this user may not create files in {parent}; write elsewhere")
    _probe(path, parent)
    return target


def _probe(path: str, parent: Path) -> None:
    """Create and remove a temporary file in ``parent``, as ``written`` will: the mode bits
    say yes to root everywhere, yet ``/proc`` and ``/sys`` refuse new files (ENOENT, EACCES),
    and that was found only after the whole version was read, as "a datahub bug"."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".datahub-probe.", dir=parent)
    except OSError as exc:
        raise _cannot_write(path, parent, exc) from exc
    os.close(fd)
    os.unlink(tmp)


def _cannot_write(path: str | Path, parent: Path, exc: OSError) -> InvalidInput | NoSpace:
    """The error for a file that could not be made or written under ``path``, naming it."""
    reason = exc.strerror or type(exc).__name__
    if exc.errno in _FULL:
        return NoSpace(
            f"-o {path}: out of space writing it ({reason}); "
            f"free space on the file system of {parent} or write elsewhere, then run it again"
        )
    return InvalidInput(f"-o {path}: cannot create a file in {parent} ({reason}); write elsewhere")


@contextmanager
def written(path: Path, mode: str = "w", **open_args: Any) -> Iterator[IO[Any]]:
    """A file to write ``path``'s new contents into, there whole or not at all.

    A regular file (or a new one) is written under a temporary name beside it and renamed
    over it at the end, so a failure leaves the old contents; through a symlink, the link's
    target is (the link stays). Why not always: a path that is not a regular file
    (``-o /dev/stdout``, a FIFO, a device) was replaced by the renamed file: as root,
    ``/dev/stdout`` or ``/dev/full`` became a regular file holding the export. Such a path is
    opened and written as the shell's ``>`` would (newuser20)."""
    if _special(path):
        try:
            with open(path, mode, **open_args) as fh:
                yield fh
        except OSError as exc:
            if exc.errno in _FULL:
                raise _cannot_write(path, path.parent, exc) from exc
            raise
        return
    real = Path(os.path.realpath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".partial", dir=real.parent)
    except OSError as exc:
        raise _cannot_write(path, real.parent, exc) from exc
    try:
        try:
            os.fchmod(fd, stat.S_IMODE(os.stat(real).st_mode))  # a replaced file keeps its mode
        except FileNotFoundError:
            pass
        with os.fdopen(fd, mode, **open_args) as fh:
            yield fh
        os.replace(tmp, real)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.errno in _FULL:  # the write or the close filled it
            raise _cannot_write(path, real.parent, exc) from exc
        raise
