"""What one acknowledged small file must cost, step by step, against the local-disk baseline.

    .venv/bin/python bench/writeback/small_file_floor.py [--files 500] [--size 100000] [--repeat 3]

No datahub code is timed here: it replays the durable steps the write-back promise needs
for one new small file on a local-directory shared tier, with the bare system calls, in
the same run as the baseline (create + write + fsync + close of a plain file):

- ``chunk object``: what ``LocalStore.put`` does for a chunk (temp file, write, fsync,
  rename, directory fsync);
- ``chunk, no rename``: the same written under its final name (no rename, no directory
  fsync; the file's own fsync makes its new name durable on ext4, as for the baseline);
- ``journal commit``: one LMDB write transaction with ``sync=True`` (data pages fsync'd,
  then the meta page: two flushes);
- ``chunk object || journal commit`` and ``chunk, no rename || journal commit``: the chunk
  written in a second thread while the journal commits, waiting for both (what a new
  file's first close does since 2026-11-24: see docs/writeback.md, "unverified records");
- ``pack append`` and ``pack append || journal commit``: the chunk appended to one open
  file (``pwrite`` + ``fdatasync``, no create), alone and beside the journal commit: what
  a small file's first close cost with pack files (datahub/writeback/packs.py) before writes9;
- ``journal commit, covered`` and ``pack append + record || covered journal commit``: what
  it costs since (issue 41, lever 1): the file's record appended to the pack beside the
  chunk, and the journal commit with LMDB's ``metasync=False`` (the data pages' fdatasync,
  no meta-page flush: datahub/writeback/journal.py, "cover records").

``floor ratio`` = baseline / (chunk object + journal commit): the best a single writer can
reach with one shared-tier object and one journal commit per file, one after the other,
whatever the Python around it costs; the ``concurrent`` floors divide by the overlapped
rows instead. The goal of issue 3 is a ratio >= 0.6.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lmdb


def per_file(count: int, step: Callable[[int], None]) -> float:
    start = time.perf_counter()
    for i in range(count):
        step(i)
    return (time.perf_counter() - start) / count


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def one_round(scratch: Path, count: int, data: bytes) -> dict[str, float]:
    base, chunks, direct = scratch / "base", scratch / "chunks", scratch / "direct"
    both, both_direct = scratch / "both", scratch / "both-direct"
    for d in (base, chunks, direct, both, both_direct):
        d.mkdir()
    env = lmdb.open(str(scratch / "journal"), map_size=1 << 30, sync=True)
    # the journal since writes9: the meta page is not flushed by a covered commit
    env_covered = lmdb.open(str(scratch / "journal-covered"), map_size=1 << 30, sync=True, metasync=False)
    record = b"x" * 300  # about one file record with its chunk map

    pool = ThreadPoolExecutor(1)

    def chunk_object(i: int, directory: Path = chunks) -> None:
        tmp = directory / f".tmp{i}"
        write_new(tmp, data)
        os.replace(tmp, directory / f"c{i}")
        fsync_dir(directory)

    def journal_commit(i: int, prefix: str = "f") -> None:
        with env.begin(write=True) as txn:
            txn.put(f"{prefix}{i}".encode(), record)

    def overlapped(i: int) -> None:
        future = pool.submit(chunk_object, i, both)
        journal_commit(i, "b")
        future.result()

    def overlapped_direct(i: int) -> None:
        future = pool.submit(write_new, both_direct / f"c{i}", data)
        journal_commit(i, "d")
        future.result()

    pack_fd = os.open(scratch / "pack", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    pack_end = [0]

    def pack_append(i: int) -> None:
        """What a pack member costs (datahub/writeback/packs.py): no create."""
        offset, pack_end[0] = pack_end[0], pack_end[0] + len(data)
        os.pwrite(pack_fd, data, offset)
        os.fdatasync(pack_fd)

    def overlapped_pack(i: int) -> None:
        future = pool.submit(pack_append, i)
        journal_commit(i, "p")
        future.result()

    def covered_commit(i: int) -> None:
        with env_covered.begin(write=True) as txn:
            txn.put(f"c{i}".encode(), record)

    def overlapped_covered(i: int) -> None:
        """A new small file's close since writes9: the record appended to the pack beside the
        chunk (one pwrite, one fdatasync), the journal commit without its meta-page flush."""
        offset, pack_end[0] = pack_end[0], pack_end[0] + len(data) + len(record) + 16
        future = pool.submit(
            lambda: (os.pwrite(pack_fd, data + b"r" * 16 + record, offset), os.fdatasync(pack_fd))
        )
        covered_commit(i)
        future.result()

    try:
        return {
            "baseline (create+write+fsync)": per_file(count, lambda i: write_new(base / f"f{i}", data)),
            "chunk object (fsync+rename+dir fsync)": per_file(count, chunk_object),
            "chunk, no rename": per_file(count, lambda i: write_new(direct / f"c{i}", data)),
            "journal commit (LMDB sync=True)": per_file(count, journal_commit),
            "chunk object || journal commit": per_file(count, overlapped),
            "chunk, no rename || journal commit": per_file(count, overlapped_direct),
            "pack append (pwrite+fdatasync)": per_file(count, pack_append),
            "pack append || journal commit": per_file(count, overlapped_pack),
            "journal commit, covered (metasync=False)": per_file(count, covered_commit),
            "pack append + record || covered journal commit": per_file(count, overlapped_covered),
        }
    finally:
        pool.shutdown()
        env.close()
        env_covered.close()
        os.close(pack_fd)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch directory on the disk under test")
    args = parser.parse_args()
    data = os.urandom(args.size)
    rounds: list[dict[str, float]] = []
    print(f"# small-file floor, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()}")
    for _ in range(args.repeat):
        scratch = Path(tempfile.mkdtemp(prefix="wb-floor-", dir=args.dir))
        try:
            rounds.append(one_round(scratch, args.files, data))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    print("| step, per file | ms (median of rounds) |")
    print("| --- | --- |")
    med = {name: statistics.median(r[name] for r in rounds) * 1e3 for name in rounds[0]}
    for name, ms in med.items():
        print(f"| {name} | {ms:.3f} |")
    floors = [
        r["baseline (create+write+fsync)"]
        / (r["chunk object (fsync+rename+dir fsync)"] + r["journal commit (LMDB sync=True)"])
        for r in rounds
    ]
    no_rename = [
        r["baseline (create+write+fsync)"] / (r["chunk, no rename"] + r["journal commit (LMDB sync=True)"])
        for r in rounds
    ]
    print(f"\nfloor ratio (chunk object + journal commit): {statistics.median(floors):.2f}  (goal >= 0.6)")
    print(f"floor ratio without rename + directory fsync: {statistics.median(no_rename):.2f}")
    for name in (
        "chunk object || journal commit",
        "chunk, no rename || journal commit",
        "pack append || journal commit",
        "pack append + record || covered journal commit",
    ):
        ratio = statistics.median(r["baseline (create+write+fsync)"] / r[name] for r in rounds)
        print(f"concurrent floor ratio, {name}: {ratio:.2f}")


if __name__ == "__main__":
    main()
