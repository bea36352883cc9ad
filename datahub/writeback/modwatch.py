"""One thread per workspace that hears the kernel write its staged files (inotify
``IN_MODIFY``) and lets each file grow its reserved blocks ahead of the writer.

Why: a staged file is written by the kernel (FUSE passthrough) without a request to the
daemon, so the daemon can only trust bytes that lie inside blocks reserved before they were
written (``staged.py``, "Reserved space"). A reservation fixed at the file's creation
refuses every file that grows past it between two fsyncs: a single ``torch.save`` of more
than 64 MiB. The kernel emits ``IN_MODIFY`` for every passthrough write of the backing file
(``backing_file_write_iter`` -> ``vfs_iter_write`` -> ``fsnotify_modify``), so this thread
can move the reservation on while the writer writes. It may lose the race (a writer that
outruns it is refused at close, as before, never committed torn): soundness is in
``StagedFile.grow``, not here.

Cost: one wake-up per batch of events; after each batch the thread sleeps ``MERGE`` seconds,
so that the kernel merges a writer's further events into one (inotify coalesces an event
identical to the last one queued), bounding the wake-ups whatever the write size.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

MERGE = 0.005  # seconds slept after each batch of events (see the module)
NICE = -10  # this thread's priority (it runs for microseconds, at most 1/MERGE times a second)
_IN_MODIFY = 0x2
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]


def stop_thread(thread: threading.Thread | None, waker_w: int, fds: tuple[int, ...]) -> None:
    """End an inotify thread (this module's, ``lingering.py``'s) that has been told to stop:
    wake it through its pipe ``waker_w``, wait for it, then close its descriptors ``fds``
    (made with the thread: none if it never started)."""
    if thread is None:
        return
    os.write(waker_w, b"x")
    thread.join()
    for fd in fds:
        if fd >= 0:
            os.close(fd)


class ModifyWatch:
    """Calls a file's callback (in this object's thread) after the kernel wrote it.

    ``add(fd, callback)`` watches ``fd``'s inode and returns a handle for ``remove``; -1 when
    inotify is unavailable (then nobody is called: files keep the reservation they have).
    A callback runs outside this object's lock and must not raise."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._lock = threading.Lock()  # guards the map and the thread's start; a leaf
        self._calls: dict[int, Callable[[], None]] = {}  # wd -> callback
        self._inotify = -1
        self._waker_r = self._waker_w = -1
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._failed = False

    def add(self, fd: int, callback: Callable[[], None]) -> int:
        with self._lock:
            if self._stopping or not self._start():
                return -1
            wd = _libc.inotify_add_watch(self._inotify, f"/proc/self/fd/{fd}".encode(), _IN_MODIFY)
            if wd < 0:
                err = ctypes.get_errno()
                log.warning("%s: cannot watch a staged file (%s)", self._what, os.strerror(err))
                return -1
            self._calls[wd] = callback
            return wd

    def remove(self, wd: int) -> None:
        """No more calls for ``wd`` once this returns, except one already running."""
        if wd < 0:
            return
        with self._lock:
            if self._calls.pop(wd, None) is not None and self._inotify >= 0:
                _libc.inotify_rm_watch(self._inotify, wd)  # EINVAL if the inode went: fine

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        stop_thread(thread, self._waker_w, (self._inotify, self._waker_r, self._waker_w))
        with self._lock:
            self._inotify = self._waker_r = self._waker_w = -1
            self._calls.clear()

    def _start(self) -> bool:
        """The inotify instance and thread, made on first use (lock held)."""
        if self._thread is not None:
            return True
        if self._failed:
            return False
        fd = _libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        if fd < 0:
            self._failed = True
            log.warning(
                "%s: no inotify (%s): staged files keep the blocks reserved when they were made",
                self._what, os.strerror(ctypes.get_errno()),
            )  # fmt: skip
            return False
        self._inotify = fd
        self._waker_r, self._waker_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._run, name="datahub-staged-growth", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        try:  # wake up ahead of busy threads on a loaded node: a late watcher refuses a file
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        except OSError:  # no CAP_SYS_NICE: the default priority, more refusals under load
            pass
        poller = select.poll()  # not select.select: a busy daemon's descriptors pass 1023 (review11)
        for fd in (self._waker_r, self._inotify):
            poller.register(fd, select.POLLIN)
        while True:
            poller.poll()
            wds: set[int] = set()
            try:
                while True:
                    buf = os.read(self._inotify, 65536)
                    pos = 0
                    while pos + _EVENT.size <= len(buf):
                        wd, _mask, _cookie, length = _EVENT.unpack_from(buf, pos)
                        wds.add(wd)
                        pos += _EVENT.size + length
            except BlockingIOError:
                pass
            try:
                while os.read(self._waker_r, 4096):
                    pass
            except BlockingIOError:
                pass
            with self._lock:
                if self._stopping:
                    return
                calls = [self._calls[wd] for wd in wds if wd in self._calls]
            for call in calls:
                try:
                    call()
                except Exception:  # the file keeps the reservation it has: refused later, never torn
                    log.warning("%s: growing a staged file's reservation", self._what, exc_info=True)
            time.sleep(MERGE)
