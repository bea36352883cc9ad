"""Opaque cursors for key-ordered listings: base64url of the last key returned."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from datahub.errors import InvalidInput

T = TypeVar("T")
NDJSON = "application/x-ndjson"


def encode_cursor(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str | None) -> str:
    if not cursor:
        return ""
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidInput(
            f"invalid cursor {cursor[:40]!r}: pass back the next_cursor of the previous page",
            cursor=cursor[:200],
        ) from None


def page(items: Iterable[T], limit: int, key: Callable[[T], str]) -> tuple[list[T], str | None]:
    """Take up to ``limit`` items (the iterable yields at most limit + 1) and the cursor for the rest."""
    taken: list[T] = []
    for item in items:
        if len(taken) == limit:
            return taken, encode_cursor(key(taken[-1]))
        taken.append(item)
    return taken, None


def ndjson_lines(rows: Iterable[Any], convert: Callable[[Any], Any]) -> Iterator[bytes]:
    for row in rows:
        yield (json.dumps(convert(row).model_dump(mode="json"), separators=(",", ":")) + "\n").encode()
