"""Validation of names and keys that come from users (promise 4).

Kept in one place so the API, the CLI, import, FUSE and LabelX all refuse the same
inputs with the same messages.
"""

from __future__ import annotations

import re

from datahub.errors import InvalidKey, InvalidName

NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
TAG_RE = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,62}")
MAX_KEY_BYTES = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_name(name: str, what: str = "dataset") -> str:
    """Return ``name`` if it is a valid dataset/workspace/project name, else raise InvalidName."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidName(
            f"invalid {what} name {name!r}: use 1-63 characters from [a-z0-9._-], starting with a letter or digit",
            name=name,
        )
    return name


def check_tag(tag: str) -> str:
    """Tags start with a letter, so they never collide with version numbers or ``latest``."""
    if not isinstance(tag, str) or not TAG_RE.fullmatch(tag) or tag == "latest":
        raise InvalidName(
            f"invalid tag {tag!r}: use 1-63 characters from [A-Za-z0-9._-], starting with a letter "
            "(and not 'latest')",
            tag=tag,
        )
    return tag


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
    if key.startswith("/"):
        raise InvalidKey(f"invalid key {key!r}: must be relative (no leading '/')", key=key)
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidKey(f"invalid key {key!r}: empty, '.' or '..' path segments are not allowed", key=key)
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: empty, or a key-like string (a trailing '/' is fine)."""
    if prefix == "":
        return prefix
    check_key(prefix.rstrip("/") or "x")
    return prefix
