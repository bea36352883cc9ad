"""What newuser71 met serving beyond loopback in local mode, as docs/quickstart.md's "Serving
beyond this machine" begins: ``.venv/bin/datahub --home H serve --host 0.0.0.0`` was refused
with "... and create tokens with 'datahub token create'", a bare ``datahub`` (not on PATH after
``make run``: "command not found"), without the home and without the ``--principal`` it needs.
It now names the command as this user runs it, as LabelX's refusal does."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.test_newuser25_cli import REPO, shell_runner


def test_the_token_command_a_local_mode_refusal_names_runs_as_typed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = shell_runner(elsewhere)

    d = f"{REPO}/.venv/bin/datahub --home '{tmp_path / 'a home'}'"
    assert run(f"{d} init").returncode == 0
    refused = run(f"{d} serve --host 0.0.0.0 --port 8")  # refused before anything listens
    assert refused.returncode == 2 and "refusing local mode" in refused.stderr, refused.stderr
    shown = re.search(r"create tokens with `([^`]+)`", refused.stderr)
    assert shown is not None, refused.stderr
    made = run(shown[1].replace("NAME", "alice"))  # typed as shown, the principal filled in
    assert made.returncode == 0, f"{shown[1]!r}: {made.stderr}"
    listed = run(f"{d} token list")
    assert listed.returncode == 0 and "alice" in listed.stdout, listed.stdout + listed.stderr
    assert not (elsewhere / "var").exists()
