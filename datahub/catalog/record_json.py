"""A record as one compact JSON array: the row of the remote catalog's record listings.

Why arrays: a listing of 10^7 records is CPU-bound at both ends of the wire. A client parses
``[key, url, etag, size, checksum, meta, labels]`` in ~60 % of the time the same record takes
as an object with key names, and a server can write it without building a dict (the SQLite
store even has SQLite build it, see ``SQLiteCatalogStore.list_record_json``). The column
order is ``RECORD_COLUMNS``, which the listing's header line declares to the client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from datahub.catalog.model import Record

RECORD_COLUMNS = ("key", "url", "etag", "size", "checksum", "meta", "labels")

_ROW = "[%s,%s,%s,%d,%s,%s,%s]"
_quote = json.encoder.encode_basestring_ascii  # a JSON string literal, as json.dumps writes it
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _refuse(o: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# One C encoder for meta/labels, made once: JSONEncoder.encode builds a new one per call,
# which was a quarter of a listing's server CPU. Stored meta is decoded JSON (no cycles).
_c_encoder = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _refuse, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
)


def encode_map(value: Mapping[str, Any]) -> str:
    """A meta/labels mapping as compact JSON (``{}`` when empty)."""
    if not value:
        return "{}"
    value = value if isinstance(value, dict) else dict(value)
    return "".join(_c_encoder(value, 0)) if _c_encoder else _encode(value)


def record_json(r: Record) -> str:
    """``r`` as one JSON array (no newline) in RECORD_COLUMNS order, written from a fixed
    template by the stdlib's C functions (no pydantic model or dict per record)."""
    return _ROW % (
        _quote(r.key),
        _quote(r.url),
        _quote(r.etag),
        r.size,
        _quote(r.checksum),
        encode_map(r.meta),
        encode_map(r.labels),
    )
