"""What newuser28 met walking the README and the quickstart (docs/quickstart.md)."""

from __future__ import annotations

import io
import os
import re
import subprocess
from pathlib import Path

import pytest

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


def test_a_mount_point_that_is_missing_or_a_file_is_told_what_to_do(tmp_path: Path, capsys) -> None:
    """Both said "mount point X is not a directory: create it first": a file cannot be created
    first, and a missing directory is simply missing."""
    from datahub.cli.main import main

    home = ["--home", str(tmp_path / "var")]
    assert main([*home, "init"]) == 0
    capsys.readouterr()
    missing, a_file = tmp_path / "mnt", tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    assert main([*home, "mount", "--background", str(missing), "sample"]) == 2
    assert capsys.readouterr().err == (
        f"error: mount point {missing} does not exist: create it first (mkdir -p {missing})\n"
    )
    assert main([*home, "mount", "--background", str(a_file), "sample"]) == 2
    assert capsys.readouterr().err == (
        f"error: mount point {a_file} is not a directory: mount on an empty directory (mkdir DIR), not on a file\n"
    )
    assert a_file.read_text() == "mine\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream", [io.StringIO, _Terminal], ids=["log", "terminal"])
def test_a_progress_line_is_written_only_once_the_work_began(stream) -> None:
    """Refused before its first update (a 409, a missing user): no line, the error alone. Work
    that began and then failed still ends its line with "stopped by an error"."""
    from datahub.console.context import Progress

    out = stream()
    with pytest.raises(LookupError), Progress(12, "committing P", out):
        raise LookupError("refused")
    assert out.getvalue() == ""
    with pytest.raises(LookupError), Progress(12, "committing P", out) as progress:
        progress.update()
        raise LookupError("failed half-way")
    assert out.getvalue().rstrip("\n").endswith(" stopped by an error"), out.getvalue()
