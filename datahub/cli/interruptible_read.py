"""Opening a command's input so that Ctrl-C stops a read that waits (a pipe, a FIFO, a terminal).

Why: CPython runs a signal's Python handler (Ctrl-C's KeyboardInterrupt) only between
bytecodes, or when a system call returns EINTR. A SIGINT that arrives while the main thread
is in C code just before a blocking ``read(2)`` (between two reads of one ``readline``: the
first returned a line, the second waits for more) is caught by the C handler, yet the read
then blocks on, until the writer writes again or closes: ``datahub commit --changes FIFO``
did not stop for 120 s after its Ctrl-C while the writer held the pipe open
(tests/cli/test_interrupted.py, once under load). Here every read of such an input first
waits in ``poll`` on the input and on a wake-up pipe the C handler writes to
(``signal.set_wakeup_fd``), so a signal caught at any moment ends the wait, and the handler
runs before the next read.

A regular file never waits: it is opened as usual (no extra system call per read).
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import stat
import threading
from collections.abc import Iterator
from typing import TextIO

BUFFER = 1 << 20  # one poll and one read per MiB of a fast pipe


class _WakingReader(io.RawIOBase):
    """A non-regular file's reads, each after a ``poll`` that a caught signal also ends."""

    def __init__(self, fd: int, wake: int) -> None:
        self._fd, self._wake = fd, wake
        self._poll = select.poll()  # not select(): any descriptor number
        self._poll.register(fd, select.POLLIN)
        self._poll.register(wake, select.POLLIN)

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while True:  # each pass starts with a bytecode boundary: a caught signal's handler runs there
            ready = {fd for fd, _ in self._poll.poll()}  # POLLHUP too: the writer closed (EOF)
            if self._wake in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake, 512)
            if self._fd in ready:
                return os.readv(self._fd, [buffer])


@contextlib.contextmanager
def open_text(path: str) -> Iterator[TextIO]:
    """``open(path, encoding="utf-8")``, whose reads a Ctrl-C always stops (see the module).

    Raises OSError as ``open`` does. Off the main thread (no handler runs there) the file
    is opened as usual."""
    fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        if (
            stat.S_ISREG(os.fstat(fh.fileno()).st_mode)
            or threading.current_thread() is not threading.main_thread()
        ):
            yield fh
            return
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            previous = signal.set_wakeup_fd(wake_w)
            try:
                raw = _WakingReader(fh.fileno(), wake_r)
                yield io.TextIOWrapper(io.BufferedReader(raw, BUFFER), encoding="utf-8")
            finally:
                signal.set_wakeup_fd(previous)
        finally:
            os.close(wake_r)
            os.close(wake_w)
    finally:
        fh.close()
