"""Where a small file's close costs the daemon: syscalls and a py-spy profile of a mount.

    .venv/bin/python bench/writeback/profile_small.py [--files 300] [--size 100000]
        [--passthrough | --no-passthrough] [--threads 1] [--py-spy OUT.txt]

Issue 41 (small files at 0.18-0.25 of local disk, ~4.5 ms of daemon CPU per file). One
workspace mount as ``mount_writes.py`` makes it (local shared tier, flush interval an hour),
``--files`` files of ``--size`` bytes written in 1 MiB calls and closed, with:
- ``strace -f -c`` attached to the daemon: calls per file of the syscalls that make a close
  durable (fsync, fdatasync, sync_file_range, msync) and of the rest, against local disk +
  fsync's one fsync per file;
- with ``--py-spy``, ``py-spy record --gil --format raw`` of the daemon (only the thread
  holding the GIL: Python's CPU), the hottest Python frames printed (own samples and with
  callees).
- the daemon's CPU per file by thread (``/proc/<pid>/task``: the request loop is the
  main thread; trio's workers run the hops; a thread's name is inherited from the thread
  that started it, so the journal's committer, started from a trio worker, shows a worker's
  name) and the CPU of one request alone: ``--lookups`` negative LOOKUPs (``stat`` of
  missing names, answered on the loop with ENOENT), the per-request floor of the loop.
Not timed: strace slows every syscall. Daemon CPU per file is printed from a separate,
untraced pass.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from mount_writes import Mount, load, write_files

from tests.fuse.fuse_tracepoint import FuseRequests, available

DURABLE = ("fsync", "fdatasync", "sync_file_range", "msync", "syncfs")


def user_system(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid`` so far (all its threads, live or ended)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (name, user + system CPU seconds) of every live thread of process ``pid``."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:  # ended meanwhile
            continue
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def print_thread_cpu(before: dict, after: dict, files: int) -> None:
    for tid, (name, cpu) in sorted(after.items()):
        spent = cpu - before.get(tid, (name, 0.0))[1]
        if spent > 0:
            role = "request loop" if tid == min(after) else "worker"
            print(f"    tid {tid} {name!r:18} ({role}): {spent / files * 1e3:.2f} ms per file")


def lookup_floor(pid: int, mnt: Path, count: int) -> None:
    """Daemon CPU of one negative LOOKUP: a request answered on the loop, no I/O."""
    user0, sys0 = user_system(pid)
    for i in range(count):
        try:
            os.stat(mnt / f"missing-{i}")
        except FileNotFoundError:
            pass
    user1, sys1 = user_system(pid)
    print(
        f"one request alone (negative LOOKUP, {count}): daemon CPU {(user1 - user0) / count * 1e6:.0f} us user"
        f" + {(sys1 - sys0) / count * 1e6:.0f} us system"
    )


def strace_counts(pid: int, run) -> dict[str, int]:
    """Syscall counts of process ``pid`` (all threads) while ``run()`` runs."""
    out = Path(tempfile.mktemp(prefix="strace-"))
    tracer = subprocess.Popen(
        ["strace", "-f", "-c", "-o", str(out), "-p", str(pid)], stderr=subprocess.DEVNULL
    )
    time.sleep(1.0)  # attached to every thread
    try:
        run()
    finally:
        tracer.terminate()
        tracer.wait()
    counts: dict[str, int] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and not line.startswith("100"):
            counts[parts[-1]] = int(parts[3])
    out.unlink()
    return counts


def hottest(raw: Path, top: int = 25) -> None:
    """Print the frames with the most samples (own and with callees) from py-spy's raw output."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        count = int(n)
        frames = stack.split(";")
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    print(f"py-spy: {samples} samples (busy threads)")
    print("  own:")
    for frame, n in own.most_common(top):
        print(f"    {n / samples:6.1%}  {frame}")
    print("  with callees:")
    for frame, n in total.most_common(top):
        print(f"    {n / samples:6.1%}  {frame}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--passthrough", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--lookups", type=int, default=3000, help="negative LOOKUPs for the per-request floor")
    ap.add_argument("--py-spy", default=None, help="write py-spy's raw profile here and summarize it")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wb-profile-", dir="/tmp"))
    data = bytes(range(256)) * (args.size // 256) + bytes(args.size % 256)
    mode = "--passthrough" if args.passthrough else "--no-passthrough"
    mount = Mount(root, "p", [mode])
    try:
        print(f"load before: {load()}")
        print(f"mount {mode}: {'passthrough' if 'writes: passthrough' in mount.log() else 'daemon writes'}")
        local = write_files(root / "local", args.files, data, args.threads, fsync=True)
        write_files(mount.mnt / "warm", 20, data, args.threads, fsync=False)  # threads, ids, heap
        threads0 = thread_cpu(mount.pid)
        user0, sys0 = user_system(mount.pid)
        took = write_files(mount.mnt / "timed", args.files, data, args.threads, fsync=False)
        user1, sys1 = user_system(mount.pid)
        threads1 = thread_cpu(mount.pid)
        cpu = user1 - user0 + sys1 - sys0
        mib = args.files * args.size / 2**20
        print(
            f"{args.files} x {args.size:,} B, {args.threads} writer(s): local+fsync {local / args.files * 1e3:.2f} ms"
            f"/file, mount {took / args.files * 1e3:.2f} ms/file (ratio {local / took:.2f}), daemon CPU "
            f"{cpu / args.files * 1e3:.2f} ms/file (user {(user1 - user0) / args.files * 1e3:.2f}, system "
            f"{(sys1 - sys0) / args.files * 1e3:.2f}), {cpu / mib * 1e3:.2f} ms/MiB"
        )
        print("daemon CPU by thread:")
        print_thread_cpu(threads0, threads1, args.files)
        lookup_floor(mount.pid, mount.mnt, args.lookups)
        counts = strace_counts(
            mount.pid, lambda: write_files(mount.mnt / "traced", args.files, data, args.threads, fsync=False)
        )
        if (why := available()) is None:
            with FuseRequests(str(mount.mnt)) as requests:
                write_files(mount.mnt / "counted", args.files, data, args.threads, fsync=False)
            per_file = ", ".join(
                f"{op.removeprefix('FUSE_')} {n / args.files:.2f}"
                for op, n in sorted(requests.counts().items())
            )
            print(f"FUSE requests per file: {per_file}")
        else:
            print(f"FUSE requests per file: not counted ({why})")
        print("daemon syscalls per file (strace -f -c):")
        for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            mark = "  <- durable" if name in DURABLE else ""
            if n / args.files >= 0.05 or mark:
                print(f"    {name:20s} {n / args.files:7.2f}{mark}")
        if args.py_spy:
            raw = Path(args.py_spy)
            spy = subprocess.Popen(
                ["py-spy", "record", "--pid", str(mount.pid), "--format", "raw", "--output", str(raw),
                 "--rate", "500", "--nonblocking", "--gil"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(1.0)
            write_files(mount.mnt / "profiled", args.files, data, args.threads, fsync=False)
            spy.send_signal(2)
            spy.wait()
            hottest(raw)
        print(f"load after: {load()}")
    finally:
        mount.umount()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
