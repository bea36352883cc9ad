"""Validation of names and keys that come from users (promise 4).

Kept in one place so the API, the CLI, import, FUSE and LabelX all refuse the same
inputs with the same messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from datahub.errors import InvalidInput, InvalidKey, InvalidName, NameTooLong

NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
TAG_RE = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,62}")
# in any case: a tag "V3" made ds@V3 another version than ds@v3, and "Latest" not the head (review73)
_VERSION_LIKE = re.compile(r"v?[0-9]+|latest", re.IGNORECASE)
MAX_KEY_BYTES = 1024
# NUL/C0/DEL, and invisible format characters that make a key render as another one:
# zero-width and direction marks (U+200B-U+200F, and the Arabic letter mark U+061C), bidi
# embeddings/overrides (U+202A-U+202E) and isolates (U+2066-U+2069): "img/\u202egpj.exe" shows
# as "img/exe.jpg"; and the other format characters (Unicode category Cf) that render as
# nothing, so "img/c\u2060at.jpg" shows as "img/cat.jpg": the soft hyphen U+00AD, the word
# joiner and invisible operators U+2060-U+2064, the deprecated format characters U+206A-U+206F,
# the zero-width no-break space U+FEFF and the interlinear annotation controls U+FFF9-U+FFFB
# (review19b: these were shown as nothing and accepted in new keys).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A lone UTF-16 surrogate: Python strings (from JSON "\\ud800", or os.fsdecode) may hold one,
# but it is not text: it has no UTF-8 form, so no catalog, object store or file system keeps it.
_SURROGATE = re.compile("[\ud800-\udfff]")
# the contents of a regular expression class, for the tests that hold NEW_KEY_PATTERN to it
INVISIBLE_CHARS = "\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb"
_INVISIBLE = re.compile(f"[{INVISIBLE_CHARS}]")

ID_MAX = 2**32 - 2  # uid_t/gid_t: (uid_t)-1 means "no id" to the kernel; above it does not fit


def visible(text: str) -> str:
    r"""``text`` with each invisible format character written as ``⟨U+202E⟩``: a key stored
    before the rule (``img/\u202egpj.exe``) must not display as another (``img/exe.jpg``) on a
    page; HTML escaping leaves these characters as they are."""
    return _INVISIBLE.sub(lambda m: f"\u27e8U+{ord(m.group()):04X}\u27e9", text)


# The same rules as JSON Schema (ECMA-262) patterns, for the OpenAPI document: schema-valid
# input is what the checks below accept (tests/test_validation.py holds them to it).
NAME_PATTERN = "^[a-z0-9][a-z0-9._-]{0,62}$"
TAG_PATTERN = "^(?![Ll][Aa][Tt][Ee][Ss][Tt]$)(?![Vv][0-9]+$)[A-Za-z][A-Za-z0-9._-]{0,62}$"
REF_PATTERN = "^(v?[0-9]+|[A-Za-z][A-Za-z0-9._-]{0,62})$"
KEY_PATTERN = "^(?!/)(?!.*//)(?!.*/$)(?!(.*/)?[.][.]?(/|$))[^\\x00-\\x1f\\x7f]+$"  # check_key
# check_new_key, up to its per-segment rules: no invisible format characters either
NEW_KEY_PATTERN = (
    "^(?!/)(?!.*//)(?!.*/$)(?!(.*/)?[.][.]?(/|$))"
    "[^\\x00-\\x1f\\x7f\\u00ad\\u061c\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\ufeff\\ufff9-\\ufffb]+$"
)
# check_prefix: empty, only slashes, or a key (at most MAX_KEY_BYTES, as characters here)
# followed by any number of slashes.
PREFIX_PATTERN = "^(?:/*|(?!/)(?!.*//+[^/])(?!(.*/)?[.][.]?(/|$))(?=.{0,1023}[^/]/*$)[^\\x00-\\x1f\\x7f]+)$"
# Integers stay well inside the stores' signed 64 bits, and exact as JSON Schema numbers
# (doubles) too: so a schema-valid value is always one the server takes.
MAX_SEQ = 2**53 - 1  # the largest version number a reference may name
MAX_SIZE = 2**62  # bytes of one record (4 EiB)
_SEQ_DIGITS = len(str(MAX_SEQ))
MAX_JSON_DEPTH = 32  # nesting levels of a record's meta / labels (the mapping itself is level 1)
MAX_JSON_BYTES = 64 * 1024  # compact JSON size of each of meta / labels


def version_number(digits: str) -> int:
    """The number a version reference's digits name (0-9 only, checked by the caller; "-" first
    when negative), leading zeros and all: ``"003"`` is 3. A number with more digits than
    ``MAX_SEQ`` is ``MAX_SEQ + 1`` (``-1`` when negative): no version has it.

    Why not ``int(digits)``: CPython refuses to convert more than 4,300 digits (ValueError), so
    ``ds@999…`` (or ``ds@v000…3``) of that length reached ``Catalog.resolve``'s callers (the CLI,
    the API, the browser, ``datahub://``) and a mount's path as "this is a datahub bug", where a
    number too large to be a version is not found and ``v03`` is version 3 (review74)."""
    negative = digits.startswith("-")
    body = digits.removeprefix("-").lstrip("0") or "0"
    if len(body) > _SEQ_DIGITS:
        return -1 if negative else MAX_SEQ + 1
    return -int(body) if negative else int(body)


def check_name(name: str, what: str = "dataset") -> str:
    """Return ``name`` if it is a valid dataset/workspace/project name, else raise InvalidName."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidName(
            f"invalid {what} name {name!r}: use 1-63 characters from [a-z0-9._-], starting with a letter or digit",
            name=name,
        )
    return name


