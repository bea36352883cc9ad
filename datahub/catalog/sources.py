"""A dataset's ``sources``: the URL prefixes its records may point under (storage namespaces).

Why: readers read a record's URL with the deployment's credentials (mount processes, the
API server's previews, pack workers), so a URL in a record is a request to read that object
on the platform's behalf. Over HTTP only a global admin may say which storage a dataset's
records may name (``datahub.api.record_urls``); this module holds the one shape of such a
prefix and the one way a URL is found to be under it.

A prefix is ``s3://bucket/`` or ``memory://space/``, optionally followed by key segments,
ending in ``/``: a whole "folder", so ``s3://b/team1/`` never covers ``s3://b/team10/x``.
``file://`` and ``rados://`` name the deployment's own disk and Ceph pool, which only global
admins may record over HTTP whatever a dataset's sources say. URLs are compared after the
storage layer parses them (scheme case, percent-escapes), and a key with ``.`` or ``..``
segments is under no prefix, so no spelling of a URL escapes its prefix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from datahub.errors import InvalidInput
from datahub.storage import split_object_url
from datahub.validation import check_text

MAX_SOURCES = 64
MAX_SOURCE_CHARS = 1024
SOURCE_SCHEMES = ("s3", "memory")


def check_sources(sources: Iterable[str], dataset: str) -> tuple[str, ...]:
    """``sources`` as stored: each a valid prefix (scheme in lower case), no duplicates."""
    out: list[str] = []
    for source in sources:
        prefix = check_source(source, dataset)
        if prefix not in out:
            out.append(prefix)
    if len(out) > MAX_SOURCES:
        raise InvalidInput(
            f"dataset {dataset!r}: {len(out)} sources, more than {MAX_SOURCES}; "
            "allow a common prefix instead",
            dataset=dataset,
        )
    return tuple(out)


def check_source(source: object, dataset: str) -> str:
    """One prefix, checked: ``s3://bucket/[key/…/]`` or ``memory://space/[key/…/]``."""
    example = "e.g. s3://bucket/team/ (scheme s3 or memory, ending in /)"
    if not isinstance(source, str) or not source or len(source) > MAX_SOURCE_CHARS:
        raise InvalidInput(
            f"dataset {dataset!r}: a source must be a URL prefix of at most {MAX_SOURCE_CHARS} "
            f"characters, {example}",
            dataset=dataset,
        )
    check_text(source, f"source of dataset {dataset!r}:")
    scheme, sep, rest = source.partition("://")
    authority, slash, key = rest.partition("/")
    bad = (
        not sep
        or scheme.lower() not in SOURCE_SCHEMES
        or not authority
        or not slash
        or not source.endswith("/")
        or any(c in rest for c in "?#%\\")
        or _dot_segments(key[:-1])
    )
    if bad:
        raise InvalidInput(
            f"dataset {dataset!r}: invalid source {source!r}: {example}; no '.'/'..' segments, "
            "no '?', '#', '%' or '\\'",
            dataset=dataset,
            source=source,
        )
    return f"{scheme.lower()}://{rest}"


def under(url: str, prefixes: Iterable[str]) -> bool:
    """Whether the object ``url`` names lies under one of ``prefixes`` (checked prefixes).

    Compared as the storage layer reads the URL: the scheme in lower case and, only when the
    URL has a ``%``, its escapes decoded (``datahub.storage.urls``); without one the key is
    the URL's text as it is, so the common case is one ``startswith`` (a commit of 10^6 puts
    checks 10^6 URLs)."""
    prefixes = tuple(prefixes)
    scheme, sep, rest = url.partition("://")
    if not prefixes or not sep:
        return False
    if "%" in rest:
        try:
            root, key = split_object_url(url)
        except InvalidInput:
            return False
        rest = f"{root.partition('://')[2]}/{key}"
    else:
        key = rest.partition("/")[2]
    if _DOTS.search(key):
        return False
    return f"{scheme.lower()}://{rest}".startswith(prefixes)


_DOTS = re.compile(r"(?:^|/)\.\.?(?:/|$)")


def _dot_segments(key: str) -> bool:
    return _DOTS.search(key) is not None
