"""A workspace mount's request loop in C (issue 41, loop20; docs/writeback.md, "The request loop
in C"; third_party/pyfuse3/src/pyfuse3/dispatch.h).

By default pyfuse3's C threads read a workspace mount's requests and run its handlers
themselves (``pyfuse3.dispatch``): no trio task, no hop to a worker thread; a handler about to
block (a small file's FLUSH) lets another C thread read meanwhile. One real mount for the
file (and one ``--request-loop trio`` mount, the baseline). What must hold:

- the requests are run by the C threads (``pyfuse3-disp`` in /proc/PID/task), several
  writers' files come back as written, and the mount counts at unmount what its C threads ran
  and how often a FLUSH handed reading over;
- writers killed in the middle of their write(2)s and close(2)s (the kernel sends INTERRUPT
  for their requests in flight) leave the mount serving: later files are written and read;
- ``--request-loop trio`` keeps pyfuse3's trio loop (no C thread runs a handler).

- a handler that lets an exception out ends the session, as it ended the trio loop's
  ``main()``: the caller's request fails and the daemon exits, nobody is left waiting for an
  answer that never comes (``tests/fuse/session_loop_fs.py``'s ``boom`` file, dispatch mode).

The session loop's own rules in that mode (a blocking handler does not hold the others, with
every thread blocked the first to finish reads next, an unmount with handlers blocked) are
``tests/fuse/test_session_loop.py``'s ``dispatch`` cases.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fuse_adapter.daemon import is_mounted
from tests.fuse.conftest import REPO, FuseEnv, make_env, wait_until
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse


class Mounted:
    def __init__(self, env: FuseEnv, mnt: Path, pid: int) -> None:
        self.env, self.mnt, self.pid = env, mnt, pid
        self.log = env.root / f"mount-{mnt.name}.log"

    def threads(self) -> list[str]:
        names = []
        for comm in Path(f"/proc/{self.pid}/task").glob("*/comm"):
            try:
                names.append(comm.read_text().strip())
            except FileNotFoundError:  # a thread that ended meanwhile
                pass
        return names


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path_factory.mktemp("loop20"), moto_endpoint)


@pytest.fixture(scope="module")
def ws(env: FuseEnv) -> Iterator[Mounted]:
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws") as proc:
        yield Mounted(env, mnt, proc.pid)


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def test_the_c_threads_run_the_requests_and_several_writers_files_come_back(ws: Mounted) -> None:
    files = {ws.mnt / "d" / f"f{i:03d}.bin": os.urandom(1000 + 97 * i) for i in range(40)}
    (ws.mnt / "d").mkdir()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda item: _write(*item), files.items()))
    assert {p: p.read_bytes() for p in files} == files
    assert sorted(os.listdir(ws.mnt / "d")) == sorted(p.name for p in files)
    assert "workspace requests: run by pyfuse3's C threads" in ws.log.read_text()
    assert "pyfuse3-disp" in ws.threads()


def test_writers_killed_in_their_writes_leave_the_mount_serving(ws: Mounted) -> None:
    # each child writes files in a loop; SIGKILL interrupts whatever request it waits for
    code = (
        "import os, sys\n"
        "d = sys.argv[1]\n"
        "data = os.urandom(300_000)\n"
        "print('go', flush=True)\n"
        "i = 0\n"
        "while True:\n"
        "    with open(os.path.join(d, f'k{os.getpid()}-{i}'), 'wb') as f:\n"
        "        f.write(data)\n"
        "    i += 1\n"
    )
    (ws.mnt / "k").mkdir()
    for _ in range(3):
        children = [
            subprocess.Popen([sys.executable, "-c", code, str(ws.mnt / "k")], stdout=subprocess.PIPE)
            for _ in range(3)
        ]
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == b"go\n"
        # a few files each, so that the kill lands among their requests
        wait_until(lambda: len(os.listdir(ws.mnt / "k")) >= 6, 60)
        for child in children:
            child.send_signal(signal.SIGKILL)
        for child in children:
            child.wait(60)
            assert child.stdout is not None
            child.stdout.close()
    after = {ws.mnt / "k" / f"after{i}": os.urandom(50_000 + i) for i in range(8)}
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda item: _write(*item), after.items()))
    assert {p: p.read_bytes() for p in after} == after
    for name in os.listdir(ws.mnt / "k"):  # every file the children left reads as its size says
        path = ws.mnt / "k" / name
        assert len(path.read_bytes()) == path.stat().st_size


def test_the_mount_counts_what_its_c_threads_ran_at_unmount(ws: Mounted) -> None:
    ws.env.umount(ws.mnt)
    wait_until(lambda: "requests run by C threads" in ws.log.read_text(), 60)
    said = re.findall(r"requests run by C threads: (\{.*\})", ws.log.read_text())
    counts = ast.literal_eval(said[-1])  # a dict of ints, as the daemon logged it
    # 40 + 8 files above: each at least a LOOKUP, CREATE, WRITE, FLUSH and RELEASE; each FLUSH
    # that committed a file blocked, so it handed the reading over first
    assert counts["dispatched"] >= 5 * 48 and counts["handoffs"] >= 48, counts
    assert 2 <= counts["threads"] <= 33, counts  # at most --threads (32 by default) + 1


def test_request_loop_trio_keeps_the_trio_loop_and_the_hop(env: FuseEnv) -> None:
    mnt = env.mountpoint("trio")
    with env.mounted(mnt, "--workspace", "wt", "--request-loop", "trio") as proc:
        _write(mnt / "a.txt", b"hello\n")
        assert (mnt / "a.txt").read_bytes() == b"hello\n"
        trio = Mounted(env, mnt, proc.pid)
        assert "pyfuse3-disp" not in trio.threads()
        assert "workspace requests: run by pyfuse3's C threads" not in trio.log.read_text()


@pytest.mark.parametrize("mode", ["trio", "dispatch"])
def test_a_handler_that_lets_an_exception_out_ends_the_session_instead_of_leaving_its_caller_waiting(
    tmp_path: Path, mode: str
) -> None:
    mnt, gates = tmp_path / "mnt", tmp_path / "gates"
    mnt.mkdir()
    gates.mkdir()
    with open(tmp_path / "fs.log", "w") as log:
        cmd = [sys.executable, "-m", "tests.fuse.session_loop_fs", str(mnt), str(gates), "2", mode]
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: is_mounted(mnt) or proc.poll() is not None, 60)
        assert proc.poll() is None, (tmp_path / "fs.log").read_text()
        outcome: list = []

        def read() -> None:
            try:
                with open(mnt / "boom-5", "rb") as f:
                    outcome.append(f.read())
            except OSError as exc:
                outcome.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(60)
        assert not reader.is_alive(), "the READ was never answered"
        assert isinstance(outcome[0], OSError), outcome
        assert proc.wait(60) != 0  # main() raised
        assert "RuntimeError: boom-5: a bug of the handler" in (tmp_path / "fs.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