# what may name a version after '@' or as a REF argument: a number (3, v3), "-1" (the catalog
# answers "no such version"), a tag or latest; a tag's own rules (its length, not v3) are check_tag's
_REF_SHAPE = re.compile(r"v?[0-9]+|-[0-9]+|[A-Za-z][A-Za-z0-9._-]*")


def is_ref(text: str) -> bool:
    """Whether ``text`` can name a version (a number, a tag or latest): ``@v1`` (what follows
    the first '@' of ``sample@@v1``) and ``v1/train/`` cannot."""
    return isinstance(text, str) and _REF_SHAPE.fullmatch(text) is not None


def meant_ref(text: str) -> str | None:
    """The version ``text`` most likely meant (``@v1`` and ``sample@v1`` -> ``v1``, ``v1/a.jpg``
    -> ``v1``), or None when no part of it names one."""
    parts = text.strip().strip("@").split("@")
    if len(parts) > 2:  # v1@v2@v3: which one, nobody can tell
        return None
    guess = parts[-1].split("/", 1)[0].strip()
    return guess if is_ref(guess) else None


def not_a_version(dataset: str, ref: str) -> InvalidName:
    """The refusal of ``DATASET@REF`` whose REF cannot name a version, naming it as typed, the
    form and the version meant. Why: ``datahub ls sample@@v1`` said "invalid tag '@v1'", which
    named neither what was typed nor how a version is written, and no tag was typed (newuser72)."""
    typed = f"{dataset}@{ref}"
    meant = meant_ref(ref)
    hint = f"; did you mean '{dataset}@{meant}'?" if meant else ""
    return InvalidName(
        f"invalid version {typed!r}: write DATASET@VERSION, e.g. {dataset}@v1 (VERSION: a number such "
        f"as 1 or v1, a tag, or latest){hint}",
        name=typed[:200],
    )


def split_version(text: str) -> tuple[str, str | None]:
    """``"imagenet@v3"`` -> ("imagenet", "v3"); ``"imagenet"`` -> ("imagenet", None: latest).

    Nothing after the ``@`` is refused: ``sample@$REF`` with ``REF`` unset listed, exported,
    prefetched and mounted the latest version as if it had been asked for (newuser32); so is
    what names no version (``sample@@v1``, ``sample@v1/a.jpg``: ``not_a_version``)."""
    name, at, ref = text.partition("@")
    if not at and not NAME_RE.fullmatch(name):
        _refuse_other_separator(name)
    check_name(name)
    if at and not ref:
        raise InvalidInput(
            f"nothing after '@' in {text!r} (an empty shell variable?): name a version, "
            f"e.g. {name}@v1, {name}@latest or {name}@TAG, or write {name} alone for the latest"
        )
    if at and not is_ref(ref):
        raise not_a_version(name, ref)
    return name, ref or None


