"""review34: a page file whose header names this very page is still checked before its bytes
are handed out (``BackingFiles.open``, b97fc7a3 and 5a872063 trust the header's name to leave
a size disagreement alone).

The header is a claim: here it names the page while the body is short, long, or another
object version's bytes of the same length, or it claims another size than the record (and
the object) has. A passthrough open hands out no such file, and a read gives the object's
bytes (the origin's, when the file cannot serve them). A local-directory origin, a real disk
tier of format-3 page files, a fresh process (RAM empty) for every claim.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from datahub.cache import open_cache
from datahub.cache import pages as fmt
from datahub.cache.pages import page_key
from tests.cache.conftest import local_origin_cache

PAGE = 64 * 1024
SIZE = 5000


def _rewrite(path: Path, body: bytes, header: bytes) -> None:
    """The page file's body and header replaced in place (same inode: as damage would)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, body)
        os.setxattr(fd, fmt.XATTR, header)
    finally:
        os.close(fd)


def _short(key, data: bytes) -> tuple[bytes, bytes]:
    return data[:4000], fmt.encode_header(key, data)  # names the page and its 5000 bytes


def _long(key, data: bytes) -> tuple[bytes, bytes]:
    return data + b"tail", fmt.encode_header(key, data)


def _other_version(key, data: bytes) -> tuple[bytes, bytes]:
    other = bytes(b ^ 0x5A for b in data)  # the same length, other bytes
    return other, fmt.encode_header(key, data)


def _claims_a_prefix(key, data: bytes) -> tuple[bytes, bytes]:
    return data, fmt.encode_header(key, data[:4000])  # its checksum right for 4000 bytes of it


def _claims_a_prefix_and_is_one(key, data: bytes) -> tuple[bytes, bytes]:
    return data[:4000], fmt.encode_header(key, data[:4000])  # a whole, consistent 4000-byte page


@pytest.mark.parametrize(
    "damage", [_short, _long, _other_version, _claims_a_prefix, _claims_a_prefix_and_is_one]
)
def test_a_header_naming_the_page_is_no_proof_of_its_bytes(
    tmp_path: Path, damage: Callable[..., tuple[bytes, bytes]]
) -> None:
    with local_origin_cache(tmp_path, [SIZE], seed=34, page_size=PAGE) as (config, stores, objects):
        ref, data = objects[0]
        with open_cache(config, stores) as cache:
            assert cache.read(ref) == data
        files = list((Path(config.resolved_disk_dir) / "pages").rglob("*.page"))
        assert len(files) == 1
        key = page_key(ref, PAGE, 0)
        _rewrite(files[0], *damage(key, data))
        with open_cache(config, stores) as cache:
            for verify in (False, True):
                fd = cache.passthrough.fd(ref, verify=verify)
                if fd is not None and fd >= 0:
                    try:
                        assert os.pread(fd, SIZE + 1, 0) == data, "a damaged page file was handed out"
                    finally:
                        os.close(fd)
            assert cache.read(ref) == data
            assert cache.read(ref, 1000, 3900) == data[1000:4900]
            fd = cache.passthrough.fd(ref, fetch=True)
            if fd is not None and fd >= 0:
                try:
                    assert os.pread(fd, SIZE + 1, 0) == data
                finally:
                    os.close(fd)
