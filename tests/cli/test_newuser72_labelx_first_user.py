"""What newuser72 met opening LabelX under ``.venv/bin/datahub --home H serve`` on a new home:
its login page said to make the first account with ``datahub labelx create-user NAME --role
admin``, a bare ``datahub`` (not on PATH after ``make run``: "command not found" as typed) and
without the home the account must be made in, while the server's own line named it as typed.
The page now names it as the server was started, and it runs as shown."""

from __future__ import annotations

import html
import os
import re
import shlex
from pathlib import Path

import httpx

from tests.cli.test_newuser25_cli import REPO, shell_runner
from tests.cli.test_newuser32_serve import served

EXE = REPO / ".venv" / "bin" / "datahub"


def test_the_first_account_command_runs_as_the_login_page_shows_it(tmp_path: Path) -> None:
    home = tmp_path / "a home"
    typed = f"{shlex.quote(str(EXE))} --home {shlex.quote(str(home))}"
    with served(EXE, home, tmp_path, serve=("--labelx",)) as url:
        page = httpx.get(url + "/labelx/login", timeout=30).text
    said = re.search(r'id="no-users">.*?<code>([^<]*create-user[^<]*)</code>', page, re.S)
    assert said is not None, page
    shown = html.unescape(said[1])
    assert shown == f"{typed} labelx create-user NAME --role admin", shown
    run = shell_runner(tmp_path)
    made = run(f"LABELX_PASSWORD=pw-first-123456 {shown.replace('NAME', 'first')}")
    assert made.returncode == 0, made.stderr
    assert os.path.exists(home / "labelx.db")
