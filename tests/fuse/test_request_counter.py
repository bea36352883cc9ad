"""mount_sys.request_counter: it moves with the serving thread's reads (each request the FUSE
loop reads from /dev/fuse) and with the requests pyfuse3's C threads answer, not with the
reads of the threads that look at it."""

from __future__ import annotations

import os
import threading

from fuse_adapter.fuse_ops import c_requests
from fuse_adapter.mount_sys import request_counter


def test_counts_the_reads_of_the_thread_that_made_it_only() -> None:
    made: list = []
    r, w = os.pipe()
    ready, go, done, leave = (threading.Event() for _ in range(4))

    def loop() -> None:  # stands in for the FUSE loop: made here, reads here
        made.append(request_counter(lambda: 0))
        ready.set()
        go.wait(30)
        os.read(r, 1)
        os.read(r, 1)
        done.set()
        leave.wait(30)  # stays alive so that its /proc entry does too

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    assert ready.wait(30)
    count = made[0]
    before = count()
    assert count() == before  # looking (reading /proc here) is not counted
    fd = os.open("/proc/self/stat", os.O_RDONLY)
    os.read(fd, 10)  # another thread's read: not counted
    os.close(fd)
    assert count() == before
    os.write(w, b"ab")
    go.set()
    assert done.wait(30)
    assert count() == before + 2
    leave.set()
    os.close(r)
    os.close(w)


def test_counts_the_requests_answered_in_c_too() -> None:
    """With fastloop or io_uring (the default) the loop's thread reads nothing for a warm
    open: pyfuse3's C threads answer it, and their counters move instead."""
    answered = [0]
    made: list = []
    ready, leave = threading.Event(), threading.Event()

    def loop() -> None:  # the serving thread: it reads nothing here
        made.append(request_counter(lambda: answered[0]))
        ready.set()
        leave.wait(30)

    threading.Thread(target=loop, daemon=True).start()
    assert ready.wait(30)
    count = made[0]
    before = count()
    assert count() == before
    answered[0] += 3  # e.g. OPEN, the isatty() ioctl and RELEASE of one warm open
    assert count() == before + 3
    assert isinstance(c_requests(), int)  # pyfuse3's counters (no mount here: unchanged)
    leave.set()
