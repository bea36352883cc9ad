"""newuser44: every argument of every ``datahub`` command says what it is in ``--help``.

31 arguments showed in ``--help`` as a bare name (``datahub ls --help``: ``DATASET[@REF]`` and
nothing beside it; ``--prefix PREFIX`` with no word, …). The test walks the real parser, every
subcommand at every depth, and lists each argument with no help text; ``--help``/``-h`` itself
and the subcommand choosers (whose choices each carry their own) are argparse's.
"""

from __future__ import annotations

import argparse

from datahub.cli.main import build_parser


def _parsers(parser: argparse.ArgumentParser, path: str = "datahub"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def mute_arguments(parser: argparse.ArgumentParser, path: str = "datahub") -> list[str]:
    mute = []
    for where, p in _parsers(parser, path):
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if action.help == argparse.SUPPRESS:
                continue  # hidden on purpose (shown nowhere)
            if not (action.help or "").strip():
                mute.append(f"{where} {'/'.join(action.option_strings) or action.dest}")
    return mute


def test_every_argument_of_every_command_has_help() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 40  # every subcommand walked, labelx's and cache's included
    assert mute_arguments(build_parser()) == []


def test_the_walk_finds_an_argument_without_help() -> None:
    p = argparse.ArgumentParser(prog="x")
    sub = p.add_subparsers().add_parser("y")
    sub.add_argument("--said", help="it says")
    sub.add_argument("--mute")
    assert mute_arguments(p, "x") == ["x y --mute"]
