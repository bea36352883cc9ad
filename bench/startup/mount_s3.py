"""A mount daemon's CPU on an S3 (moto) dataset, as tests/fuse starts one: to ready, and in all.

    .venv/bin/python bench/startup/mount_s3.py [--rounds 10] [--base COMMIT] [--after 2]

Each round starts ``python -m fuse_adapter mount MNT sample --foreground`` (the tests'
``FuseEnv.mounted``: warm-up on, the sample dataset of tests/fuse/conftest.py on a private
moto, the disk cache emptied first, so every read is cold) once per tree, trees alternating
(``head`` this checkout, ``base`` a ``git archive`` of COMMIT). Measured: the daemon's CPU
(``/proc/PID/stat``) and wall from exec until ready (mounted and its record written, as
``FuseEnv.mounted`` waits), then its whole CPU (``wait4``) after one file is read, ``--after``
seconds pass (the store's open and the GC freeze happen after a quiet second) and SIGTERM
unmounts it. Prints medians per tree and the load. Run as root (a FUSE mount); no network
but loopback.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.base_tree import extract  # noqa: E402
from tests.fuse.conftest import make_env, sample_objects, upload_dataset  # noqa: E402
from tests.servers import MotoServer  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _mounted(point: Path, records: str) -> bool:
    listed = any(line.split()[1] == str(point) for line in Path("/proc/mounts").read_text().splitlines())
    return listed and bool(glob.glob(records))


def one(
    tree: Path, config: Path, home: Path, point: Path, after: float, extra: list[str]
) -> tuple[float, float, float]:
    """(CPU to ready, wall to ready, CPU in all) of one mount from ``tree``."""
    shutil.rmtree(home / "cache", ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = [
        sys.executable,
        "-m",
        "fuse_adapter",
        "--config",
        str(config),
        "mount",
        str(point),
        "sample",
        "--foreground",
    ]
    records = str(home / "run" / "mounts" / "*.json")
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not _mounted(point, records):
        if proc.poll() is not None:
            raise SystemExit(f"the mount from {tree} exited {proc.returncode}")
        time.sleep(0.005)
    wall = time.monotonic() - start
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    ready_cpu = (int(fields[11]) + int(fields[12])) / TICK
    assert (point / "sample" / "v1" / "README.txt").read_bytes() == b"sample dataset\n"
    time.sleep(after)
    proc.send_signal(signal.SIGTERM)
    _, _status, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    while _mounted(point, records):
        time.sleep(0.01)
    return ready_cpu, wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--base", metavar="COMMIT", help="also run a git archive of COMMIT (alternating)")
    ap.add_argument("--after", type=float, default=2.0, help="seconds between the read and SIGTERM")
    ap.add_argument("--mount-args", default="", help='more mount flags, e.g. "--no-prefetch"')
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="datahub-mount-s3-"))
    server = MotoServer()
    try:
        trees = {"head": ROOT}
        if args.base:
            trees = {"base": extract(args.base, work / "base"), "head": ROOT}
        env = make_env(work / "env", server.endpoint)
        upload_dataset(env, "sample", sample_objects())
        point = env.mountpoint("m")
        extra = args.mount_args.split()
        load = Path("/proc/loadavg").read_text().split()[0]
        print(
            f"mount_s3: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.rounds} rounds, load {load}"
        )
        results: dict[str, list[tuple[float, float, float]]] = {t: [] for t in trees}
        for _ in range(2):  # bytecode written, page cache warm: not measured
            for tree in trees.values():
                one(tree, env.config_path, env.config.home_path, point, 0.0, extra)
        for i in range(args.rounds):
            for name in list(trees) if i % 2 == 0 else list(reversed(trees)):
                results[name].append(
                    one(trees[name], env.config_path, env.config.home_path, point, args.after, extra)
                )
        print("tree | CPU-s to ready | wall-s to ready | CPU-s in all (median of each)")
        for name, rows in results.items():
            cpu, wall, total = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"{name} | {cpu:.3f} | {wall:.3f} | {total:.3f}")
            print(f"  {name} rounds: " + ", ".join(f"{c:.2f}/{w:.2f}/{t:.2f}" for c, w, t in rows))
        print(f"load {load} -> {Path('/proc/loadavg').read_text().split()[0]}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
