"""One ``datahub serve`` under 200 keep-alive clients on a mixed read workload (issue 24 item 9).

    .venv/bin/python bench/api/load.py [--records 100000] [--clients 200] [--seconds 20]
        [--workloads mixed,pages] [--workers 1,2] [--rss-runs 0]

A 100,000-record dataset with 2 versions (v2 patches the labels of every 100th record and adds
1,000), served by ``datahub serve --workers W`` (local mode, 127.0.0.1, SQLite, no LabelX).
Workloads (paths drawn at random per request):

- ``mixed``: 40 % record pages of 50 at a random cursor of v1 or v2, 30 % single records,
  15 % the log (``GET …/versions``), 15 % the diff v1 -> v2 (first page of 50);
- ``pages``: record pages of 50 only.

The load generator is ``concurrent_clients.py``'s raw-asyncio HTTP/1.1 keep-alive client, run
in its own process (closed loop: each connection sends its next request when the last answer
is in); its own CPU is reported, so one can see it is not the bottleneck.

Same-run baselines, printed beside each figure:
- **one at a time**: the same paths from 1 client on one process: the server's CPU per request
  without concurrency (the goal: CPU per request under 200 clients within 1.5x of it);
- ``--workers 2``: the same 200 clients against two worker processes (goal: one process
  >= 0.45x of it).

CPU per request = server CPU (all its processes, /proc/<pid>/stat) over the measured window,
divided by the requests answered in it; on a shared machine it is steadier than req/s.
``--rss-runs N`` then runs the mixed workload N more times against ONE server process and
prints its RSS after each run (goal: it levels off; the last 5 runs within 10 %).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_import_api import served  # noqa: E402 - the sibling bench owns the server helpers
from concurrent_clients import server_cpu, uptime  # noqa: E402 - and the load generator

DATASET = "bench"
LOADER = Path(__file__).resolve().parent / "concurrent_clients.py"


def make_catalog(home: Path, records: int) -> None:
    sys.path.insert(0, str(REPO))
    from datahub.catalog import Patch, Put, Record, open_catalog

    home.mkdir(parents=True, exist_ok=True)
    with open_catalog(f"sqlite:///{home / 'catalog.db'}") as catalog:
        catalog.create_dataset(DATASET, description="bench")

        def record(i: int) -> Record:
            return Record(_key(i), f"s3://bench/{_key(i)}", f"e{i}", 100_000, meta={"i": i, "split": "train"})

        catalog.commit(DATASET, (Put(record(i)) for i in range(records)), message="import")
        changes = [Patch(_key(i), labels={"class": "cat"}) for i in range(0, records, 100)]
        changes += [Put(record(i)) for i in range(records, records + 1000)]
        catalog.commit(DATASET, changes, message="labels")


def _key(i: int) -> str:
    return f"img/{i:08d}.jpg"


def _cursor(key: str) -> str:
    import base64

    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def workload_paths(workload: str, records: int, n: int = 4000, seed: int = 24) -> list[str]:
    """``n`` request paths in the workload's proportions, shuffled (clients pick at random)."""
    rnd = random.Random(seed)
    base = f"/v1/datasets/{DATASET}"

    def page() -> str:
        v = rnd.choice((1, 2))
        return f"{base}/versions/{v}/records?limit=50&cursor={_cursor(_key(rnd.randrange(records)))}"

    if workload == "pages":
        return [page() for _ in range(n)]
    paths = [page() for _ in range(n * 40 // 100)]
    paths += [
        f"{base}/versions/{rnd.choice((1, 2))}/records/{_key(rnd.randrange(records))}"
        for _ in range(n * 30 // 100)
    ]
    paths += [f"{base}/versions"] * (n * 15 // 100)
    paths += [f"{base}/diff?from=1&to=2&limit=50"] * (n * 15 // 100)
    rnd.shuffle(paths)
    return paths


def rss_mib(pid: int) -> float:
    """RSS of the server and its worker processes."""
    pids = [pid] + [
        int(p)
        for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    ]
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total / 1024


def load(port: int, paths_file: str, clients: int, warmup: float, seconds: float) -> dict:
    argv = [
        sys.executable, str(LOADER), "--load", "--port", str(port), "--paths-file", paths_file,
        "--clients", str(clients), "--warmup", str(warmup), "--seconds", str(seconds),
    ]  # fmt: skip
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


def measure(port: int, pid: int, paths_file: str, clients: int, warmup: float, seconds: float) -> dict:
    """One measured window (after an uncounted warm-up run, if any): the loader's figures, the
    server's CPU over exactly that window, and its RSS at the end."""
    if warmup > 0:
        load(port, paths_file, clients, 0.0, warmup)
    cpu0 = server_cpu(pid)
    r = load(port, paths_file, clients, 0.0, seconds)
    r["server_cpu_s"] = server_cpu(pid) - cpu0
    r["cpu_ms_per_req"] = 1000 * r["server_cpu_s"] / max(1, r["requests"])
    r["rss_mib"] = rss_mib(pid)
    return r


def line(label: str, r: dict) -> str:
    return (
        f"{label:34} {r['rps']:7.1f} req/s  p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
        f"errors {r['errors']}  server CPU {r['cpu_ms_per_req']:5.2f} ms/req  "
        f"client CPU {r['client_cpu_s']:.1f} s  RSS {r['rss_mib']:.0f} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--serial-seconds", type=float, default=10.0, help="the one-at-a-time baseline's window")
    ap.add_argument("--workloads", default="mixed,pages")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rss-runs", type=int, default=0)
    args = ap.parse_args()
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    print(
        f"datahub serve under {args.clients} keep-alive clients: {args.records:,} records, 2 versions; "
        f"{args.seconds:.0f} s windows after {args.warmup:.0f} s warm-up"
    )
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, git {git.stdout.strip()}, {os.cpu_count()} CPUs"
    )
    print(uptime(), flush=True)
    rows: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "var"
        make_catalog(home, args.records)
        files = {}
        for workload in args.workloads.split(","):
            files[workload] = str(Path(tmp) / f"{workload}.json")
            Path(files[workload]).write_text(json.dumps(workload_paths(workload, args.records)))
        for workers in [int(w) for w in args.workers.split(",")]:
            with served(home, "--no-labelx", "--workers", str(workers)) as (_, port, pid):
                for workload in args.workloads.split(","):
                    if workers == 1:
                        r = measure(port, pid, files[workload], 1, args.warmup, args.serial_seconds)
                        rows[(workload, "serial")] = r
                        print(line(f"{workload}, 1 process, one at a time", r), flush=True)
                    r = measure(port, pid, files[workload], args.clients, args.warmup, args.seconds)
                    rows[(workload, str(workers))] = r
                    print(line(f"{workload}, {workers} process(es), {args.clients} clients", r), flush=True)
                if workers == 1 and args.rss_runs:
                    print(f"RSS of one process over {args.rss_runs} consecutive mixed runs:", flush=True)
                    rss = []
                    for i in range(args.rss_runs):
                        r = measure(port, pid, files["mixed"], args.clients, 0, args.seconds)
                        rss.append(r["rss_mib"])
                        print(f"  run {i + 1:2}: {line('', r).strip()}", flush=True)
                    last = rss[-5:]
                    print(
                        f"  last 5 runs: {min(last):.0f}..{max(last):.0f} MiB ({max(last) / min(last) - 1:.1%} spread)"
                    )
    print()
    print(
        "| workload | server | req/s | p50 ms | p99 ms | errors | CPU ms/req | vs one at a time | client CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (workload, shape), r in rows.items():
        serial = rows.get((workload, "serial"))
        ratio = f"{r['cpu_ms_per_req'] / serial['cpu_ms_per_req']:.2f}x" if serial else "-"
        label = {"serial": "1 process, 1 client", "1": "1 process", "2": "--workers 2"}.get(shape, shape)
        print(
            f"| {workload} | {label} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.0f} | {r['errors']} | "
            f"{r['cpu_ms_per_req']:.2f} | {ratio} | {r['client_cpu_s']:.1f} |"
        )
    for workload in args.workloads.split(","):
        one, two = rows.get((workload, "1")), rows.get((workload, "2"))
        if one and two:
            print(f"{workload}: one process / two workers = {one['rps'] / two['rps']:.2f}x (req/s)")


if __name__ == "__main__":
    main()
