"""``datahub commit --changes`` says how far it got while a long change set is read.

A 10^8-line commit runs for many minutes in one transaction; without a line now and then
it cannot be told from a hung one. Short commits print nothing (``every`` seconds first).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from datahub.catalog.put_lines import CHUNK_LINES
from datahub.cli.commit_cmd import ReadProgress, read_changes


def _put(i: int) -> str:
    key = f"train/{i:06d}.jpg"
    record = {"key": key, "url": f"s3://b/{key}", "etag": "e", "size": i}
    return json.dumps({"op": "put", "record": record}, separators=(",", ":")) + "\n"


def test_reading_a_change_set_reports_lines_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "changes.jsonl"
    text = "".join(_put(i) for i in range(2 * CHUNK_LINES + 7))
    path.write_text(text)
    err = io.StringIO()
    progress = ReadProgress(str(path), err, every=0.0)
    changes = list(read_changes(str(path), progress))
    assert sum(len(c) for c in changes) == 2 * CHUNK_LINES + 7  # plain puts: chunks of lines
    assert (progress.lines, progress.chars) == (2 * CHUNK_LINES + 7, len(text))
    lines = err.getvalue().splitlines()
    assert len(lines) == 3 and all(line.startswith("commit: ") for line in lines)
    assert f"{2 * CHUNK_LINES + 7:,} lines read from {path}" in lines[-1] and " of " in lines[-1]


def test_a_short_commit_prints_nothing(tmp_path: Path) -> None:
    path = tmp_path / "changes.jsonl"
    path.write_text(_put(1))
    err = io.StringIO()
    assert len(list(read_changes(str(path), ReadProgress(str(path), err)))) == 1
    assert err.getvalue() == ""
