"""Late replies (issue 41, small41; third_party/pyfuse3/src/pyfuse3/dispatch.h, "late replies";
docs/writeback.md, "The request loop in C"): a workspace mount's dispatching threads keep a
handler's small reply and write it once the handler returned and the GIL is released, so the
reply's writev (which wakes the caller) holds no other thread out of Python.

One real mount. What must hold: every request is still answered (several writers' files come
back as written, their closes report what they did: a close past the quota fails with ENOSPC
and leaves no file), and at unmount the mount counts the replies written late, none failed.
A reply that must not wait (INIT, a notification) is not kept: the mount comes up and a
revert's entry invalidation reaches the kernel (``test_quota14`` and the loop20 tests cover
those paths with late replies on, as every workspace mount has them now).
"""

from __future__ import annotations

import ast
import errno
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env, wait_until
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

FILES = 48


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path_factory.mktemp("small41"), moto_endpoint)


@pytest.fixture(scope="module")
def mnt(env: FuseEnv) -> Iterator[Path]:
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws", "--quota", str(4 * 1024**2)):
        yield mnt


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def test_every_request_is_answered_and_the_files_come_back(mnt: Path) -> None:
    (mnt / "d").mkdir()
    files = {mnt / "d" / f"f{i:03d}": os.urandom(20_000 + 101 * i) for i in range(FILES)}
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda item: _write(*item), files.items()))
    assert {p: p.read_bytes() for p in files} == files
    assert sorted(os.listdir(mnt / "d")) == sorted(p.name for p in files)
    assert (mnt / "d" / "missing").exists() is False  # a negative LOOKUP, answered late too
    with pytest.raises(FileNotFoundError):
        (mnt / "d" / "missing").read_bytes()


def test_an_error_reply_is_written_late_too(mnt: Path) -> None:
    big = mnt / "big"
    with pytest.raises(OSError) as failed:
        _write(big, os.urandom(5 * 1024**2))  # past the 4 MiB quota: the WRITE or the close fails
    assert failed.value.errno in (errno.ENOSPC, errno.EDQUOT)
    assert not big.exists()  # reverted: the file had no acknowledged state
    _write(mnt / "after", b"still serving\n")
    assert (mnt / "after").read_bytes() == b"still serving\n"


def test_the_mount_counts_the_replies_it_wrote_late_at_unmount(env: FuseEnv, mnt: Path) -> None:
    log = env.root / f"mount-{mnt.name}.log"
    env.umount(mnt)
    wait_until(lambda: "requests run by C threads" in log.read_text(), 60)
    counts = ast.literal_eval(re.findall(r"requests run by C threads: (\{.*\})", log.read_text())[-1])
    # each file: a LOOKUP, CREATE, WRITE, FLUSH and RELEASE, every reply small enough to keep
    assert counts["late"] >= 5 * FILES, counts
    assert counts["late"] <= counts["dispatched"], counts  # one reply a request at most
    assert counts["late_failed"] == 0, counts
