"""Stand-ins of a 16 MiB close's disk work without datahub: local disk's fsync against the
staged copy's chunk files and the journal's flushes, taking turns.

    .venv/bin/python bench/writeback/close_stand_ins.py [--rounds 8] [--dir DIR]
    .venv/bin/python bench/writeback/close_stand_ins.py --variants [--files 1] [--rounds 8]

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

``--variants`` (direct41) instead times ways of writing one chunk of ``16 MiB / --files``
(``--files`` of them at once, in threads, as ``chunks._copy_new``'s copies run), each copied
from a staged file in the page cache (as a close's copy reads it), from the ``open`` to the
``close``, local disk's writes included this time: ``local``: 1 MiB buffered writes from memory
+ ``fsync``; ``today``: ``_write_direct`` as it is (``O_DIRECT`` set on the new file, 4 MiB
``preadv`` into an aligned buffer and ``pwrite`` of it, then ``fsync``); ``falloc``:
``fallocate`` of the length first; ``falloc-keep``: ``FALLOC_FL_KEEP_SIZE``; ``trunc``:
``ftruncate`` to the length first; ``whole``: one ``O_DIRECT`` write of the chunk; ``copy``:
``copy_file_range`` from the staged file through the page cache; ``+fdatasync``: ``fdatasync``
instead of ``fsync``; ``thp``: ``today`` from a buffer of transparent huge pages (private
memory at a 2 MiB boundary, ``MADV_HUGEPAGE``: ``datahub.aligned_buffers``' since direct41) where
``today`` uses shared memory (shmem, 4 KiB pages), as chunks' buffers did before direct41. Printed also: the process's CPU ms per case (user + system of this
process's threads; the kernel's write-back threads are not in it) and the write requests the
disk completed meanwhile (``/proc/diskstats``: the whole device's, other tenants' included).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
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
    ap.add_argument("--variants", action="store_true", help="the chunk-write variants of direct41 instead")
    ap.add_argument(
        "--files", type=int, default=1, help="--variants: chunk files (16 MiB / FILES each) at once"
    )
    ap.add_argument("--only", default="", help="--variants: comma-separated names to run (default all)")
    args = ap.parse_args()
    if args.variants:
        variants(args)
        return
    root = Path(tempfile.mkdtemp(prefix="wb-stand-ins-", dir=args.dir))
    data = os.urandom(16 * MiB)
    bufs = [mmap.mmap(-1, 4 * MiB) for _ in range(4)]  # page-aligned, as chunks' buffers before direct41
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


FALLOC_FL_KEEP_SIZE = 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    if _libc.fallocate(fd, mode, offset, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def device_writes(path: Path) -> int:
    """Write requests completed by the disk holding ``path`` (``/proc/diskstats``; 0 if not found)."""
    dev = os.stat(path).st_dev
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if (int(f[0]), int(f[1])) == (os.major(dev), os.minor(dev)):
            return int(f[7])
    return 0


def variants(args: argparse.Namespace) -> None:
    """The chunk-write variants (direct41): see the module's docstring."""
    root = Path(tempfile.mkdtemp(prefix="wb-variants-", dir=args.dir))
    size = 16 * MiB // args.files
    staged = os.open(root / "staged", os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(staged, os.urandom(16 * MiB), 0)  # stays in the page cache, unsynced, as a staged file
    memory = os.pread(staged, 16 * MiB, 0)
    spare = [memoryview(mmap.mmap(-1, 16 * MiB)) for _ in range(args.files)]  # shared: shmem, base pages
    huge = []  # private, at a 2 MiB boundary, MADV_HUGEPAGE: as datahub.aligned_buffers' since direct41
    for _ in range(args.files):
        mapping = mmap.mmap(-1, 18 * MiB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        anchor = ctypes.c_char.from_buffer(mapping)
        skip = -ctypes.addressof(anchor) % (2 * MiB)
        del anchor
        mapping.madvise(mmap.MADV_HUGEPAGE, skip, 16 * MiB)
        huge.append(memoryview(mapping)[skip : skip + 16 * MiB])
    count = [0]
    pool = ThreadPoolExecutor(args.files)

    def new() -> int:
        count[0] += 1
        return os.open(root / f"c{count[0]}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

    def direct(prep: str, sync, whole: bool = False, buffers: list[memoryview] = spare):
        def one(i: int) -> None:
            fd = new()
            if prep == "falloc":
                fallocate(fd, 0, 0, size)
            elif prep == "falloc-keep":
                fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, size)
            elif prep == "trunc":
                os.ftruncate(fd, size)
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
            step = size if whole else min(size, 4 * MiB)
            with buffers[i][:step] as piece:
                for off in range(0, size, step):
                    os.preadv(staged, [piece], i * size + off)
                    os.pwrite(fd, piece, off)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            sync(fd)
            os.close(fd)

        return one

    def copy(sync):
        def one(i: int) -> None:
            fd = new()
            done = 0
            while done < size:
                done += os.copy_file_range(staged, fd, size - done, i * size + done, done)
            sync(fd)
            os.close(fd)

        return one

    def local(i: int) -> None:
        fd = new()
        for off in range(i * size, (i + 1) * size, MiB):
            os.write(fd, memory[off : off + MiB])
        os.fsync(fd)
        os.close(fd)

    cases = {
        "local (write+fsync)": local,
        "today": direct("", os.fsync),
        "thp": direct("", os.fsync, buffers=huge),
        "thp+fdatasync": direct("", os.fdatasync, buffers=huge),
        "falloc": direct("falloc", os.fsync),
        "falloc-keep": direct("falloc-keep", os.fsync),
        "trunc": direct("trunc", os.fsync),
        "whole": direct("", os.fsync, whole=True),
        "copy": copy(os.fsync),
        "today+fdatasync": direct("", os.fdatasync),
        "falloc+fdatasync": direct("falloc", os.fdatasync),
        "copy+fdatasync": copy(os.fdatasync),
    }
    if args.only:
        cases = {name: cases[name] for name in args.only.split(",")}
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    requests: dict[str, list[int]] = {name: [] for name in cases}
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  {args.files} x {size // MiB} MiB; "
        f"dir {root}; load {os.getloadavg()}"
    )
    try:
        for r in range(args.rounds):
            order = list(cases.items())
            for name, case in order[::-1] if r % 2 else order:
                for _ in range(3):
                    start, cpu0, writes0 = time.perf_counter(), time.process_time(), device_writes(root)
                    list(pool.map(case, range(args.files)))
                    times[name].append(time.perf_counter() - start)
                    cpu[name].append(time.process_time() - cpu0)
                    requests[name].append(device_writes(root) - writes0)
            for entry in os.scandir(root):  # the chunks of the round: untimed, between rounds
                if entry.name != "staged":
                    os.unlink(entry.path)
        for name, ts in times.items():
            print(
                f"{name:24s} median {1000 * statistics.median(ts):6.1f} ms  least {1000 * min(ts):6.1f} ms"
                f"  CPU median {1000 * statistics.median(cpu[name]):5.1f} ms"
                f"  disk writes median {statistics.median(requests[name]):5.1f}"
            )
        print(f"# load after {os.getloadavg()}")
    finally:
        os.close(staged)
        pool.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
