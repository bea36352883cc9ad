"""bench/scale/workspace_commit.py and commit_walk.py (commitmem18, issue 38) at a few
dozen files, in this process (their orchestration is the scale benches' own, run as
subprocesses): the build through the Workspace API, the first commit and the 1 % one, and the
made-up snapshot of commit_walk, each making the version it should."""

from __future__ import annotations

from pathlib import Path

import datahub.workspaces as workspaces
from bench.scale import commit_walk, workspace_commit


def test_workspace_commit_bench_commits_n_files_then_one_percent(tmp_path: Path) -> None:
    home = str(tmp_path / "ws")
    assert workspace_commit.build(home, 200)["files"] == 200
    first = workspace_commit.commit(home, "first")["first"]
    assert first["version"] == [1, 200, 0, 0] and first["peak_rss_anon_mib"] > 0
    assert workspace_commit.commit(home, "second")["second"]["version"] == [2, 0, 0, 2]


def test_commit_walk_bench_commits_the_changed_one_percent(tmp_path: Path) -> None:
    home, real = str(tmp_path / "walk"), workspaces._flushed
    commit_walk.setup(home, 300)
    measured = commit_walk.measure(home, 300)
    assert measured["version"] == [2, 0, 0, 3] and measured["files"] == 300
    assert workspaces._flushed is real  # put back for the tests after this one
