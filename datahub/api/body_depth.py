"""Nesting depth of a request body, counted on its raw bytes as they arrive (issue 24 item 1).

Python's json decoder, pydantic and FastAPI all recurse: a body nested about 1,000 levels
deep ends in a RecursionError (a 500) wherever it is parsed, and each level costs stack and
memory before that. Counting brackets outside strings before anything parses the body refuses
such a body in one place (the body-limits middleware, which every route's body passes through)
in time linear in its size and constant memory, whatever the route, the content type or the
parser behind it.

The count is exact for valid JSON and NDJSON. On anything else it may be off only after the
first byte that makes the body invalid (an unmatched ``]``), and every parser the routes use
reads in order and stops at its first error, so no parser ever gets deeper than the count saw.
Valid UTF-8 JSON never holds a NUL byte and UTF-16/32 JSON always does (its first character is
ASCII), so a body with one is refused as not UTF-8 JSON (RFC 8259 8.1): its brackets could not
be counted as bytes.
"""

from __future__ import annotations

import re
from itertools import accumulate, count
from operator import sub

from datahub.validation import MAX_JSON_DEPTH

MAX_BODY_DEPTH = 64  # a commit's meta at its 32-level limit sits 36 levels deep in the body

_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')  # deleted: all that is left
_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # an escape, matched left to right as a decoder reads
_SLICE = 64 * 1024
_STEP = bytes.maketrans(b"[]{}", b"\x02\x00\x02\x00")  # an opening bracket +2, any bracket -1


class BodyError(ValueError):
    """Why a body was refused; ``at``: it was seen in the body's bytes before this offset."""

    def __init__(self, why: str, at: int) -> None:
        super().__init__(why)
        self.why, self.at = why, at


class DepthScanner:
    """Fed the body's chunks in order; ``feed`` raises BodyError once the body nests deeper than
    ``limit`` or holds a NUL byte. State between chunks: the depth, and whether the chunk ended
    inside a string (and right after its backslash)."""

    def __init__(self, limit: int = MAX_BODY_DEPTH) -> None:
        self.limit = limit
        self.depth = 0
        self._in_string = False
        self._escape = b""  # a backslash that ended the last chunk: it escapes the next byte
        self._seen = 0  # bytes fed so far
        self._done = False  # the body is already invalid JSON: its parser refuses it first

    def feed(self, data: bytes, *, last: bool = False) -> None:
        """The next bytes of the body; ``last``: no more follow."""
        few = last and not self._seen and data.count(b"[") + data.count(b"{") <= self.limit
        if few and b"\x00" not in data:  # a whole body with so few brackets cannot nest deeper
            self._seen = len(data)
            return
        for at in range(0, len(data), _SLICE):  # bounds the per-slice lists below
            self._feed(data[at : at + _SLICE])

    def _feed(self, chunk: bytes) -> None:
        """Bulk byte operations only (C loops): drop escapes, keep quotes and brackets, drop
        quote pairs with nothing between them (which changes no bracket's inside-or-outside,
        that being the parity of the quotes before it); what quotes remain delimit strings
        that hold brackets, split off in one pass."""
        start, self._seen = self._seen, self._seen + len(chunk)
        if self._done or not chunk:
            return
        if (nul := chunk.find(b"\x00")) >= 0:
            raise BodyError("it is not UTF-8 JSON (it holds a NUL byte): send UTF-8", start + nul + 1)
        text = self._escape + chunk
        self._escape = b""
        if escapes := text.count(b"\\"):
            # Escaped backslashes pair up from the left of each run, as a decoder reads them;
            # of the escapes left, only an escaped quote matters here. A few escapes: one
            # regex pass; many: two replaces, which cost the same however many there are.
            if escapes * 64 < len(text):
                text = _ESCAPE.sub(b"", text)
            else:
                text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
            if text.endswith(b"\\"):  # unpaired, so cut off from the byte it escapes
                text, self._escape = text[:-1], b"\\"
        structure = text.translate(None, _NOT_STRUCTURE)
        if self._in_string:
            structure = b'"' + structure
        structure = structure.replace(b'""', b"")
        if b'"' in structure:
            parts = structure.split(b'"')
            self._in_string = len(parts) % 2 == 0
            brackets = b"".join(parts[0::2])
        else:
            self._in_string = False
            brackets = structure
        if not brackets:
            return
        opens = brackets.count(b"[") + brackets.count(b"{")
        if self.depth + opens <= self.limit and self.depth - (len(brackets) - opens) >= 0:
            self.depth += 2 * opens - len(brackets)  # cannot cross either bound in this chunk
            return
        # depth after the i-th bracket (from 1) = depth + 2 * (opening brackets so far) - i
        running = list(map(sub, accumulate(brackets.translate(_STEP)), count(1 - self.depth)))
        if max(running) > self.limit:
            raise BodyError(
                f"it is nested deeper than {self.limit} levels (records' meta and labels may not "
                f"nest deeper than {MAX_JSON_DEPTH} levels): flatten them",
                self._seen,
            )
        if min(running) < 0:
            self._done = True  # an unmatched closing bracket: not JSON, refused by its parser
            return
        self.depth = running[-1]
