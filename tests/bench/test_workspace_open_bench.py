"""bench/scale/workspace_open.py and workspace_flush.py --gc (recover20, issues 38/41) at 200
files, in this process (their orchestration, a subprocess per side, is the harness's own):
the build, the measured open with what the packs' live sets hold, every file unlinked, and the
measured collection of their garbage, each doing what it says."""

from __future__ import annotations

from pathlib import Path

from bench.scale import workspace_flush, workspace_open
from datahub.writeback.flusher import Flusher


def test_the_open_and_the_collection_benches_measure_what_they_say(tmp_path: Path) -> None:
    home, real_gc = str(tmp_path / "ws"), Flusher.gc
    assert workspace_flush.prepare(home, 200)["files"] == 200
    opened = workspace_open.measure_open(home, 200)
    assert opened["dirty"] and opened["pack_members_live"] == 200  # one packed chunk a file
    assert opened["open_peak_rss_anon_mib"] >= opened["rss_anon_without_live_sets_mib"] > 0
    assert workspace_flush.unlink_all(home, 200)["garbage_listed"] == 200
    collected = workspace_flush.collect(home, 200)
    assert (collected["gc_deleted"], collected["garbage_left"]) == (200, 0)
    assert collected["gc_peak_rss_anon_mib"] > 0
    assert Flusher.gc is real_gc  # put back for the tests after this one
