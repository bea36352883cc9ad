"""What a new user met making a LabelX project for two annotators (newuser25): 12 items in
tasks of 50 make one task, given round-robin to the first annotator named; the second had
nothing to do and nothing said so (the form said "Created … with 12 items.", the command its
id). Both say who has no task and what gives each one a task (the form: tests/browser/test_newuser25.py)."""

from __future__ import annotations

import json

import pytest

from datahub.cli.main import main
from tests.labelx.conftest import PASSWORD


def _create(
    env, tmp_path, capsys, monkeypatch, *extra: str, name: str = "p", size: str = "50"
) -> tuple[dict, str]:
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}", "--json"]
    monkeypatch.setenv("LABELX_PASSWORD", PASSWORD)
    made = [
        *home,
        "labelx",
        "create-project",
        name,
        "--dataset",
        "pets",
        "--classes",
        "cat,dog",
        "--user",
        "admin",
        "--task-size",
        size,
    ]
    assert main([*made, *extra]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_create_project_says_which_annotator_got_no_task(app, env, tmp_path, capsys, monkeypatch) -> None:
    made, err = _create(env, tmp_path, capsys, monkeypatch, "--annotators", "alice,bob")
    assert made["items"] == 12
    assert err == (
        "note: bob has no task in p: 1 task of up to 50 items for 2 annotators; a --task-size of 6 or "
        "less gives each one a task\n"
    )


def test_create_project_says_nothing_when_each_annotator_has_a_task(app, env, tmp_path, capsys, monkeypatch):
    _, err = _create(env, tmp_path, capsys, monkeypatch, "--annotators", "alice,bob", "--task-size", "6")
    assert err == ""
    _, err = _create(
        env, tmp_path, capsys, monkeypatch, "--annotators", "alice,bob", "--claim", name="q", size="6"
    )
    assert err == ""  # two tasks taken one at a time: each can take one


def test_tasks_taken_one_at_a_time_are_too_few_for_the_annotators_too(
    app, env, tmp_path, capsys, monkeypatch
):
    _, err = _create(env, tmp_path, capsys, monkeypatch, "--annotators", "alice,bob", "--claim")
    assert err == (
        "note: p: 1 task of up to 50 items for 2 annotators: 1 of them will find no task to take; "
        "a --task-size of 6 or less gives each one a task\n"
    )


def test_create_project_help_says_where_the_version_goes(capsys) -> None:
    """Its help read "create a project from dataset@version", the form ``--dataset`` refuses."""
    with pytest.raises(SystemExit):
        main(["labelx", "create-project", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "dataset@version" not in text
    assert "--dataset DATASET the dataset's name (its version goes in --version)" in text
    assert "--task-size TASK_SIZE items per task (default 50)" in text
