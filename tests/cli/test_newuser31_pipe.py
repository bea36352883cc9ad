"""What newuser31 met trying the demo's ``datahub export sample@golden | head``.

The export's progress line (stderr) ended "stopped by an error" when ``head`` closed the pipe,
with no error after it: a reader that leaves early is no error (the command exits 141 quietly,
as ``ls`` and ``log`` do). The line says what happened now.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.test_cli import REPO, many  # noqa: F401


def test_an_export_whose_reader_leaves_says_so_not_an_error(many: Path) -> None:  # noqa: F811
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")} | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "datahub.cli.main", "--home", str(many), "export", "many@latest"]
    writer = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert writer.stdout is not None and writer.stderr is not None
    first = writer.stdout.readline()
    writer.stdout.close()  # what `head -1` does after its line
    err = writer.stderr.read().decode()
    code = writer.wait(timeout=120)
    assert first.startswith(b"{"), first
    assert code == 141, err
    assert "error" not in err and "Traceback" not in err, err
    assert err.splitlines()[-1].endswith(" stopped: its reader closed the output"), err
