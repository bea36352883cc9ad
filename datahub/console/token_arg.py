"""The token a revoke command was given: an id, or ``-`` for a secret or id read from stdin.

Why one place: ``datahub token revoke`` and ``datahub labelx revoke-token`` take the same
argument, and a secret on argv is readable by every local user while the command runs
(``ps``, /proc/PID/cmdline) and stays in the shell's history; both commands still revoke it,
for scripts written before ``-``, but say where it went."""

from __future__ import annotations

import getpass
import sys
from typing import TextIO

from datahub.console.context import as_typed, shown
from datahub.errors import InvalidInput


def token_argument(
    given: str, *, prefix: str, command: str, list_command: str, program: str, err: TextIO
) -> str:
    """The id or secret to revoke: ``given``, or the first line of stdin for ``-`` (typed
    without echo at a terminal). ``prefix`` is the secrets' (``dh_``, ``lx_``), ``command`` the
    revoke command and ``list_command`` the one that shows ids (as ``datahub …``), ``program``
    the CLI as this run was called (``CliContext.command``), which the warning's commands take."""
    if given == "-":
        return _from_stdin(prefix=prefix, command=command, list_command=list_command)
    if given.startswith(prefix):
        message = (
            "warning: the token's secret was given on the command line, where every local user "
            "can read it while the command runs (ps, /proc/PID/cmdline) and the shell's history "
            f"keeps it; revoke by id (`{list_command}` shows them) or give the secret on stdin: "
            f"`{command} -`"
        )
        print(shown(as_typed(message, program)), file=err)
    return given


def _from_stdin(*, prefix: str, command: str, list_command: str) -> str:
    if sys.stdin is None:
        raise InvalidInput(f"`{command} -` reads the token from stdin, and there is none")
    value = getpass.getpass("token secret or id: ") if sys.stdin.isatty() else sys.stdin.readline()
    value = value.strip()
    if not value:
        raise InvalidInput(
            f"`{command} -` read no token from stdin: give the secret ({prefix}…) or the id "
            f"(`{list_command}`) on its first line; nothing was revoked"
        )
    return value
