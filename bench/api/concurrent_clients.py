"""API throughput and latency with 200 concurrent clients, one server process vs several.

    .venv/bin/python bench/api/concurrent_clients.py [--clients 200] [--records 20000]
        [--workers 1,2,3] [--seconds 15] [--page 100]

Starts ``datahub serve --workers W`` (local mode, 127.0.0.1, SQLite catalog, no LabelX) over
a dataset of ``--records`` records, then runs a load generator in its own process: ``--clients``
keep-alive connections, each sending its next request as soon as the last answer is in
(closed loop). Two workloads:

- ``pages``: GET a record page (``limit=--page``) at a random cursor of the version
  (issue 15 item 4: one process gave 471 req/s, p99 718 ms; goal >= 2x with p99 < 300 ms);
- ``mixed``: half record pages, half ref resolution (``versions/latest``, ``versions/1``,
  the dataset) (issue 16 item 3).

The load generator is raw asyncio streams (about 30 us of CPU per request) so that on 2
cores it takes little from the server; its CPU and the server's (all worker processes) are
reported beside each figure, with ``uptime``. Figures are requests/s over the measured
window after a warm-up, and p50/p99 of the time from sending a request to its last byte.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_import_api import served  # noqa: E402 - the sibling bench owns the server helpers

DATASET = "bench"


# --- the load generator (runs in its own process) -------------------------------------------------
async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes) -> int:
    writer.write(raw)
    status_line = await reader.readline()
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def _client(
    host: str, port: int, paths: list[bytes], stop_at: float, measure_from: float, out: list
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    rnd = random.Random(id(out) ^ os.getpid() ^ int(time.time_ns()))
    try:
        while (now := time.perf_counter()) < stop_at:
            path = rnd.choice(paths)
            raw = b"GET " + path + b" HTTP/1.1\r\nHost: bench\r\n\r\n"
            status = await _request(reader, writer, raw)
            if now >= measure_from:
                out.append((time.perf_counter() - now, status))
    finally:
        writer.close()


async def _load(
    host: str, port: int, paths: list[bytes], clients: int, warmup: float, seconds: float
) -> dict:
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + seconds
    results: list[tuple[float, int]] = []
    await asyncio.gather(
        *(_client(host, port, paths, stop_at, measure_from, results) for _ in range(clients))
    )
    latencies = sorted(r[0] for r in results)
    errors = sum(1 for r in results if r[1] != 200)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "requests": len(latencies),
        "errors": errors,
        "rps": len(latencies) / seconds,
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)] if latencies else None,
        "client_cpu_s": usage.ru_utime + usage.ru_stime,
    }


def run_load(args: argparse.Namespace) -> None:
    paths = [p.encode() for p in json.loads(Path(args.paths_file).read_text())]
    result = asyncio.run(_load("127.0.0.1", args.port, paths, args.clients, args.warmup, args.seconds))
    print(json.dumps(result))


# --- the orchestration ---------------------------------------------------------------------------
def make_catalog(home: Path, records: int) -> None:
    from datahub.catalog import Put, Record, open_catalog

    home.mkdir(parents=True, exist_ok=True)
    with open_catalog(f"sqlite:///{home / 'catalog.db'}") as catalog:
        catalog.create_dataset(DATASET, description="bench")
        catalog.commit(
            DATASET,
            (
                Put(
                    Record(f"img/{i:08d}.jpg", f"s3://bench/img/{i:08d}.jpg", f"e{i}", 100_000, meta={"i": i})
                )
                for i in range(records)
            ),
        )


def page_paths(url: str, page: int) -> list[str]:
    """Every page's URL of the version (the cursors come from walking it once)."""
    base = f"/v1/datasets/{DATASET}/versions/1/records?limit={page}"
    paths, cursor = [base], None
    with httpx.Client(base_url=url, timeout=60) as client:
        while True:
            body = client.get(base + (f"&cursor={cursor}" if cursor else "")).json()
            cursor = body.get("next_cursor")
            if not cursor:
                return paths
            paths.append(f"{base}&cursor={cursor}")


def server_cpu(pid: int) -> float:
    """CPU seconds of the server and all its (worker) children, alive ones included."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid] + [
        int(p)
        for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    ]
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def one_config(home: Path, workers: int, workload: str, pages: list[str], args: argparse.Namespace) -> dict:
    with served(home, "--no-labelx", "--workers", str(workers)) as (_, port, pid):
        resolve = [
            f"/v1/datasets/{DATASET}/versions/latest",
            f"/v1/datasets/{DATASET}/versions/1",
            f"/v1/datasets/{DATASET}",
        ]
        paths = pages if workload == "pages" else pages[: len(resolve) * 50] + resolve * 50
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(paths, fh)
        load_up = uptime()
        cpu0 = server_cpu(pid)
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--load",
                "--port",
                str(port),
                "--paths-file",
                fh.name,
                "--clients",
                str(args.clients),
                "--warmup",
                str(args.warmup),
                "--seconds",
                str(args.seconds),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(out.stdout)
        result["server_cpu_s"] = server_cpu(pid) - cpu0
        result["uptime"] = load_up
        os.unlink(fh.name)
        return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--page", type=int, default=100)
    ap.add_argument("--workers", default="1,2,3")
    ap.add_argument("--workloads", default="pages,mixed")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--paths-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load:
        run_load(args)
        return
    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    print(
        f"API under {args.clients} concurrent clients: {args.records:,} records, pages of {args.page}, "
        f"{args.seconds:.0f} s measured after {args.warmup:.0f} s warm-up"
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, git {git}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "var"
        make_catalog(home, args.records)
        with served(home, "--no-labelx") as (url, _, _):
            pages = page_paths(url, args.page)
        rows = []
        for workload in args.workloads.split(","):
            for workers in [int(w) for w in args.workers.split(",")]:
                r = one_config(home, workers, workload, pages, args)
                rows.append((workload, workers, r))
                print(
                    f"{workload:6} workers={workers}: {r['rps']:8.1f} req/s  p50 {r['p50_ms']:7.1f} ms  "
                    f"p99 {r['p99_ms']:7.1f} ms  errors {r['errors']}  server CPU {r['server_cpu_s']:.1f} s  "
                    f"client CPU {r['client_cpu_s']:.1f} s  | {r['uptime']}",
                    flush=True,
                )
    print()
    print(
        "| workload | workers | req/s | vs 1 worker | p50 ms | p99 ms | errors | server CPU s | client CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for workload, workers, r in rows:
        one = next(
            x for w, n, x in rows if w == workload and n == min(n2 for w2, n2, _ in rows if w2 == workload)
        )
        print(
            f"| {workload} | {workers} | {r['rps']:.0f} | {r['rps'] / one['rps']:.2f}x | {r['p50_ms']:.0f} | "
            f"{r['p99_ms']:.0f} | {r['errors']} | {r['server_cpu_s']:.1f} | {r['client_cpu_s']:.1f} |"
        )


if __name__ == "__main__":
    main()
