"""The short chaos soak (issue 26): bench/soak over the multi-host cluster, fixed seed.

40 seconds of the workload (readers on both nodes through the mount and ``datahub://``,
write-back writers committing a workspace every 15 s, API clients, pack jobs on both
nodes) under every fault kind of bench/soak/schedule.py, overlapping; then the heal and
the independent check. Any broken invariant fails the test with the report (violations
listed); the schedule is the seed's. See docs/reliability.md. Every wait in the soak is a
hang guard, never a timing goal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.report import text
from bench.soak.run import Soak
from bench.soak.schedule import KINDS, make_schedule

pytestmark = [pytest.mark.netns, pytest.mark.fuse]

SEED = 26
SECONDS = 40.0


@pytest.mark.timeout(1800)  # a hang guard: setup, 40 s of faults, heals, retried commits, the check
def test_a_short_soak_keeps_every_promise(tmp_path: Path) -> None:
    soak = Soak(tmp_path / "soak", SEED, SECONDS)
    report = soak.run()
    (tmp_path / "report.txt").write_text(text(report))
    assert report["violations"] == [], text(report)
    assert report["schedule"] == [f.as_dict() for f in make_schedule(SEED, SECONDS)]  # the seed's faults
    assert {f["kind"] for f in report["faults"]} == set(KINDS)
    assert all(f["healed_at"] for f in report["faults"])
    assert set(report["reads"]["by_node"]) == {"a", "b"} and report["reads"]["wrong"] == 0
    assert report["writes"]["acknowledged"] > 0 and report["writes"]["files_checked"] > 0
    assert report["catalog"]["versions_read_end_to_end"] == report["catalog"]["versions"]
    assert report["supervisors"]["pack_jobs_finished"]
    # the writers' files went through the daemon, the default write path (staged files are
    # opt-in: docs/writeback.md, "A full staging disk", found by this soak)
    logs = "".join(p.read_text() for p in (tmp_path / "soak" / "logs").glob("mount-*-ws-*.log"))
    assert "writes go through the daemon" in logs and "writes: passthrough" not in logs
