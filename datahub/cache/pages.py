"""Pages: the unit every tier stores, and the on-disk/in-bucket format that guards them.

An object is cut into fixed-size pages (``page_size``; a small object is one page). A page
is named by (object URL, etag, page size, index): the etag makes the name refer to
immutable bytes, so a cached page never goes stale, and an object that changed gets new
names instead of overwriting old ones. The last page of a record of whole pages is named
apart (``ends_record``, ``page_key``): the etag pins the object, not the size a record
claims for it.

Persistent tiers (disk, shared) store a page as a header followed by the data. The header
repeats the page's name, its length and a checksum of the data (xxh3 from the ``xxhash``
package, or crc32 from zlib without it), so a page read back is checked against the name
it was asked for and against bit rot or truncation (promise 2: never serve wrong bytes).
Format 2 (written now) has a fixed binary header; format 1 (JSON header) is still read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import zlib
from collections.abc import Callable
from typing import NamedTuple

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


class PageKey(NamedTuple):
    """The name of one page of one immutable object.

    A NamedTuple because every read builds one and the tiers and the eviction policy hash
    and compare it several times: tuple construction, hash and equality run in C, where a
    frozen dataclass ran Python code for each (and hashed two digests up front that most
    reads never use). The digests are derived on demand."""

    url: str
    etag: str
    page_size: int
    index: int
    #: the last page of a record that ends on a page boundary (``page_key``): named apart
    #: from the page of the same index of a longer record of the same object version
    ends_record: bool = False

    @property
    def digest(self) -> str:
        """Names the page's file/object: 40 hex digits of blake2b over ``name``."""
        return _digest(self)

    @property
    def object_id(self) -> str:
        """Names the object version (pins hold these)."""
        return object_id_of(self.url, self.etag)

    @property
    def name(self) -> bytes:
        """The page's full name as bytes: what its digest hashes and its stored header repeats."""
        return page_name(self.url, self.etag, self.page_size, self.index, self.ends_record)


@functools.lru_cache(maxsize=4096)
def _digest(key: PageKey) -> str:
    """Memoised: a cold page asks for its digest about five times (disk lookups, the page
    file, the index batch), and recent pages are the ones asked again."""
    return hashlib.blake2b(key.name, digest_size=20).hexdigest()


def page_name(url: str, etag: str, page_size: int, index: int, ends_record: bool = False) -> bytes:
    return f"{url}\0{etag}\0{page_size}\0{index}{END if ends_record else ''}".encode()


#: what a page name ends with when the page ends its record on a page boundary
END = "\0end"


def object_id_of(url: str, etag: str) -> str:
    return hashlib.blake2b(f"{url}\0{etag}".encode(), digest_size=16).hexdigest()


def page_count(size: int, page_size: int) -> int:
    return (size + page_size - 1) // page_size


def page_length(ref: ObjectRef, page_size: int, index: int) -> int:
    """How many bytes page ``index`` of ``ref`` holds (the last page may be short)."""
    return max(0, min(page_size, ref.size - index * page_size))


def ends(ref: ObjectRef, key: PageKey) -> bool:
    """Whether page ``key`` is the last of ``ref``: its origin read asks one byte past the
    record's end (``datahub.cache.origin.read_range``). A ragged last page's name is the
    object's page of that index (``ends_record`` marks only a whole last page), so the
    record, not the name, says it."""
    return (key.index + 1) * key.page_size >= ref.size


def page_key(ref: ObjectRef, page_size: int, index: int) -> PageKey:
    """The name of page ``index`` of ``ref``, the one way every read path names a record's page.

    A record of whole pages (its size a multiple of the page size) names its last page apart
    (``ends_record``). Why: the etag pins the object, not the size a record claims, and a
    shorter record's last whole page has the length and would have the name of the page of
    that index of the object's own record; once that page was cached, the shorter record was
    served the object's prefix as the file. Named apart, it is never found under the
    object's page: its origin read asks a byte past its end (``ends``), which a longer object
    answers, and ObjectChanged follows. Records that agree on the size share every page."""
    return PageKey(ref.url, ref.etag, page_size, index, (index + 1) * page_size == ref.size)


def pages_of(ref: ObjectRef, page_size: int) -> list[PageKey]:
    return [page_key(ref, page_size, i) for i in range(page_count(ref.size, page_size))]


# --- the persistent page format -------------------------------------------------------------
class PageHeader(NamedTuple):
    """What a stored page says about itself: whose bytes it holds, how many, and their checksum.

    (A NamedTuple: built on every disk hit, and a frozen dataclass costs several times more.)"""

    name: bytes  # PageKey.name of the page the file/object holds
    size: int
    algorithm: str
    checksum: int

    def key(self) -> PageKey | None:
        """The PageKey the header names (used to rebuild an index from page files)."""
        try:
            name = self.name.decode()
            ends_record = name.endswith(END)
            url, etag, page_size, index = name.removesuffix(END).rsplit("\0", 3)
            return PageKey(url, etag, int(page_size), int(index), ends_record)
        except ValueError:  # also UnicodeDecodeError
            return None