# NAME:REF (as a container image is named) or NAME/REF (as a mount lays a version out): the
# version meant, written with another separator than '@'
_OTHER_SEPARATOR = re.compile(
    r"([a-z0-9][a-z0-9._-]{0,62})[:/](v?[0-9]+|latest|[A-Za-z][A-Za-z0-9._-]{0,62})"
)


def _refuse_other_separator(text: str) -> None:
    """Refuse ``pets:v1`` and ``pets/v1`` naming the version they mean. Why: ``datahub ls
    pets:v1`` said only "invalid dataset name 'pets:v1': use 1-63 characters from [a-z0-9._-]",
    which names no way to write a version (newuser71)."""
    match = _OTHER_SEPARATOR.fullmatch(text) if isinstance(text, str) else None
    if match is not None:
        raise InvalidName(
            f"invalid dataset name {text!r}: a version is written NAME@REF; did you mean "
            f"'{match[1]}@{match[2]}'?",
            name=text,
        )


def check_tag(tag: str, *, existing: bool = False) -> str:
    """Tags never look like version references (``3``, ``v3``, ``latest``), in any case (``V3``,
    ``Latest``): ``@v3`` must always mean version 3, whoever tagged what, and ``@V3`` must not
    mean another one. ``existing=True`` (resolving or deleting a tag) still accepts such a name,
    so one stored before the rule can still be read and removed."""
    version_like = not existing and isinstance(tag, str) and _VERSION_LIKE.fullmatch(tag)
    if not isinstance(tag, str) or not TAG_RE.fullmatch(tag) or version_like:
        raise InvalidName(
            f"invalid tag {tag!r}: use 1-63 characters from [A-Za-z0-9._-], starting with a letter, "
            "and not a version reference such as 'v3' or 'latest' in any case ('V3', 'Latest')",
            tag=tag,
        )
    return tag


_NOT_UTF8 = "holds a lone surrogate (such as \\ud800), which has no UTF-8 form; send valid UTF-8 text"


