"""Record filters: ``labels.class=cat``, ``meta.split!=test``, ``labels.class=cat|dog``, ``labels.box?``.

A filter is a conjunction of terms separated by commas (or given as a list). Stores may
push terms down to their query language; ``matches`` is the reference semantics every
store must agree with (the conformance suite checks it).

A value may be written as JSON: ``labels.title="a, b|c"``, ``labels.box=[1, 2]``,
``labels.class="cat"|"dog"``. A ``,`` or ``|`` inside a JSON string or a JSON array or
object that starts a value is part of the value, not a separator; ``str(filter)`` writes a
value that way whenever it would not read back bare, so ``parse(str(f)) == f``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from datahub.catalog.model import Record
from datahub.errors import InvalidInput

_TERM = re.compile(
    r"^(?P<field>(labels|meta)\.[A-Za-z0-9_.-]+|key|size)\s*(?P<op>!=|=|>=|<=|>|<|\?)\s*(?P<value>.*)$"
)


@dataclass(frozen=True, slots=True)
class Term:
    field: str  # "labels.x", "meta.y", "key" or "size"
    op: str  # "=", "!=", ">", ">=", "<", "<=", "?" (exists)
    values: tuple[Any, ...] = ()

    def lookup(self, record: Record) -> tuple[bool, Any]:
        if self.field == "key":
            return True, record.key
        if self.field == "size":
            return True, record.size
        section, _, path = self.field.partition(".")
        node: Any = record.labels if section == "labels" else record.meta
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return False, None
            node = node[part]
        return True, node

    def matches(self, record: Record) -> bool:
        present, value = self.lookup(record)
        if self.op == "?":
            return present
        if not present:
            return self.op == "!="
        if self.op == "=":
            return any(_equal(value, v) for v in self.values)
        if self.op == "!=":
            return not any(_equal(value, v) for v in self.values)
        try:
            target = self.values[0]
            return {">": value > target, ">=": value >= target, "<": value < target, "<=": value <= target}[
                self.op
            ]
        except TypeError:
            return False


def _equal(value: Any, wanted: Any) -> bool:
    # a list-valued label (multi-label classification) matches if it contains the value
    if isinstance(value, list) and not isinstance(wanted, list):
        return wanted in value
    return value == wanted


_DECODER = json.JSONDecoder()


def _json_end(text: str, start: int) -> int:
    """Where the JSON string, array or object starting at ``text[start]`` ends, or -1 when it
    does not parse there (then the text is bare: read up to the next separator, as always)."""
    if start >= len(text) or text[start] not in '"[{':
        return -1
    try:
        return _DECODER.raw_decode(text, start)[1]
    except ValueError:
        return -1


def _split(text: str, sep: str, values: bool) -> list[str]:
    """``text`` cut at each ``sep`` outside JSON values (``values``: ``text`` is a term's
    values, each of which may be JSON; else a filter's terms, whose values may be).

    Why: ``,`` and ``|`` were cut wherever they were, so no value could hold them, however
    quoted (``labels.title="a, b"`` was refused as a term ``b"``), and ``str(filter)``
    wrote such values bare, which parsed back as other terms (newuser24). A quote or bracket
    counts only where a value starts, and only when a whole JSON value follows: a filter
    that parsed before means what it meant (``labels.x="abc`` is still the value ``"abc``)."""
    parts: list[str] = []
    begin = i = 0
    at_value = values  # where a value may start: the text's start (values), after an operator or '|'
    while i < len(text):
        c = text[i]
        if at_value and c in '"[{':
            end = _json_end(text, i)
            at_value = False
            if end > 0:
                i = end
                continue
        if c == sep:
            parts.append(text[begin:i])
            begin = i + 1
            at_value = values
        elif c in "=<>|" and not values:
            at_value = True  # a term's operator, or '|' between its values
        elif not c.isspace():  # any other character ('?' too, which takes no value)
            at_value = False
        i += 1
    parts.append(text[begin:])
    return parts


def _parse_value(text: str) -> Any:
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        return text


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_numeric(field: str, op: str, values: tuple[Any, ...], item: str) -> None:
    """``size`` compares with numbers only, and so does every ordering comparison (``>``, ``<=``
    ...) of labels/meta: ``size>abc`` would otherwise match nothing, silently."""
    numeric = field == "size" or (op in (">", ">=", "<", "<=") and field != "key")
    if numeric and op != "?" and not all(_is_number(v) for v in values):
        raise InvalidInput(
            f"invalid filter term {item!r}: {field}{op} needs a number, e.g. {field}{op}10",
            term=item,
        )


def _check_no_doubled_operator(field: str, op: str, raw: str, item: str) -> None:
    """``labels.class==cat`` reads as ``=`` with the value ``=cat``, which matches nothing, and
    silently. A bare value starting with ``=`` is refused with the syntax; one that really
    starts with ``=`` is written as a JSON string (``labels.class="=cat"``)."""
    if any(v.strip().startswith("=") for v in _split(raw, "|", True)):
        shown = raw.strip().lstrip("=").strip() or "VALUE"
        raise InvalidInput(
            f"invalid filter term {item!r}: {op}= is not an operator; write {field}{op}{shown} "
            f"(operators: = != > >= < <= ?; a value that starts with '=' is quoted: {field}{op}\"={shown}\")",
            term=item,
        )


_JOINED = re.compile(
    r"\s(and|AND|And|or|OR|Or|&&|&|\|\|)\s+((labels|meta)\.[A-Za-z0-9_.-]+|key|size)\s*(!=|=|>=|<=|>|<|\?)"
)


def _check_no_joined_term(field: str, op: str, raw: str, item: str) -> None:
    """``labels.class=cat and meta.split=val`` reads as one term whose value is ``cat and
    meta.split=val``, which matches nothing, and silently (newuser21). Terms are joined by
    commas; a value that really holds such words is written as a JSON string."""
    # the whole value too: `cat || size>1` is cut at each `|` into `cat `, `` and ` size>1`
    whole = [raw] if "||" in raw and '"' not in raw else []
    for value in [*_split(raw, "|", True), *whole]:
        if value.lstrip().startswith('"') or _json_end(value.lstrip(), 0) > 0:  # quoted: as it says
            continue
        m = _JOINED.search(value)
        if not m:
            continue
        first, rest = value[: m.start()].strip(), value[m.end(1) :].strip()
        if m[1].lower() in ("or", "||"):
            how = f"either of two values of one field is written with '|': {field}{op}{first}|VALUE"
        else:
            how = f"write {field}{op}{first},{rest}"
        # a value is cut at each `|` outside quotes: a quoted one may hold `||` (newuser24)
        quoted = f"; a value that really holds {m[1]!r} is quoted: {field}{op}{json.dumps(value.strip())}"
        raise InvalidInput(
            f"invalid filter term {item!r}: terms are joined by ',' (all must hold), not {m[1]!r}; {how}{quoted}",
            term=item,
        )


def _check_nothing_after_exists(field: str, raw: str, item: str) -> None:
    """``labels.class? meta.split=train`` (as LabelX's filter box showed it) read as
    ``labels.class?``, the rest dropped: every record with a class, whatever its split, and
    nothing said (newuser24). ``?`` takes no value; a next term follows a comma."""
    rest = raw.strip()
    if not rest:
        return
    how = f"write {field}?,{rest}" if _TERM.match(rest) else f"write {field}? alone"
    raise InvalidInput(
        f"invalid filter term {item!r}: {field}? (the field exists) takes no value, and terms "
        f"are joined by ','; {how}",
        term=item,
    )


@dataclass(frozen=True, slots=True)
class RecordFilter:
    terms: tuple[Term, ...]

    def matches(self, record: Record) -> bool:
        return all(t.matches(record) for t in self.terms)

    @classmethod
    def parse(cls, spec: str | Iterable[str] | None) -> RecordFilter | None:
        """Parse ``"labels.class=cat,meta.split!=test"``; InvalidInput names the bad term."""
        if spec is None:
            return None
        items = [s for s in (_split(spec, ",", False) if isinstance(spec, str) else spec) if s.strip()]
        if not items:
            return None
        terms = []
        for item in items:
            m = _TERM.match(item.strip())
            if not m:
                raise InvalidInput(
                    f"invalid filter term {item!r}: use labels.NAME=VALUE, meta.NAME!=VALUE, "
                    "labels.NAME=A|B, size>N, key=K or labels.NAME? (exists)",
                    term=item,
                )
            op, raw = m["op"], m["value"]
            _check_no_doubled_operator(m["field"], op, raw, item)
            _check_no_joined_term(m["field"], op, raw, item)
            if op == "?":
                _check_nothing_after_exists(m["field"], raw, item)
                values: tuple[Any, ...] = ()
            elif op in ("=", "!="):
                values = tuple(_parse_value(v) for v in _split(raw, "|", True))
            else:
                values = (_parse_value(raw),)
            _check_numeric(m["field"], op, values, item)
            terms.append(Term(m["field"], op, values))
        return cls(tuple(terms))

    def __str__(self) -> str:
        def shown(v: Any) -> str:
            """A string bare where it parses back as itself, else as JSON: a LabelX project
            keeps ``str(filter)`` and parses it again at export (``labels.class="=cat"``,
            ``labels.title="a, b"``)."""
            bare = isinstance(v, str) and v.isprintable() and v == v.strip() and _parse_value(v) == v
            if (
                bare
                and not v.startswith(("=", '"', "[", "{"))
                and not any(c in v for c in ",|")
                and not _JOINED.search(v)
            ):
                return v
            return json.dumps(v)

        def fmt(t: Term) -> str:
            vals = "|".join(shown(v) for v in t.values)
            return f"{t.field}{t.op}{vals}"

        return ",".join(fmt(t) for t in self.terms)
