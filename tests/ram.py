"""A directory in RAM for test data whose durability no test checks (``ram_dir``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RAM = Path("/dev/shm")  # a tmpfs on Linux; Docker's default is 64 MB
RAM_FREE = 32 << 20  # bytes a test's catalog and objects may take with room to spare (~1 MB for pets)


def ram_usable() -> bool:
    """Whether /dev/shm is a writable tmpfs with room for a test's data (else tests use the disk)."""
    try:
        with open("/proc/self/mounts") as mounts:
            on_tmpfs = any(line.split()[1:3] == [str(RAM), "tmpfs"] for line in mounts)
        st = os.statvfs(RAM)
    except OSError:
        return False
    return on_tmpfs and os.access(RAM, os.W_OK) and st.f_bavail * st.f_frsize >= RAM_FREE


@contextmanager
def ram_dir(fallback: Path) -> Iterator[Path]:
    """A new directory on a RAM file system (``/dev/shm``), removed afterwards; ``fallback``
    where there is none usable.

    Why: a pets catalog and its objects on disk cost ~90 fsyncs (SQLite's commits with
    ``synchronous=FULL``, the local store's durable puts): 0.3-0.6 s of a browser test's
    wall at load 8-13 on the 2-core machine, against 0.06 s on tmpfs, where a sync is a no-op
    (suite38). Nothing a browser or LabelX test checks depends on durability across a power loss
    (tests/catalog and tests/storage hold that). The home (cache, LabelX, tasks) stays in
    ``fallback``: the cache's disk tier does what it does on a real disk."""
    if not ram_usable():
        yield fallback
        return
    path = Path(tempfile.mkdtemp(prefix="datahub-test-", dir=RAM))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def ram_tempdir(prefix: str) -> Path:
    """A new directory (``tempfile.mkdtemp``) on the RAM file system when one is usable, else in
    the default temp directory; the caller removes it. For test data no test needs durable
    where a context manager does not fit (a hypothesis state machine's ``__init__``)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=RAM if ram_usable() else None))
