"""A full commit of N records the way a user makes one: ``datahub commit --changes`` reading a
named pipe that a generator process writes (issue 38 item 3: "a 10^8-record version must
commit in minutes").

    .venv/bin/python bench/scale/cli_commit_pipe.py --records 100000000 --dir /var/tmp/big

Why a pipe: at 10^8 records the change set is ~20 GB of JSON lines and the one-transaction
commit needs about twice the catalog's 17.8 GB while its WAL is copied in; written to a file
first, the three do not fit a 47 GB disk. The generator writes the lines of
``scale.change_lines`` (flat keys, synthetic S3 URLs, one meta field) with plain f-strings,
in its own process, so the commit's process is measured alone: its wall time (including the
WAL's checkpoint into the catalog, which the CLI waits for), its CPU (``wait4``'s rusage),
its peak RSS, and the catalog's size. The generator's CPU is printed apart; on 2 cores it
takes part of the machine the commit would otherwise have.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PER_DIR = 10_000

GENERATOR = r"""
import sys
n, out, per_dir = int(sys.argv[1]), open(sys.argv[2], "w", buffering=1 << 20), int(sys.argv[3])
lines = []
for i in range(n):
    key = f"train/{i // per_dir:05d}/{i:09d}.jpg"
    lines.append(
        f'{{"op":"put","record":{{"key":"{key}","url":"s3://bench-bucket/imagenet/{key}",'
        f'"etag":"{i:024x}00000000","size":{100_000 + i % 50_000},"meta":{{"split":"train"}}}}}}\n'
    )
    if len(lines) == 10_000:
        out.write("".join(lines))
        lines.clear()
out.write("".join(lines))
out.close()
"""


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000_000)
    parser.add_argument("--dir", default=None, help="where the catalog goes (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the catalog (prints its path)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cli-commit-pipe-", dir=args.dir))
    config, pipe = work / "datahub.toml", work / "changes.fifo"
    config.write_text(f'home = "{work / "home"}"\n')
    datahub = [sys.executable, "-m", "datahub.cli.main", "--config", str(config)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # cwd=ROOT: `python -m` puts the current directory first on sys.path, so started from another
    # checkout it would import that checkout's datahub, not this one's
    subprocess.run([*datahub, "dataset", "create", "big"], check=True, capture_output=True, env=env, cwd=ROOT)
    os.mkfifo(pipe)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    print(
        f"bench/scale/cli_commit_pipe.py: {args.records:,} records, git {head.stdout.strip() or '?'}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, {os.cpu_count()} CPUs, load {load()}",
        flush=True,
    )
    gen = subprocess.Popen([sys.executable, "-c", GENERATOR, str(args.records), str(pipe), str(PER_DIR)])
    t0 = time.perf_counter()
    commit = subprocess.Popen(
        [*datahub, "commit", "big", "--changes", str(pipe), "-m", "bench"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    _, status, usage = os.wait4(commit.pid, 0)
    wall = time.perf_counter() - t0
    out, err = commit.stdout.read().decode(), commit.stderr.read().decode()  # type: ignore[union-attr]
    commit.returncode = os.waitstatus_to_exitcode(status)
    gen.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if commit.returncode:
        raise SystemExit(f"datahub commit failed ({commit.returncode}): {err[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    size = sum(f.stat().st_size for f in (work / "home").glob("catalog.db*"))
    figures = {
        "records": args.records,
        "wall_s": wall,
        "cpu_s": cpu,
        "rate": args.records / wall,
        "per_cpu_s": args.records / cpu if cpu else 0.0,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "catalog_mib": size / 2**20,
        "generator_cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime - cpu,
    }
    print(out.strip())
    print(
        f"commit: {wall:,.1f} s wall = {figures['rate']:,.0f} records/s; {cpu:,.1f} CPU-s = "
        f"{figures['per_cpu_s']:,.0f} records per CPU-s; peak RSS {figures['peak_rss_mb']:,.0f} MB; "
        f"catalog {figures['catalog_mib']:,.0f} MiB ({size / args.records:,.0f} B/record); "
        f"generator {figures['generator_cpu_s']:,.1f} CPU-s (apart); load {load()}  "
        f"(goal: 250,000 records/s)",
        flush=True,
    )
    if args.keep:
        pipe.unlink()
        print(f"kept {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return figures


if __name__ == "__main__":
    main()
