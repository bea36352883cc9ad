"""What newuser28 met committing LabelX labels from the shell.

A refused commit (409: no accepted label, into a new dataset or onto the project's own) printed
"committing pets-cls: 0/12 (0%) … stopped by an error" above the refusal, as if a commit had
begun: a command refused before any work prints only the error (docs/cli.md).
"""

from __future__ import annotations

import pytest

from datahub.cli.main import main
from tests.labelx.conftest import PASSWORD, Env, Session, make_project


@pytest.mark.parametrize("into", [[], ["--to-dataset", "pets-empty"]], ids=["own-dataset", "new-dataset"])
def test_a_refused_commit_prints_only_the_error(
    app, env: Env, tmp_path, capsys, monkeypatch, into: list[str]
) -> None:
    make_project(Session(app, "admin"))  # nothing accepted: both commits are refused (409)
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    monkeypatch.setenv("LABELX_PASSWORD", PASSWORD)
    capsys.readouterr()
    rc = main([*home, "labelx", "commit", "pets-cls", "--user", "admin", *into])
    out, err = capsys.readouterr()
    assert rc == 4 and out == "", (rc, out)
    assert err.startswith("error: project 'pets-cls' has no accepted") and err.count("\n") == 1, err
