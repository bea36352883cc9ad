"""What a new user met typing ``datahub`` commands from the docs (newuser25)."""

from __future__ import annotations

import pytest

from datahub.cli.main import main


@pytest.mark.parametrize(
    ("command", "actions"),
    [
        ("dataset", "create, list, show, update"),
        ("token", "create, revoke"),
        ("lease", "list, show, break, prune"),
        ("labelx", "serve, create-user, set-password"),
    ],
)
def test_a_command_without_its_action_names_the_actions(
    command: str, actions: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``datahub dataset`` said only "the following arguments are required: ACTION" (and the
    usage above it ``datahub dataset [-h] ACTION ...``): which words go there, it did not say."""
    with pytest.raises(SystemExit) as exited:
        main([command])
    assert exited.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith(f"datahub {command}: error: the following arguments are required: ACTION; ")
    assert f"datahub {command} takes one of: {actions}" in said
    assert f"(`datahub {command} --help` says what each does)" in said


def test_a_missing_argument_that_is_not_an_action_reads_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["labelx", "set-password"])
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == "datahub labelx set-password: error: the following arguments are required: name"
