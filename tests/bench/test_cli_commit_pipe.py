"""bench/scale/cli_commit_pipe.py at 3,000 records: the 10^8 run's path (a generator process
writing a named pipe that ``datahub commit --changes`` reads) runs in the suite."""

from __future__ import annotations

from pathlib import Path

from bench.scale import cli_commit_pipe
from datahub.catalog import open_catalog


def test_a_commit_from_a_named_pipe_reports_its_figures(tmp_path: Path, capsys) -> None:
    figures = cli_commit_pipe.main(["--records", "3000", "--dir", str(tmp_path), "--keep"])
    out = capsys.readouterr().out
    assert "committed big@v1 (3000 records) from 3000 changes: 3000 added, 0 removed, 0 modified" in out
    kept = next(Path(line.split()[1]) for line in out.splitlines() if line.startswith("kept "))
    catalog = open_catalog(f"sqlite:///{kept / 'home' / 'catalog.db'}")
    try:
        version = catalog.resolve("big", 1)
        assert version.record_count == 3000
        first = next(iter(catalog.list_records("big", 1)))
        assert (first.key, first.url, first.meta) == (
            "train/00000/000000000.jpg",
            "s3://bench-bucket/imagenet/train/00000/000000000.jpg",
            {"split": "train"},
        )
    finally:
        catalog.close()
    assert figures["cpu_s"] > 0 and figures["catalog_mib"] > 0 and figures["peak_rss_mb"] > 0
