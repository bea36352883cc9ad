"""The command-line runtime every ``datahub`` command shares.

Each command module exposes ``register(subparsers)``, which adds its parser(s) and sets
``func=handler(args, ctx) -> int``. This module owns what they share: global flags, building
the Config once, and translating DatahubError into a message and a stable exit code (never a
bare traceback to a user). It lives below the packages that own commands (the library's
``datahub.cli``, ``fuse_adapter``, ``labelx``) so they can all use it without importing each
other; ``datahub.cli.main`` composes them into the one ``datahub`` command.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from datahub import build_info
from datahub.console.context import CliContext, invoked_as, print_error, shown, shown_lines
from datahub.errors import DatahubError, NoSpace

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what `ls | head` reports for a reader that left early


# the options every command shares: (flags, add_argument keywords); given before or after
# the subcommand (`datahub --json ls ds` or `datahub ls ds --json`)
GLOBAL_OPTIONS: tuple[tuple[tuple[str, ...], dict], ...] = (
    (("--config",), {"help": "TOML configuration file (default: $DATAHUB_CONFIG or ./datahub.toml)"}),
    (("--home",), {"help": "state directory for the embedded default (default: ./var)"}),
    (("--catalog",), {"help": "catalog URL: sqlite:///path.db or mongodb://host/db"}),
    (("--json",), {"action": "store_true", "help": "machine-readable output"}),
    (("-v", "--verbose"), {"action": "count", "default": 0, "help": "more logging (-vv for debug)"}),
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "required: ACTION" names the actions. Why: ``datahub dataset``
    (or ``token``, ``cache``, ``lease``, ``labelx``) said only "the following arguments are
    required: ACTION", and the usage line above it ``datahub dataset [-h] ACTION ...``: a new
    user learnt that a word was missing, not which words there are (newuser25). Subcommands'
    parsers are of the class of the parser they hang from, so one class serves them all.
    The ``--help`` it names is typed as this user runs datahub (``invoked_as``): it said
    ``datahub cache --help`` to whoever typed ``.venv/bin/datahub cache``, "command not found"
    as typed without the venv on PATH (newuser71)."""

    def error(self, message: str) -> NoReturn:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and action.metavar and action.choices:
                missing = message.partition("the following arguments are required: ")[2].split(", ")
                if action.metavar in missing:
                    typed = invoked_as(argparse.Namespace()) + self.prog.removeprefix("datahub")
                    message += (
                        f"; {self.prog} takes one of: {', '.join(action.choices)}"
                        f" (`{typed} --help` says what each does)"
                    )
        super().error(message)


