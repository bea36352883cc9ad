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
