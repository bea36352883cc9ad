"""newuser22: ``datahub export DS -o -`` wrote a file named "-" in the working directory (mode
0600), where ``-`` is stdout to curl, tar and the like; a pipe after it got nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main


def test_export_o_dash_writes_to_stdout_not_a_file_named_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    home = ["--home", str(tmp_path / "home")]
    assert main([*home, "import", str(src), "--to", "ds"]) == 0
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert main([*home, "export", "ds@v1", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('{"key":"a.txt"') and out.count("\n") == 1, out
    assert not (tmp_path / "-").exists()
    assert main([*home, "export", "ds@v1", "-o", "./-"]) == 0  # a file of that name, asked for so
    assert (tmp_path / "-").read_text() == out


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("missing", "does not exist: give a directory, a .jsonl manifest or an s3:// prefix"),
        ("ftp://host/x", "has an unsupported scheme 'ftp': use s3://, file:// or a local path"),
    ],
)
def test_import_of_a_source_that_cannot_be_read_says_so_before_any_progress_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, source: str, said: str
) -> None:
    """It printed "import missing: 0 0/s stopped by an error" above the reason, as if an import began."""
    monkeypatch.chdir(tmp_path)
    assert main(["--home", str(tmp_path / "home"), "import", source, "--to", "ds"]) == 2
    assert capsys.readouterr().err == f"error: import source {source!r} {said}\n"
