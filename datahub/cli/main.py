"""The ``datahub`` command: one module per subcommand, registered here.

Each module in ``COMMANDS`` exposes ``register(subparsers)`` which adds its parser(s) and
sets ``func=handler(args, ctx) -> int``. This file owns what every command shares:
global flags, building the Config once, and translating DatahubError into a message and
a stable exit code (never a bare traceback to a user).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from datahub.cli.context import CliContext
from datahub.errors import DatahubError

# module names under datahub.cli; a missing module (a component not built yet) is skipped
COMMANDS = (
    "init_cmd",
    "serve_cmd",
    "dataset_cmd",
    "import_cmd",
    "commit_cmd",
    "version_cmd",
    "token_cmd",
    "cache_cmd",
    "mount_cmd",
    "pack_cmd",
    "labelx_cmd",
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what `ls | head` reports for a reader that left early


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="datahub",
        description="Versioned datasets over object storage, served through a tiered cache.",
    )
    parser.add_argument(
        "--config", help="TOML configuration file (default: $DATAHUB_CONFIG or ./datahub.toml)"
    )
    parser.add_argument("--home", help="state directory for the embedded default (default: ./var)")
    parser.add_argument("--catalog", help="catalog URL: sqlite:///path.db or mongodb://host/db")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"datahub.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"datahub.cli.{name}":
                continue
            raise
        module.register(sub)
    _accept_global_flags_after_subcommand(sub)
    return parser


def _accept_global_flags_after_subcommand(sub: argparse._SubParsersAction) -> None:
    """`datahub ls ds --json` works like `datahub --json ls ds`, as users expect of git-like tools.

    The copies default to SUPPRESS so a flag given before the subcommand is not overwritten.
    """
    for parser in sub.choices.values():
        taken = parser._option_string_actions
        if "--home" not in taken:
            parser.add_argument("--home", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if "--json" not in taken:
            parser.add_argument(
                "--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
            )
        if "-v" not in taken and "--verbose" not in taken:
            parser.add_argument(
                "-v", "--verbose", action="count", default=argparse.SUPPRESS, help=argparse.SUPPRESS
            )
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _accept_global_flags_after_subcommand(action)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(
        level=os.environ.get("DATAHUB_LOG", "").upper() or level, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    ctx = CliContext.from_args(args)
    try:
        return int(args.func(args, ctx) or 0)
    except DatahubError as exc:
        ctx.error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "interrupted; partial work was not committed (rerun to resume where supported)", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader (`| head`) closed the pipe: stop quietly like other Unix tools; point
        # stdout at /dev/null so the interpreter's final flush does not print a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    finally:
        ctx.close()


if __name__ == "__main__":
    sys.exit(main())
