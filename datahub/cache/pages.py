"""Pages: the unit every tier stores, and the on-disk/in-bucket format that guards them.

An object is cut into fixed-size pages (``page_size``; a small object is one page). A page
is named by (object URL, etag, page size, index): the etag makes the name refer to
immutable bytes, so a cached page never goes stale, and an object that changed gets new
names instead of overwriting old ones.

Persistent tiers (disk, shared) store a page as ``MAGIC | u32 header length | JSON header
| data``. The header repeats the page's name, its length and a checksum of the data
(crc32 from zlib, or xxh3 when the ``xxhash`` package is installed), so a page read back
is checked against the name it was asked for and against bit rot or truncation
(promise 2: never serve wrong bytes).
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from datahub.storage.base import ObjectRef

try:  # optional: xxh3 checks ~5x faster than crc32, which bounds disk-hit throughput
    import xxhash
except ImportError:  # pragma: no cover - depends on the environment
    xxhash = None

#: checksum name -> function; a page names the one it was written with, so both kinds verify
CHECKSUMS: dict[str, Callable[[bytes], int]] = {"crc32": zlib.crc32}
if xxhash is not None:
    CHECKSUMS["xxh3"] = xxhash.xxh3_64_intdigest
DEFAULT_CHECKSUM = "xxh3" if "xxh3" in CHECKSUMS else "crc32"

MAGIC = b"DHPAGE1\n"
_LEN = struct.Struct(">I")
PREFIX_LEN = len(MAGIC) + _LEN.size
MAX_HEADER = 64 * 1024


@dataclass(frozen=True, slots=True)
class PageKey:
    """The name of one page of one immutable object."""

    url: str
    etag: str
    page_size: int
    index: int
    digest: str = field(init=False, compare=False, repr=False)  # names the page's file/object
    object_id: str = field(init=False, compare=False, repr=False)  # names the object version (pins)

    def __post_init__(self) -> None:
        raw = f"{self.url}\0{self.etag}\0{self.page_size}\0{self.index}".encode()
        object.__setattr__(self, "digest", hashlib.blake2b(raw, digest_size=20).hexdigest())
        object.__setattr__(self, "object_id", object_id_of(self.url, self.etag))


def object_id_of(url: str, etag: str) -> str:
    return hashlib.blake2b(f"{url}\0{etag}".encode(), digest_size=16).hexdigest()


def page_count(size: int, page_size: int) -> int:
    return (size + page_size - 1) // page_size


def page_length(ref: ObjectRef, page_size: int, index: int) -> int:
    """How many bytes page ``index`` of ``ref`` holds (the last page may be short)."""
    return max(0, min(page_size, ref.size - index * page_size))


def pages_of(ref: ObjectRef, page_size: int) -> list[PageKey]:
    return [PageKey(ref.url, ref.etag, page_size, i) for i in range(page_count(ref.size, page_size))]


# --- the persistent page format -------------------------------------------------------------
def encode_header(key: PageKey, data: bytes | memoryview) -> bytes:
    header = json.dumps(
        {
            "url": key.url,
            "etag": key.etag,
            "page_size": key.page_size,
            "index": key.index,
            "size": len(data),
            "sum": [DEFAULT_CHECKSUM, CHECKSUMS[DEFAULT_CHECKSUM](data)],
        },
        separators=(",", ":"),
    ).encode()
    return MAGIC + _LEN.pack(len(header)) + header


def encode_page(key: PageKey, data: bytes) -> bytes:
    return encode_header(key, data) + data


def header_length(prefix: bytes) -> int | None:
    """Length of the JSON header given the first PREFIX_LEN bytes, or None if not a page."""
    if len(prefix) < PREFIX_LEN or not prefix.startswith(MAGIC):
        return None
    (n,) = _LEN.unpack_from(prefix, len(MAGIC))
    return n if 0 < n <= MAX_HEADER else None


def parse_header(raw: bytes) -> dict | None:
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def check_page(key: PageKey, header: dict | None, data: bytes) -> str | None:
    """Why ``data`` (with its stored header) is not page ``key``, or None when it is."""
    if header is None:
        return "unreadable header"
    expected = {"url": key.url, "etag": key.etag, "page_size": key.page_size, "index": key.index}
    for name, value in expected.items():
        if header.get(name) != value:
            return f"header names another page ({name}={header.get(name)!r})"
    if header.get("size") != len(data):
        return f"truncated: {len(data)} bytes of {header.get('size')}"
    algorithm, value = (header.get("sum") or [None, None])[:2]
    check = CHECKSUMS.get(algorithm)
    if check is None:
        return f"unknown checksum {algorithm!r}"
    if check(data) != value:
        return "checksum mismatch"
    return None


def decode_page(key: PageKey, blob: bytes) -> tuple[bytes | None, str | None]:
    """(data, None) for a sound page blob, else (None, reason)."""
    n = header_length(blob[:PREFIX_LEN])
    if n is None:
        return None, "not a page (bad magic)"
    header = parse_header(blob[PREFIX_LEN : PREFIX_LEN + n])
    data = blob[PREFIX_LEN + n :]
    problem = check_page(key, header, data)
    return (None, problem) if problem else (data, None)
