"""The fault schedule: made up front from the seed alone, so a seed names one run's faults.

Why up front: a soak that finds a defect is only useful if the same faults can be replayed
(FoundationDB's and Jepsen's lesson). The schedule is a pure function of (seed, duration,
kinds); the run prints it in its report before the check. Faults of different kinds and
targets overlap freely; two faults of the same kind on the same target never do (the second
would find nothing to break, and the first's heal would end the second early).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

NODES = ("a", "b")

#: kind -> (targets, shortest, longest seconds it lasts before its heal)
KINDS: dict[str, tuple[tuple[str, ...], float, float]] = {
    "mount_kill": (NODES, 1.0, 4.0),  # kill -9 of a node's read-only mount daemon, then remount
    "workspace_kill": (NODES, 1.0, 4.0),  # kill -9 of a node's workspace mount daemon, then remount
    "service_kill": (("service",), 1.0, 5.0),  # kill -9 of `datahub serve`, then start it again
    "pack_worker_kill": (NODES, 0.5, 3.0),  # kill -9 of a node's pack-worker, then start another
    "origin_503": (("origin",), 1.0, 6.0),  # every origin request answered 503 SlowDown
    "origin_stall": (("origin",), 2.0, 8.0),  # origin answers held 8 s (past the nodes' read timeout)
    "origin_latency": (("origin",), 2.0, 10.0),  # origin answers 300 ms late
    "partition": (NODES, 1.0, 5.0),  # a node's veth down
    "ssd_full": (NODES, 2.0, 8.0),  # a node's disk (cache, journal) filled to the last byte
    "osd_stall": (("ceph",), 1.0, 4.0),  # the OSD frozen (SIGSTOP), then resumed (SIGCONT)
    "catalog_full": (("service",), 1.0, 5.0),  # the service's disk (its SQLite catalog) full
}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the workload started
    kind: str
    target: str
    seconds: float  # how long it lasts before it is healed

    @property
    def until(self) -> float:
        return self.at + self.seconds

    def as_dict(self) -> dict:
        return asdict(self)


def make_schedule(
    seed: int, duration: float, kinds: tuple[str, ...] = tuple(KINDS), mean_gap: float = 6.0
) -> list[Fault]:
    """Faults for a run of ``duration`` seconds, sorted by start; each ends by ``duration - 2``.

    Arrivals are a Poisson process (mean gap ``mean_gap`` s) after a first round that starts
    every kind once in a random order, so even a short run sees each kind.
    """
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
    rng = random.Random(seed)
    end = duration - 2.0
    busy: dict[tuple[str, str], float] = {}  # (kind, target) -> when its current fault ends
    out: list[Fault] = []

    def place(at: float, kind: str) -> None:
        targets, lo, hi = KINDS[kind]
        at = round(at, 2)  # the fault's own start, so "ends before the next starts" is exact
        free = [t for t in targets if busy.get((kind, t), -1.0) < at]
        if not free:
            return
        target = rng.choice(free)
        seconds = round(rng.uniform(lo, hi), 2)
        if at + seconds > end:
            return
        busy[(kind, target)] = at + seconds
        out.append(Fault(at, kind, target, seconds))

    first = list(kinds)
    rng.shuffle(first)
    at = 1.0
    for kind in first:
        at += rng.uniform(0.5, 2.5)
        place(at, kind)
    while True:
        at += rng.expovariate(1.0 / mean_gap)
        if at >= end:
            break
        place(at, rng.choice(kinds))
    return sorted(out, key=lambda f: (f.at, f.kind, f.target))
