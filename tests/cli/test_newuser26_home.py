"""What newuser26 met with a home chosen by $DATAHUB_HOME (as docs/quickstart.md offers:
``DATAHUB_HOME=DIR make run``): the quickstart's ``D=".venv/bin/datahub --home var"`` then read
./var, which holds nothing, and the error listed $DATAHUB_HOME among the ways to point at a
catalog, as if it were not set. It now says $DATAHUB_HOME names one and --home chose another."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main


def test_no_catalog_at_home_names_the_one_datahub_home_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "demo-home"
    monkeypatch.setenv("DATAHUB_HOME", str(real))
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0  # a catalog in $DATAHUB_HOME
    assert (real / "catalog.db").is_file()
    capsys.readouterr()
    assert main(["--home", "var", "dataset", "list"]) == 3
    said = capsys.readouterr().err
    assert f"no catalog at {tmp_path / 'var' / 'catalog.db'}" in said, said
    assert (
        f"$DATAHUB_HOME is {real}, which holds a catalog, but --home (or a configuration file) chose "
        f"{tmp_path / 'var'}: run without --home, or with --home {real}"
    ) in said, said
    assert main(["dataset", "list"]) == 0  # without --home: $DATAHUB_HOME's
    # nothing to say when $DATAHUB_HOME holds no catalog either, or --catalog chose the catalog
    monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "empty"))
    assert main(["--home", "var", "dataset", "list"]) == 3
    assert "$DATAHUB_HOME is" not in capsys.readouterr().err
    monkeypatch.setenv("DATAHUB_HOME", str(real))
    assert main(["--catalog", f"sqlite:///{tmp_path / 'other.db'}", "dataset", "list"]) == 3
    assert "$DATAHUB_HOME is" not in capsys.readouterr().err