def check_text(value: str, what: str) -> str:
    """Return ``value`` if it is text a catalog can store, else raise InvalidInput naming ``what``.

    Free text (an etag, a commit message, a description) may hold any character but a lone
    surrogate: without this check one reached SQLite's or BSON's UTF-8 encoder and came back to
    the user as a bare ``UnicodeEncodeError``.
    """
    if isinstance(value, str) and _SURROGATE.search(value):
        raise InvalidInput(f"invalid {what} {value[:200]!r}: {_NOT_UTF8}")
    return value


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative record key, else raise InvalidKey.

    Keys become paths under mounts and object-store prefixes, so anything that could
    escape a directory or confuse a file system is refused.
    """
    if not isinstance(key, str) or key == "":
        raise InvalidKey("invalid key: a record key must be a non-empty relative path", key=key)
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidKey(f"invalid key {key[:60]!r}...: longer than {MAX_KEY_BYTES} bytes", key=key[:200])
    if _CONTROL.search(key):
        raise InvalidKey(f"invalid key {key!r}: contains NUL or control characters", key=key)
    if _SURROGATE.search(key):
        raise InvalidKey(f"invalid key {key!r}: {_NOT_UTF8}", key=key.encode("utf-8", "replace").decode())
    if key.startswith("/"):
        raise InvalidKey(f"invalid key {key!r}: must be relative (no leading '/')", key=key)
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidKey(f"invalid key {key!r}: empty, '.' or '..' path segments are not allowed", key=key)
    return key


NAME_MAX = 255  # bytes of one path segment that Linux file systems can hold
# Keys every rule of check_new_key accepts, recognised at once: ASCII only (so characters are
# bytes: no control or invisible characters), segments of 1..NAME_MAX characters that never
# begin with "." (so no ".", "..", or reserved hint name), no leading "/" and no empty segment.
# Anything else (a segment beginning with ".", any non-ASCII) takes the full checks below.
PLAIN_KEY = re.compile(
    r"(?:[A-Za-z0-9_+=,@~-][A-Za-z0-9_.+=,@~ -]{0,254}/)*[A-Za-z0-9_+=,@~-][A-Za-z0-9_.+=,@~ -]{0,254}"
)
RESERVED_PREFIX = ".datahub-hint-"  # mount lookups of such names are read-order hints, never entries


def check_new_key(key: str) -> str:
    """``check_key`` plus what a new record, imported object or workspace file may not be.

    Applied where keys enter a version (import, commit, workspace create/rename, bucket
    snapshots); reads, deletes and patches keep ``check_key`` so records stored before these
    rules (such as a bidi-control key, issue 24 item 4) can still be read and removed.
    A segment over ``NAME_MAX`` bytes could be shown by a mount but not copied to a local file
    system, and a segment beginning with ``RESERVED_PREFIX`` is a hint name that a mount never
    shows as an entry (docs/semantics.md), so either would be committed and then unreachable.
    """
    if type(key) is str and len(key) <= MAX_KEY_BYTES and PLAIN_KEY.fullmatch(key):
        return key  # the common case, decided by one C regex (a 10^8-record commit checks 10^8)
    check_key(key)
    if _INVISIBLE.search(key):
        raise InvalidKey(
            f"invalid key {key!r}: contains invisible format characters (zero-width, "
            "bidirectional or other format characters that render as nothing: U+00AD, U+061C, "
            "U+200B-U+200F, U+202A-U+202E, U+2060-U+206F, U+FEFF, U+FFF9-U+FFFB) that make it "
            "display as another key; rename it",
            key=key,
        )
    for segment in key.split("/"):
        if len(segment.encode("utf-8", "surrogatepass")) > NAME_MAX:
            raise NameTooLong(  # InvalidKey, but ENAMETOOLONG at a workspace mount
                f"invalid key {key[:300]!r}: the path segment {segment[:40]!r}... is longer than "
                f"{NAME_MAX} bytes, which no local file system can hold; shorten it",
                key=key,
            )
        if segment.startswith(RESERVED_PREFIX):
            raise InvalidKey(
                f"invalid key {key!r}: names beginning with {RESERVED_PREFIX!r} are reserved for "
                "mount read-order hints and are never shown as files; rename it",
                key=key,
            )
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: empty, or a key-like string (a trailing '/' is fine)."""
    if prefix == "":
        return prefix
    check_key(prefix.rstrip("/") or "x")
    return prefix


# Principals name callers in access lists: a token's principal (``datahub token create
# --principal``: people and services, e.g. ``alice@example.com``), or a pod's Kubernetes service
# account as the CSI plugin spells it (``csi/access.py``): ``system:serviceaccount:NS:NAME``, with
# the namespace a DNS-1123 label and the name a DNS-1123 subdomain, as Kubernetes itself
# validates them. Nothing else: no markup, no control or format characters, nothing overlong.
# One pattern for Python and for the OpenAPI document (ECMA-262), so both accept the same.
_TOKEN_PRINCIPAL = "[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}"
_DNS_LABEL = "[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_DNS_SUBDOMAIN = f"(?=[-a-z0-9.]{{1,253}}$){_DNS_LABEL}(?:[.]{_DNS_LABEL})*"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
PRINCIPAL_PATTERN = f"^(?:{_TOKEN_PRINCIPAL}|{SERVICE_ACCOUNT_PREFIX}{_DNS_LABEL}:{_DNS_SUBDOMAIN})$"
# an access list's keys: a principal, or ``*`` for every caller
ACL_PRINCIPAL_PATTERN = f"^(?:[*]|{_TOKEN_PRINCIPAL}|{SERVICE_ACCOUNT_PREFIX}{_DNS_LABEL}:{_DNS_SUBDOMAIN})$"
_PRINCIPAL_RE = re.compile(PRINCIPAL_PATTERN)


