"""A chunk of a change set's puts kept as the JSON lines they arrived in, checked whole by one
C regex and written by SQLite from the raw text: no Python object per record.

Why: at 10^8 records a commit's Python work per record (parsing a line, a ``Record``, the
checks, the planner, the row) cost ~16 us of the caller's thread, four times the 4 us a
record may cost at 250,000 records/s (issue 38 item 3, docs/benchmarks.md). A change-set
file (``datahub commit --changes``) of plain puts needs none of it: ``put_lines`` matches
each line of a chunk against one pattern (anchored per line, so a chunk passes only when
every line is a whole match), and the SQLite store inserts the chunk's lines, joined into
a JSON array, by C (``put_rows``: it only cuts the checked lines into fields) or else with
one ``INSERT … SELECT … FROM json_each(?)``.

The pattern accepts only lines whose checks are decided by the pattern itself and whose
stored row is the one the per-change path writes, byte for byte:

- ``{"op":"put","record":{"key":K,"url":U,"etag":E,"size":N[,"meta":M][,"labels":M]}}``,
  compact, in that order (what ``json.dumps(..., separators=(",", ":"))`` writes);
- K a plain key (``validation.PLAIN_KEY``: ASCII, no escapes, no ``.``/``..`` segment, no
  segment over 255 bytes), at most ``MAX_KEY_BYTES`` (checked on the extracted keys);
- U a plain ``s3://bucket/key`` URL (``storage.PLAIN_S3``); E printable ASCII, not blank,
  without ``"`` or ``\\``; N an integer below 10^18 (< ``MAX_SIZE``);
- M an object of ONE field, its name plain ASCII and not the ``datahub_unreadable`` marker,
  its value a plain ASCII string or an integer other than ``-0`` (so the text is what
  ``dump_json`` writes: one field needs no sorting; no escapes; no float formatting; and
  ``json.loads`` reads ``-0`` as 0, which the per-change path stores as ``0``).

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
_FIELD = (
    rf'\{{"(?!{UNREADABLE}")[A-Za-z0-9_.-]{{1,64}}":(?:"[ !#-\[\]-~]{{0,1024}}"|0|-?[1-9][0-9]{{0,15}})\}}'
)
_LINE = re.compile(
    rf'^\{{"op":"put","record":\{{"key":"({PLAIN_KEY.pattern})","url":"{PLAIN_S3.pattern}",'
    rf'"etag":"[!#-\[\]-~][ !#-\[\]-~]{{0,1023}}","size":(0|[1-9][0-9]{{0,17}})'
    rf'(?:,"meta":{_FIELD})?(?:,"labels":{_FIELD})?\}}\}}$',
    re.MULTILINE,
)
assert "\n" not in _LINE.pattern and "\\n" not in _LINE.pattern

CHUNK_LINES = 2000  # lines checked and inserted at once (one statement of the writer thread)

_KEY, _SIZE = itemgetter(0), itemgetter(1)
_CHECKED = object()


class PutLines:
    """Plain puts as JSON lines, every line checked (built only by ``put_lines``).

    ``text`` is the lines as one JSON array (what SQLite's ``json_each`` reads), ``keys`` the
    records' keys in line order, ``total_size`` the sum of their sizes."""

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
        for line in json.loads(self.text):
            r = line["record"]
            out.append(
                Put(
                    Record(
                        r["key"], r["url"], r["etag"], r["size"], "", r.get("meta", {}), r.get("labels", {})
                    )
                )
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
    found = _LINE.findall(text)  # at most one match per line, anchored: all match or some failed
    if len(found) != len(lines):
        return None
    keys = list(map(_KEY, found))
    if max(map(len, keys)) > MAX_KEY_BYTES:
        return None
    return PutLines(f"[{text[:-1].replace(chr(10), ',')}]", keys, sum(map(int, map(_SIZE, found))), _CHECKED)


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
