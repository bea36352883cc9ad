"""bench/scale/small_commit.py (issue 38 item 3) on a 3,000-record catalog of the kept
catalog's shape: the 1 % commit it makes at 10^8, with and without reading pages ahead, runs
in the suite, and each run changes keys no run before changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scale import scale, small_commit
from datahub.catalog import Put, open_catalog


def test_small_commit_bench_commits_a_spread_version_on_the_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scale, "key_of", scale.key_tree)  # restored after the test
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        catalog.create_dataset("big")
        catalog.commit("big", (Put(scale.record(i)) for i in range(3000)))
    finally:
        catalog.close()
    for threads in ("0", "2"):
        small_commit.main(
            ["--catalog", str(tmp_path), "--records", "3000", "--evict", "--read-ahead-threads", threads]
        )
    out = capsys.readouterr().out
    assert "v2: 30 changes (6 added, 6 removed, 18 modified)" in out
    assert "v3: 30 changes (6 added, 6 removed, 18 modified)" in out
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        assert catalog.resolve("big", "latest").record_count == 3000
        changed = [e.key for e in catalog.diff("big", 1, 3)]
        assert len(changed) == 60 == len(set(changed))  # v3 touched no key v2 touched
    finally:
        catalog.close()
