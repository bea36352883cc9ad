"""Stand-ins of a 16 MiB close's disk work without datahub: local disk's fsync against the
staged copy's chunk files and the journal's flushes, taking turns.

    .venv/bin/python bench/writeback/close_stand_ins.py [--rounds 8] [--dir DIR]

Issue 41 (stage41). In a directory on the disk under ``--dir`` (default: a temp dir under
/tmp), each case three times a round, in reverse order every other round:

- ``local``: 16 x 1 MiB ``write`` into a new file, then its ``fsync`` (only the fsync timed:
  what local disk's close waits for);
- ``direct, 1 file``: 16 MiB written to a new file with ``O_DIRECT`` from an aligned buffer,
  then ``fsync``;
- ``direct, 4 chunk files in 4 threads``: what a staged file's copy does on a local shared
  tier (``chunks._copy_new``: four new 4 MiB chunk files, each written with ``O_DIRECT`` and
  fsync'd, in parallel), without the ``pread`` from the staged file;
- ``direct, 4 chunk files, 4 x 1 MiB in flight each``: the same with each chunk's size set
  first and its 4 MiB written as four 1 MiB ``O_DIRECT`` writes at once (16 in flight, as a
  page-cache write-back sends them), then the four fsyncs at once;
- ``the same, then 2 fdatasyncs``: and a journal stand-in's two flushes after it (LMDB's);
- ``2 fdatasyncs alone``.

Printed: the median and the least milliseconds of each.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MiB = 1024**2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--dir", default=None, help="where to work (default: a temp dir under /tmp)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wb-stand-ins-", dir=args.dir))
    data = os.urandom(16 * MiB)
    bufs = [mmap.mmap(-1, 4 * MiB) for _ in range(4)]  # page-aligned, as chunks._take_aligned's
    for i, buf in enumerate(bufs):
        buf.write(data[i * 4 * MiB : (i + 1) * 4 * MiB])
    count = [0]
    pool = ThreadPoolExecutor(4)
    pieces_pool = ThreadPoolExecutor(16)

    def new(flags: int = 0) -> int:
        count[0] += 1
        return os.open(root / f"f{count[0]}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | flags, 0o600)

    journal = os.open(root / "journal", os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(journal, bytes(8192), 0)
    os.fsync(journal)

    def flushes() -> None:
        for _ in range(2):
            os.pwrite(journal, os.urandom(4096), 0)
            os.fdatasync(journal)

    def local() -> float:
        fd = new()
        for off in range(0, len(data), MiB):
            os.write(fd, data[off : off + MiB])
        start = time.perf_counter()
        os.fsync(fd)
        os.close(fd)
        return time.perf_counter() - start

    def direct_one() -> float:
        start = time.perf_counter()
        fd = new(os.O_DIRECT)
        for i, buf in enumerate(bufs):
            os.pwrite(fd, buf, i * 4 * MiB)
        os.fsync(fd)
        os.close(fd)
        return time.perf_counter() - start

    def chunk(i: int) -> None:
        fd = new(os.O_DIRECT)
        os.pwrite(fd, bufs[i], 0)
        os.fsync(fd)
        os.close(fd)

    def chunks() -> float:
        start = time.perf_counter()
        list(pool.map(chunk, range(4)))
        return time.perf_counter() - start

    def chunk_in_pieces(i: int) -> int:
        fd = new(os.O_DIRECT)
        os.ftruncate(fd, 4 * MiB)  # the pieces write inside the size: none is an extending write
        with memoryview(bufs[i]) as view:
            done = [
                pieces_pool.submit(os.pwrite, fd, view[j * MiB : (j + 1) * MiB], j * MiB) for j in range(4)
            ]
            for future in done:
                future.result()
        return fd

    def chunks_in_pieces() -> float:
        start = time.perf_counter()
        fds = list(pool.map(chunk_in_pieces, range(4)))
        list(pool.map(os.fsync, fds))
        for fd in fds:
            os.close(fd)
        return time.perf_counter() - start

    def chunks_and_journal() -> float:
        start = time.perf_counter()
        list(pool.map(chunk, range(4)))
        flushes()
        return time.perf_counter() - start

    def journal_alone() -> float:
        start = time.perf_counter()
        flushes()
        return time.perf_counter() - start

    cases = {
        "local: 16 MiB buffered, its fsync": local,
        "direct, 1 file of 16 MiB + fsync": direct_one,
        "direct, 4 chunk files in 4 threads": chunks,
        "direct, 4 chunk files, 4 x 1 MiB in flight each": chunks_in_pieces,
        "the same, then 2 fdatasyncs": chunks_and_journal,
        "2 fdatasyncs alone": journal_alone,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  dir {root}; load {os.getloadavg()}")
    try:
        for r in range(args.rounds):
            order = list(cases.items())
            for name, case in order[::-1] if r % 2 else order:
                for _ in range(3):
                    times[name].append(case())
        for name, ts in times.items():
            print(f"{name:48s} median {1000 * statistics.median(ts):6.1f} ms  least {1000 * min(ts):6.1f} ms")
        print(f"# load after {os.getloadavg()}")
    finally:
        os.close(journal)
        pool.shutdown()
        pieces_pool.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
