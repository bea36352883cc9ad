"""Ctrl-C caught while ``datahub commit`` is about to wait for its change set's next line.

tests/cli/test_interrupted.py hung once under load: the commit did not exit for 120 s after
its SIGINT, the writer holding the pipe open. CPython runs the Python handler of a signal only
between bytecodes or at an EINTR; a SIGINT whose C handler ran in the few microseconds between
two reads of one ``readline`` (the first returned the line, the second waits for the next) left
the second read blocked until the writer wrote again or closed.

Here that interleaving is forced: the commit runs in the main thread of a child process, and a
second thread of it catches the SIGINT itself (``raise`` in that thread: the C handler runs
there, as it ran before the blocking read in the hang) once the main thread waits on the pipe.
The command must stop without more input, exit 130 and say it was interrupted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.cli.conftest import ended, start_interruptible

GUARD = 60.0  # a hang guard, never a timing goal

CHILD = r"""
import os, signal, sys, threading
from datahub.cli.main import main

home, fifo = sys.argv[1], sys.argv[2]
main_tid = threading.get_native_id()

def is_the_pipe(fd):
    try:  # a descriptor listed may be closed before it is resolved (the catalog's own files)
        return os.path.realpath(f"/proc/self/fd/{fd}") == fifo
    except OSError:
        return False

def waits_on_the_pipe():
    fds = [int(fd) for fd in os.listdir("/proc/self/fd") if is_the_pipe(fd)]
    try:
        with open(f"/proc/self/task/{main_tid}/syscall") as fh:
            call = fh.read().split()
    except OSError:
        return False
    # blocked in read(2) of the pipe (0), or in poll (7) / ppoll (271) once it is open
    return bool(fds) and (
        (call[0] == "0" and int(call[1], 16) in fds) or call[0] in ("7", "271")
    )

def catch_sigint():
    event = threading.Event()
    while not waits_on_the_pipe():
        event.wait(0.01)
    # said first: printed after, it raced the main thread's own last line (a fresh clone's run)
    print("caught", file=sys.stderr, flush=True)
    signal.raise_signal(signal.SIGINT)  # this thread's: the main thread's wait is not interrupted

threading.Thread(target=catch_sigint, daemon=True).start()
sys.exit(main(["--home", home, "commit", "pets", "--changes", fifo]))
"""


def test_a_sigint_caught_before_the_change_sets_read_waits_still_stops_the_commit(tmp_path: Path) -> None:
    fifo = tmp_path / "changes.jsonl"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # a writer from the start: the child's open does not wait
    try:
        os.write(writer, b'{"op": "delete", "key": "cat/1.jpg"}\n')  # the first line is there; no more comes
        proc = start_interruptible([sys.executable, "-c", CHILD, str(tmp_path / "var"), str(fifo)], tmp_path)
        # the writer stays open: no EOF ends the read
        out, err = ended(proc, GUARD, "the commit went on waiting for input after its SIGINT")
    finally:
        os.close(writer)
    assert "caught" in err, err
    assert proc.returncode == 130, err
    assert "datahub commit interrupted (Ctrl-C)" in err.strip().splitlines()[-1], err
    assert "Traceback" not in err, err
