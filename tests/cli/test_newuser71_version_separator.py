"""What newuser71 met writing a version as a container image or a mount writes it:
``datahub ls pets:v1`` and ``datahub ls pets/v1`` said only "invalid dataset name 'pets:v1':
use 1-63 characters from [a-z0-9._-], starting with a letter or digit", which names no way to
write a version. They now say how (NAME@REF) and which version was meant; a name that is just
wrong keeps the rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("pets:v1", "pets@v1"),
        ("pets/v1", "pets@v1"),
        ("pets/latest", "pets@latest"),
        ("pets:golden", "pets@golden"),
    ],
)
def test_a_version_written_with_another_separator_names_the_one_meant(
    tmp_path: Path, typed: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    home = str(tmp_path / "home")
    assert main(["--home", home, "init"]) == 0
    capsys.readouterr()
    assert main(["--home", home, "ls", typed]) == 2
    said = capsys.readouterr().err
    assert f"a version is written NAME@REF; did you mean '{meant}'?" in said, said


def test_a_wrong_name_keeps_the_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    assert main(["--home", home, "init"]) == 0
    capsys.readouterr()
    for typed in ("Pets", "pets:", "a/b/c"):
        assert main(["--home", home, "ls", typed]) == 2
        said = capsys.readouterr().err
        assert "use 1-63 characters from [a-z0-9._-]" in said and "did you mean" not in said, (typed, said)