def check_principal(principal: str) -> str:
    """The one principal rule: the API, the CLI and the CSI plugin all refuse the same names,
    so an operator can grant every principal a caller can actually present (promise 5)."""
    if not isinstance(principal, str) or not _PRINCIPAL_RE.fullmatch(principal):
        raise InvalidName(
            f"invalid principal {principal!r}: use a token's principal (1-128 characters from "
            "[A-Za-z0-9._@+-], starting with a letter or digit, e.g. alice@example.com) or a "
            "Kubernetes service account, system:serviceaccount:NAMESPACE:NAME "
            "(e.g. system:serviceaccount:team-a:trainer)",
            principal=principal,
        )
    return principal


def check_owner(owner: str, dataset: str) -> str:
    """A dataset's owner is a principal: an empty one would leave the dataset with no admin."""
    if not isinstance(owner, str) or not owner.strip():
        raise InvalidInput(
            f"invalid owner {owner!r} for dataset {dataset!r}: name a principal", dataset=dataset
        )
    return owner


def json_depth(value: Any, stop: int = MAX_JSON_DEPTH + 1) -> int:
    """Nesting depth of a JSON value (a scalar is 0, ``{}`` is 1), counted without recursion
    and giving up at ``stop``, so even a value nested 10**6 deep costs nothing to refuse."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping | list | tuple):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest >= stop:
                    return deepest
            stack.extend((v, depth) for v in (node.values() if isinstance(node, Mapping) else node))
    return deepest


def check_json_field(value: Any, what: str, key: str) -> None:
    """Bound a record's ``meta`` / ``labels``: at most MAX_JSON_DEPTH levels, MAX_JSON_BYTES.

    Every write path (API, CLI, import, LabelX, pack) commits through the catalog, which calls
    this: deeper values break JSON encoders and decoders that recurse (pydantic, json), and a
    version, being immutable, would stay unreadable for good.
    """
    if type(value) is dict or (isinstance(value, dict) and not value):  # the common cases, no ABC checks
        if not value:
            return
    elif value is None or (isinstance(value, Mapping) and not value) or isinstance(value, Unreadable):
        return  # most records have no meta/labels: they pay nothing; a legacy value is carried over
    elif not isinstance(value, Mapping):
        raise InvalidInput(f"record {key!r}: {what} must be a JSON object", key=key)
    if UNREADABLE in value:
        # the marker as the wire shows it: written back, it would replace the stored value
        raise InvalidInput(
            f"record {key!r}: {what} holds {UNREADABLE!r}, the marker shown for a value stored too deep "
            "to read; it cannot be written as a value (a copy through an export or a remote catalog "
            "cannot carry the stored value): give the record its real "
            f"{what}, or derive/patch it on the server that holds it",
            key=key,
        )
    try:  # the C encoder first: ~1 us for typical labels, and it bounds its own recursion
        # a dict goes straight to the C encoder (built once; the cycle a Python caller could
        # build ends in RecursionError: infinitely deep); other mappings through JSONEncoder
        text = "".join(_COMPACT_C(value, 0)) if _COMPACT_C and type(value) is dict else _COMPACT.encode(value)
    except RecursionError:
        raise _too_deep(what, key) from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"record {key!r}: {what} is not plain JSON: {exc}", key=key) from None
    # rare: a character above U+FFFF (escaped as a pair) or a lone surrogate, a NUL character,
    # 19 digits or more (in a number, or in a string): is it something a store cannot hold?
    if "\\ud" in text or "\\u0000" in text or LONG_DIGITS.search(text):
        _check_storable(value, what, key)
    size = len(text)  # ASCII (non-ASCII is escaped), so characters are bytes
    if size > MAX_JSON_BYTES:
        raise InvalidInput(
            f"record {key!r}: {what} is {size} bytes of JSON, over the {MAX_JSON_BYTES}-byte limit; "
            "store large annotations as objects and reference them",
            key=key,
        )
    # fewer brackets than the limit cannot nest deeper; only then walk the value
    if text.count("{") + text.count("[") > MAX_JSON_DEPTH and json_depth(value) > MAX_JSON_DEPTH:
        raise _too_deep(what, key)


#: 19 digits in a row: JSON text that may hold an integer beyond ``JSON_INT_MIN``..``JSON_INT_MAX``
#: (Python writes a float of 19 digits or more with an exponent)
LONG_DIGITS = re.compile(r"[0-9]{19}")
JSON_INT_MIN, JSON_INT_MAX = -(2**63), 2**63 - 1  # a signed 64-bit integer: what BSON holds


def _check_storable(value: Any, what: str, key: str) -> None:
    """Refuse in ``meta`` / ``labels`` what one catalog store holds and another does not
    (``unstorable``), naming the record, the value and what to write instead.

    Why: the SQLite store kept them (its JSON text) while MongoDB's BSON has no such integer, no
    text without a UTF-8 form and no field name with a NUL, so the same commit (an import of a
    manifest holding a 64-bit unsigned hash, a LabelX label) was a version on SQLite and a bare
    ``OverflowError`` or ``InvalidDocument`` ("this is a datahub bug") on MongoDB, and a catalog
    could not be copied from one store to the other (review73: integers; review74: NUL keys)."""
    found = unstorable(value)
    if found is None:
        return
    kind, node = found
    if kind == "text":
        raise InvalidInput(f"record {key!r}: {what} {_NOT_UTF8}", key=key)
    if kind == "key":
        raise InvalidInput(
            f"record {key!r}: {what} holds the key {node!r}, whose NUL character no catalog store's "
            "field name holds (MongoDB's cannot); rename it",
            key=key,
        )
    raise InvalidInput(
        f"record {key!r}: {what} holds the integer {node}, beyond the signed 64-bit range "
        f"({JSON_INT_MIN} to {JSON_INT_MAX}) that every catalog store holds; write it as a "
        f'string ("{node}")',
        key=key,
    )


def unstorable(value: Any) -> tuple[str, Any] | None:
    """The first thing found in a JSON value that MongoDB's BSON cannot hold though JSON text
    (SQLite) can: ``("integer", n)`` beyond ``JSON_INT_MIN``..``JSON_INT_MAX``, ``("text", s)`` a
    string or key with a lone surrogate (no UTF-8 form), ``("key", k)`` a key with a NUL
    character; None if there is none. The one rule of records' meta and labels
    (``check_json_field``) and of task jobs (``datahub.tasks.base.check_task_json``). A container
    met twice (a cycle) is not walked again: the store's encoder refuses such a value as before."""
    stack, seen = [value], set()
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii() and not _utf8(node):
                return "text", node
        elif isinstance(node, int):
            if not JSON_INT_MIN <= node <= JSON_INT_MAX:
                return "integer", int(node)
        elif isinstance(node, Mapping | list | tuple) and id(node) not in seen:
            seen.add(id(node))
            if isinstance(node, Mapping):
                for name in node:
                    if isinstance(name, str) and "\x00" in name:
                        return "key", name
                stack.extend(node)  # the keys: their text is checked as any string's
                stack.extend(node.values())
            else:
                stack.extend(node)
    return None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _too_deep(what: str, key: str) -> InvalidInput:
    return InvalidInput(
        f"record {key!r}: {what} is nested deeper than {MAX_JSON_DEPTH} levels; flatten it", key=key
    )


