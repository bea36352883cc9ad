"""The fault injectors: each kind breaks one thing and returns how to heal it.

Each scheduled fault runs in a thread of its own (so faults overlap freely): wait for its
time, break, wait its seconds, heal. A heal is retried until it holds (a remount during a
partition cannot load its catalog; it succeeds once the cable is back), within a guard.
What happened is recorded per fault: when it was applied and healed, and what it hit.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.latency_proxy import LatencyProxy
from bench.soak.schedule import Fault
from bench.soak.supervise import GUARD, Mount, PackJobs
from tests.multihost.cluster import Cluster

STALL_MS = 8000  # an origin "stall": answers held past the nodes' 3 s read timeout
SPIKE_MS = 300  # a latency spike


@dataclass
class Outcome:
    fault: Fault
    applied_at: float = 0.0  # seconds after the workload started
    healed_at: float = 0.0
    hit: str = ""  # what it broke ("nothing running" when there was nothing to break)
    error: str = ""  # a heal that did not hold within the guard

    def as_dict(self) -> dict:
        return {**self.fault.as_dict(), "applied_at": self.applied_at, "healed_at": self.healed_at,
                "hit": self.hit, "error": self.error}  # fmt: skip


@dataclass
class Targets:
    """Everything a fault can hit."""

    cluster: Cluster
    proxy: LatencyProxy
    mounts: dict[str, Mount]
    workspaces: dict[str, Mount]
    pack: PackJobs
    homes: dict[str, Path]  # small file systems: a node's (cache, journal), the service's (catalog)
    osd_pid: int
    service_lock: threading.Lock = field(default_factory=threading.Lock)


def _fill(home: Path, name: str) -> Path:
    """Take every free byte of ``home``'s file system with one file; returns it."""
    ballast = home / f".soak-ballast-{name}"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        st = os.statvfs(home)
        free = st.f_bavail * st.f_frsize
        if free > 0:
            try:
                os.posix_fallocate(fd, 0, free)
            except OSError:
                pass  # a race with a writer: what was taken stays taken
    finally:
        os.close(fd)
    return ballast


class Injector:
    def __init__(self, targets: Targets, t0: float) -> None:
        self.t = targets
        self.t0 = t0
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def apply(self, fault: Fault) -> tuple[str, Callable[[], None]]:
        """Break it; returns (what was hit, the heal)."""
        t, kind, target = self.t, fault.kind, fault.target
        if kind == "mount_kill":
            killed = t.mounts[target].kill9()
            return ("mount daemon" if killed else "nothing running"), lambda: t.mounts[target].heal(killed)
        if kind == "workspace_kill":
            killed = t.workspaces[target].kill9()
            return ("workspace daemon" if killed else "nothing running"), lambda: t.workspaces[target].heal(
                killed
            )
        if kind == "service_kill":
            with t.service_lock:
                t.cluster.kill_service()

            def restart() -> None:
                with t.service_lock:
                    t.cluster.start_service()

            return "datahub serve", restart
        if kind == "pack_worker_kill":
            hit = t.pack.kill9(target)
            return ("pack-worker" if hit else "nothing running"), lambda: t.pack.heal(target)
        if kind == "origin_503":
            t.proxy.inject(f"fail {fault.seconds}")
            return "origin", lambda: None
        if kind == "origin_stall":
            t.proxy.inject(f"latency {STALL_MS} {fault.seconds}")
            return "origin", lambda: None
        if kind == "origin_latency":
            t.proxy.inject(f"latency {SPIKE_MS} {fault.seconds}")
            return "origin", lambda: None
        if kind == "partition":
            host = getattr(t.cluster, target).host
            host.link(up=False)
            return "veth", lambda: host.link(up=True)
        if kind in ("ssd_full", "catalog_full"):
            ballast = _fill(t.homes[target], f"{fault.at}")
            return "file system", lambda: ballast.unlink(missing_ok=True)
        if kind == "osd_stall":
            os.kill(t.osd_pid, signal.SIGSTOP)
            return "ceph-osd", lambda: os.kill(t.osd_pid, signal.SIGCONT)
        raise ValueError(f"unknown fault kind {kind!r}")

    def run_one(self, fault: Fault) -> None:
        out = Outcome(fault)
        with self._lock:
            self.outcomes.append(out)
        delay = self.t0 + fault.at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        out.applied_at = self.now()
        try:
            out.hit, heal = self.apply(fault)
        except Exception as exc:  # a fault that could not be applied is reported, not fatal
            out.error = f"apply: {type(exc).__name__}: {exc}"
            return
        time.sleep(fault.seconds)
        deadline = time.monotonic() + GUARD
        while True:
            try:
                heal()
                break
            except Exception as exc:  # retried until the guard: other faults may still hold it down
                if time.monotonic() > deadline:
                    out.error = f"heal: {type(exc).__name__}: {exc}"
                    return
                time.sleep(1.0)
        out.healed_at = self.now()

    def start(self, schedule: list[Fault]) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self.run_one, args=(f,), name=f"fault-{f.kind}-{f.at}", daemon=True)
            for f in schedule
        ]
        for th in threads:
            th.start()
        return threads
