"""Per-process CPU accounting for a test run (``bench/startup/suite_account.py`` puts this
directory on PYTHONPATH): every Python process that starts appends one line to
``$DATAHUB_ACCOUNT_LOG`` when it exits, with its command line, CPU seconds and wall seconds,
so a run can say how many ``datahub`` processes it started and what they cost.

A process killed by a signal it does not handle (SIGKILL, a default SIGTERM) writes no exit
line; its start line still counts it. Writes are single ``O_APPEND`` lines, so processes
running at once do not interleave. Nothing happens without ``$DATAHUB_ACCOUNT_LOG``.
"""

import atexit
import json
import os
import time

_LOG = os.environ.get("DATAHUB_ACCOUNT_LOG")


def _write(record: dict) -> None:
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _argv() -> list[str]:
    with open("/proc/self/cmdline", "rb") as fh:
        return [part.decode(errors="replace") for part in fh.read().split(b"\0") if part]


if _LOG:
    _start = time.monotonic()
    _pid = os.getpid()
    _cmd = _argv()
    _write({"event": "start", "pid": _pid, "ppid": os.getppid(), "argv": _cmd})

    def _exit() -> None:
        if os.getpid() != _pid:  # a forked child that never exec'd runs atexit too
            return
        t = os.times()
        _write({"event": "exit", "pid": _pid, "argv": _cmd, "cpu": t.user + t.system,
                "children_cpu": t.children_user + t.children_system,
                "wall": time.monotonic() - _start})  # fmt: skip

    atexit.register(_exit)
