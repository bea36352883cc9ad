"""What still reaches the daemon on a warm pass, counted on /dev/fuse with strace.

A warm ``os.open``/``os.read``/``os.close`` of a file sends the daemon nothing (zero-message
open, kept page cache, long entry/attr timeouts: the mount's mode with ``--no-passthrough``
and whenever FUSE passthrough is unavailable). Python's ``open()`` also calls
``isatty()``, an ioctl (TCGETS) that the kernel forwards as FUSE_IOCTL (opcode 39) on every
call: Linux <= 6.18 has no ``no_ioctl`` flag that would remember an ENOSYS answer (see
docs/fuse.md). That request must be the only one, at most one per open, and libfuse must
answer it ENOSYS itself (the daemon registers no ioctl handler), never with data.

strace (scripts/install.sh installs it) attaches to every thread of the daemon and records
the first bytes of each ``read`` (request header: length, opcode) and ``writev`` (reply
header: length, error) on the daemon's /dev/fuse descriptor. The warm pages are mlocked
while counting, so that kernel reclaim cannot turn into a READ (see
test_zero_message_open.py).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until
from tests.pagecache import pinned_in_page_cache, read_unbuffered

pytestmark = pytest.mark.fuse

FUSE_IOCTL = 39
N_FILES = 30

_CALL = re.compile(r"^(\d+)\s+(read|writev)\((\d+), (.*)$")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (read|writev) resumed>(.*)$")
_BYTES = re.compile(r'"((?:\\x[0-9a-f]{2})+)"')


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "warm", {f"d/f{i:02d}.bin": os.urandom(500 + 311 * i) for i in range(N_FILES)})


class FuseTrace:
    """strace on every thread of ``pid``: request opcodes and reply errors on /dev/fuse."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        self.fds = {
            int(fd.name) for fd in Path(f"/proc/{pid}/fd").iterdir() if os.readlink(fd) == "/dev/fuse"
        }
        assert self.fds, f"daemon {pid} holds no /dev/fuse descriptor"

    def __enter__(self) -> FuseTrace:
        strace = shutil.which("strace")
        assert strace, "strace is missing: run scripts/install.sh"
        cmd = [strace, "-f", "-qq", "-xx", "-s", "8", "-e", "trace=read,writev", "-o", str(self.out)]
        self.proc = subprocess.Popen([*cmd, "-p", str(self.pid)], stderr=subprocess.PIPE)
        wait_until(self._attached, 30)
        return self

    def _attached(self) -> bool:
        assert self.proc.poll() is None, f"strace exited: {self.proc.stderr.read().decode()}"
        tasks = list(Path(f"/proc/{self.pid}/task").iterdir())
        return all(_tracer(t) == self.proc.pid for t in tasks)

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)

    def messages(self) -> tuple[list[int], list[int]]:
        """(opcodes of the requests read, error fields of the replies written), in order."""
        requests, replies, pending = [], [], {}
        for line in self.out.read_text().splitlines():
            if m := _CALL.match(line):
                pid, call, fd, rest = m.groups()
                if "<unfinished" in rest:
                    pending[pid] = (call, int(fd))
                    continue
            elif m := _RESUMED.match(line):
                pid, call, rest = m.groups()
                call, fd = pending.pop(pid, (call, -1))
            else:
                continue
            if int(fd) not in self.fds or not (b := _BYTES.search(rest)):
                continue
            head = bytes.fromhex(b.group(1).replace("\\x", ""))
            if len(head) < 8:
                continue
            value = int.from_bytes(head[4:8], "little", signed=True)
            (requests if call == "read" else replies).append(value)
        return requests, replies


def _tracer(task: Path) -> int:
    try:
        status = (task / "status").read_text()
    except FileNotFoundError:
        return -1
    return int(re.search(r"^TracerPid:\s+(\d+)", status, re.M).group(1))


def _read_py(path: Path) -> bytes:
    with open(path, "rb") as f:  # buffered: open() asks isatty()
        return f.read()


@pytest.mark.parametrize("threads", [1, 8])
def test_a_warm_pass_sends_the_daemon_only_ioctls_that_libfuse_refuses(
    env: FuseEnv, files: Dataset, tmp_path: Path, threads: int
) -> None:
    """With 8 reader threads, ioctls queue up and datahub's pyfuse3 answers them in a burst."""
    mnt = env.mountpoint("warmreq")
    # zero-message opens: the mode without FUSE passthrough (which needs OPEN and RELEASE;
    # tests/fuse/test_passthrough.py covers it), and its fallback
    with env.mounted(mnt, "warm", "--no-passthrough") as proc:
        root = mnt / "warm" / f"v{files.seq}"
        paths = {root / key: data for key, data in files.objects.items()}
        for path, data in paths.items():  # cold: through the daemon, fills the page cache
            assert read_unbuffered(path) == data
        with pinned_in_page_cache(list(paths)):
            time.sleep(0.2)  # let replies to the cold pass (and any late request) drain
            with FuseTrace(proc.pid, tmp_path / "os.trace") as raw:
                assert {p: read_unbuffered(p) for p in paths} == paths
            with FuseTrace(proc.pid, tmp_path / "py.trace") as buffered, ThreadPoolExecutor(threads) as pool:
                assert dict(zip(paths, pool.map(_read_py, paths), strict=True)) == paths

    requests, replies = raw.messages()
    assert requests == [], f"warm os.open/os.read sent the daemon requests with opcodes {requests}"
    assert replies == []

    requests, replies = buffered.messages()
    assert set(requests) <= {FUSE_IOCTL}, (
        f"warm open() sent opcodes {sorted(set(requests))}, not only FUSE_IOCTL"
    )
    assert len(requests) <= len(paths), f"{len(requests)} requests for {len(paths)} warm opens"
    assert replies == [-errno.ENOSYS] * len(requests), (
        f"ioctl replies {replies}: libfuse should refuse each one"
    )
