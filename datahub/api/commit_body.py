"""A commit body read one change at a time (issue 12 item 3: bounded memory per commit).

Parsing a 59 MB change set into Python dicts and then into a pydantic model of the whole
list took about 18x the body in server memory. Here the body's text is scanned once for
its top-level fields (each change is decoded and dropped), then the changes are decoded,
validated with the same pydantic models and turned into catalog ``Change`` objects one
at a time, as ``Catalog.commit`` consumes them. Memory stays near the body's bytes plus
its text. Invalid JSON or a change not matching the schema is the usual 422
``validation_error``, with the change's index in ``loc``; raised from inside the
commit's generator, it aborts the commit with nothing written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from datahub.api.schemas import ChangeIn, CommitCreate, DeleteChange, PatchChange, PutChange

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
_CHANGE: TypeAdapter[PutChange | DeleteChange | PatchChange] = TypeAdapter(ChangeIn)


def _invalid_json(pos: int, why: str) -> RequestValidationError:
    return RequestValidationError(
        [{"type": "json_invalid", "loc": ("body", pos), "msg": f"JSON decode error: {why}", "input": {}}]
    )


def _skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]  # matches the empty string


def _expect(text: str, pos: int, chars: str) -> str:
    if pos >= len(text) or text[pos] not in chars:
        raise _invalid_json(pos, f"expected one of {chars!r}")
    return text[pos]


def _decode(text: str, pos: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise _invalid_json(exc.pos, exc.msg) from None


def _elements(text: str, pos: int, end: list[int]) -> Iterator[Any]:
    """The elements of the JSON array starting at ``pos``; ``end[0]`` is set past its ``]``."""
    pos = _skip_ws(text, pos + 1)
    if pos < len(text) and text[pos] == "]":
        end.append(pos + 1)
        return
    while True:
        value, pos = _decode(text, pos)
        yield value
        pos = _skip_ws(text, pos)
        if _expect(text, pos, ",]") == "]":
            end.append(pos + 1)
            return
        pos = _skip_ws(text, pos + 1)


class CommitBody:
    """The top-level fields, validated; ``changes()`` decodes the change set lazily."""

    def __init__(self, raw: bytes) -> None:
        try:
            self._text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid_json(exc.start, "not UTF-8") from None
        text = self._text
        fields: dict[str, Any] = {}
        self._changes_at: int | None = None
        pos = _skip_ws(text, 0)
        _expect(text, pos, "{")
        pos = _skip_ws(text, pos + 1)
        if pos < len(text) and text[pos] == "}":
            pos += 1
        else:
            while True:
                _expect(text, pos, '"')
                key, pos = _decode(text, pos)
                pos = _skip_ws(text, pos)
                _expect(text, pos, ":")
                pos = _skip_ws(text, pos + 1)
                if key == "changes" and pos < len(text) and text[pos] == "[":
                    self._changes_at, end = pos, []
                    for _ in _elements(text, pos, end):  # syntax only; nothing kept
                        pass
                    pos = end[0]
                    fields["changes"] = []
                else:
                    fields[key], pos = _decode(text, pos)
                    if key == "changes":
                        self._changes_at = None
                pos = _skip_ws(text, pos)
                if _expect(text, pos, ",}") == "}":
                    pos += 1
                    break
                pos = _skip_ws(text, pos + 1)
        if _skip_ws(text, pos) != len(text):
            raise _invalid_json(pos, "extra data after the object")
        try:
            # Everything but the changes (an empty list stands in for an array, so a missing or
            # non-array "changes" is refused by the model as usual).
            self.fields = CommitCreate.model_validate(fields)
        except ValidationError as exc:
            raise RequestValidationError(_located(exc, ("body",))) from None

    def changes(self) -> Iterator[PutChange | DeleteChange | PatchChange]:
        if self._changes_at is None:
            return
        for i, value in enumerate(_elements(self._text, self._changes_at, [])):
            try:
                yield _CHANGE.validate_python(value)
            except ValidationError as exc:
                raise RequestValidationError(_located(exc, ("body", "changes", i))) from None


def _located(exc: ValidationError, prefix: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [{**e, "loc": (*prefix, *e["loc"])} for e in exc.errors(include_url=False)]
