"""leftovers34: a consistent but short page file (header and body agree, 4000 bytes of a
5000-byte object's only page; only outside damage makes one) is replaced by the refill that
follows it once the origin's bytes agree with the record.

Before, ``TieredCache._wrong_length`` left it in the disk tier and the refill's ``put`` saw the
page "held already": the origin's right bytes passed through the cache, yet once the origin was
gone the object's own record failed with ObjectNotFound. A wrong record (the origin disagreeing
with it) still leaves the object's page file alone (tests/cache/test_caller31_sizeclaim.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from datahub.cache import open_cache
from datahub.cache import pages as fmt
from datahub.cache.pages import page_key
from tests.cache.conftest import local_origin_cache

PAGE = 64 * 1024
SIZE = 5000


def _page_files(config) -> list[Path]:
    return list((Path(config.resolved_disk_dir) / "pages").rglob("*.page"))


def test_the_refill_replaces_a_short_consistent_page_file(tmp_path: Path) -> None:
    with local_origin_cache(tmp_path, [SIZE], seed=34, page_size=PAGE) as (config, stores, objects):
        ref, data = objects[0]
        with open_cache(config, stores) as cache:
            assert cache.read(ref) == data
        [path] = _page_files(config)
        short = data[:4000]
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # damage in place: a whole, consistent 4000-byte page
        try:
            os.write(fd, short)
            os.setxattr(fd, fmt.XATTR, fmt.encode_header(page_key(ref, PAGE, 0), short))
        finally:
            os.close(fd)
        damaged = path.stat().st_ino
        with open_cache(config, stores) as cache:  # RAM empty: the disk tier's short page is met
            assert cache.read(ref) == data
        [path] = _page_files(config)
        assert path.stat().st_size == SIZE, "the short page file stayed after the origin's right bytes"
        assert path.stat().st_ino != damaged  # a new file renamed into place, not written over
        for f in (tmp_path / "origin").rglob("*"):
            if f.is_file():
                f.unlink()
        with open_cache(config, stores) as cache:  # the origin gone: the disk tier serves the object
            assert cache.read(ref) == data
            assert cache.read(ref, 1000, 3900) == data[1000:4900]
            fd = cache.passthrough.fd(ref, verify=True)
            assert fd is not None and fd >= 0
            try:
                assert os.pread(fd, SIZE + 1, 0) == data
            finally:
                os.close(fd)
