"""bench/cache/stream_races.py runs its loop at small scale: every run reads the right bytes
and, with the races fixed, makes one request (a preempted thread cannot always be arranged,
so the bench, not this test, counts how often a race happens under load)."""

from __future__ import annotations

from bench.cache import stream_races


def test_the_race_bench_runs_and_reports(capsys) -> None:
    assert stream_races.main(["--runs", "3"]) == 0
    out = capsys.readouterr().out
    assert "of 3 runs with an extra request" in out
