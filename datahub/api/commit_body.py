"""A commit body read from its spooled file one change at a time (issue 12 item 3: bounded memory).

Parsing a 59 MB change set into Python dicts and then into a pydantic model of the whole
list took about 18x the body in server memory; even holding the body's bytes plus its
decoded text cost 2x. Here the body stays in the file the body-limits middleware spooled
it to (``datahub.api.limits``), and only a window of its text (a few hundred KiB) is
decoded at a time:

- pass 1 checks the whole body's JSON syntax and collects its top-level fields (each
  change is decoded and dropped), so a malformed body is refused before anything is
  written, and fields sent after the changes (``commit_id``, ``base``) are known first;
- pass 2 (``changes()``) reads the file again and turns the changes into pydantic models,
  one at a time, as ``Catalog.commit`` consumes them.

Invalid JSON or a change not matching the schema is the usual 422 ``validation_error``
(with the character position, or the change's index in ``loc``); raised from inside the
commit's generator, it aborts the commit with nothing written.
"""

from __future__ import annotations

import codecs
import io
import json
import re
from collections.abc import Iterator
from typing import IO, Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from datahub.api.schemas import CommitCreate, DeleteChange, PatchChange, PutChange, change_adapter

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
CHUNK = 256 * 1024  # bytes read from the file at a time; the window holds about two of these
_NEAR_END = 16  # a decode error this close to the window's end may only mean "read more"


def _invalid_json(pos: int, why: str) -> RequestValidationError:
    return RequestValidationError(
        [{"type": "json_invalid", "loc": ("body", pos), "msg": f"JSON decode error: {why}", "input": {}}]
    )


class _Window:
    """The body's text, decoded from the file as parsing advances; only a window is kept.

    Positions handed around are indexes into ``text``; ``offset`` is the number of
    characters dropped before it, so errors still name the position in the whole body.
    """

    def __init__(self, source: IO[bytes], chunk: int) -> None:
        self._source, self._chunk = source, chunk
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._read = 0
        self.text, self.offset, self.eof = "", 0, False

    def more(self, at_least: int = 0) -> bool:
        """Append the next chunk (or ``at_least`` bytes) of text; False once the file is exhausted."""
        if self.eof:
            return False
        data = self._source.read(max(at_least, self._chunk))
        try:
            text = self._utf8.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise _invalid_json(self._read + exc.start, "not UTF-8") from None
        self._read += len(data)
        self.eof = not data
        self.text += text
        return True

    def drop(self, pos: int) -> int:
        """Forget the text before ``pos`` once that is a chunk or more; ``pos`` in the new text."""
        if pos < self._chunk:
            return pos
        self.text, self.offset = self.text[pos:], self.offset + pos
        return 0

    def skip_ws(self, pos: int) -> int:
        while True:
            pos = _WS.match(self.text, pos).end()  # type: ignore[union-attr]  # matches ""
            if pos < len(self.text) or not self.more():
                return pos

    def peek(self, pos: int) -> str:
        """The character at ``pos`` ("" at the end of the body)."""
        while pos >= len(self.text) and self.more():
            pass
        return self.text[pos] if pos < len(self.text) else ""

    def expect(self, pos: int, chars: str) -> str:
        if not (char := self.peek(pos)) or char not in chars:
            raise _invalid_json(self.offset + pos, f"expected one of {chars!r}")
        return char

    def decode(self, pos: int) -> tuple[Any, int]:
        """The JSON value at ``pos`` and the position after it, reading on while it is cut off."""
        want = self._chunk
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, pos)
            except json.JSONDecodeError as exc:
                cut_off = exc.pos >= len(self.text) - _NEAR_END or exc.msg.startswith("Unterminated string")
                if cut_off and self.more(want):
                    want *= 2  # one huge value costs O(its size) reads, not O(size^2)
                    continue
                raise _invalid_json(self.offset + exc.pos, exc.msg) from None
            # A number at the very end of the window may go on in the next chunk.
            if end == len(self.text) and self.more(want):
                want *= 2
                continue
            return value, end


