"""Staged files kept open after their last close while a mapping still writes them.

Why: with FUSE passthrough a process's shared mapping of a staged file holds the kernel's
*backing* file (fs/backing-file.c), not the FUSE file, so the last RELEASE reaches the
workspace at the last close(2) while the process may go on storing through the mapping
(a C program's ``open; mmap; close; store; msync; munmap``). Letting the staged file go
then loses those stores. Instead the workspace hands the file's last reference to a
:class:`Lingering` when ``staged.written_elsewhere`` says some other open of the staged
inode still exists; this thread waits until none is left, then commits a full copy
(``StagedFile.fsync(whole=True)``) and only then releases the file.

Waking up: an inotify watch on the staged inode (through ``/proc/self/fd``) reports
``IN_CLOSE_WRITE``/``IN_CLOSE_NOWRITE`` when the kernel finally releases a struct file of
it, which for a mapping's backing file is the ``munmap`` (measured by
``bench/writeback/mapping_probe.py``); every wake-up probes every held file again (the
event does not say whether it was the last open). A poll every ``POLL`` seconds covers a
missed or overflowed event queue. Lock order: a held file's ``release_lock`` is taken by
``finish`` (the workspace's), never under this module's ``_lock``.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import threading
from collections.abc import Callable

from datahub.writeback.modwatch import stop_thread
from datahub.writeback.staged import StagedFile, written_elsewhere

log = logging.getLogger(__name__)

POLL = 1.0  # seconds between probes when no inotify event comes
_IN_CLOSE = 0x8 | 0x10  # IN_CLOSE_WRITE | IN_CLOSE_NOWRITE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]


class Lingering:
    """Files whose last reference waits for the last other open of their staged file.

    ``finish(of)`` commits and releases one such file (``Workspace``); it returns False if
    the file must be held longer (written again meanwhile, or its commit failed)."""

    def __init__(self, finish: Callable[[StagedFile], bool], what: str) -> None:
        self._finish = finish
        self._what = what
        self._lock = threading.Lock()  # guards the maps below and the thread's start
        self._held: dict[int, tuple[StagedFile, int]] = {}  # file id -> (file, inotify wd or -1)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._inotify = -1
        self._waker_r, self._waker_w = -1, -1

    def held(self) -> list[StagedFile]:
        with self._lock:
            return [of for of, _ in self._held.values()]

    def hold(self, of: StagedFile) -> bool:
        """Take over ``of``'s last reference until nothing else opens its staged file. False:
        stopped already (the workspace is closing and commits its open files itself)."""
        with self._lock:
            if self._stopping:
                return False
            if self._thread is None:
                self._inotify = _libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
                self._waker_r, self._waker_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
                self._thread = threading.Thread(target=self._run, name="datahub-lingering", daemon=True)
                self._thread.start()
            wd = -1
            if self._inotify >= 0:
                wd = _libc.inotify_add_watch(self._inotify, f"/proc/self/fd/{of.fd}".encode(), _IN_CLOSE)
            self._held[of.id] = (of, wd)
        of.lingering = True
        os.write(self._waker_w, b"x")  # probe at once: the last open may be gone already
        return True

    def stop(self) -> list[StagedFile]:
        """Stop watching; the files still held (the caller commits and closes them)."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        stop_thread(thread, self._waker_w, (self._inotify, self._waker_r, self._waker_w))
        with self._lock:
            held = [of for of, _ in self._held.values()]
            self._held.clear()
        return held

    def _run(self) -> None:
        poller = select.poll()  # not select.select: a busy daemon's descriptors pass 1023 (review11)
        for fd in [self._waker_r] + ([self._inotify] if self._inotify >= 0 else []):
            poller.register(fd, select.POLLIN)
        while True:
            for fd, _events in poller.poll(int(POLL * 1000)):
                try:
                    while os.read(fd, 65536):
                        pass
                except OSError as exc:
                    if exc.errno != errno.EAGAIN:
                        raise
            with self._lock:
                if self._stopping:
                    return
                held = list(self._held.values())
            for of, wd in held:
                try:
                    if written_elsewhere(of.fd):
                        continue
                except OSError as exc:
                    log.warning("%s: probing %r: %s; committing it now", self._what, of.path, exc)
                with self._lock:
                    if self._stopping:
                        return
                    del self._held[of.id]
                    of.lingering = False
                    if wd >= 0:
                        _libc.inotify_rm_watch(self._inotify, wd)
                if not self._finish(of):  # held again, unwatched: the poll retries, ``stop`` returns it
                    with self._lock:
                        self._held[of.id] = (of, -1)
                        of.lingering = True