def build_parser(commands: Sequence[str]) -> argparse.ArgumentParser:
    """The ``datahub`` parser with the subcommands of ``commands`` (fully qualified module names).

    A missing module (an optional component not installed: the module, or its package, as the
    CSI image has no ``labelx``) is skipped; a module whose own import fails on something else
    missing raises.
    """
    parser = _Parser(
        prog="datahub",
        description="Versioned datasets over object storage, served through a tiered cache.",
    )
    for flags, options in GLOBAL_OPTIONS:
        parser.add_argument(*flags, **options)
    parser.add_argument("--version", action=_Version, help="print the release and the commit, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in commands:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                continue
            raise
        module.register(sub)
    _accept_global_flags_after_subcommand(sub)
    _describe_subcommands(sub)
    return parser


def _describe_subcommands(sub: argparse._SubParsersAction) -> None:
    """A subcommand's ``--help`` opens with what it does: the line ``datahub --help`` lists it
    with, before a description of its own that says something else first. Why: ``datahub ls
    --help`` (and 47 more, down to ``datahub labelx export --help``) showed the usage and options
    only, and ``datahub lease list --help`` opened with "Over the API: every lease to a global
    admin …", never what the command is for (newuser19)."""
    said = {choice.dest: choice.help for choice in sub._choices_actions}
    for name, parser in sub.choices.items():
        listed = said.get(name)
        if listed and listed != argparse.SUPPRESS:
            line = listed[0].upper() + listed[1:] + "."
            own = parser.description
            if own is None:
                parser.description = line
            elif own.split()[0].lower() != listed.split()[0].lower():  # "Mount …" already says it
                parser.description = f"{line} {own}"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _describe_subcommands(action)


def _accept_global_flags_after_subcommand(sub: argparse._SubParsersAction) -> None:
    """`datahub ls ds --json` works like `datahub --json ls ds`, as users expect of git-like tools.

    Every subcommand (and sub-subcommand, `cache stats`) gets a copy of each global option it
    does not define itself. The copies default to SUPPRESS, so a flag given before the
    subcommand is not overwritten by the copy's default; they are hidden from the
    subcommand's --help (`datahub --help` lists them once).
    """
    for parser in sub.choices.values():
        taken = parser._option_string_actions
        for flags, options in GLOBAL_OPTIONS:
            if not any(flag in taken for flag in flags):
                parser.add_argument(
                    *flags, **{**options, "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
                )
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _accept_global_flags_after_subcommand(action)


def run(commands: Sequence[str], argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` against ``commands``, run the chosen handler, map errors to exit codes."""
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        # before any command module is imported: an image that holds only some components
        # (the CSI plugin's has no web stack) still says which commit it runs
        print(build_info.version_line())
        return 0
    parser = build_parser(commands)
    args, extra = parser.parse_known_args(argv)
    if extra:  # under the usage of the command they were given to, not the whole tool's
        _innermost(parser, sys.argv[1:] if argv is None else argv).error(
            f"unrecognized arguments: {' '.join(extra)}"
        )
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    handler = logging.StreamHandler()  # stderr, as basicConfig's
    handler.setFormatter(_ShownFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=os.environ.get("DATAHUB_LOG", "").upper() or level, handlers=[handler])
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        ctx = CliContext.from_args(args)
    except DatahubError as exc:  # a bad --config file, TOML or DATAHUB_* value: no context yet
        print_error(exc, sys.stderr, json_output=args.json, command=invoked_as(args))
        return exc.exit_code
    try:
        code = int(args.func(args, ctx) or 0)
        ctx.out.flush()  # here, so a reader that left early is met inside this try (not at exit)
        return code
    except DatahubError as exc:
        ctx.error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print(_interrupted(args), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader (`| head`) closed the pipe: stop quietly like other Unix tools; point
        # stdout at /dev/null so the interpreter's final flush does not print a traceback
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # the last guard of "never a bare traceback to a user"
        error = _unexpected(exc, args.command)
        if args.verbose:
            traceback.print_exception(exc, file=ctx.err)
        ctx.error(error)
        return error.exit_code
    finally:
        ctx.close()


class _ShownFormatter(logging.Formatter):
    """Log lines for a terminal, escaped as ``shown`` escapes output (review18c): a mount in the
    foreground logs other nodes' words (a refused renewal names the lease's new holder, a string
    that node wrote), and an escape sequence there reached the terminal raw. A record's message
    is one line (a newline in it is written out); a traceback keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return shown(super().formatMessage(record))

    def formatException(self, ei) -> str:
        return shown_lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return shown_lines(super().formatStack(stack_info))


def _innermost(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub)command parser ``argv`` chose: ``datahub cache flush nope`` is a mistake of
    ``cache flush``, and its usage says what that command takes; the top-level usage listed
    only the global flags (leftovers18)."""
    for word in argv:
        choices = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
        if word in choices:
            parser = choices[word]
    return parser


# the arguments that name what a command works on, in the order a message prefers them
_TARGETS = ("dataset", "target", "to_dataset", "version")


def _interrupted(args: argparse.Namespace) -> str:
    """What Ctrl-C stopped, naming the command and its dataset or version, and what to do.

    Every command commits at its end or not at all (``import``, ``commit``, ``derive``), or
    keeps what it finished and goes on from there (``pack``, ``migrate``, ``cache prefetch``),
    so running the same command again is always the way on.
    """
    target = next((getattr(args, name) for name in _TARGETS if getattr(args, name, None)), None)
    on = f" on {target!r}" if isinstance(target, str) else ""
    return (
        f"datahub {args.command} interrupted (Ctrl-C){on}: nothing half-committed; "
        "run the same command again to finish it"
    )


_NO_SPACE_TEXTS = ("No space left on device", "database or disk is full", "Disk quota exceeded")


def _unexpected(exc: Exception, command: str) -> DatahubError:
    """An error no layer turned into a DatahubError, as one line that names the command.

    A full disk is the likeliest cause on a working install, and libraries report it in
    their own words (``lmdb.DiskError``, SQLite's "database or disk is full"), so that case
    gets the fix in the message; anything else is a bug, and says how to see where it is.
    """
    what = f"datahub {command} failed: {type(exc).__name__}: {exc}"
    if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or any(
        t in str(exc) for t in _NO_SPACE_TEXTS
    ):
        return NoSpace(f"{what}; free space on that file system and run it again")
    return DatahubError(
        f"{what}; this is a datahub bug: run it again with -v for the traceback and report it"
    )


class _Version(argparse.Action):
    """``--version``: like argparse's own, but asks git only when the flag is given."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(build_info.version_line())
        parser.exit()


def _silence_stdout() -> None:
    """Send what is still buffered for stdout to /dev/null (no "Exception ignored" at exit)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (captured in tests)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