# Format 2 (written): MAGIC | fixed binary fields | name | zero padding | data. Binary, so a
# disk hit parses its header with one struct unpack and checks the name with one bytes
# comparison; the disk tier reads exactly ``header_size(key)`` bytes, then the data. The
# padding starts the data on a 64-byte boundary of the file: the kernel copies a page-cache
# read about 5 % faster when source and destination are equally aligned (measured).
MAGIC = b"DHPAGE2\n"
_FIXED = struct.Struct(">IQBQ")  # name length, data size, checksum id, checksum
PREFIX_LEN = len(MAGIC) + _FIXED.size
DATA_ALIGN = 64
_ALGORITHM_IDS = {"crc32": 1, "xxh3": 2}
_ALGORITHM_NAMES = {v: k for k, v in _ALGORITHM_IDS.items()}

# Format 1 (read only, pages written before format 2): MAGIC_V1 | u32 length | JSON header | data.
# Still read so an upgrade keeps its warm cache; replaced by format 2 as pages are refetched.
MAGIC_V1 = b"DHPAGE1\n"
_LEN_V1 = struct.Struct(">I")
PREFIX_LEN_V1 = len(MAGIC_V1) + _LEN_V1.size

MAX_HEADER = 64 * 1024

# Format 3 (disk tier): the file is the data alone, from offset 0, and the format-2 header
# (padding included) is this extended attribute of the file; see datahub.cache.disk.
XATTR = "user.datahub.page"


def header_size(key: PageKey) -> int:
    """Length of the format-2 header of page ``key``: one read of this many bytes gets it all."""
    return _padded(PREFIX_LEN + len(key.name))


def _padded(n: int) -> int:
    return -(-n // DATA_ALIGN) * DATA_ALIGN


def encode_header(key: PageKey, data: bytes | memoryview) -> bytes:
    name = key.name
    fixed = _FIXED.pack(
        len(name), len(data), _ALGORITHM_IDS[DEFAULT_CHECKSUM], CHECKSUMS[DEFAULT_CHECKSUM](data)
    )
    unpadded = PREFIX_LEN + len(name)
    return MAGIC + fixed + name + bytes(_padded(unpadded) - unpadded)


def encode_page(key: PageKey, data: bytes) -> bytes:
    return encode_header(key, data) + data


def header_length(prefix: bytes) -> int | None:
    """Total header length (where the data starts) given at least PREFIX_LEN leading bytes
    of a page, or None if they do not start a page of either format."""
    if prefix.startswith(MAGIC) and len(prefix) >= PREFIX_LEN:
        n = _FIXED.unpack_from(prefix, len(MAGIC))[0]
        length = _padded(PREFIX_LEN + n)
    elif prefix.startswith(MAGIC_V1) and len(prefix) >= PREFIX_LEN_V1:
        n = _LEN_V1.unpack_from(prefix, len(MAGIC_V1))[0]
        length = PREFIX_LEN_V1 + n
    else:
        return None
    return length if 0 < n <= MAX_HEADER else None


def parse_header(head: bytes) -> PageHeader | None:
    """The header of a page given its first ``header_length`` bytes, or None if unreadable."""
    if head.startswith(MAGIC):
        if len(head) < PREFIX_LEN:
            return None
        n, size, algorithm, checksum = _FIXED.unpack_from(head, len(MAGIC))
        end = PREFIX_LEN + n
        if len(head) != _padded(end) or head.count(0, end) != len(head) - end:  # padding is zeros
            return None
        name = head[PREFIX_LEN:end]
        return PageHeader(name, size, _ALGORITHM_NAMES.get(algorithm, str(algorithm)), checksum)
    if head.startswith(MAGIC_V1):
        return _parse_header_v1(head[PREFIX_LEN_V1:])
    return None


def _parse_header_v1(raw: bytes) -> PageHeader | None:
    try:
        header = json.loads(raw)
        url, etag, page_size, index, size = (header[f] for f in ("url", "etag", "page_size", "index", "size"))
        algorithm, checksum = header["sum"][:2]
    except (ValueError, TypeError, KeyError):  # UnicodeDecodeError is a ValueError
        return None
    types = [
        (url, str),
        (etag, str),
        (page_size, int),
        (index, int),
        (size, int),
        (algorithm, str),
        (checksum, int),
    ]
    if not all(isinstance(value, kind) for value, kind in types):
        return None
    return PageHeader(page_name(url, etag, page_size, index), size, algorithm, checksum)


def check_page(key: PageKey, header: PageHeader | None, data: bytes | memoryview) -> str | None:
    """Why ``data`` (with its stored header) is not page ``key``, or None when it is."""
    if header is None:
        return "unreadable header"
    if header.name != key.name:
        return f"header names another page ({header.name[:200]!r})"
    if header.size != len(data):
        return f"truncated: {len(data)} bytes of {header.size}"
    check = CHECKSUMS.get(header.algorithm)
    if check is None:
        return f"unknown checksum {header.algorithm!r}"
    if check(data) != header.checksum:
        return "checksum mismatch"
    return None


def decode_page(key: PageKey, blob: bytes) -> tuple[bytes | None, str | None]:
    """(data, None) for a sound page blob, else (None, reason)."""
    n = header_length(blob[:PREFIX_LEN])
    if n is None:
        return None, "not a page (bad magic)"
    header = parse_header(blob[:n])
    data = blob[n:]
    problem = check_page(key, header, data)
    return (None, problem) if problem else (data, None)
