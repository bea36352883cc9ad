"""What newuser71 met with ``derive``: ``ls`` and ``export`` take ``--filter``, ``derive`` only
``--where``, so ``derive pets --filter …`` as the other commands taught was answered "the
following arguments are required: --where"; and a filter matching nothing in an existing target
named 'datahub commit --changes' outside backticks, so not as this user runs datahub (after
``make run`` no datahub is on PATH: "command not found" typed as shown)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.test_newuser25_cli import REPO, shell_runner


def test_derive_takes_filter_and_names_commit_as_typed(tmp_path: Path) -> None:

    run = shell_runner(tmp_path)

    d = f"{REPO}/.venv/bin/datahub --home '{tmp_path / 'a home'}'"
    pets = tmp_path / "pets"
    pets.mkdir()
    (pets / "a.jpg").write_bytes(b"a")
    (pets / "b.jpg").write_bytes(b"b")
    assert run(f"{d} import {pets} --to pets").returncode == 0
    made = run(f"{d} derive pets --filter key=a.jpg --to one")
    assert made.returncode == 0, made.stderr
    assert [line.split()[0] for line in run(f"{d} ls one").stdout.splitlines()] == ["a.jpg"]
    older = run(f"{d} derive pets --where key=b.jpg --to two")  # the older name still works
    assert older.returncode == 0, older.stderr
    refused = run(f"{d} derive pets --filter key=nope.jpg --to one")
    assert refused.returncode != 0
    shown = re.search(r"`([^`]*commit --changes)`", refused.stderr)
    assert shown is not None, refused.stderr
    assert shown[1].startswith(f"{REPO}/.venv/bin/datahub --home "), shown[1]
    helped = run(f"{shown[1].removesuffix(' --changes')} --help")  # the program as shown runs
    assert helped.returncode == 0, helped.stderr
