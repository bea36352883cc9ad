"""Append-only JSON-lines event logs, the soak's history (what each client did and saw).

Why its own log and not the system's: the checker trusts nothing datahub says about itself.
Each workload process appends what it asked and what it got back; an acknowledgement line is
fsync'd before the client goes on, so the history holds every acknowledgement the system
gave even if the client dies right after.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path


class EventLog:
    """One process's log: ``write(event)`` appends a line; ``durable=True`` fsyncs it first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: dict, *, durable: bool = False) -> None:
        event.setdefault("t", time.time())
        os.write(self._fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())
        if durable:
            os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


class Inflight:
    """What a client is doing right now (a small file rewritten in place), so a client stuck
    in a syscall (a hung FUSE read) still shows which operation hangs and since when."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def begin(self, what: str) -> None:
        self._set({"t0": time.time(), "what": what})

    def end(self) -> None:
        self._set({})

    def _set(self, doc: dict) -> None:
        data = json.dumps(doc).encode()
        os.pwrite(self._fd, data.ljust(512)[: max(512, len(data))], 0)

    def close(self) -> None:
        os.close(self._fd)


def read_inflight(path: Path) -> dict:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return {}
    return json.loads(text) if text else {}


def read_events(path: Path) -> Iterator[dict]:
    """Every complete line of a log (a torn last line of a killed writer is skipped)."""
    if not path.exists():
        return
    with open(path, "rb") as fh:
        for line in fh:
            if line.endswith(b"\n"):
                yield json.loads(line)
