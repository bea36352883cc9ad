"""What newuser71 met warming part of a version with a typo in the prefix: ``datahub prefetch
pets@v1 --prefix trian/`` said "0 objects: 0 pages fetched (0.0 MiB), 0 already cached, 0
failed" and exited 0, which reads as "nothing left to fetch"; nothing said the prefix holds no
record. It now says so on stderr with what is there, as ``ls`` does (newuser15); so does
``cache pin`` with such a prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("DATAHUB_HOME", "DATAHUB_CONFIG", "DATAHUB_CATALOG_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    pets = tmp_path / "pets"
    for key in ("train/cat/1.jpg", "train/dog/2.jpg", "val/cat/3.jpg"):
        (pets / key).parent.mkdir(parents=True, exist_ok=True)
        (pets / key).write_bytes(key.encode())
    home = tmp_path / "home"
    assert main(["--home", str(home), "import", str(pets), "--to", "pets"]) == 0
    return home


@pytest.mark.parametrize("command", [["prefetch", "pets@v1"], ["cache", "pin", "pets@v1"]])
def test_a_prefix_that_holds_nothing_is_said_with_what_is_there(
    home: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["--home", str(home), *command, "--prefix", "trian/"]) == 0
    said = capsys.readouterr().err
    assert "no record of pets@v1 under prefix 'trian/'; the top level holds: train/, val/" in said, said
    assert main(["--home", str(home), *command, "--prefix", "train/cat/"]) == 0
    said = capsys.readouterr()
    assert "1 object" in said.out and "no record" not in said.err, said
