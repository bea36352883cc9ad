"""What newuser27 met committing and administering LabelX.

A commit into a NEW dataset (the dashboard's "Into dataset", ``commit --to-dataset NAME``) of a
project with no accepted label made the dataset anyway: a copy of the project's records with no
label of the project's, owned by the committer, while a commit onto the project's own dataset
refuses the same state (409, "review items first"). It refuses too now, and creates nothing.
"""

from __future__ import annotations

from datahub.cli.main import main
from tests.labelx.conftest import PASSWORD, Env, Session, make_project


def test_a_commit_into_a_new_dataset_with_no_accepted_label_refuses_and_creates_nothing(
    app, env: Env
) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    refused = admin.post(f"/api/projects/{pid}/commit", {"to_dataset": "pets-empty"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["message"] == (
        "project 'pets-cls' has no accepted label to commit into a new dataset 'pets-empty', so "
        "nothing was created: review items first (accept at least one), then commit again"
    )
    assert "pets-empty" not in {d.name for d in env.catalog.list_datasets()}
    # the same state commits nothing onto the project's own dataset either
    assert admin.post(f"/api/projects/{pid}/commit", {}).status_code == 409
    assert env.catalog.store.head("pets") == 1


def test_labelx_commit_to_dataset_with_no_accepted_label_creates_nothing(
    app, env: Env, tmp_path, capsys, monkeypatch
) -> None:
    make_project(Session(app, "admin"))  # the project through the API, the commit through the CLI
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    monkeypatch.setenv("LABELX_PASSWORD", PASSWORD)
    rc = main([*home, "labelx", "commit", "pets-cls", "--user", "admin", "--to-dataset", "pets-empty"])
    _, err = capsys.readouterr()
    assert rc == 4  # Conflict's exit code
    assert "has no accepted label to commit into a new dataset 'pets-empty'" in err, err
    assert "pets-empty" not in {d.name for d in env.catalog.list_datasets()}
