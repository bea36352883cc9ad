"""A whole batch of puts checked at once: the common case of a large commit, without a Python
step per record.

Why: a commit of 10^8 records spent ~40 % of its CPU in the per-change checks of
``catalog.validated_changes`` (four calls, a regex and a JSON encoding per record; issue 38).
Here the same rules run over a batch's columns with C-level passes: ``map`` over attribute
getters, one regex over the batch's keys joined by newlines (no plain key or URL holds one),
``min``/``max`` over sizes and lengths, the C JSON encoder mapped over the metas.

``plain_puts(batch)`` says True only when every change is a ``Put`` that the per-change
checks would accept; whenever it cannot tell cheaply (a Delete or Patch, a non-ASCII key, a
``%`` in a URL, a subclass, a value that does not encode, deep brackets…) it says False and
the caller checks each change, which names the bad one exactly as before. So this module can
only ever skip work, never accept a change the per-change checks refuse
(``tests/catalog/test_batch_checks.py`` holds the two to the same answers).
"""

from __future__ import annotations

import json
import re
from itertools import repeat
from operator import attrgetter

from datahub.catalog.model import EMPTY, Put, Record
from datahub.storage import PLAIN_S3, PLAIN_S3_MAX
from datahub.validation import (
    LONG_DIGITS,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_KEY_BYTES,
    MAX_SIZE,
    PLAIN_KEY,
    UNREADABLE,
)

# Neither pattern's classes hold "\n", so a batch's values joined by newlines match these
# exactly when every value matches the single pattern (check_new_key's and check_record_fields'
# own fast tests).
_PLAIN_KEYS = re.compile(rf"(?:{PLAIN_KEY.pattern}\n)*{PLAIN_KEY.pattern}")
_PLAIN_URLS = re.compile(rf"(?:{PLAIN_S3.pattern}\n)*{PLAIN_S3.pattern}")

_RECORD = attrgetter("record")
_KEY, _URL, _ETAG, _SIZE = attrgetter("key"), attrgetter("url"), attrgetter("etag"), attrgetter("size")
_META, _LABELS = attrgetter("meta"), attrgetter("labels")
_PLAIN_MAPPINGS = {dict, type(EMPTY)}


def _refuse(o: object) -> object:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


# What sqlite_schema.dump_json writes (sorted, compact), but refusing NaN/Infinity as
# check_json_field does: a value this encodes is one the per-change check accepts (given the
# size and bracket bounds below).
_ENCODE = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _refuse, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, False
)


def plain_puts(batch: list) -> list[Record] | None:
    """The batch's records when every change is a ``Put`` the per-change checks accept, decided
    by C-level passes over the batch; None when any change needs (or might fail) those checks."""
    if not batch or set(map(type, batch)) != {Put}:
        return None
    records = list(map(_RECORD, batch))
    if set(map(type, records)) != {Record}:
        return None
    keys = list(map(_KEY, records))
    urls = list(map(_URL, records))
    etags = list(map(_ETAG, records))
    sizes = list(map(_SIZE, records))
    if (
        set(map(type, keys)) != {str}
        or set(map(type, urls)) != {str}
        or set(map(type, etags)) != {str}
        or set(map(type, sizes)) != {int}
        or max(map(len, keys)) > MAX_KEY_BYTES
        or max(map(len, urls)) > PLAIN_S3_MAX
        or not _PLAIN_KEYS.fullmatch("\n".join(keys))
        or not _PLAIN_URLS.fullmatch("\n".join(urls))
        or not all(map(str.strip, etags))
        or not "".join(etags).isascii()
        or min(sizes) < 0
        or max(sizes) > MAX_SIZE
    ):
        return None
    if not (
        _json_fields_plain(list(map(_META, records))) and _json_fields_plain(list(map(_LABELS, records)))
    ):
        return None
    return records


def _json_fields_plain(values: list) -> bool:
    """Every value is an empty mapping, or a plain dict that encodes to at most MAX_JSON_BYTES
    of JSON with too few brackets to nest deeper than MAX_JSON_DEPTH, without the marker key."""
    if not _PLAIN_MAPPINGS.issuperset(map(type, values)):
        return False  # Unreadable, other mappings, None, non-mappings: the per-change check decides
    full = [v for v in values if v]
    if not full:
        return True
    if any(map(dict.__contains__, full, repeat(UNREADABLE))) or _ENCODE is None:
        return False
    try:
        whole = "".join(_ENCODE(full, 0))  # one C call for the batch (half the cost of one each)
        if "\\ud" in whole or "\\u0000" in whole or LONG_DIGITS.search(whole):
            # a character above U+FFFF, a lone surrogate, a NUL (in a key?), or 19 digits (an
            # integer beyond 64 bits?): the per-change check decides
            return False
        if len(whole) <= MAX_JSON_BYTES and whole.count("{") == len(full) and whole.count("[") == 1:
            return True  # flat dicts (depth 1), none over the size bound since all together are not
        texts = list(map("".join, map(_ENCODE, full, repeat(0))))
    except (RecursionError, TypeError, ValueError):
        return False
    # the most brackets of one text bound its depth; the two maxima may come from different
    # texts, which only ever sends a batch to the per-change checks
    braces = max(map(str.count, texts, repeat("{")))
    return (
        max(map(len, texts)) <= MAX_JSON_BYTES
        and braces + max(map(str.count, texts, repeat("["))) <= MAX_JSON_DEPTH
    )
