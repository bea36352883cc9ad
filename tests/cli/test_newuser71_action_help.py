"""What newuser71 met typing ``.venv/bin/datahub cache`` (or ``dataset``, ``token``) after
``make run``: the refusal named `datahub cache --help`, which typed as shown is "datahub:
command not found" without the venv on PATH. It names the program as it was typed now."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.cli.test_newuser25_cli import REPO, SHELL_PATH


def test_the_help_a_command_without_its_action_names_runs_as_typed(tmp_path: Path) -> None:
    """``.venv/bin/datahub cache`` said "(`datahub cache --help` says what each does)": with no
    datahub on PATH (after ``make run``), "command not found" as typed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    for command in ("cache", "dataset", "token"):
        refused = run(f"{REPO}/.venv/bin/datahub {command}")
        assert refused.returncode == 2, refused.stderr
        shown = re.search(r"\(`([^`]+)` says what each does\)", refused.stderr)
        assert shown is not None, refused.stderr
        helped = run(shown[1])  # typed as shown
        assert helped.returncode == 0, f"{shown[1]!r}: {helped.stderr}"
        assert helped.stdout.startswith(f"usage: datahub {command} "), helped.stdout
