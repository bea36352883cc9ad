"""What a workspace mount's dispatching threads keep of their read buffers, and what giving
them back costs (dispatch.h, pyfuse3_fd_trim; leftovers21).

    .venv/bin/python bench/mount/dispatch_buffers.py [--rounds 3] [--writers 16] [--size 4194304]
        [--base-pyfuse3 DIR]

Each round mounts a workspace (local home: objects under file://, no S3) in the foreground,
has ``--writers`` threads each write a file of ``--size`` bytes in 1 MiB write(2)s and fsync it
(the fsync's handler blocks: the reading goes to another C thread), and prints: the dispatching
threads (one read buffer each: the anonymous read-write mappings of 1 MiB + 4 KiB, between
guard pages, in the daemon's /proc/PID/smaps), what they hold resident, and the daemon's CPU
seconds (user + system, /proc/PID/stat) per MiB written. ``--base-pyfuse3 DIR``: alternate
rounds with the pyfuse3 installed in DIR (``pip --target``) first on PYTHONPATH, the same-run
baseline: a build of the commit before the trim (f28b652b: each buffer already its own
mapping, so smaps shows it too); a build older still has malloc'd buffers, not found (n/a).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KiB, MiB = 1024, 1024 * 1024
BUFFER = 256 * 4 * KiB + 4 * KiB


def buffers(pid: int) -> list[int]:
    found, size, anon = [], 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and fields[0][0] in "0123456789abcdef":
            anon = len(fields) == 5 and fields[1] == "rw-p"
        elif fields[0] == "Size:":
            size = int(fields[1]) * KiB
        elif fields[0] == "Rss:" and anon and size == BUFFER:
            found.append(int(fields[1]) * KiB)
    return found


def cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def named_threads(pid: int) -> int:
    n = 0
    for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
        try:
            n += comm.read_text().strip() == "pyfuse3-disp"
        except FileNotFoundError:
            pass
    return n


def write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        for off in range(0, len(data), MiB):
            f.write(data[off : off + MiB])
        os.fsync(f.fileno())


def one_round(label: str, extra_path: str, writers: int, size: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="dispatch-buffers-"))
    mnt = home / "mnt"
    mnt.mkdir()
    config = home / "datahub.toml"
    config.write_text(f'home = "{home / "var"}"\n[cache]\nflush_interval = 3600.0\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (extra_path, str(ROOT)) if p)}
    cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(config), "mount", str(mnt)]
    cmd += ["--workspace", "bench", "--foreground"]
    log = open(home / "mount.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while not os.path.ismount(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"mount failed: {(home / 'mount.log').read_text()[-2000:]}")
            time.sleep(0.1)
        data = os.urandom(size)
        before = cpu(proc.pid)
        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(lambda i: write(mnt / f"f{i}.bin", data), range(writers)))
        used = cpu(proc.pid) - before
        found = buffers(proc.pid)
        count = len(found) if found else named_threads(proc.pid)
        shown = (
            f"{sum(found) // KiB:,} KiB ({', '.join(str(b // KiB) for b in sorted(found))})"
            if found
            else "n/a"
        )
        print(f"{label}: {count} dispatching threads, buffers resident {shown}; "
              f"daemon CPU {1000 * used / (writers * size / MiB):.2f} ms per MiB written")  # fmt: skip
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--writers", type=int, default=16)
    ap.add_argument("--size", type=int, default=4 * MiB)
    ap.add_argument(
        "--base-pyfuse3", default="", help="a base build's pip --target dir: alternate rounds with it"
    )
    args = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}")
    for r in range(args.rounds):
        if args.base_pyfuse3:
            one_round(f"round {r} base", args.base_pyfuse3, args.writers, args.size)
        one_round(f"round {r} this", "", args.writers, args.size)
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
