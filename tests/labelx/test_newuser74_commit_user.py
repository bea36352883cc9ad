"""What newuser74 met typing ``datahub labelx commit P`` (or ``create-project``) without
``--user``: argparse's "the following arguments are required: --user", which said neither what
the option is for nor whom to name. It now says so, names the admins there are, and for
``commit`` the command with one, which runs as shown (past the question of who commits)."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.cli.test_newuser25_cli import REPO, shell_runner
from tests.labelx.conftest import Env, Session, make_project

EXE = REPO / ".venv" / "bin" / "datahub"


@pytest.mark.parametrize("command", ["commit", "create-project"])
def test_no_user_names_the_admins_and_the_command_with_one(app, env: Env, tmp_path, command: str) -> None:
    make_project(Session(app, "admin"))
    typed = f"{shlex.quote(str(EXE))} --home {shlex.quote(str(env.config.home))} --catalog sqlite:///{tmp_path}/catalog.db"
    args = {"commit": "commit pets-cls", "create-project": "create-project two --dataset pets --classes a,b"}
    run = shell_runner(tmp_path)
    refused = run(f"{typed} labelx {args[command]}")
    assert refused.returncode == 2, refused.stderr
    said = refused.stderr
    assert "required: --user" not in said, said
    assert f"labelx {command} needs --user NAME, the LabelX admin doing this" in said, said
    assert "one of admin; add --user admin" in said, said
    if command == "commit":
        shown = re.search(r"\(`([^`]+)`\)", said)
        assert shown is not None, said
        assert shown[1] == f"{typed} labelx commit pets-cls --user admin", shown[1]
        again = run(shown[1])  # typed as shown: nothing accepted yet, so nothing to commit
        assert again.returncode == 4, again.stderr
        assert "--user" not in again.stderr and "no accepted label left to commit" in again.stderr
