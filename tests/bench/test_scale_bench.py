"""bench/scale/scale.py (issue 38 item 5) at 3,000 records: the code paths of the 10^8 run
(the commits, the CLI's commit, the server's pages, the report) run in the suite."""

from __future__ import annotations

from pathlib import Path

from bench.scale import scale
from datahub.catalog import open_catalog


def test_scale_bench_builds_the_versions_and_reports_every_figure(tmp_path: Path, capsys) -> None:
    report = scale.main(
        [
            "--records",
            "3000",
            "--baseline",
            "1000",
            "--cli-records",
            "200",
            "--repeat",
            "1",
            "--dir",
            str(tmp_path),
            "--keep",
        ]  # fmt: skip
    )
    out = capsys.readouterr().out
    kept = next(Path(line.split()[1]) for line in out.splitlines() if line.startswith("kept "))
    catalog = open_catalog(f"sqlite:///{kept / 'catalog.db'}")
    try:
        big = catalog.resolve("big", 1)
        assert big.record_count == 3000 and catalog.resolve("base", 1).record_count == 1000
        v2 = catalog.resolve("big", 2)
        assert (v2.added, v2.removed, v2.modified) == (6, 6, 18)  # 1 % of 3,000: 3 : 1 : 1
        assert catalog.resolve("cli", "latest").record_count == 200
        assert next(iter(catalog.list_records("big", 1))).key == scale.key_of(0)
    finally:
        catalog.close()
    assert report["rate"] > 0 and report["disk_mib"] > 0 and report["peak_mb"] > 0
    kinds = {what for _, what in report["pages"]}
    assert len(kinds) == 5 and {name for name, _ in report["pages"]} == {"base", "big"}
    assert report["diffed"] == 30 and report["list_rate"] > 0  # v1..v2: 18 modified, 6 removed, 6 added
    for line in (
        "| full commit |",
        "| 1% commit",
        "| `datahub commit --changes`",
        "| catalog on disk |",
        "| list v2 whole",
    ):
        assert line in out


def test_scale_bench_tree_layout_samples_and_keeps_a_catalog_for_the_mount_bench(
    tmp_path: Path, capsys
) -> None:
    """The 10^8 run's options: bench/mount/namespace.py's keys, the generator timed on a
    sample (scaled, and said so), a listing of the first N records, no CLI step; the full
    commits from checked JSON lines (``--via lines``)."""
    report = scale.main(
        ["--records", "2000", "--baseline", "1000", "--layout", "tree", "--generator-records", "500",
         "--list-records", "300", "--cli-records", "0", "--repeat", "1", "--dir", str(tmp_path), "--keep",
         "--via", "lines"]
    )  # fmt: skip
    out = capsys.readouterr().out
    kept = next(Path(line.split()[1]) for line in out.splitlines() if line.startswith("kept "))
    catalog = open_catalog(f"sqlite:///{kept / 'catalog.db'}")
    try:
        keys = [r.key for r in catalog.list_records("big", 1)]
        assert keys[0] == "s00/d000/f00000.jpg" and keys[-1] == "s00/d000/f01999.jpg" and len(keys) == 2000
        assert catalog.resolve("base", 1).record_count == 1000
        assert next(iter(catalog.list_records("big", 1))) == scale.record(0)  # the record the objects hold
    finally:
        catalog.close()
    assert "scaled from 500 records" in out and "| list v2 first (300 records)" in out
    assert "disk peak during the commit" in out and "big v1: 2,000 records handed over" in out
    assert report["disk_mib"] > 0 and "`datahub commit --changes`" not in out
    scale.main(
        ["--records", "10", "--baseline", "10", "--cli-records", "0", "--repeat", "1", "--dir", str(tmp_path)]
    )
    assert scale.key_of(0) == "train/00000/000000000.jpg"  # flat again: the default
