"""Checks every backend applies to keys, ranges and payloads before touching storage.

Kept apart from the backends so memory, local and S3 refuse the same inputs with the
same errors (promise 4).
"""

from __future__ import annotations

import io
from typing import BinaryIO

from datahub.errors import InvalidInput, InvalidKey
from datahub.validation import MAX_KEY_BYTES, check_key


def check_object_key(key: str) -> str:
    """Keys datahub writes or reads in its own stores: the record-key rules (no ``..``,
    no absolute paths, no empty segments, no control characters)."""
    return check_key(key)


def check_foreign_key(key: str) -> str:
    """Keys in S3 buckets datahub did not write may be any non-empty string of at most
    1,024 bytes (S3's own rule); they never become file paths inside a store."""
    if not isinstance(key, str) or key == "":
        raise InvalidKey("invalid key: an object key must be a non-empty string", key=key)
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidKey(f"invalid key {key[:60]!r}...: longer than {MAX_KEY_BYTES} bytes", key=key[:200])
    return key


def check_range(key: str, start: int, end: int | None) -> None:
    """``[start, end)`` with ``0 <= start <= end``; ranges past the end are clipped, not errors."""
    if start < 0 or (end is not None and end < start):
        raise InvalidInput(
            f"invalid byte range [{start}, {end}) for object {key!r}: need 0 <= start <= end", key=key
        )


def read_all(data: bytes | bytearray | memoryview | BinaryIO, key: str) -> bytes:
    """Payload as bytes, for backends that keep whole objects in memory anyway."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    if isinstance(data, io.TextIOBase):
        raise InvalidInput(f"object {key!r}: put needs bytes or a binary file, not a text file", key=key)
    return data.read()
