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

# A complete JSON string. Possessive, and never starting at a quote right after a backslash
# (in valid JSON only an escaped quote inside a string is), so the string a chunk cuts off is
# tried once, not once per escaped quote in it: linear time whatever the body.
_STR = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+'
_STRING = re.compile(rb"(?<!\\)" + _STR + rb'"', re.DOTALL)
_UNTERMINATED = re.compile(_STR, re.DOTALL)  # a cut-off string, unless it ends in a lone "\"
_SLICE = 64 * 1024
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
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
        self._carry = b""  # b'"' inside a string, b'"\\' inside one just after a backslash
        self._seen = 0  # bytes fed so far
        self._done = False  # the body is already invalid JSON: its parser refuses it first

    def feed(self, data: bytes) -> None:
        for at in range(0, len(data), _SLICE):  # bounds the per-slice lists below
            self._feed(data[at : at + _SLICE])

    def _feed(self, chunk: bytes) -> None:
        start, self._seen = self._seen, self._seen + len(chunk)
        if self._done or not chunk:
            return
        if (nul := chunk.find(b"\x00")) >= 0:
            raise BodyError("it is not UTF-8 JSON (it holds a NUL byte): send UTF-8", start + nul + 1)
        text = self._carry + chunk
        outside = _STRING.sub(b"", text)
        self._carry = b""
        # What is left of a quote on is the string the chunk cut off (no complete one followed).
        if (quote := outside.find(b'"')) >= 0:
            self._carry = b'"' if _UNTERMINATED.fullmatch(outside, quote) else b'"\\'
            outside = outside[:quote]
        brackets = outside.translate(None, _NOT_BRACKETS)
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
