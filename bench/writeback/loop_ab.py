"""A/B of two pyfuse3 builds on a workspace mount's request loop, taking turns in one run.

    .venv/bin/python bench/writeback/loop_ab.py BASE_SITE [--rounds 3] [--files 300]
        [--lookups 3000] [--size 100000] [--piece 1048576] [--passthrough | --writeback-cache]
        [--base-tree DIR]

Issue 41, lever 1 (pyfuse3's session loop, ``third_party/pyfuse3/src/pyfuse3/internal.pxi``).
``BASE_SITE`` is a directory holding the other build's ``pyfuse3`` package, e.g. a copy of
the venv's before rebuilding:

    mkdir /tmp/base && cp -a .venv/lib/python3.11/site-packages/pyfuse3 /tmp/base/

Each round mounts a workspace (as ``mount_writes.py``: local shared tier, flush interval an
hour) once with ``BASE_SITE`` first on ``PYTHONPATH`` ("base") and once with the venv's build
("head"), alternating which goes first, and measures on each:

- the daemon's CPU of one request alone: ``--lookups`` negative LOOKUPs (``stat`` of missing
  names, answered on the loop, no I/O);
- ``--files`` files of ``--size`` bytes written in 1 MiB calls and closed by 1 writer and by
  4 writers: daemon CPU per file (utime + stime of the mount process) and wall per file;
- in the first round, the FUSE requests per file by opcode (the kernel's fuse tracepoint).

``--base-tree DIR`` (an export of the base commit, e.g. ``git archive BASE | tar -x -C DIR``):
the base daemon runs that tree's code too (its working directory), for a change that spans the
build and its Python caller (odirect16: ``write()``'s ``cached`` argument). ``--piece``: bytes
per ``write(2)`` call (8192: one WRITE per 8 KiB without the write-back cache);
``--writeback-cache``: the mounts take the kernel's write-back cache. CPU per MiB is printed
beside CPU per file.

The machine is shared: CPU per request and per file are the figures to compare, wall clock
swings with the load (printed before and after each round).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import mount_writes
from mount_writes import MiB, Mount, cpu_seconds, load, write_files

from tests.fuse.fuse_tracepoint import FuseRequests, available


def build_of(pid: int) -> str:
    """The pyfuse3 extension the daemon loaded (from its memory map)."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        if "pyfuse3" in line and line.endswith(".so"):
            return line.split()[-1]
    return "?"


def measure(
    root: Path, tag: str, site: str | None, tree: Path, args: argparse.Namespace, trace: bool
) -> dict[str, float]:
    saved = os.environ.get("PYTHONPATH")
    if site:
        os.environ["PYTHONPATH"] = site
    flags = ["--passthrough" if args.passthrough else "--no-passthrough"]
    try:
        mount = Mount(root, tag, flags + (["--writeback-cache"] if args.writeback_cache else []), repo=tree)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    out: dict[str, float] = {}
    data = os.urandom(args.size)
    try:
        if trace:
            print(f"  {tag}: {build_of(mount.pid)}")
        write_files(mount.mnt / "warm", 20, data, 1, False)  # threads, ids, heap
        before = cpu_seconds(mount.pid)
        for i in range(args.lookups):
            try:
                os.stat(mount.mnt / f"missing-{i}")
            except FileNotFoundError:
                pass
        out["lookup_us"] = (cpu_seconds(mount.pid) - before) / args.lookups * 1e6
        for threads in (1, 4):
            before = cpu_seconds(mount.pid)
            secs = write_files(mount.mnt / f"w{threads}", args.files, data, threads, False)
            out[f"cpu{threads}_ms"] = (cpu_seconds(mount.pid) - before) / args.files * 1e3
            out[f"wall{threads}_ms"] = secs / args.files * 1e3
        if trace and available() is None:
            with FuseRequests(str(mount.mnt)) as reqs:
                write_files(mount.mnt / "traced", args.files, data, 1, False)
            per_file = ", ".join(
                f"{op.removeprefix('FUSE_')} {n / args.files:.2f}" for op, n in sorted(reqs.counts().items())
            )
            print(f"  {tag}: FUSE requests per file: {per_file}")
    finally:
        mount.umount()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_site", help="directory holding the base build's pyfuse3 package")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--lookups", type=int, default=3000)
    ap.add_argument("--passthrough", action="store_true", help="staged files (default: the daemon path)")
    ap.add_argument("--writeback-cache", action="store_true", help="the kernel's write-back cache")
    ap.add_argument("--piece", type=int, default=mount_writes.PIECE, help="bytes per write(2) call")
    ap.add_argument("--base-tree", help="the base daemon runs this tree's code (default: this tree)")
    args = ap.parse_args()
    mount_writes.PIECE = args.piece
    base_site = str(Path(args.base_site).resolve())
    base_tree = Path(args.base_tree).resolve() if args.base_tree else mount_writes.REPO
    print(f"# {args.size} bytes per file, {args.piece} per write(2); base tree {base_tree}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="wb-loop-ab-", dir="/tmp"))
    results: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
    try:
        for r in range(args.rounds):
            print(f"round {r + 1}: load before: {load()}", flush=True)
            order = [("base", base_site, base_tree), ("head", None, mount_writes.REPO)]
            if r % 2:
                order.reverse()
            for name, site, tree in order:
                res = measure(root, f"{name}{r}", site, tree, args, trace=r == 0)
                results[name].append(res)
                print(
                    f"  {name}: LOOKUP {res['lookup_us']:.0f} us; per file: 1 writer "
                    f"{res['cpu1_ms']:.2f} ms CPU ({res['cpu1_ms'] * MiB / args.size:.2f} ms/MiB), "
                    f"{res['wall1_ms']:.2f} ms wall; 4 writers {res['cpu4_ms']:.2f} ms CPU "
                    f"({res['cpu4_ms'] * MiB / args.size:.2f} ms/MiB), {res['wall4_ms']:.2f} ms wall",
                    flush=True,
                )
            print(f"round {r + 1}: load after: {load()}", flush=True)
        print("medians (base -> head):")
        for key, label in (
            ("lookup_us", "daemon CPU per negative LOOKUP, us"),
            ("cpu1_ms", "daemon CPU per file, 1 writer, ms"),
            ("cpu4_ms", "daemon CPU per file, 4 writers, ms"),
            ("wall1_ms", "wall per file, 1 writer, ms"),
            ("wall4_ms", "wall per file, 4 writers, ms"),
        ):
            b = statistics.median(x[key] for x in results["base"])
            h = statistics.median(x[key] for x in results["head"])
            print(f"  {label:40s} {b:8.2f} -> {h:8.2f}  ({h / b:.2f}x)")
            if key.startswith("cpu"):
                print(
                    f"  {'  the same per MiB, ms':40s} {b * MiB / args.size:8.2f} -> {h * MiB / args.size:8.2f}"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
