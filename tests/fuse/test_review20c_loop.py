"""review20c: the request loop in C (loop20) and O_DIRECT chunk writes (bigwrites20) under
contention, then kill -9 of the daemon: every file whose close(2) returned 0 comes back as it
was acknowledged.

One workspace mount with ``--threads 1`` (two C threads at most: the reader role is handed
over, or left vacant, at almost every blocking FLUSH) on a local shared tier (chunk files
written with O_DIRECT from the reused aligned buffers, a 4 MiB + 123 B file's chunk filled on
the request loop). Four writers rewrite a few names each (O_TRUNC, 1 MiB write(2)s, some
closes through a dup first: a FLUSH racing the same handle's next WRITEs), one handle is cut
by ftruncate(2) while it is written. The daemon is then killed in the middle of all that and
the workspace mounted again: each name must read as its last acknowledged bytes, or as the
bytes of the rewrite whose close was in flight at the kill (a commit the kill cut off from
its reply). The workspace is mounted again with ``--threads 300``: more threads than the C
loop runs (review20c's other finding). ``docs/writeback.md``, "The request loop in C".
"""

from __future__ import annotations

import errno
import os
import random
import threading
from pathlib import Path

import pytest

from tests.fuse.conftest import make_env, wait_until
from tests.fuse.test_remount import _kill_9
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

MiB = 1 << 20
SIZES = [
    3000,
    200_000,
    4 * MiB + 123,
    4 * MiB + 123,
]  # small files in packs; filled chunks (O_DIRECT) + tails


class Writers:
    """What each name was acknowledged as (its close returned 0), and what the one commit in
    flight at the kill (a close or a FLUSH of a dup whose reply the kill cut off: committed
    or not) would leave, per name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[str, bytes | None] = {}  # None: never acknowledged
        self.pending: dict[str, bytes] = {}  # the bytes the commit in flight would leave
        self.stop = threading.Event()
        self.closes = 0
        self.errors: list[OSError] = []  # an errno a killed daemon does not explain

    def _committing(self, name: str, data: bytes) -> None:
        with self.lock:
            self.pending[name] = data

    def run(self, root: Path, seed: int) -> None:
        r = random.Random(seed)
        while not self.stop.is_set():
            name = f"w{seed}-{r.randrange(3)}"
            data = os.urandom(r.choice(SIZES))
            with self.lock:
                self.acked.setdefault(name, None)
                self.pending.pop(name, None)  # an O_TRUNC open or a WRITE commits nothing
            try:
                fd = os.open(root / name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                try:
                    for off in range(0, len(data), MiB):
                        os.write(fd, data[off : off + MiB])
                        if r.random() < 0.3:  # a FLUSH of this handle: what it wrote so far is acknowledged
                            # its commit can land and the kill cut its reply off (close(2) of
                            # the dup fails): then the file is this prefix (stop 74: seen once
                            # in CI, a 4 MiB + 123 B file back as its 2 MiB prefix)
                            self._committing(name, data[: off + MiB])
                            os.close(os.dup(fd))
                            with self.lock:
                                self.acked[name] = data[: off + MiB]
                    self._committing(name, data)
                finally:
                    os.close(fd)
            except OSError as exc:  # the daemon was killed: nothing of this rewrite was acknowledged
                if exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED, errno.EIO):
                    with self.lock:
                        self.errors.append(exc)
                return
            with self.lock:
                self.acked[name] = data
                del self.pending[name]
                self.closes += 1


def _cut_while_written(root: Path, stop: threading.Event) -> None:
    """One handle written by a thread and cut by ftruncate(2) in another; its close must
    acknowledge what a read through it saw just before."""
    fd = os.open(root / "cut", os.O_CREAT | os.O_RDWR, 0o644)
    done = threading.Event()

    def cut() -> None:
        r = random.Random(7)
        while not done.is_set():
            os.ftruncate(fd, r.randrange(0, 6 * MiB))

    cutter = threading.Thread(target=cut)
    cutter.start()
    try:
        r = random.Random(8)
        for _ in range(40):
            os.pwrite(fd, os.urandom(r.choice([100, 70_000, MiB])), r.randrange(0, 6 * MiB))
    finally:
        done.set()
        cutter.join()
    size = os.fstat(fd).st_size
    seen = os.pread(fd, size + 1, 0)
    os.close(fd)
    assert len(seen) == size and (root / "cut").read_bytes() == seen
    (root / "cut.seen").write_bytes(seen)


def test_acknowledged_files_survive_kill_9_of_a_c_loop_daemon(
    tmp_path: Path, moto_endpoint: S3Endpoint
) -> None:
    env = make_env(tmp_path / "env", moto_endpoint)
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'shared_url = "{(env.root / "shared").as_uri()}"\n')
    mnt = env.mountpoint("ws")
    writers = Writers()
    with env.mounted(mnt, "--workspace", "ws", "--threads", "1") as proc:
        log = env.root / f"mount-{mnt.name}.log"
        wait_until(lambda: "run by pyfuse3's C threads (at most 2)" in log.read_text(), 30)
        root = mnt / "d"
        root.mkdir()
        _cut_while_written(root, writers.stop)
        threads = [threading.Thread(target=writers.run, args=(root, i)) for i in range(4)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: writers.closes >= 24, 120)
            _kill_9(proc, mnt)
        finally:
            writers.stop.set()
            for t in threads:
                t.join(60)
    assert not writers.errors, writers.errors
    # over the stale mount; --threads 300 (accepted: at least 1) runs at most 256 C threads
    # (dispatch.h's bound): before (review20c), --threads + 1 above it made pyfuse3.dispatch
    # raise once the mount was up, the daemon exited ("this is a datahub bug") and left the
    # mount point ENOTCONN
    env.cli("mount", str(mnt), "--workspace", "ws", "--background", "--threads", "300")
    try:
        root = mnt / "d"
        assert (root / "cut").read_bytes() == (root / "cut.seen").read_bytes()
        wrong = []
        for name, acked in writers.acked.items():
            try:
                got: bytes | None = (root / name).read_bytes()
            except FileNotFoundError:
                got = None
            # a rewrite opened with O_TRUNC and never acknowledged leaves the file as it was
            # acknowledged, or as the commit in flight at the kill left it
            if got != acked and got != writers.pending.get(name):
                wrong.append((name, None if got is None else len(got), None if acked is None else len(acked)))
        assert not wrong, wrong
    finally:
        env.cli("umount", str(mnt))
