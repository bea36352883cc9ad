"""What a new user met reading ``datahub <command> --help`` (newuser19).

- 39 subcommands' ``--help`` (``datahub ls --help``, ``datahub cache stats --help``, …,
  ``datahub labelx export --help``) showed the usage and the options, never what the command
  does: that line was only in ``datahub --help``'s list.
- ``datahub commit --help`` showed a bare lowercase ``dataset`` and ``--changes`` without a word,
  and ``datahub commit pets@v1 --changes f.jsonl`` said only "invalid dataset name 'pets@v1'",
  as ``log`` did before newuser17.
"""

from __future__ import annotations

import argparse
import json

from datahub.cli.main import build_parser
from tests.cli.test_cli import FILES, dh, src  # noqa: F401 - fixtures


def _subcommands(parser: argparse.ArgumentParser, path: str = "datahub"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            said = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{path} {name}", said.get(name), sub
                yield from _subcommands(sub, f"{path} {name}")


def test_every_subcommand_help_says_what_it_does() -> None:
    seen = list(_subcommands(build_parser()))
    assert len(seen) > 40
    mute = []
    for path, listed, parser in seen:
        text = " ".join(parser.format_help().split())  # argparse wraps lines
        says = " ".join(listed.split()).lower() in text.lower()
        # or its own description opens with the listed line's verb ("Mount dataset versions …")
        says = says or parser.description.split()[0].lower() == listed.split()[0].lower()
        if not (parser.description and says):
            mute.append(path)
    assert mute == [], f"--help that does not say what the command does: {mute}"
    commit = next(parser for path, _, parser in seen if path == "datahub commit")
    text = commit.format_help()
    assert "DATASET" in text and "a dataset's name (not DATASET@REF)" in text
    assert "one change a line: put, delete or patch" in text


def test_commit_of_a_version_says_the_version_goes_to_base(dh, src, tmp_path) -> None:  # noqa: F811
    assert dh("import", str(src), "--to", "pets")[0] == 0
    changes = tmp_path / "changes.jsonl"
    changes.write_text(json.dumps({"op": "delete", "key": "val/cat/3.jpg"}) + "\n")
    for spec, instead in (
        ("pets@v1", f"`datahub commit pets --changes {changes} --base 1` applies them to v1"),
        ("pets@latest", f"`datahub commit pets --changes {changes}` applies them to its head"),
    ):
        code, out, err = dh("commit", spec, "--changes", str(changes))
        said = f"error: `datahub commit` takes a dataset, not a version ({spec!r}): "
        assert code == 2 and out == "" and err.startswith(said) and instead in err, (code, err)
    assert [v["seq"] for v in json.loads(dh("log", "pets", json_output=True)[1])] == [1]  # nothing committed
    code, out, err = dh("commit", "pets", "--changes", str(changes), "--base", "1")
    assert code == 0 and "committed pets@v2" in out, (code, out, err)
