"""FUSE requests by opcode, counted by the kernel's own tracepoint for one mount.

``/sys/kernel/tracing/events/fuse/fuse_request_send`` fires for every request the kernel
sends to a FUSE daemon, over /dev/fuse and over io_uring alike, with the connection (the
mount's device number) and the opcode. A private trace instance (``instances/<name>``)
keeps its own buffer and filter, so other users of tracefs on a shared machine are not
disturbed and do not disturb the count. ``fuse_request_end`` (same instance) gives each
request's answer: its error field, matched to the request by ``unique``. Root only.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
_OPCODE = re.compile(r"fuse_request_send: .*\((\w+)\)")
_SEND = re.compile(r"fuse_request_send: connection \d+ req (\d+) opcode \d+ \((\w+)\)")
_END = re.compile(r"fuse_request_end: connection \d+ req (\d+) len \d+ error (-?\d+)")
_EVENTS = ("fuse_request_send", "fuse_request_end")


def connection_of(mountpoint: str | os.PathLike[str]) -> int:
    """The tracepoint's ``connection``: the mount's dev_t in the kernel's encoding (MKDEV)."""
    dev = os.stat(mountpoint).st_dev
    return (os.major(dev) << 20) | os.minor(dev)


def ensure_tracefs() -> None:
    """Mount tracefs where the tracepoint lives if nothing has: a machine without systemd (a
    fresh CI container) boots with ``/sys/kernel/tracing`` empty, and the counts are what
    the request tests check, so they must not depend on who mounted it before."""
    if not (TRACEFS / "events").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, check=False)
    if not (TRACEFS / "events" / "fuse" / "fuse_request_send").is_dir():
        raise RuntimeError(
            f"no fuse tracepoint under {TRACEFS}: needs root, tracefs (mount -t tracefs nodev {TRACEFS}) "
            "and Linux >= 6.14 with the fuse module loaded"
        )


def available() -> str | None:
    """None if the tracepoint can count here, else why not (a benchmark then prints its
    figures without the request counts; a test fails with the reason instead)."""
    if os.geteuid() != 0:
        return "the fuse tracepoint needs root"
    try:
        ensure_tracefs()
    except RuntimeError as exc:
        return str(exc)
    return None


class FuseRequests:
    """Count the requests one mount's kernel side sends: ``with FuseRequests(mnt) as r: ...;
    r.counts()``; opcode names as the tracepoint prints them (``FUSE_IOCTL``, ...)."""

    def __init__(self, mountpoint: str | os.PathLike[str], name: str | None = None) -> None:
        self.connection = connection_of(mountpoint)
        self.dir = TRACEFS / "instances" / (name or f"datahub-bench-{os.getpid()}")
        self._counts: Counter[str] = Counter()
        self._answers: Counter[tuple[str, int]] = Counter()
        self.lost = 0

    def __enter__(self) -> FuseRequests:
        ensure_tracefs()
        self.dir.mkdir(exist_ok=True)
        (self.dir / "buffer_size_kb").write_text("8192\n")
        for name in _EVENTS:
            (self.dir / "events" / "fuse" / name / "filter").write_text(f"connection == {self.connection}\n")
        (self.dir / "trace").write_text("")  # empty the buffer
        for name in _EVENTS:
            (self.dir / "events" / "fuse" / name / "enable").write_text("1\n")
        return self

    def __exit__(self, *exc: object) -> None:
        for name in _EVENTS:
            (self.dir / "events" / "fuse" / name / "enable").write_text("0\n")
        text = (self.dir / "trace").read_text()
        self._counts = Counter(m.group(1) for m in map(_OPCODE.search, text.splitlines()) if m)
        sent = {m.group(1): m.group(2) for m in map(_SEND.search, text.splitlines()) if m}
        self._answers = Counter(
            (sent.get(m.group(1), "?"), int(m.group(2))) for m in map(_END.search, text.splitlines()) if m
        )
        for stats in (self.dir / "per_cpu").glob("cpu*/stats"):
            for line in stats.read_text().splitlines():
                if line.startswith("overrun:"):
                    self.lost += int(line.split()[1])
        self.dir.rmdir()

    def counts(self) -> Counter[str]:
        if self.lost:
            raise RuntimeError(f"the trace buffer lost {self.lost} events: count fewer files")
        return self._counts

    def answers(self) -> Counter[tuple[str, int]]:
        """(opcode, error of the answer) -> how many requests were answered so (``"?"``:
        sent before the count began)."""
        self.counts()
        return self._answers


def per_file(counts: Counter[str], files: int) -> str:
    """``OPEN 1.00 IOCTL 1.00 ...`` (requests per file by opcode; ``-`` when none)."""
    parts = [
        f"{op.removeprefix('FUSE_')} {n / files:.2f}" for op, n in sorted(counts.items(), key=lambda x: -x[1])
    ]
    return " ".join(parts) or "-"
