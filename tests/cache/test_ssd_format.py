"""The page format behind disk hits: format 2 (binary header) is written and checked byte by
byte; format-1 pages (JSON header, written by earlier releases) still read; every kind of
damage is a miss that removes the page, never an exception or wrong bytes."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from datahub.cache import DiskTier, make_policy
from datahub.cache import pages as fmt
from datahub.cache.pages import PageKey, decode_page, encode_page

BUDGET = 1 << 20
KEY = PageKey("s3://bucket/images/0001.jpg", '"9b2cf535f27731c974343645a3985328"', 4096, 2)


def encode_page_v1(key: PageKey, data: bytes) -> bytes:
    """A page exactly as the format-1 writer (JSON header) stored it."""
    header = json.dumps(
        {
            "url": key.url,
            "etag": key.etag,
            "page_size": key.page_size,
            "index": key.index,
            "size": len(data),
            "sum": [fmt.DEFAULT_CHECKSUM, fmt.CHECKSUMS[fmt.DEFAULT_CHECKSUM](data)],
        },
        separators=(",", ":"),
    ).encode()
    return b"DHPAGE1\n" + struct.pack(">I", len(header)) + header + data


def make_disk(tmp_path: Path) -> DiskTier:
    return DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))


def test_format_2_header_is_binary_and_exactly_header_size_long() -> None:
    data = os.urandom(3000)
    blob = encode_page(KEY, data)
    assert blob.startswith(b"DHPAGE2\n")
    assert fmt.header_length(blob[: fmt.PREFIX_LEN]) == fmt.header_size(KEY) == len(blob) - len(data)
    assert fmt.header_size(KEY) % 64 == 0  # the data starts cache-line aligned in the file
    header = fmt.parse_header(blob[: fmt.header_size(KEY)])
    assert header.name == KEY.name and header.size == 3000 and header.key() == KEY
    assert decode_page(KEY, blob) == (data, None)


def test_every_byte_of_a_format_2_header_is_guarded() -> None:
    data = os.urandom(500)
    blob = encode_page(KEY, data)
    for pos in range(len(blob) - len(data)):
        damaged = bytearray(blob)
        damaged[pos] ^= 0x41
        assert decode_page(KEY, bytes(damaged))[0] is None, pos


@pytest.mark.parametrize("size", [0, 1, 4096])
def test_format_1_pages_still_decode_and_their_damage_is_detected(size: int) -> None:
    data = os.urandom(size)
    blob = encode_page_v1(KEY, data)
    assert decode_page(KEY, blob) == (data, None)
    assert fmt.parse_header(blob[: fmt.header_length(blob)]).key() == KEY
    assert "another page" in decode_page(PageKey(KEY.url, "other", 4096, 2), blob)[1]
    assert decode_page(KEY, blob + b"x")[1].startswith("truncated")
    if size:
        flipped = bytearray(blob)
        flipped[-1] ^= 1
        assert decode_page(KEY, bytes(flipped)) == (None, "checksum mismatch")
    # a JSON header with the right fields of the wrong types names no page
    wrong = blob.replace(b'"page_size":4096', b'"page_size":"4096"')
    assert decode_page(KEY, wrong) == (None, "unreadable header")


def test_disk_tier_reads_format_1_pages_and_rebuilds_its_index_from_them(tmp_path: Path) -> None:
    data = os.urandom(4000)
    disk = make_disk(tmp_path)
    assert disk.put(KEY, data)
    path = Path(disk._path(KEY))
    path.unlink()  # a new file, as an earlier release wrote it (no format-3 xattr)
    path.write_bytes(encode_page_v1(KEY, data))
    got = disk.get(KEY)
    assert got == data and type(got) is bytes and disk.counters.corrupt == 0
    assert list(disk._scan()) == [(KEY, 4000)]  # what an index rebuild adopts
    disk.close()


def test_a_disk_hit_is_a_bytes_object_of_the_page(tmp_path: Path) -> None:
    """``TieredCache.read`` returns a whole page without copying only when it is ``bytes``."""
    data = os.urandom(4096)
    disk = make_disk(tmp_path)
    disk.put(KEY, data)
    got = disk.get(KEY)
    assert type(got) is bytes and got == data
    disk.close()


@pytest.mark.parametrize(
    "damage",
    ["other-name", "huge-size", "short-header", "unknown-checksum", "no-data"],
)
def test_damaged_format_2_page_files_are_misses_and_removed(tmp_path: Path, damage: str) -> None:
    data = os.urandom(4096)
    disk = make_disk(tmp_path)
    assert disk.put(KEY, data)
    path = Path(disk._path(KEY))
    # The tier writes format 3 where the file system has user xattrs (data from offset 0,
    # header in the xattr); an older cache's format-2 file (header + data) is what this
    # damages. Without this, the "damage" changed data bytes of a format-3 file, and a
    # data byte already equal to the one written made a damage that changed nothing.
    blob = encode_page(KEY, data)
    path.write_bytes(blob)
    if disk.xattr_pages:
        os.removexattr(path, fmt.XATTR)
    assert disk.get(KEY) == data  # read as format 2, before the damage
    n = fmt.header_size(KEY)
    if damage == "other-name":  # a valid page of another key under this key's file name
        blob = encode_page(PageKey(KEY.url, KEY.etag, 4096, 3), data)
    elif damage == "huge-size":  # a size no page can have must not become a huge read
        blob = blob[:12] + struct.pack(">Q", 1 << 62) + blob[20:]
    elif damage == "short-header":
        blob = blob[: n - 1]
    elif damage == "unknown-checksum":
        blob = blob[:20] + b"\x09" + blob[21:]
    else:
        blob = blob[:n]
    path.write_bytes(blob)
    assert disk.get(KEY) is None
    assert disk.counters.corrupt == 1 and disk.counters.errors == 0
    assert not path.exists()
    assert disk.usage().used == 0
    disk.close()


def test_page_key_names_files_as_before_and_is_a_cheap_value() -> None:
    """Existing cache directories stay valid: the digest (the file name) is unchanged."""
    raw = f"{KEY.url}\0{KEY.etag}\0{KEY.page_size}\0{KEY.index}".encode()
    assert KEY.name == raw
    assert KEY.digest == hashlib.blake2b(raw, digest_size=20).hexdigest()
    assert KEY.object_id == hashlib.blake2b(f"{KEY.url}\0{KEY.etag}".encode(), digest_size=16).hexdigest()
    same = PageKey(KEY.url, KEY.etag, 4096, 2)
    assert same == KEY and hash(same) == hash(KEY) and {KEY: 1}[same] == 1
    assert PageKey(KEY.url, KEY.etag, 4096, 3) != KEY
    with pytest.raises(AttributeError):
        KEY.index = 5  # immutable: keys live in dicts and sets
