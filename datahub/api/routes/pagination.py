"""Opaque cursors for key-ordered listings: base64url of the last key returned."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from fastapi import Response
from pydantic import BaseModel

from datahub.errors import InvalidInput

T = TypeVar("T")
NDJSON = "application/x-ndjson"


def json_page(model: BaseModel) -> Response:
    """Serialise a page once, in pydantic's core (the route declares ``response_model`` for the
    schema). Returning the model would make FastAPI dump it to dicts and validate it again:
    measured at ~3/4 of a 1000-record page's time."""
    return Response(model.model_dump_json(), media_type="application/json")


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


def ndjson_lines(
    rows: Iterable[Any], convert: Callable[[Any], Any], chunk_bytes: int = 256 * 1024
) -> Iterator[bytes]:
    """NDJSON in chunks of about ``chunk_bytes``: one chunk per row would cost a thread hop and
    an HTTP chunk per record (measured 80x slower than the catalog listing)."""
    buffer: list[str] = []
    size = 0
    for row in rows:
        line = convert(row).model_dump_json() + "\n"
        buffer.append(line)
        size += len(line)
        if size >= chunk_bytes:
            yield "".join(buffer).encode()
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer).encode()