# Events of one walk over the body: a top-level field, the start of a "changes" array, an element.
_FIELD, _ARRAY, _ITEM = "field", "array", "item"


def _walk(window: _Window) -> Iterator[tuple[str, Any, Any]]:
    """The body's top-level fields and the elements of its ``changes`` arrays, in file order;
    raises the 422 for anything that is not one JSON object (trailing data included)."""
    pos = window.skip_ws(0)
    window.expect(pos, "{")
    pos = window.skip_ws(pos + 1)
    if window.peek(pos) == "}":
        pos += 1
    else:
        while True:
            window.expect(pos, '"')
            key, pos = window.decode(pos)
            pos = window.skip_ws(pos)
            window.expect(pos, ":")
            pos = window.skip_ws(pos + 1)
            if key == "changes" and window.peek(pos) == "[":
                yield _ARRAY, key, None
                pos = window.skip_ws(pos + 1)
                if window.peek(pos) == "]":
                    pos += 1
                else:
                    while True:
                        value, pos = window.decode(pos)
                        yield _ITEM, key, value
                        pos = window.skip_ws(window.drop(pos))
                        if window.expect(pos, ",]") == "]":
                            pos += 1
                            break
                        pos = window.skip_ws(pos + 1)
            else:
                value, pos = window.decode(pos)
                yield _FIELD, key, value
            pos = window.skip_ws(window.drop(pos))
            if window.expect(pos, ",}") == "}":
                pos += 1
                break
            pos = window.skip_ws(pos + 1)
    if window.skip_ws(pos) != len(window.text):
        raise _invalid_json(window.offset + pos, "extra data after the object")


class CommitBody:
    """The top-level fields, validated; ``changes()`` decodes the change set lazily from the file.

    ``source`` is a seekable binary file (the spooled request body) or the body's bytes; it
    must stay open until ``changes()`` has been consumed.
    """

    def __init__(self, source: IO[bytes] | bytes, *, chunk: int | None = None) -> None:
        self._source = io.BytesIO(source) if isinstance(source, bytes | bytearray) else source
        self._chunk = chunk or CHUNK
        fields: dict[str, Any] = {}
        self._arrays = 0  # "changes" arrays seen; as in json.loads, the last "changes" field wins
        self._changes_array: int | None = None
        for event, key, value in _walk(self._open()):
            if event == _ARRAY:
                self._arrays += 1
                self._changes_array = self._arrays
                # An empty list stands in for the array, so a missing or non-array "changes"
                # is refused by the model as usual.
                fields[key] = []
            elif event == _FIELD:
                fields[key] = value
                if key == "changes":
                    self._changes_array = None
        try:
            self.fields = CommitCreate.model_validate(fields)
        except ValidationError as exc:
            raise RequestValidationError(_located(exc, ("body",))) from None

    def _open(self) -> _Window:
        self._source.seek(0)
        return _Window(self._source, self._chunk)

    def changes(self) -> Iterator[PutChange | DeleteChange | PatchChange]:
        """The changes, validated one at a time (the file is read again from its start)."""
        if self._changes_array is None:
            return
        arrays, i = 0, 0
        for event, _, value in _walk(self._open()):
            if event == _ARRAY:
                arrays += 1
            if arrays != self._changes_array:
                continue
            if event == _FIELD:  # past the chosen array: the rest was checked in pass 1
                return
            if event == _ITEM:
                try:
                    yield change_adapter().validate_python(value)
                except ValidationError as exc:
                    raise RequestValidationError(_located(exc, ("body", "changes", i))) from None
                i += 1


def _located(exc: ValidationError, prefix: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [{**e, "loc": (*prefix, *e["loc"])} for e in exc.errors(include_url=False)]
