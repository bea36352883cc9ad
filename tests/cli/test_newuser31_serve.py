"""What newuser31 met starting ``datahub serve`` on a home whose path holds a space.

* Its LabelX line named the first account's command as ``datahub --home /tmp/my home labelx
  create-user NAME --role admin``: typed, ``--home`` was ``/tmp/my`` and ``home`` an unknown
  command. The home is shell-quoted now.
* ``datahub serve --labelx`` (LabelX is served by default; the help names only ``--no-labelx``)
  was "unrecognized arguments: --labelx". It is the default's flag now.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from labelx.store import LabelStore
from tests import zygote
from tests.servers import free_port

REPO = Path(__file__).resolve().parents[2]


def test_serve_names_labelx_create_user_with_a_quoted_home_and_it_runs_as_shown(tmp_path: Path) -> None:
    home = tmp_path / "my home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH=str(REPO), LABELX_PASSWORD="correct horse battery")
    cli = [sys.executable, "-m", "datahub.cli.main"]
    argv = [*cli, "--home", str(home), "serve", "--labelx", "--port", str(free_port())]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        said = next((line for line in proc.stderr if line.startswith("LabelX on ")), "")
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=60)[1]
    assert said, rest
    shown = re.search(r"`([^`]+)`", said)
    assert shown is not None, said
    words = shlex.split(shown[1].replace("NAME", "ada"))
    assert words == ["datahub", "--home", str(home), "labelx", "create-user", "ada", "--role", "admin"], said
    made = zygote.run([*cli, *words[1:]], cwd=tmp_path, env=env, timeout=120)  # a pre-imported fork
    assert made.returncode == 0, made.stderr
    store = LabelStore(home / "labelx.db")
    try:
        assert store.user_by_name("ada").role == "admin"
    finally:
        store.close()
