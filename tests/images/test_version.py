"""`datahub --version` names the release and the commit the code was built from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import datahub
from datahub import build_info
from datahub.console import runner

REPO = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_checkout_names_its_head_and_whether_tracked_files_differ() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (a tarball): only an image's COMMIT file names the commit")
    dirty = "-dirty" if _git("status", "--porcelain", "--untracked-files=no") else ""
    out = subprocess.run(
        [sys.executable, "-m", "datahub.cli.main", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"datahub {datahub.__version__} (commit {_git('rev-parse', 'HEAD')}{dirty})\n"


def test_an_installed_copy_reads_the_commit_its_image_build_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_info, "COMMIT_FILE", tmp_path / "COMMIT")
    monkeypatch.setattr(build_info, "_CHECKOUT", tmp_path)  # no .git here: git is never asked
    assert build_info.version_line() == f"datahub {datahub.__version__} (commit unknown)"
    (tmp_path / "COMMIT").write_text("0123abc\n")
    assert build_info.version_line() == f"datahub {datahub.__version__} (commit 0123abc)"


def test_version_answers_when_a_command_module_cannot_be_imported(capsys: pytest.CaptureFixture) -> None:
    """The CSI image has no web stack: `datahub --version` must not import the commands first."""
    commands = ("tests.images._needs_a_missing_dependency",)
    with pytest.raises(ModuleNotFoundError):
        runner.build_parser(commands)
    assert runner.run(commands, ["--version"]) == 0
    assert capsys.readouterr().out == build_info.version_line() + "\n"


def test_version_is_listed_in_help_and_works_after_other_flags(capsys: pytest.CaptureFixture) -> None:
    parser = runner.build_parser(("datahub.cli.token_cmd",))
    assert "--version" in parser.format_help()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["-v", "--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == build_info.version_line() + "\n"


def test_a_command_whose_package_is_not_installed_is_left_out_and_the_others_run(
    capsys: pytest.CaptureFixture,
) -> None:
    """The CSI image installs no ``labelx``: `datahub commit` there failed with a traceback
    (No module named 'labelx') because only a missing command module, not its missing package,
    was skipped. A command module whose own import fails stays an error (the test above)."""
    commands = ("datahub.cli.token_cmd", "datahub_component_that_is_not_installed.some_cmd")
    parser = runner.build_parser(commands)
    assert parser.parse_args(["token", "revoke", "x"]).command == "token"
    with pytest.raises(SystemExit):
        parser.parse_args(["some"])
    capsys.readouterr()
