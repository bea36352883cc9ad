"""How much room one open staged stream's reservation leaves another file on a small
staging disk, for this tree and another (an A/B in one run, taking turns).

    .venv/bin/python bench/writeback/ahead_share.py [--disk-mib 256] [--stream-mib 32]
        [--reserve-mib 64] [--rounds 3] [--base-tree DIR]

Issue 41, reserve13. A staged file's reservation grows ahead of its writer (``StagedFile.grow``)
and is held until its last close. Per round and tree: a real tmpfs of ``--disk-mib`` (needs
root) is the staging disk of a fresh workspace; a stream of ``--stream-mib`` is written and
left open; then a second file is written until a write fails for space. Each write is 256 KiB
followed by ``grow()`` (what the watcher does on the write's event, taken in order so that
the figure does not depend on the watcher's timing). Printed: the blocks the stream holds,
and the MiB the second file got, against the disk's room with the stream's bytes on it (what
the daemon path would let it write). The run is deterministic: no load or CPU figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MiB = 1024**2

CHILD = r"""
import errno, json, os, subprocess, sys, tempfile
from pathlib import Path
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace, staged
from datahub.writeback.workspace import STAGING_DIR

disk_mib, stream_mib, reserve_mib = (int(a) for a in sys.argv[1:4])
MiB, step = 1024**2, 256 * 1024
staged.STAGE_RESERVE = reserve_mib * MiB
root = Path(tempfile.mkdtemp(prefix="ahead-", dir=sys.argv[4]))
disk = root / "disk"
disk.mkdir()
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={disk_mib}m", "tmpfs", str(disk)], check=True)
try:
    config = load_config(env={}, overrides={"home": str(root / "var"), "cache": {"flush_interval": 3600}})
    stores = StoreRegistry(config)
    ws = open_workspace("ws", config, stores)
    (ws.chunks.local_root / STAGING_DIR).mkdir(parents=True, exist_ok=True)
    (ws.chunks.local_root / STAGING_DIR / ws.name).symlink_to(disk)
    chunk = os.urandom(step)

    def write(fh, limit):
        of = fh._of
        of._staging.watch.remove(of._wd)  # the watcher's step taken after each write, in order
        done = 0
        try:
            while done < limit:
                done += os.pwrite(of.fd, chunk, done)
                of.grow()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        return done

    first = ws.open("stream.bin", create=True, truncate=True, staged=True)
    write(first, stream_mib * MiB)
    held = os.fstat(first._of.fd).st_blocks * 512
    second = ws.open("other.bin", create=True, truncate=True, staged=True)
    got = write(second, disk_mib * MiB)
    print(json.dumps({"held": held, "other": got}))
    ws.abandon()
    stores.close()
finally:
    subprocess.run(["umount", "-l", str(disk)], check=False)
"""


def run(tree: Path, args: argparse.Namespace, scratch: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(args.disk_mib), str(args.stream_mib), str(args.reserve_mib), scratch],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--disk-mib", type=int, default=256)
    ap.add_argument("--stream-mib", type=int, default=32)
    ap.add_argument("--reserve-mib", type=int, default=64, help="STAGE_RESERVE for the run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base-tree", help="another checkout: measured in turns with this tree")
    ap.add_argument("--dir", default=None, help="scratch directory (not the tmpfs)")
    args = ap.parse_args()
    trees = {"head": REPO, **({"base": Path(args.base_tree).resolve()} if args.base_tree else {})}
    scratch = tempfile.mkdtemp(prefix="ahead-share-", dir=args.dir)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  tmpfs {args.disk_mib} MiB, "
          f"stream {args.stream_mib} MiB, STAGE_RESERVE {args.reserve_mib} MiB")  # fmt: skip
    room = args.disk_mib - args.stream_mib
    for r in range(args.rounds):
        order = list(trees.items())
        for name, tree in order[::-1] if r % 2 else order:
            got = run(tree, args, scratch)
            print(f"round {r} {name}: the open stream holds {got['held'] / MiB:6.2f} MiB; another file got "
                  f"{got['other'] / MiB:6.2f} MiB of the {room} MiB the disk has beside the stream's bytes "
                  f"({got['other'] / MiB / room:.2f})", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
