"""bench/catalog/relabel.py (suiteB27): the relabel commit of test_million's fixture, small.

The bench runs as its usage line says and counts every patch as a modified record, on the
planner alone and through the SQLite store; and ``patched`` (now built by
``record_from_row``) is the Record ``dataclasses.replace`` made, frozen as before."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from bench.catalog import relabel
from datahub.catalog import Patch, Record
from datahub.catalog.revisions import patched


def test_the_relabel_bench_counts_every_patch_as_modified(capsys: pytest.CaptureFixture[str]) -> None:
    relabel.main(["--records", "3000", "--rounds", "1"])
    out = capsys.readouterr().out
    assert out.startswith("round 1: 300 patches; plan alone ") and "µs CPU/patch" in out


def test_the_relabel_bench_runs_as_its_usage_says() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "bench.catalog.relabel", "--records", "200", "--rounds", "2"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert res.stdout.count("patches; plan alone") == 2, res.stdout + res.stderr


@pytest.mark.parametrize(
    "change",
    [
        Patch("k", labels={"class": "checked"}),
        Patch("k", meta={"a": None, "n": 2}),
        Patch("k", meta={}, labels={"class": None}),
    ],
)
def test_patched_is_the_record_replace_made(change: Patch) -> None:
    record = Record("k", "s3://b/k", "e", 7, "sha256:00", meta={"a": 1}, labels={"class": "c"})
    want = dataclasses.replace(
        record,
        meta={k: v for k, v in {**record.meta, **(change.meta or {})}.items() if v is not None},
        labels={k: v for k, v in {**record.labels, **(change.labels or {})}.items() if v is not None},
    )
    got = patched(record, change)
    assert got == want and type(got) is Record
    assert (got.checksum, got.size, got.url, got.etag) == ("sha256:00", 7, "s3://b/k", "e")
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.size = 8  # type: ignore[misc]
