"""The read buffers of a workspace mount's dispatching threads (dispatch.h) once they are idle.

Each ``pyfuse3-disp`` thread reads /dev/fuse into a buffer of its own, 1 MiB + 4 KiB (the
largest request the kernel sends: a 1 MiB WRITE), kept for the life of the mount; up to 256
threads. A buffer's pages stay resident once a large WRITE filled them: after a burst of
concurrent big writes each thread that had read one kept about a MiB for good (20 threads
after 16 writers that fsync). A thread that has waited idle for a second gives back the pages
past its first 64 KiB (``MADV_DONTNEED``), so the buffers hold about one MiB for the thread
that reads, not one for every thread that ever read a big WRITE. Not at once (perf41): the
role goes round two or three threads, one handoff per small file's FLUSH, and a trim at each
handoff cost every small file an ``madvise`` and the page faults of its next WRITE.

One real workspace mount (``--request-loop c``, the default); each buffer is its own mapping
between two guard pages, so /proc/PID/smaps shows its resident size (and counts the threads:
threads that handlers start inherit the name ``pyfuse3-disp``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

KiB = 1024
BUFFER = 256 * 4 * KiB + 4 * KiB  # dispatch.h: 256 pages, plus one for the request header
KEPT = 64 * KiB  # what an idle thread keeps of it (dispatch.h, PYFUSE3_FD_KEEP)


@pytest.fixture(scope="module")
def mounted(
    tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint
) -> Iterator[tuple[Path, int]]:
    env: FuseEnv = make_env(tmp_path_factory.mktemp("dispatch21"), moto_endpoint)
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws") as proc:
        yield mnt, proc.pid


def _buffers_rss(pid: int) -> list[int]:
    """The resident bytes of each read buffer: the anonymous read-write mappings of its size."""
    found, size, buffer = [], 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and fields[0][0] in "0123456789abcdef":  # a mapping
            buffer = len(fields) == 5 and fields[1] == "rw-p"  # no file, no name
        elif fields[0] == "Size:":
            size = int(fields[1]) * KiB
        elif fields[0] == "Rss:" and buffer and size == BUFFER:
            found.append(int(fields[1]) * KiB)
    return found


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        for off in range(0, len(data), 1 << 20):
            f.write(data[off : off + (1 << 20)])  # 1 MiB WRITEs: a buffer filled whole
        os.fsync(f.fileno())  # a handler that blocks: the reading goes to another thread


def test_idle_dispatch_threads_give_their_big_buffers_back(mounted: tuple[Path, int]) -> None:
    mnt, pid = mounted
    data = os.urandom(4 << 20)
    files = [mnt / f"big{i}.bin" for i in range(16)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: _write(p, data), files))
    assert all(p.read_bytes() == data for p in files[:2])
    buffers = _buffers_rss(pid)  # one a dispatching thread
    print(
        f"{len(buffers)} dispatching threads, their buffers resident {sorted(b // KiB for b in buffers)} KiB"
    )
    assert len(buffers) >= 3, buffers  # fsyncs handed the reading over, to new threads
    # one thread reads now (its buffer may hold the request it waits for); the others are idle,
    # and give their pages back once they have waited a second (dispatch.h, PYFUSE3_FD_TRIM_AFTER_S)
    deadline = time.monotonic() + 30
    while sum(sorted(buffers)[:-1]) > (len(buffers) - 1) * KEPT and time.monotonic() < deadline:
        time.sleep(0.2)
        buffers = _buffers_rss(pid)
    assert sum(sorted(buffers)[:-1]) <= (len(buffers) - 1) * KEPT, sorted(b // KiB for b in buffers)


def _minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def _maps_asan(pid: int) -> bool:
    """Whether the daemon has libasan mapped: scripts/sanitize.sh preloads it into every process."""
    return "libasan" in Path(f"/proc/{pid}/maps").read_text()


def test_a_stream_of_small_files_costs_no_page_faults_per_file(mounted: tuple[Path, int]) -> None:
    """Each 100 KB file's FLUSH hands the reader role to another thread, which reads the next
    file's WRITE into its buffer. A trim at every handoff had given those pages back, so every
    file paid an ``madvise`` and the faults of refilling them (9.2 minor faults a file, perf41);
    a thread now keeps them while it is back within a second."""
    mnt, pid = mounted
    if _maps_asan(pid):  # make sanitize: ASan's shadow memory and allocator fault on their own
        pytest.skip("the daemon runs the ASan build (make sanitize): page faults count its shadow memory")
    (mnt / "small").mkdir(exist_ok=True)
    data = os.urandom(100_000)

    def stream(tag: str, count: int) -> None:
        for i in range(count):
            with open(mnt / "small" / f"{tag}{i}", "wb") as f:
                f.write(data)  # one WRITE; the close's FLUSH blocks (the pack's fdatasync)

    stream("warm", 30)  # the threads, their buffers and the daemon's heap
    before = _minor_faults(pid)
    stream("f", 200)
    per_file = (_minor_faults(pid) - before) / 200
    print(f"{per_file:.2f} minor faults per file")
    assert per_file < 3, per_file
    assert all((mnt / "small" / f"f{i}").read_bytes() == data for i in (0, 199))
