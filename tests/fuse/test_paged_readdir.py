"""READDIRPLUS of a paged version mount, packed in C from the directory page's columns
(pyfuse3's ``readdir_fill``, readdir.h; docs/fuse.md, "The namespace of a version mount"):
every name once, in key order, across several replies; a file shadowed by a directory of its
name not listed; non-ASCII names; and each entry's attributes (inode, mode, links, size,
blocks, mtime, owner) exactly what a GETATTR answers, so that ``ls -l`` and ``find`` cost no
LOOKUP or GETATTR per entry."""

from __future__ import annotations

import os
import stat

import pytest

from datahub.catalog import Put, Record, open_catalog
from tests.fuse.conftest import FuseEnv
from tests.fuse.fuse_tracepoint import FuseRequests

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")

MANY = 3000  # with 200-byte names: about 1 MB of READDIRPLUS, several replies
LONG = "n" * 190


def _records() -> dict[str, Record]:
    recs = {}
    for i in range(MANY):
        key = f"big/{LONG}{i:05d}.jpg"
        recs[key] = Record(key, f"s3://synthetic/{key}", f"{i:032x}", 1000 + i)
    for key, size, meta in (
        ("mixed/plain.bin", 0, {}),
        ("mixed/timed.bin", 513, {"mtime": 1_700_000_000.25}),
        ("mixed/old.bin", 7, {"mtime": 12.5}),
        ("mixed/été-ü.jpg", 4096, {}),
        ("mixed/a", 5, {}),  # shadowed by the directory a/
        ("mixed/a/b", 6, {}),
        ("mixed/zz/deep/x", 1, {}),
    ):
        recs[key] = Record(key, f"s3://synthetic/{key}", "e", size, meta=meta)
    return recs


def test_readdirplus_from_columns(env: FuseEnv) -> None:
    recs = _records()
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("cols")
        version = catalog.commit("cols", [Put(r) for r in recs.values()], message="columns")
    finally:
        catalog.close()
    dir_mtime = int(version.created_at * 1e9)
    mnt = env.mountpoint("cols")
    with env.mounted(mnt, "cols@v1", "--no-prefetch"):
        root = mnt / "cols" / f"v{version.seq}"
        for sub, expected in (
            ("big", sorted(k.rsplit("/", 1)[1] for k in recs if k.startswith("big/"))),
            ("mixed", sorted(["plain.bin", "timed.bin", "old.bin", "été-ü.jpg", "a", "zz"])),
        ):
            entries = list(os.scandir(root / sub))
            names = [e.name for e in entries]
            assert sorted(names) == expected and len(names) == len(set(names))
            if sub == "big":
                assert names == expected  # key order, through every reply
            inodes = {e.name: e.inode() for e in entries}
            assert len(set(inodes.values())) == len(entries)
            with FuseRequests(mnt) as requests:
                stats = {e.name: e.stat(follow_symlinks=False) for e in entries}
            # the attributes came with the entries: nothing asked per entry
            assert not {"FUSE_LOOKUP", "FUSE_GETATTR"} & set(requests.counts())
            for name, st in stats.items():
                assert st.st_ino == inodes[name]
                assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
                rec = recs.get(f"{sub}/{name}")
                if name in ("a", "zz"):
                    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o555
                    assert (st.st_nlink, st.st_size, st.st_mtime_ns) == (2, 0, dir_mtime)
                    continue
                assert rec is not None
                mtime = rec.meta.get("mtime")
                assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o444
                assert (st.st_nlink, st.st_size, st.st_blocks) == (1, rec.size, (rec.size + 511) // 512)
                assert st.st_mtime_ns == (dir_mtime if mtime is None else int(mtime * 1e9))
                assert st.st_blksize == 1024 * 1024
        # the shadowed file is absent; the directory that shadows it lists
        assert os.listdir(root / "mixed" / "a") == ["b"]
        # a later GETATTR (the kernel's attributes dropped) answers the same as the listing
        fresh = os.lstat(root / "mixed" / "timed.bin")
        assert (fresh.st_size, fresh.st_mtime_ns) == (513, int(1_700_000_000.25 * 1e9))


def test_readdir_fill_checks_its_columns() -> None:
    """Columns of different lengths, or name ends past the names, are refused before any
    byte is packed (a wrong page must never turn into a reply read out of bounds)."""
    pyfuse3 = pytest.importorskip("pyfuse3")
    from array import array

    token = pyfuse3.ReaddirToken()
    ok = dict(names=b"ab", ends=array("Q", [1, 2]), kinds=b"\0\0", skip=None, inos=array("Q", [5, 6]))
    ok |= dict(sizes=array("q", [1, 2]), mtimes=array("q", [0, 0]))
    args = (0, 0o100444, 0o40555, 0, 0, 4096, 1.0)
    for bad in (
        dict(ends=array("Q", [1, 3])),  # past the names
        dict(ends=array("Q", [2, 1])),  # out of order
        dict(inos=array("Q", [5])),  # one short
        dict(sizes=array("q", [1, 2, 3])),
        dict(skip=b"\0"),
        dict(mtimes=array("i", [0, 0])),  # 4-byte items
    ):
        with pytest.raises(ValueError):
            pyfuse3.readdir_fill(token, *({**ok, **bad}.values()), *args)
    assert pyfuse3.readdir_fill(token, *ok.values(), 2, *args[1:]) == 2  # past the end: nothing
