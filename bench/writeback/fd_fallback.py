"""What a file costs the daemon when a --passthrough mount is short of descriptors (emfile12).

    .venv/bin/python bench/writeback/fd_fallback.py [--rounds 5] [--files 200] [--size 100000]

A file that cannot get a staged file's descriptor (fewer than ``FD_RESERVE`` left below the
daemon's soft RLIMIT_NOFILE) goes through the daemon for its whole life (docs/writeback.md,
"Writes through a mount", point 8). Three cases, taking turns round by round so a change
in the shared machine's load hits all alike, each writing ``--files`` files of ``--size``
bytes (open, 1 MiB writes, close) with one writer:

- ``staged``: a ``--passthrough`` mount with its soft limit at the hard one (as mounted);
- ``fallen back``: the same mount, its soft limit lowered with ``prlimit`` to the
  descriptors it has open plus 16, so every new file finds too few and is not staged;
- ``daemon path``: a ``--no-passthrough`` mount (the same files through the daemon; the
  fallen-back files should cost what these do).

``--base-tree DIR`` (another checkout) adds ``fallen back (base)``: a ``--passthrough``
mount running that tree's code, short of descriptors like the one above: an A/B of the
fallback itself in one run.

Printed: the daemon's CPU per file (utime+stime of the mount process, ms; the clock tick is
10 ms, so a round's total is measured, not each file), each round's value and the median,
the mount log's fallback line, and ``uptime`` before and after. Wall times under load are
noise and are not reported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_writes import Mount, cpu_seconds, load, write_files


def set_soft_limit(pid: int, soft: int | None) -> None:
    """The daemon's soft RLIMIT_NOFILE: ``soft``, or its hard limit (None)."""
    hard = int(subprocess.run(["prlimit", f"--pid={pid}", "--nofile", "--raw", "--noheadings",
                               "--output=HARD"], capture_output=True, text=True, check=True).stdout)  # fmt: skip
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={soft if soft else hard}:{hard}"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--dir", default=None, help="where to work (default: a temp dir under /tmp)")
    ap.add_argument("--base-tree", help="another checkout: its --passthrough mount falls back too")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wb-fds-", dir=args.dir))
    data = os.urandom(args.size)
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  {args.files} x {args.size:,} B, 1 writer"
    )
    print(f"# load before: {load()}")
    pt = Mount(root, "pt", ["--passthrough"])
    plain = Mount(root, "nopt", ["--no-passthrough"])
    base = (
        Mount(root, "base", ["--passthrough"], repo=Path(args.base_tree).resolve())
        if args.base_tree
        else None
    )
    try:
        time.sleep(1)
        writes = [line for line in pt.log().splitlines() if "writes:" in line]
        print(f"# --passthrough mount: {writes[-1].split(': ', 2)[-1] if writes else pt.log()[-300:]}")
        per_file: dict[str, list[float]] = {"staged": [], "fallen back": [], "daemon path": []}
        mounts = {"staged": pt, "fallen back": pt, "daemon path": plain}
        if base is not None:
            per_file["fallen back (base)"] = []
            mounts["fallen back (base)"] = base
        for r in range(args.rounds):
            order = list(per_file) if r % 2 == 0 else list(reversed(per_file))
            for case in order:
                mount = mounts[case]
                if mount is not plain:
                    short = case.startswith("fallen back")
                    set_soft_limit(
                        mount.pid, len(os.listdir(f"/proc/{mount.pid}/fd")) + 16 if short else None
                    )
                before = cpu_seconds(mount.pid)
                write_files(mount.mnt / f"r{r}-{case.replace(' ', '-')}", args.files, data, 1, False)
                per_file[case].append((cpu_seconds(mount.pid) - before) * 1e3 / args.files)
            print(f"# round {r}: " + ", ".join(f"{c} {v[-1]:.2f}" for c, v in per_file.items()))
        set_soft_limit(pt.pid, None)
        if base is not None:
            set_soft_limit(base.pid, None)
        fallback = [line for line in pt.log().splitlines() if "to spare" in line]
        print(
            f"# fallback logged: {fallback[0].split(': ', 1)[-1] if fallback else 'NEVER (no file fell back)'}"
        )
        print("case                daemon CPU ms/file: median [rounds]")
        for case, values in per_file.items():
            print(f"{case:19s} {statistics.median(values):6.2f}  [{', '.join(f'{v:.2f}' for v in values)}]")
        print(f"# load after: {load()}")
    finally:
        for mount in (pt, plain, base):
            if mount is not None:
                mount.umount()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
