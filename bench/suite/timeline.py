"""A pytest plugin that writes when each test ran and on which xdist worker: the suite's timeline.

Why: ``make test`` hands whole files (and the directories of SHARED_PACKAGES) to two workers;
its wall time is the later worker's end, so what to cut is only seen per worker: which unit
ran where, when, and how long one worker sat idle while the other finished. ``--durations``
gives none of that. Load it on a whole run without changing the run::

    DATAHUB_SUITE_TIMELINE=var/timeline.jsonl .venv/bin/python -m pytest -p bench.suite.timeline \\
        -q -n 2 --dist loadfile -m "not exclusive"
    .venv/bin/python -m bench.suite.timeline_report var/timeline.jsonl

Each process (controller, workers) appends JSON lines to the file: ``{"w": worker, "ev":
"start"|"collected"|"begin"|"test"|"internal"|"end", "t": wall time, ...}``; a ``begin`` line
names a test as it starts, a ``test`` line has the node id, its start and end (setup to
teardown), and its CPU seconds (the worker's user+system, children waited for included); when
the process runs in a cpuacct cgroup of its own (cgroup v1: ``/proc/self/cgroup`` names one
other than ``/``), also ``tree``: that cgroup's CPU seconds over the test, which counts what
``cpu`` cannot: ``--background`` mount daemons (re-parented away from pytest), a session's moto
or Ceph server (waited for only at the session's end) and every process a test left running.
It is the whole cgroup's, so it is a test's own only in a run of one process (``-n 0``); an
``internal`` line has the last lines of a pytest internal error in that process. After a
failed run, ``timeline_report --failure`` prints the tests that began and never ended and the
internal errors: what a crash's ``assert not crashitem`` does not say. Lines are written whole with one ``write`` on an ``O_APPEND`` file, so
the workers' lines never interleave.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

ENV = "DATAHUB_SUITE_TIMELINE"


def cgroup_usage_file() -> str | None:
    """The cpuacct.usage of this process's cpuacct cgroup (v1), when that cgroup is not the root."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(",") and path != "/":
            for root in ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"):
                usage = f"{root}{path}/cpuacct.usage"
                if os.path.exists(usage):
                    return usage
    return None


def _tree_cpu(usage: str | None) -> float | None:
    if usage is None:
        return None
    with open(usage) as f:
        return int(f.read()) / 1e9


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Timeline:
    def __init__(self, path: str, worker: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.worker = worker
        self.started: dict[str, tuple[float, float, float | None]] = {}
        self.usage = cgroup_usage_file()

    def write(self, ev: str, **fields: object) -> None:
        line = json.dumps({"w": self.worker, "ev": ev, "t": round(time.time(), 3), **fields})
        os.write(self.fd, (line + "\n").encode())

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.write("collected", n=len(session.items), cpu=round(_cpu(), 2))

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if self.worker != "controller":  # an xdist controller only relays its workers' reports
            self.started[nodeid] = (time.time(), _cpu(), _tree_cpu(self.usage))
            self.write("begin", id=nodeid)  # a test that never ends (a hang, a crash) still shows

    def pytest_internalerror(self, excrepr: object) -> None:
        """A worker's internal error ends its session with tests left (xdist then reports only
        ``assert not crashitem``): its last lines are kept for the failure digest."""
        text = str(excrepr).strip().splitlines()
        self.write("internal", lines=text[-12:])

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if nodeid in self.started:
            t0, cpu0, tree0 = self.started.pop(nodeid)
            fields: dict[str, object] = {"id": nodeid, "t0": round(t0, 3), "cpu": round(_cpu() - cpu0, 2)}
            if tree0 is not None:
                fields["tree"] = round(_tree_cpu(self.usage) - tree0, 2)
            self.write("test", **fields)

    def pytest_sessionfinish(self) -> None:
        self.write("end", cpu=round(_cpu(), 2))
        os.close(self.fd)


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    if hasattr(config, "workerinput"):
        worker = config.workerinput["workerid"]
    else:  # an xdist controller, or a run without -n (then it runs the tests itself)
        worker = "controller" if config.getoption("numprocesses", None) else "main"
    timeline = Timeline(path, worker)
    timeline.write("start")
    config.pluginmanager.register(timeline, "datahub-suite-timeline")
