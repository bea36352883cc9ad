"""What a new user met typing ``datahub`` commands from the docs (newuser25)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from datahub.cli.main import main
from datahub.console.context import as_typed, invoked_as

REPO = Path(__file__).resolve().parents[2]
SHELL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def shell_runner(cwd: Path) -> Callable[[str], subprocess.CompletedProcess]:
    """Run a command line in bash in ``cwd`` as a user after ``make run`` types it: no datahub
    on PATH, no DATAHUB_ settings, no virtualenv active (so a message's command runs as shown)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )

    return run


@pytest.mark.parametrize(
    ("command", "actions"),
    [
        ("dataset", "create, list, show, update"),
        ("token", "create, list, revoke"),
        ("lease", "list, show, break, prune"),
        ("labelx", "serve, create-user, set-password"),
    ],
)
def test_a_command_without_its_action_names_the_actions(
    command: str, actions: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``datahub dataset`` said only "the following arguments are required: ACTION" (and the
    usage above it ``datahub dataset [-h] ACTION ...``): which words go there, it did not say."""
    with pytest.raises(SystemExit) as exited:
        main([command])
    assert exited.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith(f"datahub {command}: error: the following arguments are required: ACTION; ")
    assert f"datahub {command} takes one of: {actions}" in said
    assert f"(`datahub {command} --help` says what each does)" in said


def test_a_missing_argument_that_is_not_an_action_reads_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["labelx", "set-password"])
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == "datahub labelx set-password: error: the following arguments are required: name"


def test_a_command_an_error_names_runs_as_shown_after_make_run(tmp_path: Path) -> None:
    """After ``make run`` the venv is not on PATH: the quickstart's ``D=".venv/bin/datahub
    --home var"``, then ``$D log nope``, said "check `datahub dataset list`", and typed as
    shown that is "datahub: command not found" (and without ``--home var``, another catalog)."""
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    assert run(".venv/bin/datahub --home var init").returncode == 0
    refused = run(".venv/bin/datahub --home var log nope")
    assert refused.returncode == 3
    shown = re.search(r"`([^`]+)`", refused.stderr)
    assert shown is not None and shown[1] == ".venv/bin/datahub --home var dataset list", refused.stderr
    listed = run(shown[1])
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert run("datahub dataset list").returncode == 127  # the bare name is not on this PATH


def test_how_a_user_runs_datahub_is_what_the_messages_name(tmp_path: Path, monkeypatch) -> None:
    args = argparse.Namespace(home="my var", config=None, catalog=None)
    assert invoked_as(args, "/usr/lib/python3/dist-packages/datahub/cli/main.py") == "datahub"  # python -m
    exe = tmp_path / "bin" / "datahub"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert invoked_as(args, str(exe)) == f"{exe} --home 'my var'"
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    # on PATH: as the docs write it, with the options that say which catalog (newuser34)
    assert invoked_as(args, str(exe)) == "datahub --home 'my var'"
    assert invoked_as(argparse.Namespace(home=None, config=None, catalog=None), str(exe)) == "datahub"
    command = ".venv/bin/datahub --home var"
    assert as_typed("see `datahub log pets`", command) == f"see `{command} log pets`"
    # a command naming its own location keeps it, not ours as well
    said = as_typed("create one with `datahub --home /srv/var init`", command)
    assert said == "create one with `.venv/bin/datahub --home /srv/var init`"
    assert as_typed("see `datahub log pets`", "datahub") == "see `datahub log pets`"


@pytest.mark.fuse
@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse")
def test_a_foreground_mount_names_the_umount_as_the_user_runs_datahub(tmp_path: Path) -> None:
    """``.venv/bin/datahub --home var mount var/mnt sample@v1`` said it runs "until `datahub
    umount …`": after ``make run`` that is "datahub: command not found"."""
    from datahub.demo import main as demo

    assert demo(["--home", str(tmp_path / "var"), "--no-wait", "--skip", "listen", "--skip", "mount",
                 "--skip", "serve"]) == 0  # fmt: skip
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "mnt").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))
    mount = subprocess.Popen(
        [".venv/bin/datahub", "--home", "var", "mount", "mnt", "sample@v1"],
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert mount.stderr is not None
        said = next(line for line in mount.stderr if line.startswith("mounted at "))
        shown = re.search(r"`([^`]+)`", said)
        assert shown is not None and shown[1] == f".venv/bin/datahub --home var umount {tmp_path / 'mnt'}", (
            said
        )
        umount = subprocess.run(
            ["bash", "-c", shown[1]], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert umount.returncode == 0, umount.stderr
        assert mount.wait(timeout=60) == 0
    finally:
        if mount.poll() is None:
            mount.terminate()
            mount.wait(timeout=60)
