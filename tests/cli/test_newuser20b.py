"""An operator's ``datahub export`` of part of a version: the progress line counts that part."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli import FILES, dh, src  # noqa: F401 (fixtures)


def test_export_of_a_prefix_or_a_filter_claims_no_total_of_the_whole_version(dh, src: Path) -> None:  # noqa: F811
    """``datahub export pets@v1 --prefix val/`` ended ``1/3 (33%) … done``: the total was the
    whole version's record count, so a finished export read as a third done."""
    assert dh("import", str(src), "--to", "pets")[0] == 0
    for selection in (("--prefix", "val/"), ("--filter", "size<0")):
        code, out, err = dh("export", "pets@v1", *selection)
        assert code == 0 and out.count("\n") == (1 if selection[0] == "--prefix" else 0)
        last = err.strip().splitlines()[-1]
        assert last.endswith("done") and "%" not in last and f"/{len(FILES)}" not in last, err
    code, out, err = dh("export", "pets@v1")  # the whole version: its total, and 100 %
    assert code == 0 and f"{len(FILES)}/{len(FILES)} (100%)" in err.strip().splitlines()[-1]
