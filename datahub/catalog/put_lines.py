"""A chunk of a change set's puts kept as the JSON lines they arrived in, checked whole by one
C regex and written by SQLite from the raw text: no Python object per record.

Why: at 10^8 records a commit's Python work per record (parsing a line, a ``Record``, the
checks, the planner, the row) cost ~16 us of the caller's thread, four times the 4 us a
record may cost at 250,000 records/s (issue 38 item 3, docs/benchmarks.md). A change-set
file (``datahub commit --changes``) of plain puts needs none of it: ``put_lines`` matches
each line of a chunk against one pattern (anchored per line, so a chunk passes only when
every line is a whole match) and rewrites it into a short JSON array per record in the same
C pass (``re.subn``), and the SQLite store inserts the chunk with one
``INSERT … SELECT … FROM json_each(?)`` over those arrays.

The pattern accepts only lines whose checks are decided by the pattern itself and whose
stored row is the one the per-change path writes, byte for byte:

- ``{"op":"put","record":{"key":K,"url":U,"etag":E,"size":N[,"meta":M][,"labels":M]}}``,
  compact, in that order (what ``json.dumps(..., separators=(",", ":"))`` writes);
- K a plain key (``validation.PLAIN_KEY``: ASCII, no escapes, no ``.``/``..`` segment, no
  segment over 255 bytes), at most ``MAX_KEY_BYTES`` (checked on the extracted keys);
- U a plain ``s3://bucket/key`` URL (``storage.PLAIN_S3``); E printable ASCII, not blank,
  without ``"`` or ``\\``; N an integer below 10^18 (< ``MAX_SIZE``);
- M an object of ONE field, its name plain ASCII and not the ``datahub_unreadable`` marker,
  its value a plain ASCII string or an integer (so the text is what ``dump_json`` writes:
  one field needs no sorting; no escapes; no float formatting).

Any other line (another key order, spaces, a checksum, several meta fields, a float, an
escape, a delete or patch, a bad value) sends its whole chunk through the per-line parser
and the per-change checks, which name the bad line exactly as before. So this path can
only skip work: ``tests/catalog/test_put_lines.py`` holds the two paths to the same rows and
the same errors. Stores that cannot take raw lines (MongoDB, the remote store) get the
same changes as ``Put`` objects (``PutLines.puts``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from operator import itemgetter

from datahub.catalog.model import Change, Put, Record
from datahub.storage import PLAIN_S3
from datahub.validation import MAX_KEY_BYTES, PLAIN_KEY, UNREADABLE

# None of these classes holds "\n", '"' or "\\": a match never spans lines, and every string's
# JSON text is its value.
_FIELD = rf'\{{"(?!{UNREADABLE}")[A-Za-z0-9_.-]{{1,64}}":(?:"[ !#-\[\]-~]{{0,1024}}"|-?(?:0|[1-9][0-9]{{0,15}}))\}}'
_LINE = re.compile(
    rf'^\{{"op":"put","record":\{{"key":"({PLAIN_KEY.pattern})","url":"({PLAIN_S3.pattern})",'
    rf'"etag":"([!#-\[\]-~][ !#-\[\]-~]{{0,1023}})","size":(0|[1-9][0-9]{{0,17}})'
    rf'((?:,"meta":{_FIELD})?(?:,"labels":{_FIELD})?)\}}\}}$',
    re.MULTILINE,
)
assert "\n" not in _LINE.pattern and "\\n" not in _LINE.pattern and _LINE.groups == 5
# Each line as a shorter JSON array, which SQLite reads ~1.5x faster than the line's nested
# object: ["key","url","etag",size] and the meta/labels tail as name, value pairs
# (,"meta",{…},"labels",{…}; the ":" after a name becomes "," below — every '"' is structural,
# and a one-field object's own field follows "{", never ",").
_ROW = r'["\1","\2","\3",\4\5]'
_KEY_SIZE = re.compile(r'^\["([^"]*)",(?:"[^"]*",){2}([0-9]+)', re.MULTILINE)

CHUNK_LINES = 2000  # lines checked and inserted at once (one statement of the writer thread)

_KEY, _SIZE = itemgetter(0), itemgetter(1)
_CHECKED = object()


class PutLines:
    """Plain puts as JSON lines, every line checked (built only by ``put_lines``).

    ``text`` is one JSON array of the records as ``["key","url","etag",size]`` plus
    ``"meta",{…}`` / ``"labels",{…}`` when the line has them (what SQLite's ``json_each``
    reads), ``keys`` the records' keys in line order, ``total_size`` the sum of their sizes."""

    __slots__ = ("text", "keys", "total_size")

    def __init__(self, text: str, keys: list[str], total_size: int, checked: object = None) -> None:
        if checked is not _CHECKED:  # a store writes the text unchecked: only put_lines may vouch for it
            raise TypeError("PutLines are built by put_lines(), which checks every line")
        self.text, self.keys, self.total_size = text, keys, total_size

    def __len__(self) -> int:
        return len(self.keys)

    def puts(self) -> list[Put]:
        """The same changes as ``Put`` objects (for stores that take objects, and digests)."""
        out = []
        for key, url, etag, size, *tail in json.loads(self.text):
            fields = dict(zip(tail[::2], tail[1::2], strict=True))
            out.append(
                Put(Record(key, url, etag, size, "", fields.get("meta", {}), fields.get("labels", {})))
            )
        return out


def put_lines(lines: list[str]) -> PutLines | None:
    """``lines`` (each one change, ending in "\\n" but for a file's last) as ``PutLines`` when
    every line is a plain put the pattern decides; None when any line needs the per-line path."""
    if not lines:
        return None
    text = "".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    if text.count("\n") != len(lines):
        return None  # a line with a newline inside (a caller's list, not a file's lines)
    rows, matched = _LINE.subn(_ROW, text)  # at most one match per line, anchored: all or some failed
    if matched != len(lines):
        return None
    found = _KEY_SIZE.findall(rows)
    keys = list(map(_KEY, found))
    if len(keys) != len(lines) or max(map(len, keys)) > MAX_KEY_BYTES:
        return None
    array = f"[{rows[:-1].replace(chr(10), ',')}]".replace(',"meta":{', ',"meta",{').replace(
        ',"labels":{', ',"labels",{'
    )
    return PutLines(array, keys, sum(map(int, map(_SIZE, found))), _CHECKED)


def expanded(changes: Iterable[Change | PutLines]) -> Iterator[Change]:
    """``changes`` with every ``PutLines`` as its ``Put`` objects, for a store that takes objects."""
    for change in changes:
        if isinstance(change, PutLines):
            yield from change.puts()
        else:
            yield change


def batches(changes: Iterable[Change | PutLines], size: int) -> Iterator[list[Change] | PutLines]:
    """Lists of at most ``size`` changes, and each ``PutLines`` as a batch of its own, in the
    change set's order; consumed lazily (bounded memory)."""
    batch: list[Change] = []
    for change in changes:
        if isinstance(change, PutLines):
            if batch:
                yield batch
                batch = []
            yield change
            continue
        batch.append(change)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
