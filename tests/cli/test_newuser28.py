"""What newuser28 met walking the README and the quickstart (docs/quickstart.md)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.servers import free_port

REPO = Path(__file__).resolve().parents[2]
SHELL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # no .venv/bin on it


def test_serve_names_labelx_create_user_as_the_user_runs_datahub(tmp_path: Path) -> None:
    """``.venv/bin/datahub --home var serve --auth`` (the quickstart's "Serving beyond this
    machine") said "users: datahub --home … labelx create-user NAME --role admin": after
    ``make run`` that line, typed, is "datahub: command not found"."""
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))
    port = str(free_port())
    argv = [".venv/bin/datahub", "--home", "var", "serve", "--auth", "--host", "127.0.0.1", "--port", port]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        said = next(line for line in proc.stderr if line.startswith("LabelX on "))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    shown = re.search(r"`([^`]+)`", said)
    want = f".venv/bin/datahub --home {tmp_path / 'var'} labelx create-user NAME --role admin"
    assert shown is not None and shown[1] == want, said
    typed = subprocess.run(
        ["bash", "-c", shown[1].replace("NAME", "ann")],
        cwd=tmp_path, env={**env, "LABELX_PASSWORD": "a long enough password"}, capture_output=True, text=True,
    )  # fmt: skip
    assert typed.returncode == 0, typed.stderr
