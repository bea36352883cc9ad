"""How an object key is written into an ``s3://`` or ``memory://`` URL, and read back.

Records and cache keys hold object URLs for good, so the rule has to be reversible for every
legal S3 key *and* leave the URLs already stored in catalogs meaning what they meant:

- ``encode_key`` escapes only ``%`` (``%25``), ``#`` (``%23``), ``?`` (``%3F``) and the
  non-printable C0 controls and DEL (``%00``..``%1F``, ``%7F``). A key without those
  characters is written exactly as before, so nearly every stored URL is unchanged.
- ``decode_key`` undoes exactly those escapes, in upper-case hex, and nothing else. A ``%``
  that does not start one of them is a literal ``%``: an old URL ``s3://b/pct%41`` still
  names the key ``pct%41`` (datahub wrote keys raw before this rule).
- A raw ``?`` or ``#`` is part of the key, never a query or fragment: old URLs such as
  ``s3://b/q?x=1`` (accepted, then unreadable, before this rule) now read their object.

The one residue: an old raw URL whose key literally contained ``%25``, ``%23``, ``%3F``,
``%00``..``%1F`` or ``%7F`` now decodes differently; such keys were rare and their URLs are
rewritten by re-importing. ``file://`` URLs keep full RFC 8089 percent-encoding (as
``Path.as_uri`` writes them) and are not handled here. docs/storage.md states the rule.
"""

from __future__ import annotations

import re

_ENCODE = re.compile(r"[%#?\x00-\x1f\x7f]")
_DECODE = re.compile(r"%(25|23|3F|[01][0-9A-F]|7F)")


def encode_key(key: str) -> str:
    """``key`` as it appears after ``s3://bucket/`` (see the module docstring)."""
    return _ENCODE.sub(lambda m: f"%{ord(m.group()):02X}", key)


def decode_key(text: str) -> str:
    """The key a URL path names: the inverse of ``encode_key``, lenient to old raw URLs."""
    return _DECODE.sub(lambda m: chr(int(m.group(1), 16)), text)
