"""LOOKUP answered in C (third_party/pyfuse3/src/pyfuse3/lookup.h), on real mounts.

A read-only mount's namespace never changes and its FORGET is a no-op, so the daemon
publishes each positive LOOKUP answer to pyfuse3's C table; when the kernel asks again
(it dropped the dentry), the fastloop/io_uring threads answer from the table. What must
hold: the entry a reader gets from C is exactly Python's (inode, mode, size, times, ...),
bytes read through it are right, and what is not a fixed entry (a missing name, the
generated info file whose size changes) still reaches Python every time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fuse_adapter.fuse_ops import LOOKUP_IN_C
from fuse_adapter.layout import INFO_FILE
from tests.fuse.conftest import Dataset, FuseEnv, polled_mount, upload_dataset, wait_until
from tests.fuse.test_fastloop import FILES, TRANSPORTS, uses
from tests.fuse.test_passthrough import mount_stats

pytestmark = pytest.mark.fuse

GUARD = 60.0


def test_the_lookup_build_is_installed() -> None:
    assert LOOKUP_IN_C, "pyfuse3 lacks lookup.h (third_party/pyfuse3): run scripts/build_pyfuse3.sh"


def entry(path: Path) -> tuple:
    st = os.stat(path)
    return (st.st_ino, st.st_mode, st.st_nlink, st.st_uid, st.st_gid, st.st_size, st.st_blocks,
            st.st_blksize, st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)  # fmt: skip


def drop_dentries() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("2\n")  # dentries and inodes: LOOKUP again


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "lk", FILES)


@pytest.mark.exclusive  # drop_dentries(): every file system's dentries, inodes and their pages
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_name_looked_up_before_is_answered_in_c_with_pythons_entry(
    env: FuseEnv, files: Dataset, transport: str
) -> None:
    mnt = env.mountpoint("lk")
    with env.mounted(mnt, "lk", *TRANSPORTS[transport]):
        root = mnt / "lk" / f"v{files.seq}"
        first = {key: entry(root / key) for key in FILES}  # answered by Python, published
        wait_until(lambda: polled_mount(env).get("lookup_names_in_c", 0) >= len(FILES), GUARD)
        uses(env, transport)
        before = mount_stats(env)["lookups_answered_in_c"]
        for _ in range(2):
            drop_dentries()
            assert {key: entry(root / key) for key in FILES} == first
        wait_until(lambda: polled_mount(env)["lookups_answered_in_c"] >= before + 2 * len(FILES), GUARD)
        for key, data in FILES.items():
            assert (root / key).read_bytes() == data


@pytest.mark.exclusive  # drop_dentries()
def test_missing_names_and_generated_files_still_reach_python(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("lk")
    with env.mounted(mnt, "lk", "--passthrough"):
        root = mnt / "lk" / f"v{files.seq}"
        for key in FILES:
            entry(root / key)
        info = mnt / INFO_FILE
        assert info.exists()
        wait_until(lambda: polled_mount(env).get("lookup_names_in_c", 0) >= len(FILES), GUARD)
        names = mount_stats(env, cli=True)["lookup_names_in_c"]  # as the CLI shows it
        for _ in range(2):
            drop_dentries()
            with pytest.raises(FileNotFoundError):
                os.stat(root / "no-such-file")
            assert entry(info)[5] == len(info.read_bytes())  # its size as generated now
        wait_until(lambda: polled_mount(env)["lookups_answered_in_c"] > 0, GUARD)
        assert mount_stats(env)["lookup_names_in_c"] == names  # neither was published
