"""fuse_ops.request_counter: it moves with the serving thread's reads (each request the FUSE
loop reads from /dev/fuse), not with the reads of the threads that look at it."""

from __future__ import annotations

import os
import threading

from fuse_adapter.fuse_ops import request_counter


def test_counts_the_reads_of_the_thread_that_made_it_only() -> None:
    made: list = []
    r, w = os.pipe()
    ready, go, done, leave = (threading.Event() for _ in range(4))

    def loop() -> None:  # stands in for the FUSE loop: made here, reads here
        made.append(request_counter())
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
