"""What the CLI prints for a person shows control and invisible format characters instead of
sending them to the terminal: an escape sequence in a commit message recoloured or cleared
the screen on ``datahub log``, and a key stored before the bidi rule (``img/\\u202egpj.exe``)
was listed as ``img/exe.jpg``. ``--json`` keeps the exact text."""

from __future__ import annotations

import json

from datahub.catalog import Put, Record, open_catalog
from tests.cli.test_cli import dh  # noqa: F401 - the fixture

KEY = "img/\u202egpj.exe"
MESSAGE = "\x1b[2J\x1b[31mred\nsecond line"


def test_tables_and_lines_show_control_and_format_characters(dh, tmp_path):  # noqa: F811
    assert dh("init")[0] == 0
    catalog = open_catalog(f"sqlite:///{tmp_path / 'var' / 'catalog.db'}")
    catalog.create_dataset("ds", description="desc \x1b]0;title\x07")
    # written straight to the store, as a datahub from before the rules did
    catalog.store.commit(
        "ds", 0, [Put(Record(KEY, "s3://b/x", "e", 1, labels={"c": "\x1b[1m"}))], message=MESSAGE
    )
    catalog.close()
    for args in (
        ["log", "ds"],
        ["ls", "ds"],
        ["diff", "ds", "0", "1"],
        ["dataset", "show", "ds"],
        ["dataset", "list"],
    ):
        code, out, err = dh(*args)
        assert code == 0, (args, err)
        assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out, (args, out)
        assert out.count("\n") == len(out.splitlines()), args
    assert "\\x1b[2J\\x1b[31mred\\x0asecond line" in dh("log", "ds")[1]
    assert (
        "img/⟨U+202E⟩gpj.exe" in dh("ls", "ds")[1]
        and "+ img/⟨U+202E⟩gpj.exe" in dh("diff", "ds", "0", "1")[1]
    )
    # machine output keeps the exact text
    assert json.loads(dh("log", "ds", json_output=True)[1])[0]["message"] == MESSAGE
    assert json.loads(dh("ls", "ds", json_output=True)[1].splitlines()[0])["key"] == KEY
