"""Every ``datahub …`` command LabelX and the dataset browser name to a user (in an error
message, a page, the OpenAPI descriptions) is one the CLI has: each word names a command of
the CLI's own parser, each option is one that command takes, and a command written whole
(with a value for every argument it requires) parses as written. Placeholders such as NAME
stand for values.

Before, LabelX named ``datahub version ls`` (no such command), ``datahub ls --where`` (the
option is ``--filter``) and ``datahub labelx preannotate --predictions file.jsonl`` (without
its project)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from datahub.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((REPO / "labelx").rglob("*.py")), *sorted((REPO / "labelx" / "templates").glob("*.html"))]
SOURCES += [
    *sorted((REPO / "datahub" / "browser").rglob("*.py")),
    *sorted((REPO / "datahub" / "browser").glob("*/*.html")),
]


def named_commands() -> list[tuple[str, str]]:
    found = []
    for path in SOURCES:
        # a command starts with a word or an option: not the code that rewrites "`datahub " in
        # messages to the demo's own command (labelx/app.py, datahub/browser/pages.py)
        for command in re.findall(r"`(datahub [a-z-][^`{}\n]*)`", path.read_text()):
            found.append((str(path.relative_to(REPO)), command))
    return found


def test_the_sources_name_commands() -> None:
    assert len(named_commands()) >= 5


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@pytest.mark.parametrize(("where", "command"), named_commands())
def test_a_named_command_exists(where: str, command: str) -> None:
    words = [w for w in shlex.split(command)[1:] if w not in ("...", "…")]
    parser, path, positionals = build_parser(), ["datahub"], []
    for word in words:
        sub = _subcommands(parser)
        if sub and not positionals and not word.startswith("-"):
            assert word in sub, f"{where} names `{command}`: {' '.join(path)} has no command {word!r}"
            parser = sub[word]
            path.append(word)
        elif word.startswith("-") and word != "-":  # a lone - is a value: stdin (revoke-token -)
            option = word.split("=", 1)[0]
            assert option in parser._option_string_actions, (
                f"{where} names `{command}`: {' '.join(path)} takes no option {option}"
            )
        else:
            positionals.append(word)
    if positionals:  # written whole: it parses as written
        try:
            build_parser().parse_args(words)
        except SystemExit as exc:
            pytest.fail(f"{where} names `{command}`, which the CLI refuses (exit {exc.code})")
