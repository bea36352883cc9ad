"""The file a command writes (``-o FILE``), checked before any work is done.

Why: ``datahub export sample -o /no/such/dir/x.ndjson`` and ``datahub labelx export … -o`` into
a missing directory ended in "this is a datahub bug" (a ``FileNotFoundError`` from the temporary
file), and ``-o /`` read the whole version before it failed renaming over the directory
(newuser17). A wrong path is the user's to fix: it is said in words, exit 2, at once.
``written`` writes it whole or not at all, and never renames over a path that is not a
regular file (newuser20).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from datahub.errors import InvalidInput


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
    return target


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
        with open(path, mode, **open_args) as fh:
            yield fh
        return
    real = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".partial", dir=real.parent)
    try:
        try:
            os.fchmod(fd, stat.S_IMODE(os.stat(real).st_mode))  # a replaced file keeps its mode
        except FileNotFoundError:
            pass
        with os.fdopen(fd, mode, **open_args) as fh:
            yield fh
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
