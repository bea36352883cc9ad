"""What newuser72 met typing a version with one '@' too many: ``datahub ls sample@@v1`` said
"invalid tag '@v1'", which names neither what was typed nor how a version is written (the user
typed no tag). Every command taking ``DATASET@REF`` now names what was typed, the form
(``DATASET@VERSION``, e.g. ``sample@v1``) and the version meant; ``diff`` and ``tag``, which take
a version as an argument of its own, name that argument and the command with the version meant.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from datahub.cli.main import main
from tests.cli.test_newuser25_cli import REPO, shell_runner


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A home with ``pets@v1`` (two files), made once for the module."""
    root = tmp_path_factory.mktemp("refs")
    src = root / "src"
    src.mkdir()
    for name in ("a.txt", "b.txt"):
        (src / name).write_text(name)
    home = str(root / "home")
    assert main(["--home", home, "import", str(src), "--to", "pets"]) == 0
    (root / "mnt").mkdir()
    return home


@pytest.mark.parametrize(
    "command",
    [
        ["ls", "{v}"],
        ["export", "{v}"],
        ["derive", "{v}", "--filter", "size>0", "--to", "pets-big"],
        ["prefetch", "{v}"],
        ["cache", "pin", "{v}"],
        ["cache", "unpin", "{v}"],
        ["mount", "{mnt}", "{v}"],
        ["pack", "{v}", "--to", "pets-packed", "--resize", "8x8"],
    ],
    ids=lambda c: " ".join(c[:2]) if c[0] == "cache" else c[0],
)
@pytest.mark.parametrize(("typed", "meant"), [("pets@@v1", "pets@v1"), ("pets@v1/a.txt", "pets@v1")])
def test_a_version_that_names_none_is_named_as_typed(
    home: str, command: list[str], typed: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mnt = str(Path(home).parent / "mnt")
    argv = [a.format(v=typed, mnt=mnt) for a in command]
    capsys.readouterr()
    assert main(["--home", home, *argv]) == 2
    said = capsys.readouterr().err
    assert f"invalid version {typed!r}: write DATASET@VERSION, e.g. pets@v1" in said, said
    assert f"did you mean {meant!r}?" in said, said
    assert "invalid tag" not in said, said


@pytest.mark.parametrize(
    ("argv", "named", "meant"),
    [
        (["diff", "pets", "@v1", "2"], "FROM '@v1'", "diff pets v1 2"),
        (["diff", "pets", "0", "pets@v1"], "TO 'pets@v1'", "diff pets 0 v1"),
        (["tag", "pets", "golden", "@v1"], "REF '@v1'", "tag pets golden v1"),
    ],
)
def test_a_version_argument_that_names_none_is_named(
    home: str, argv: list[str], named: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tag pets golden @v1`` said "invalid tag '@v1'", of the argument after the tag."""
    capsys.readouterr()
    assert main(["--home", home, *argv]) == 2
    said = capsys.readouterr().err
    assert f"{named} names no version of pets" in said, said
    assert f"did you mean `datahub {meant}`?" in said, said


@pytest.mark.parametrize(
    ("argv", "instead"),
    [
        (["log", "pets@@v1"], "`datahub ls pets@v1` the records of one"),
        (["diff", "pets@@v1", "2"], "`datahub diff pets v1 2` compares"),
    ],
)
def test_a_command_taking_a_dataset_names_the_version_meant(
    home: str, argv: list[str], instead: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``log pets@@v1`` (a dataset, not a version) said to run ``ls pets@@v1``, refused in turn."""
    capsys.readouterr()
    assert main(["--home", home, *argv]) == 2
    said = capsys.readouterr().err
    assert "takes a dataset, not a version ('pets@@v1')" in said and instead in said, said


def test_the_version_meant_runs_as_typed(home: str) -> None:
    """After ``make run``: the suggestion, typed as shown, lists the version."""
    run = shell_runner(Path(home).parent)
    d = f"{REPO}/.venv/bin/datahub --home {home}"
    refused = run(f"{d} ls pets@@v1")
    assert refused.returncode == 2, refused.stderr
    meant = re.search(r"did you mean '([^']+)'\?", refused.stderr)
    assert meant is not None, refused.stderr
    listed = run(f"{d} ls {meant[1]}")
    assert listed.returncode == 0 and "a.txt" in listed.stdout, listed.stdout + listed.stderr
