"""What newuser34 met with ``datahub`` on PATH (an installed datahub, or the venv activated):
``datahub --home /data/dh log nope`` said "check `datahub dataset list`", and typed as shown
that read ./var instead: "no catalog at var/catalog.db". The command a message names keeps the
options that said which catalog (``--home``, ``--catalog``, ``--config``), on PATH or not.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.cli.test_newuser25_cli import REPO, SHELL_PATH


def test_a_command_an_error_names_keeps_the_home_when_datahub_is_on_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "datahub").symlink_to(REPO / ".venv" / "bin" / "datahub")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=f"{bin_dir}:{SHELL_PATH}", PYTHONPATH=str(REPO))
    elsewhere = tmp_path / "elsewhere"  # where the user types; no home here
    elsewhere.mkdir()

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120
        )

    home = tmp_path / "team home"
    assert run(f"datahub --home '{home}' init").returncode == 0
    refused = run(f"datahub --home '{home}' log nope")
    assert refused.returncode == 3, refused.stderr
    shown = re.search(r"`([^`]+)`", refused.stderr)
    assert shown is not None and shown[1] == f"datahub --home '{home}' dataset list", refused.stderr
    listed = run(shown[1])
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert not (elsewhere / "var").exists()
