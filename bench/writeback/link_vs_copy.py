"""What getting a staged file's bytes into a local shared tier costs: the copy staged files
take today (a byte copy by ``splice``), ``copy_file_range`` and a direct-I/O copy against a
link of the staged file itself, in turns, on one file system.

    .venv/bin/python bench/writeback/link_vs_copy.py [--files 16] [--size 16777216]
        [--chunk 4194304] [--rounds 3] [--dir DIR]

Issue 41, lever 3. Each file is first written as a staged file is (an ``O_TMPFILE`` in
``DIR/staging``, 1 MiB ``write`` calls: the writer's part, the same for both and not
counted), then made durable in ``DIR/shared`` one of four ways:

- ``copy`` (``ChunkStore.copy_in`` on a local tier): per chunk, a new file created with
  ``O_CREAT|O_EXCL``, ``packs.copy_range`` of the chunk's range (a byte copy by ``splice``
  through a pipe), ``fsync``;
- ``copy_file_range`` (``copy_in`` before writes8): the same with ``copy_file_range``, a
  page-cache copy on ext4 but a reflink on xfs/btrfs (shared extents, which broke staged
  files' reservations: ``packs.copy_range``);
- ``direct`` (tried in writes8, not taken: through a mount it cost wall clock, see
  docs/benchmarks.md, "writes8"): the same, the file ``fallocate``d first, the range read
  into a page-aligned buffer and written from it with ``O_DIRECT``;
- ``link``: ``fsync`` of the staged file, then ``linkat`` of it (``/proc/self/fd``,
  ``AT_SYMLINK_FOLLOW``) under a new name in the shared tier, then ``fsync`` again so the
  new name is durable (ext4 commits it with the inode's next journal commit).

Printed per way: CPU per MiB (this process's user + system, the part a daemon would pay)
and wall per MiB, medians of the rounds, with ``uptime`` before and after. A local disk's
own write + fsync of the same bytes from memory is printed as the floor.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from datahub.writeback.packs import copy_range

MiB = 1024**2
AT_FDCWD, AT_SYMLINK_FOLLOW = -100, 0x400
_libc = ctypes.CDLL(None, use_errno=True)
_BUFFER = mmap.mmap(-1, 4 * MiB)  # page-aligned, as O_DIRECT wants


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def staged(directory: Path, data: bytes) -> int:
    fd = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o600)
    view = memoryview(data)
    for off in range(0, len(data), MiB):
        os.write(fd, view[off : off + MiB])
    return fd


def copy(fd: int, shared: Path, name: str, size: int, chunk: int) -> None:
    """What ``ChunkStore.copy_in`` does on a local tier: per chunk a new ``O_EXCL`` file,
    ``copy_range`` (a byte copy by ``splice``, never shared extents), ``fsync``."""
    for index, off in enumerate(range(0, size, chunk)):
        out = os.open(shared / f"{name}.{index}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            copy_range(fd, off, out, 0, min(chunk, size - off))
            os.fsync(out)
        finally:
            os.close(out)


def cfr(fd: int, shared: Path, name: str, size: int, chunk: int) -> None:
    """The same with ``copy_file_range`` (``copy_in`` before writes8): a page-cache copy on
    ext4, a reflink on xfs/btrfs (shared extents: not safe for staged files, see
    ``packs.copy_range``)."""
    for index, off in enumerate(range(0, size, chunk)):
        out = os.open(shared / f"{name}.{index}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            left, pos = min(chunk, size - off), off
            while left:
                n = os.copy_file_range(fd, out, left, pos)
                pos, left = pos + n, left - n
            os.fsync(out)
        finally:
            os.close(out)


def direct(fd: int, shared: Path, name: str, size: int, chunk: int) -> None:
    """Per chunk: a new ``O_EXCL`` file given its blocks and size first (``fallocate``: an
    extending direct write puts ext4's inode on its orphan list and takes it off again per
    write), the range read into one page-aligned 4 MiB buffer (``pread`` from the staged
    file's page cache) and written from it with ``O_DIRECT``, ``fsync``: no page of the
    chunk file is allocated, dirtied and written back. Chunk sizes are multiples of 4 KiB
    here (the bench's); a tail would go through the page cache."""
    with memoryview(_BUFFER) as view:
        for index, off in enumerate(range(0, size, chunk)):
            out = os.open(
                shared / f"{name}.{index}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o644
            )
            try:
                length = min(chunk, size - off)
                if _libc.fallocate(out, 0, ctypes.c_int64(0), ctypes.c_int64(length)) != 0:
                    raise OSError(ctypes.get_errno(), "fallocate")
                done = 0
                while done < length:
                    got = os.preadv(fd, [view[: min(len(view), length - done)]], off + done)
                    written = 0
                    while written < got:
                        written += os.pwritev(out, [view[written:got]], done + written)
                    done += got
                os.fsync(out)
            finally:
                os.close(out)


def link(fd: int, shared: Path, name: str, size: int, chunk: int) -> None:
    os.fsync(fd)
    # os.link would call link(2), which links the /proc symlink itself (EXDEV)
    src, dst = f"/proc/self/fd/{fd}".encode(), os.fsencode(shared / name)
    if _libc.linkat(AT_FDCWD, src, AT_FDCWD, dst, AT_SYMLINK_FOLLOW) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(shared / name))
    os.fsync(fd)


def plain(directory: Path, name: str, data: bytes) -> None:
    fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        for off in range(0, len(data), MiB):
            os.write(fd, view[off : off + MiB])
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--size", type=int, default=16 * MiB)
    ap.add_argument("--chunk", type=int, default=4 * MiB)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to work (default: a temp dir under /tmp)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wb-link-", dir=args.dir or "/tmp"))
    data = os.urandom(args.size)
    total = args.files * args.size / MiB
    cpu: dict[str, list[float]] = {
        "local write+fsync": [],
        "copy": [],
        "copy_file_range": [],
        "direct": [],
        "link": [],
    }
    wall: dict[str, list[float]] = {k: [] for k in cpu}
    print(f"load before: {load()}", flush=True)
    try:
        for r in range(args.rounds):
            order = ["copy", "copy_file_range", "direct", "link"]
            order = order if r % 2 == 0 else order[::-1]
            for way in ["local write+fsync", *order]:
                work = root / f"{way.split()[0]}-{r}"
                (work / "staging").mkdir(parents=True)
                (work / "shared").mkdir()
                spent = took = 0.0
                for i in range(args.files):
                    if way == "local write+fsync":
                        c0, t0 = time.process_time(), time.perf_counter()
                        plain(work / "shared", f"f{i}", data)
                    else:
                        fd = staged(work / "staging", data)
                        c0, t0 = time.process_time(), time.perf_counter()
                        {"copy": copy, "copy_file_range": cfr, "direct": direct, "link": link}[way](
                            fd, work / "shared", f"f{i}", args.size, args.chunk
                        )
                        os.close(fd)
                    spent += time.process_time() - c0
                    took += time.perf_counter() - t0
                cpu[way].append(spent / total * 1e3)
                wall[way].append(took / total * 1e3)
                shutil.rmtree(work)
            print(
                f"round {r + 1}: "
                + ", ".join(f"{k} {cpu[k][-1]:.2f} CPU / {wall[k][-1]:.2f} wall ms/MiB" for k in cpu),
                flush=True,
            )
        print(
            f"{args.files} x {args.size:,} B, chunks of {args.chunk:,} B for the copy; medians of {args.rounds} rounds:"
        )
        for k in cpu:
            print(
                f"  {k:18s} CPU {statistics.median(cpu[k]):.3f} ms/MiB  wall {statistics.median(wall[k]):.3f} ms/MiB"
            )
        print(f"load after: {load()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
