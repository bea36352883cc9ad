"""What a new user met making LabelX accounts from a shell (newuser16): the real ``datahub``
program, a new home, no terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DATAHUB = str(Path(sys.executable).with_name("datahub"))


def _run(home: Path, *args: str, password: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "LABELX_"))}
    if password is not None:
        env["LABELX_PASSWORD"] = password
    return subprocess.run(
        [DATAHUB, "--home", str(home), "labelx", *args],
        env=env,
        stdin=subprocess.DEVNULL,  # no terminal and nothing to read: as under cron, CI or ssh host cmd
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard, never a timing goal
    )


def test_no_password_and_no_terminal_names_the_two_ways_to_give_one(tmp_path: Path) -> None:
    """``create-user`` (and ``set-password``) without ``$LABELX_PASSWORD`` and with nothing on
    stdin said "datahub labelx failed: EOFError: ; this is a datahub bug" (exit 1). The
    set-password is of an account that exists (newuser74: one that does not is refused first)."""
    made = _run(tmp_path / "home", "create-user", "ann", "--role", "annotator", password="correct-horse-8")
    assert made.returncode == 0, made.stderr
    for args in (("create-user", "bob", "--role", "annotator"), ("set-password", "ann")):
        proc = _run(tmp_path / "home", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "bug" not in proc.stderr and "EOFError" not in proc.stderr, proc.stderr
        assert proc.stderr.rstrip().endswith(
            "error: no password given: set $LABELX_PASSWORD, or run the command at a terminal to be asked for one"
        ), proc.stderr
    made = _run(tmp_path / "home", "create-user", "bob", "--role", "annotator", password="correct-horse-9")
    assert made.returncode == 0, made.stderr  # the variable is the way a script gives it


def test_a_bad_user_name_is_refused_before_the_password_is_asked_for(tmp_path: Path) -> None:
    """``create-user Bob``: the password was asked for first (or, with none to read, the EOFError
    "bug"), and only then the name refused."""
    proc = _run(tmp_path / "home", "create-user", "Bob", "--role", "annotator")
    assert proc.returncode == 2, proc.stderr
    assert "password" not in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith(
        "error: invalid user name 'Bob': use 1-63 characters from [a-z0-9._-], starting with a letter or digit"
    ), proc.stderr


def test_set_password_of_no_account_is_refused_before_the_password_is_asked_for(tmp_path: Path) -> None:
    """``set-password bob`` with no account ``bob`` asked for a new password (at a terminal, typed
    for nothing) and only then said "no user 'bob'" (newuser74)."""
    made = _run(tmp_path / "home", "create-user", "ann", "--role", "annotator", password="correct-horse-8")
    assert made.returncode == 0, made.stderr
    proc = _run(tmp_path / "home", "set-password", "bob")
    assert proc.returncode == 3, proc.stderr
    assert "new password for" not in proc.stderr and "no password given" not in proc.stderr, proc.stderr
    assert "no user 'bob'; create it first" in proc.stderr and "labelx create-user bob" in proc.stderr, (
        proc.stderr
    )


def test_create_user_of_a_taken_name_is_refused_before_the_password_is_asked_for(tmp_path: Path) -> None:
    """``create-user ann`` with ``ann`` there already asked for a password, then said "user 'ann'
    already exists; pick another name" (newuser74). It now says so first, and how to give
    that account a new password."""
    made = _run(tmp_path / "home", "create-user", "ann", "--role", "annotator", password="correct-horse-8")
    assert made.returncode == 0, made.stderr
    proc = _run(tmp_path / "home", "create-user", "ann", "--role", "admin")
    assert proc.returncode == 4, proc.stderr
    assert "password for ann" not in proc.stderr and "no password given" not in proc.stderr, proc.stderr
    assert "user 'ann' already exists (annotator); pick another name" in proc.stderr, proc.stderr
    assert "labelx set-password ann`" in proc.stderr, proc.stderr
