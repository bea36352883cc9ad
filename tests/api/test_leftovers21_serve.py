"""``datahub serve --workers N`` and SIGHUP: a stop, as for one process (docs/cli.md).

The parent left SIGHUP at its default: it died by the signal (no "stopped", status -1) and
its workers stopped only by their parent-death signal. Real processes, the fixture of
tests/api/test_workers.py.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.api.test_workers import GUARD, Served, alive, children, served, wait_for

__all__ = ["served"]  # the fixture, imported for this module's tests


@pytest.mark.parametrize("group", [False, True], ids=["parent only", "terminal closed (the group)"])
def test_sighup_stops_every_worker_and_the_parent_exits_0(served: Served, group: bool):
    workers = children(served.proc.pid)
    assert len(workers) == 2
    if group:  # a closed terminal: every process of the session gets SIGHUP
        os.killpg(served.proc.pid, signal.SIGHUP)
    else:
        served.proc.send_signal(signal.SIGHUP)
    assert served.proc.wait(GUARD) == 0
    assert wait_for(lambda: not any(alive(w) for w in workers))
    err = served.proc.stderr.read()
    assert "stopped" in err and "Traceback" not in err, err
