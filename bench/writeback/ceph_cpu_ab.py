"""Daemon CPU and page faults per MiB of big files through ``--no-passthrough`` mounts of two
trees, the shared tier on Ceph (RGW or RADOS), in alternating rounds.

    .venv/bin/python bench/writeback/ceph_cpu_ab.py --ceph-env /tmp/ceph/env.sh --base-tree DIR
        [--tier rgw|rados] [--rounds 8] [--files 8] [--size 16777216] [--writers 1,4]

Issue 41 (perf41f). ``mount_writes.py`` times every mount against a plain client in rounds
of three on a loaded 2-core machine, where a case's CPU per MiB moved by 0.5 ms between runs.
This measures only what a change in the daemon's buffers moves: one ``--no-passthrough``
mount from each tree (``--base-tree``: "base", this tree: "head"), the same files, in turns
(reversed every other round), and per case the daemon's user and kernel CPU per MiB
(``/proc/<pid>/stat`` utime and stime, every thread, dead ones included) and its minor page
faults per MiB (memory it touched for the first time). Medians over the rounds, and every
round, are printed, with ``uptime`` before and after.
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
from mount_writes import CLEANUPS, REPO, MiB, Mount, load, rados_group, write_files


def counters(pid: int) -> tuple[int, int, int]:
    """(minor faults, utime ticks, stime ticks) of process ``pid``, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[11]), int(fields[12])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--ceph-env", required=True, help="env.sh of a running Ceph (scripts/ceph-dev/ceph-up.sh)"
    )
    ap.add_argument("--base-tree", required=True, help="another checkout: the base's mount")
    ap.add_argument("--tier", choices=["rgw", "rados"], default="rgw")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--size", type=int, default=16 * MiB)
    ap.add_argument("--writers", default="1,4")
    args = ap.parse_args()
    trees = {"base": Path(args.base_tree).resolve(), "head": REPO}
    root = Path(tempfile.mkdtemp(prefix="wb-cpu-ab-"))
    tick = os.sysconf("SC_CLK_TCK")
    bucket = None
    mounts: dict[str, Mount] = {}
    print(f"# {args.tier}, {args.files} x {args.size} B per case, load before: {load()}", flush=True)
    try:
        if args.tier == "rados":
            _, _, both = rados_group(root, args.ceph_env, trees)  # each tree's two mounts
            for n, m in both.items():
                if "--no-passthrough" in n:
                    mounts["base" if "(base)" in n else "head"] = m
                else:
                    m.umount()  # the passthrough mounts: not measured here
        else:
            from write_throughput import CephBucket

            bucket = CephBucket(args.ceph_env)
            o = bucket.overrides()
            s3 = "".join(
                f"{k} = {v!r}\n".replace("'", '"').replace("True", "true") for k, v in o["s3"].items()
            )
            shared = o["cache"]["shared_url"]
            for name, tree in trees.items():
                mounts[name] = Mount(root, f"rgw-{name}", ["--no-passthrough"], f"\n[s3]\n{s3}",
                                     f'shared_url = "{shared}/{name}"\n', repo=tree)  # fmt: skip
        data = os.urandom(args.size)
        total = args.files * args.size / MiB
        for m in mounts.values():
            write_files(m.mnt / "warm", 2, data, 1, False)
        results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        for r in range(args.rounds):
            for writers in (int(w) for w in args.writers.split(",")):
                order = list(mounts.items())
                for name, m in order[::-1] if r % 2 else order:
                    before = counters(m.pid)
                    write_files(m.mnt / f"r{r}-{writers}", args.files, data, writers, False)
                    after = counters(m.pid)
                    faults, user, system = (a - b for a, b in zip(after, before, strict=True))
                    row = (1000 * user / tick / total, 1000 * system / tick / total, faults / total)
                    results.setdefault((name, writers), []).append(row)
                    print(f"round {r} {writers} writer(s) {name}: user {row[0]:.2f} sys {row[1]:.2f} "
                          f"ms/MiB, {row[2]:.0f} faults/MiB", flush=True)  # fmt: skip
        print(f"# load after: {load()}")
        for (name, writers), rows in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            user, system, faults = (statistics.median(col) for col in zip(*rows, strict=True))
            cpu = statistics.median(u + s for u, s, _ in rows)
            print(f"{args.tier} {writers} writer(s) {name}: daemon CPU {cpu:.2f} ms/MiB (user {user:.2f}, "
                  f"sys {system:.2f}), {faults:.0f} minor faults/MiB; medians of {len(rows)}")  # fmt: skip
    finally:
        for m in mounts.values():
            m.umount()
        if bucket is not None:
            bucket.remove()
        for cleanup in CLEANUPS:
            cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
