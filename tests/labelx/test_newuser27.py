"""What newuser27 met committing and administering LabelX.

A commit into a NEW dataset (the dashboard's "Into dataset", ``commit --to-dataset NAME``) of a
project with no accepted label made the dataset anyway: a copy of the project's records with no
label of the project's, owned by the committer, while a commit onto the project's own dataset
refuses the same state (409, "review items first"). It refuses too now, and creates nothing.

``datahub labelx create-token`` had no list and no revoke (the catalog's ``datahub token`` has
both): ``list-tokens`` and ``revoke-token`` now.
"""

from __future__ import annotations

import hashlib
import io
import json

from fastapi.testclient import TestClient

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


# --- LabelX API tokens: list and revoke from the shell, as `datahub token list|revoke` ----------
def _cli(env: Env, tmp_path, capsys, *args: str, stdin: str | None = None, monkeypatch=None) -> tuple:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    rc = main([*home, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_labelx_tokens_are_listed_without_a_secret_and_revoked_by_id_or_stdin(
    app, env: Env, tmp_path, capsys, monkeypatch
) -> None:
    """create-token printed a secret that never expires and nothing listed or revoked it but
    the owner's own ``POST /api/tokens/revoke`` with the secret in hand: a lost or leaked token
    stayed live for good. list-tokens and revoke-token do what the catalog's commands do, through
    the store methods the web revoke uses."""
    made = {}
    for user, what in (("alice", "nightly export"), ("bob", "")):
        rc, out, _ = _cli(
            env, tmp_path, capsys, "--json", "labelx", "create-token", user, "--description", what
        )
        assert rc == 0
        made[user] = json.loads(out)
        assert made[user]["id"] == hashlib.sha256(made[user]["token"].encode()).hexdigest()
    rc, out, _ = _cli(env, tmp_path, capsys, "--json", "labelx", "list-tokens")
    listed = json.loads(out)
    assert [(t["user"], t["id"], t["description"]) for t in listed] == [
        ("alice", made["alice"]["id"], "nightly export"),
        ("bob", made["bob"]["id"], ""),
    ]
    assert all(isinstance(t["created"], float) for t in listed)
    rc, out, _ = _cli(env, tmp_path, capsys, "labelx", "list-tokens", "--user", "bob")
    assert rc == 0 and made["bob"]["id"] in out and made["alice"]["id"] not in out
    assert out.splitlines()[0].split() == ["USER", "ID", "DESCRIPTION", "CREATED", "MADE_BY"]
    assert "lx_" not in out  # never a secret
    bearer = TestClient(app, base_url="http://127.0.0.1")
    for user in made:
        auth = {"Authorization": f"Bearer {made[user]['token']}"}
        assert bearer.get("/api/projects", headers=auth).status_code == 200

    rc, out, err = _cli(env, tmp_path, capsys, "labelx", "revoke-token", made["alice"]["id"])
    assert (rc, err) == (0, "")
    assert out == f"revoked LabelX API token {made['alice']['id']} of alice\n"
    rc, out, err = _cli(
        env, tmp_path, capsys, "labelx", "revoke-token", "-", stdin=made["bob"]["token"] + "\n",
        monkeypatch=monkeypatch,
    )  # fmt: skip
    assert (rc, err) == (0, "") and "of bob" in out
    for user in made:  # both refused at once: the token is gone, not only unlisted
        auth = {"Authorization": f"Bearer {made[user]['token']}"}
        assert bearer.get("/api/projects", headers=auth).status_code == 401
    rc, out, _ = _cli(env, tmp_path, capsys, "--json", "labelx", "list-tokens")
    assert json.loads(out) == []
    rc, _, err = _cli(env, tmp_path, capsys, "labelx", "revoke-token", made["alice"]["id"])
    assert rc == 3, err  # NotFound
    assert (
        f"no such LabelX API token {made['alice']['id'][:12]}…: it was never issued or is already revoked"
        in err
    )


def test_revoke_token_with_the_secret_in_argv_revokes_and_warns(app, env: Env, tmp_path, capsys) -> None:
    rc, out, _ = _cli(env, tmp_path, capsys, "labelx", "create-token", "alice")
    secret = out.strip()  # the text output is the secret alone, for TOKEN=$(…)
    assert secret.startswith("lx_") and "\n" not in secret
    rc, out, err = _cli(env, tmp_path, capsys, "labelx", "revoke-token", secret)
    assert rc == 0 and "of alice" in out
    assert "warning: the token's secret was given on the command line" in err
    assert "`datahub labelx revoke-token -`" in err
    assert app.state.labelx.store.list_tokens() == []


def test_commit_into_a_new_dataset_counts_its_progress_by_the_records_it_copies(
    app, env: Env, tmp_path, capsys, monkeypatch
) -> None:
    """``commit --to-dataset`` copies every record of the project and counted them against the
    accepted labels: "committing pets-cls: 12/1 (1200%) … eta -0s done"."""
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    store = app.state.labelx.store
    item = store.item_by_key(pid, "img/0003.jpg")
    store.save_value(item.id, store.user_by_name("alice").id, item.version, "dog", "annotated")
    store.submit_task(item.task_id)
    store.review(item.id, store.user_by_name("admin").id, item.version + 2, True, "")
    rc, out, err = _cli(env, tmp_path, capsys, "labelx", "commit", "pets-cls", "--user", "admin",
                        "--to-dataset", "pets-copy")  # fmt: skip
    assert rc == 0, err
    assert err.splitlines()[-1].startswith("committing pets-cls: 12/12 (100%)"), err
    assert "%)" in err and all(line.count("/12 (") == 1 for line in err.splitlines()), err
    assert env.catalog.get_record("pets-copy", 1, "img/0003.jpg").labels == {"class": "dog"}


def test_labelx_commit_takes_m_for_its_message_as_datahub_import_does(
    app, env: Env, tmp_path, capsys, monkeypatch
) -> None:
    """``datahub labelx commit P --user admin -m "val relabel"`` (``-m`` as ``datahub import``
    and ``datahub commit`` take it) was refused: "unrecognized arguments: -m val relabel"."""
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    store = app.state.labelx.store
    item = store.item_by_key(pid, "img/0004.jpg")
    store.save_value(item.id, store.user_by_name("alice").id, item.version, "bird", "annotated")
    store.submit_task(item.task_id)
    store.review(item.id, store.user_by_name("admin").id, item.version + 2, True, "")
    rc, _, err = _cli(env, tmp_path, capsys, "labelx", "commit", "pets-cls", "--user", "admin", "-m", "birds")
    assert rc == 0, err
    assert env.catalog.resolve("pets", 2).message == "birds"
