"""A name over 255 bytes (NAME_MAX) in a version committed before the commit rule refused such
segments (docs/semantics.md, "Keys"): a listing of the mount shows it, as a LOOKUP finds it and
``.datahub`` counts it among the version's files.

c29: READDIRPLUS of a paged directory is packed in C (pyfuse3's ``readdir_fill``, readdir.h),
which left every name of more than 255 bytes out while the LOOKUP (C's table or Python's
``PagedTree.lookup``) found it and ``.datahub`` ``files`` counted it: ``ls`` and ``find`` missed
files that ``stat`` and ``cat`` reached, and a walk's count disagreed with ``.datahub``. The
kernel takes names of up to 1,024 bytes in a FUSE dirent (and a key is at most 1,024 bytes),
so the listing now shows them, as the Python listing (``PagedTree.readdir``) always did."""

from __future__ import annotations

import json
import os

import pytest

from datahub.catalog import Put, Record, open_catalog
from datahub.validation import MAX_KEY_BYTES, NAME_MAX, check_key
from tests.fuse.conftest import FuseEnv

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")

SHORT = "d/short.bin"
KEYS = [
    SHORT,
    "d/" + "a" * NAME_MAX,  # the longest name the rule allows: listed before and after
    "d/" + "b" * (NAME_MAX + 1),
    "d/" + "é" * 150 + ".bin",  # 304 bytes of UTF-8 in 154 characters
    "d/" + "c" * (MAX_KEY_BYTES - 2),  # the longest segment a key can hold
    "e" * 300 + "/inside.bin",  # a directory's name over 255 bytes
]


def _commit_before_the_rule(env: FuseEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """The version as a catalog from before the NAME_MAX rule holds it: commit checked keys
    with ``check_key`` only (reads still do)."""
    monkeypatch.setattr("datahub.catalog.catalog.check_new_key", check_key)
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("old")
        catalog.commit(
            "old",
            [Put(Record(k, f"s3://synthetic/{i}", f"{i:032x}", 10 + i)) for i, k in enumerate(KEYS)],
            message="stored before the NAME_MAX rule",
        )
    finally:
        catalog.close()


def test_a_name_over_255_bytes_is_listed_as_it_is_looked_up(
    env: FuseEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    _commit_before_the_rule(env, monkeypatch)
    mnt = env.mountpoint("old")
    with env.mounted(mnt, "old@v1", "--no-prefetch"):
        root = mnt / "old" / "v1"
        files = {k for k in KEYS if "/" in k}
        # every name a lookup finds (a cold one: nothing listed yet) ...
        for i, key in enumerate(KEYS):
            assert os.stat(root / key).st_size == 10 + i, key
        # ... a listing shows, and a walk finds the files .datahub counts
        listed = sorted(e.name for e in os.scandir(root / "d"))
        assert listed == sorted(k[2:] for k in KEYS if k.startswith("d/"))
        assert sorted(os.listdir(root)) == ["d", "e" * 300]
        walked = {
            os.path.relpath(os.path.join(top, name), root)
            for top, _, names in os.walk(root)
            for name in names
        }
        assert walked == files
        info = json.loads((mnt / ".datahub").read_text())
        assert info["files"] == len(walked) == len(KEYS)
        # each listed entry's attributes are what a LOOKUP answers (READDIRPLUS filled them)
        for entry in os.scandir(root / "d"):
            assert entry.stat().st_size == os.stat(root / "d" / entry.name).st_size