_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _not_json(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


_COMPACT_C = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _not_json, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False
)
UNREADABLE = "datahub_unreadable"  # the marker key read paths show instead of an unreadable field
_TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels; written before datahub refused such values"


class Unreadable(dict):
    """What read paths show for a stored ``meta`` / ``labels`` nested deeper than MAX_JSON_DEPTH:
    the one-key marker ``{"datahub_unreadable": "..."}``, carrying the stored value itself
    (``stored``: the JSON text SQLite holds, or the value MongoDB decoded).

    So a write that leaves the field alone (a labels-only patch, a derive) stores it again as
    it was, byte for byte, never the marker as if it were real meta (issue 24 item 5); a
    change that would have to merge into it is refused (``datahub.catalog.revisions``). Two
    of them are equal when their stored values are.
    """

    __slots__ = ("stored",)

    def __init__(self, stored: Any) -> None:
        super().__init__({UNREADABLE: _TOO_DEEP})
        self.stored = stored

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Unreadable):
            return dict.__eq__(self, other)  # a plain marker (as the wire shows it) is equal
        try:
            return bool(self.stored == other.stored)
        except RecursionError:
            return False

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def stored_text(self) -> str:
        """The stored value as JSON text (exactly the stored text when there is one)."""
        if isinstance(self.stored, str):
            return self.stored
        try:
            return json.dumps(self.stored, separators=(",", ":"), sort_keys=True)
        except RecursionError:
            raise InvalidInput(
                f"a stored value nested deeper than {MAX_JSON_DEPTH} levels cannot be copied"
            ) from None

    def stored_value(self) -> Any:
        """The stored value decoded (exactly the stored value when there is one)."""
        if not isinstance(self.stored, str):
            return self.stored
        try:
            return json.loads(self.stored)
        except RecursionError:
            raise InvalidInput(
                f"a stored value nested deeper than {MAX_JSON_DEPTH} levels cannot be copied"
            ) from None


