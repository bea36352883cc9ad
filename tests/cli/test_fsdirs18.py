"""``python -m datahub.demo``'s ``error:`` line quotes the user's own arguments escaped
(``datahub.console.context.shown``), as every ``datahub`` command's does."""

from __future__ import annotations

from pathlib import Path

from datahub.demo import main


def test_the_demos_error_line_is_escaped(tmp_path: Path, capsys) -> None:
    code = main(
        ["--home", str(tmp_path / "var"), "--no-wait", "--skip", "x\x1b[2J\x1b]0;owned\x07\nerror: forged"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(
        "error: unknown step(s) x\\x1b[2J\\x1b]0;owned\\x07\\x0aerror: forged for --skip"
    ), err
    assert "\x1b" not in err and "\x07" not in err and len(err.splitlines()) == 1, err
