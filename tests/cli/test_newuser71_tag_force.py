"""What newuser71 met moving a tag as the quickstart's ``$D tag sample golden 1`` set it, after a
LabelX commit made v2: ``$D tag sample golden 2`` said "to move it to v2: datahub tag sample
golden 2 --force", the only command a refusal named outside backticks, so it was not written as
this user runs datahub: typed as shown it was "datahub: command not found" (the venv is not on
PATH), and without the home the refused command named. It is now the command as typed."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.test_newuser25_cli import REPO, shell_runner


def test_the_force_a_tag_refusal_names_runs_as_typed(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    run = shell_runner(workdir)

    d = f"{REPO}/.venv/bin/datahub --home '{tmp_path / 'a home'}'"
    pets = tmp_path / "pets"
    pets.mkdir()
    (pets / "a.jpg").write_bytes(b"a")
    assert run(f"{d} import {pets} --to pets").returncode == 0
    (pets / "b.jpg").write_bytes(b"b")
    assert run(f"{d} import {pets} --to pets").returncode == 0
    assert run(f"{d} tag pets golden 1").returncode == 0
    refused = run(f"{d} tag pets golden 2")
    assert refused.returncode == 4, refused.stderr
    shown = re.search(r"to move it to v2: (.+)$", refused.stderr.strip())
    assert shown is not None, refused.stderr
    moved = run(shown[1].strip("`"))  # typed as shown
    assert moved.returncode == 0, f"{shown[1]!r}: {moved.stderr}"
    assert "pets@golden -> v2 (moved from v1)" in moved.stdout