def stored_json(value: Any) -> Any:
    """What read paths show for a stored ``meta`` / ``labels``: the value itself, or, for one
    written before the limits existed and nested deeper than MAX_JSON_DEPTH, an ``Unreadable``
    marker, so every record of every version stays listable, exportable and diffable instead
    of failing the whole listing."""
    if json_depth(value) > MAX_JSON_DEPTH:
        return Unreadable(value)
    return value


_SCAN = json.JSONDecoder().scan_once


def load_stored_json(text: str) -> Any:
    """Decode a stored JSON field for reading; see ``stored_json``. Cheap for normal values: a
    text with fewer brackets than the depth limit cannot be too deep."""
    if len(text) <= MAX_JSON_DEPTH or text.count("{") + text.count("[") <= MAX_JSON_DEPTH:
        # The C scanner straight away: stores write compact JSON, and listings decode one or two
        # of these per record (json.loads costs 3x as much for a typical small object).
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            end = -1
        return value if end == len(text) else json.loads(text)
    try:
        value = json.loads(text)
    except RecursionError:
        return Unreadable(text)
    return Unreadable(text) if json_depth(value) > MAX_JSON_DEPTH else value


# scheme, slashes and a user, then ":PASSWORD@" (up to the last "@" before the path): a URL's
# user part, also in a URL that is otherwise mistyped ("mongodb:/user:pw@host")
# "scheme://user:" and everything up to the URL's last "@": a password typed unescaped may hold
# "/", "?", "#" and "@" (review74), and masking more than the password is harmless
_URL_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/*[^/?#:@]*):[\s\S]*@")
#: what to do about a URL whose user part does not parse (``unparsable_url``)
ESCAPE_PASSWORD = (
    "a user name or password holding one of : / ? # @ % is written percent-escaped in a URL "
    "(%3A %2F %3F %23 %40 %25)"
)


def without_password(url: str) -> str:
    """``url`` with the password of its user part written ``****``
    (``mongodb://user:****@host/db``): what an error, a log line or a page may show of a URL
    it was given. Why: an error about a catalog URL reaches people who must not hold the
    catalog's password, such as the users of a pod's namespace, who read the CSI node plugin's
    NodePublishVolume errors in the pod's events (caller71). The password is everything up to
    the URL's last ``@``: one typed unescaped (``mongodb://u:a/b@host/db``, a generated password
    with a "/") was shown whole, since the rule stopped at its "/" (review74)."""
    return _URL_PASSWORD.sub(r"\1:****@", url, count=1)


def unparsable_url(url: str, what: str, form: str) -> InvalidInput:
    """The refusal of ``url`` (a ``what``: "catalog URL") that its client cannot parse, shown
    without its password and without the client's own reason, which quotes pieces of the URL
    (httpx's ``Invalid port: 'se'`` of ``http://u:se/cret@host``, pymongo's ``Bad database name
    "x@h/db"``): both are pieces of a password typed unescaped, the usual cause (review74)."""
    return InvalidInput(f"{what} {without_password(url)!r} does not parse as {form}; {ESCAPE_PASSWORD}")
