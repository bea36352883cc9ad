"""Command-line numbers checked where argparse reads them.

Why: ``datahub mount … --threads -1`` ended in "this is a datahub bug" (a ValueError from the
thread limiter), ``--threads 0`` and ``--uid -5`` mounted, and ``datahub pack … --lease -1``
was accepted (newuser17). A number out of range is the user's to fix: argparse says which
option and what it takes, exit 2, before any work.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from datahub.validation import ID_MAX

_MAX_DIGITS = 40  # more than any count, size or id a command takes


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        written = text.strip()
        sign = written[:1] if written[:1] in ("-", "+") else ""
        digits = written[len(sign) :]
        # int() also takes any script's digits and "1_0"; one sign only ("-+5" is no number)
        if not (digits.isascii() and digits.isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (digits 0-9)")
        digits = digits.lstrip("0") or "0"
        if len(digits) > _MAX_DIGITS:  # int() refuses 4,300 digits: argparse said "invalid parse value"
            raise argparse.ArgumentTypeError(
                f"{written[:24]}... ({len(digits)} digits) is too large a number"
            )
        value = int(sign + digits)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value}: use a number >= {minimum}")
        return value

    return parse


def linux_id(text: str) -> int:
    """An argparse ``type`` for a uid or gid: 0 to ``ID_MAX``. Why: ``--uid 4294967296`` mounted,
    then every stat in the mount failed with EIO (pyfuse3 cannot put it in a uid_t)."""
    value = at_least(0)(text)
    if value > ID_MAX:
        raise argparse.ArgumentTypeError(f"{value}: a Linux user or group id is 0 to {ID_MAX}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse ``type`` for a duration in seconds, > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: use a number of seconds > 0")
    return value
