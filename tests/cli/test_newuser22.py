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
