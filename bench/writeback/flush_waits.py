"""Where a small file's close waits on the disk: the daemon's flushes per file, timed, base vs head.

    .venv/bin/python bench/writeback/flush_waits.py BASE_TREE [--rounds 3] [--files 300]
        [--size 100000] [--threads 1]

Issue 41, lever 1 (writes9). ``BASE_TREE`` is another checkout of the repository (``git
archive BASE | tar -x -C DIR``); this tree is "head". Each round mounts a workspace from each
tree in turn (as ``tree_ab.py``: the daemon runs in the tree, ``--no-passthrough``, local
shared tier, flush interval an hour), alternating which goes first, writes ``--files`` files
of ``--size`` bytes with ``strace -f -T`` attached to the daemon (only the calls that write or
flush: ``fdatasync``, ``fsync``, ``pwrite64``, ``pwritev``), and prints per file, by descriptor kind:

- ``pack``: the pack file (a chunk, and since writes9 the cover record after it);
- ``journal data``: LMDB's data file (its page writes, and ``fdatasync``: one per commit, and
  ``env.sync`` after an uncovered commit);
- ``journal meta (O_DSYNC)``: LMDB's meta-page descriptor, opened ``O_DSYNC`` when meta pages
  are flushed (``sync=True``, base): each write there is a flush of its own. Head writes the
  meta page through the data descriptor (``metasync=False``) and flushes it only when a
  commit is not covered.

Figures: calls per file and the mean time inside each call (strace's ``-T``), and the wall
per file of the traced run (strace slows every call, so read it only side by side) next to
local write + ``fsync`` of the same files in the same round. The machine is shared: the
time inside an ``fdatasync`` grows with the disk's queue, the *number* of flushes does not.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_writes import Mount, load, write_files

REPO = Path(__file__).resolve().parents[2]
_CALL = re.compile(r"^(\d+)\s+(\w+)\((\d+)(.*)$")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>(.*)$")
_TOOK = re.compile(r"<([\d.]+)>\s*$")


def fd_kinds(pid: int) -> dict[int, str]:
    """Descriptor -> kind ("pack", "journal data", "journal meta (O_DSYNC)") of the daemon."""
    kinds = {}
    for link in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(link.readlink())
            flags = int(
                (Path(f"/proc/{pid}/fdinfo") / link.name).read_text().split("flags:")[1].split()[0], 8
            )
        except (OSError, IndexError, ValueError):
            continue
        if "/packs/" in target:
            kinds[int(link.name)] = "pack"
        elif target.endswith("/data.mdb"):
            dsync = flags & 0o10000  # O_DSYNC
            kinds[int(link.name)] = "journal meta (O_DSYNC)" if dsync else "journal data"
    return kinds


def parse(trace: Path) -> list[tuple[int, str, float]]:
    """(fd, call, seconds inside) of every finished call in an ``strace -f -T`` output."""
    calls, pending = [], {}
    for line in trace.read_text().splitlines():
        if m := _CALL.match(line):
            tid, name, fd, rest = m.groups()
            if "<unfinished" in rest:
                pending[tid] = (int(fd), name)
                continue
            took = _TOOK.search(rest)
            if took:
                calls.append((int(fd), name, float(took.group(1))))
        elif m := _RESUMED.match(line):
            tid, name, rest = m.groups()
            fd, name = pending.pop(tid, (-1, name))
            took = _TOOK.search(rest)
            if took:
                calls.append((fd, name, float(took.group(1))))
    return calls


def one(root: Path, tree: Path, name: str, args: argparse.Namespace, data: bytes) -> dict:
    mount = Mount(root, name, ["--no-passthrough"], repo=tree)
    try:
        write_files(mount.mnt / "warm", 20, data, args.threads, False)  # ids, threads, the first pack
        kinds = fd_kinds(mount.pid)
        trace = root / f"{name}.strace"
        tracer = subprocess.Popen(
            [
                "strace",
                "-f",
                "-T",
                "-e",
                "trace=fdatasync,fsync,pwrite64,pwritev,pwritev2",
                "-o",
                str(trace),
                "-p",
                str(mount.pid),
            ],
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # attached to every thread
        took = write_files(mount.mnt / "timed", args.files, data, args.threads, False)
        tracer.terminate()
        tracer.wait()
        kinds.update({fd: k for fd, k in fd_kinds(mount.pid).items() if fd not in kinds})
        table: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        for fd, call, secs in parse(trace):
            table[(kinds.get(fd, "other"), call)].append(secs)
        return {"wall": took / args.files, "table": table}
    finally:
        mount.umount()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    trees = {"base": Path(args.base_tree).resolve(), "head": REPO}
    data = bytes(range(256)) * (args.size // 256) + bytes(args.size % 256)
    root = Path(tempfile.mkdtemp(prefix="wb-flush-waits-", dir="/var/tmp"))
    try:
        for r in range(args.rounds):
            print(f"round {r + 1}: load before: {load()}", flush=True)
            local = write_files(root / f"local{r}", args.files, data, args.threads, True) / args.files
            shutil.rmtree(root / f"local{r}")
            print(f"  local write + fsync: {local * 1e3:.2f} ms/file")
            for n in ["base", "head"] if r % 2 == 0 else ["head", "base"]:
                got = one(root, trees[n], f"{n}{r}", args, data)
                print(f"  {n}: traced wall {got['wall'] * 1e3:.2f} ms/file ({args.threads} writer(s))")
                for (kind, call), secs in sorted(got["table"].items()):
                    if kind == "other":
                        continue
                    print(
                        f"    {kind:24s} {call:10s} {len(secs) / args.files:5.2f}/file, "
                        f"{sum(secs) / len(secs) * 1e3:6.3f} ms each, {sum(secs) / args.files * 1e3:6.3f} ms/file"
                    )
            print(f"round {r + 1}: load after: {load()}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
