"""pyfuse3's session loop (third_party/pyfuse3/src/pyfuse3/internal.pxi, ``_session_loop``) on a
real mount: one task at a time reads requests and runs each handler until it first suspends;
a handler that suspends hands the reading over to another task first.

What must hold, in trio mode (requests from the C reader thread's queue, or read from /dev/fuse
by the loop itself), in pyfuse3's asyncio mode, and with the handlers run by pyfuse3's C
threads (``dispatch``, dispatch.h, as on workspace mounts: a "task" is a thread there)
(tests/fuse/session_loop_fs.py):
- a handler that waits does not stop other requests from being answered;
- with every one of ``max_tasks`` tasks waiting in a handler, the next request is read by the
  first task whose handler ends (nobody else is left to read it);
- many requests from many threads, handlers answering at once or after a suspension, each
  get their own answer;
- an unmount ends ``pyfuse3.main`` with spare tasks parked and handlers waiting.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fuse_adapter.daemon import is_mounted
from tests.fuse.conftest import REPO, wait_until

pytestmark = pytest.mark.fuse

GUARD = 60.0


class Loop:
    def __init__(self, root: Path, proc: subprocess.Popen) -> None:
        self.mnt = root / "mnt"
        self.gates = root / "gates"
        self.proc = proc

    def size(self, name: str) -> int:
        """How many bytes a read of the file returns (LOOKUP, OPEN, READ, FLUSH, RELEASE)."""
        fd = os.open(self.mnt / name, os.O_RDONLY)
        try:
            return len(os.read(fd, 1 << 16))
        finally:
            os.close(fd)

    def open_gate(self, name: str) -> None:
        (self.gates / name).touch()

    def held(self, name: str) -> bool:
        """Whether a READ of a ``gate-NAME-N`` file waits in its handler (or did)."""
        return (self.gates / f"{name}.held").exists()


@pytest.fixture(params=["trio", "trio-no-fastloop", "asyncio", "dispatch"])
def loop_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Loop]:
    """The gated file system, mounted with at most 2 session tasks."""
    (tmp_path / "mnt").mkdir()
    (tmp_path / "gates").mkdir()
    log = open(tmp_path / "fs.log", "w")  # noqa: SIM115 - closed in teardown
    cmd = [sys.executable, "-m", "tests.fuse.session_loop_fs", str(tmp_path / "mnt"), str(tmp_path / "gates"),
           "2", request.param]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    fs = Loop(tmp_path, proc)
    try:
        wait_until(lambda: is_mounted(fs.mnt) or proc.poll() is not None, GUARD)
        assert proc.poll() is None, (tmp_path / "fs.log").read_text()
        yield fs
    finally:
        for gate in ("a", "b", "c"):
            fs.open_gate(gate)  # nothing left waiting
        if is_mounted(fs.mnt):
            subprocess.run(["fusermount3", "-u", str(fs.mnt)], capture_output=True)
        try:
            proc.wait(GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if is_mounted(fs.mnt):  # busy, or its daemon died (a failed test): detach it, never leave it
            subprocess.run(["fusermount3", "-uz", str(fs.mnt)], capture_output=True)
        log.close()


def in_thread(fn, *args) -> tuple[threading.Thread, list]:
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    t.start()
    return t, out


def test_a_waiting_handler_does_not_stop_the_other_requests(loop_fs: Loop) -> None:
    waiting, out = in_thread(loop_fs.size, "gate-a-7")
    wait_until(lambda: loop_fs.held("a"), GUARD)
    assert [loop_fs.size(f"size-{n}") for n in range(20)] == list(range(20))
    assert [loop_fs.size(f"nap-{n}") for n in range(5)] == list(range(5))
    with pytest.raises(FileNotFoundError):
        loop_fs.size("missing")
    assert waiting.is_alive() and not out  # still held: the others went past it
    loop_fs.open_gate("a")
    waiting.join(GUARD)
    assert out == [7]


def test_with_every_task_waiting_the_first_handler_to_end_reads_the_next_request(loop_fs: Loop) -> None:
    first, out_a = in_thread(loop_fs.size, "gate-a-1")
    second, out_b = in_thread(loop_fs.size, "gate-b-2")
    wait_until(lambda: loop_fs.held("a") and loop_fs.held("b"), GUARD)
    # both tasks (max_tasks=2) now wait in a handler: the third's requests can only be
    # read once one of them is done
    third, out_c = in_thread(loop_fs.size, "size-3")
    loop_fs.open_gate("a")
    first.join(GUARD)
    third.join(GUARD)
    assert out_a == [1] and out_c == [3]
    assert second.is_alive() and not out_b  # gate b is still closed
    loop_fs.open_gate("b")
    second.join(GUARD)
    assert out_b == [2]


def test_many_threads_each_get_their_own_answer(loop_fs: Loop) -> None:
    names = [f"{('size', 'nap')[i % 3 == 0]}-{1000 + i}" for i in range(600)]
    with ThreadPoolExecutor(8) as pool:
        sizes = list(pool.map(loop_fs.size, names))
    assert sizes == [int(n.split("-")[1]) for n in names]


def test_an_unmount_ends_the_loop_with_tasks_parked_and_handlers_waiting(loop_fs: Loop) -> None:
    assert loop_fs.size("nap-1") == 1  # a suspended handler: one spare task parked since
    waiting, out = in_thread(loop_fs.size, "gate-c-5")
    wait_until(lambda: loop_fs.held("c"), GUARD)
    assert loop_fs.size("size-2") == 2
    subprocess.run(["fusermount3", "-uz", str(loop_fs.mnt)], check=True, capture_output=True)
    loop_fs.open_gate("c")  # the waiting handler ends; its reply finds the session gone
    assert loop_fs.proc.wait(GUARD) == 0
    waiting.join(GUARD)
    assert not waiting.is_alive()
