"""FUSE requests by opcode sent to one mount, from the kernel's ``fuse_request_send``
tracepoint, in a private tracefs instance (other users of the tracer are not disturbed).

    with FuseRequests(mountpoint) as reqs:
        ...                      # the workload
    reqs.counts                  # {"FUSE_WRITE": 512, "FUSE_FLUSH": 32, ...}

Needs root and tracefs (mounted at /sys/kernel/tracing if it is not). ``available()``
says why not, and a benchmark then prints the figures without the request counts.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections import Counter
from pathlib import Path

TRACING = Path("/sys/kernel/tracing")
_LINE = re.compile(r"connection (\d+) req \d+ opcode \d+ \((\w+)\)")


def available() -> str | None:
    """None if the tracepoint can be used, else why not."""
    if not (TRACING / "events").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACING)], capture_output=True)
    if not (TRACING / "events" / "fuse" / "fuse_request_send").is_dir():
        return "no fuse_request_send tracepoint (tracefs not mounted, or a kernel before 6.x)"
    if os.geteuid() != 0:
        return "tracing needs root"
    return None


def mount_connection(mountpoint: str) -> int:
    """The tracepoint's ``connection`` of a mount: the minor of its anonymous device."""
    target = os.path.abspath(mountpoint)
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            if fields[4] == target:
                return int(fields[2].split(":")[1])
    raise FileNotFoundError(f"{mountpoint} is not mounted")


class FuseRequests:
    def __init__(self, mountpoint: str) -> None:
        self.connection = mount_connection(mountpoint)
        self.instance = TRACING / "instances" / f"datahub-bench-{uuid.uuid4().hex[:8]}"
        self.counts: Counter[str] = Counter()

    def __enter__(self) -> FuseRequests:
        self.instance.mkdir()
        (self.instance / "buffer_size_kb").write_text("65536")
        (self.instance / "events" / "fuse" / "fuse_request_send" / "enable").write_text("1")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            (self.instance / "events" / "fuse" / "fuse_request_send" / "enable").write_text("0")
            for line in (self.instance / "trace").read_text().splitlines():
                m = _LINE.search(line)
                if m and int(m.group(1)) == self.connection:
                    self.counts[m.group(2)] += 1
        finally:
            self.instance.rmdir()
