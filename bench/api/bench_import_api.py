"""Import and HTTP API throughput, each against a baseline measured in the same run.

    .venv/bin/python bench/api/bench_import_api.py [--objects 100000] [--api-records 100000]

Import (source: a memory:// prefix, so the figures are the importer's, not a disk's):
  baseline A = listing the source + committing the same records directly (no merge, no spool);
  first import, a no-op re-import and a re-import with 1 % modified, against A.
API (``datahub serve`` in its own process on 127.0.0.1, httpx client here):
  baseline B = the catalog's own listing (Catalog.list_records) of the same version;
  paging through all records (limit=1000) and the NDJSON export, against B.
Prints seconds, items/s, ratios and peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.config import load_config
from datahub.ingest import import_source
from datahub.storage import StoreRegistry, drop_memory_space, open_store

REPO = Path(__file__).resolve().parents[2]


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(label: str, fn, items: int, baseline: float | None = None) -> float:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    ratio = f"  {dt / baseline:5.2f}x baseline" if baseline else ""
    print(f"{label:<44} {dt:8.2f} s  {items / dt:>10,.0f} /s{ratio}  peak RSS {rss_mib():.0f} MiB")
    return dt


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(client: httpx.Client, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if client.get("/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("datahub serve did not answer /healthz")


@contextmanager
def served(home: str | Path, *args: str, timeout: float = 120.0) -> Iterator[tuple[str, int, int]]:
    """``datahub serve ARGS`` over ``home`` in its own process for the block; yields (URL, port,
    pid) once it answers, and stops it (SIGINT: a clean stop) afterwards. Shared by the API benches."""
    port = free_port()
    cmd = [sys.executable, "-m", "datahub.cli.main", "--home", str(home), "serve", "--port", str(port), *args]
    server = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            wait_healthy(client, timeout)
        yield f"http://127.0.0.1:{port}", port, server.pid
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--objects", type=int, default=100_000)
    args = p.parse_args()
    n = args.objects
    home = tempfile.mkdtemp(prefix="bench-api-")
    config = load_config(env={}, overrides={"home": home})
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    stores = StoreRegistry(config)
    src = open_store("memory://bench-src", config)
    for i in range(n):
        src.put(f"d{i % 100:02d}/{i:07d}.bin", b"x")
    print(f"{n:,} objects; Python {sys.version.split()[0]}")

    print("-- import")

    def baseline_a() -> None:
        catalog.create_dataset("direct")
        catalog.commit("direct", (Put(Record(o.key, src.url_for(o.key), o.etag, o.size)) for o in src.list()))

    base_a = timed("baseline A: list source + direct commit", baseline_a, n)
    timed(
        "first import", lambda: import_source(catalog, config, stores, "memory://bench-src", "ds"), n, base_a
    )
    timed(
        "re-import, nothing changed (no version)",
        lambda: import_source(catalog, config, stores, "memory://bench-src", "ds"),
        n,
        base_a,
    )
    for i in range(0, n, 100):
        src.put(f"d{i % 100:02d}/{i:07d}.bin", b"yy")
    timed(
        "re-import, 1 % modified",
        lambda: import_source(catalog, config, stores, "memory://bench-src", "ds"),
        n,
        base_a,
    )
    assert catalog.resolve("ds").modified == n // 100

    print("-- HTTP API (datahub serve in a separate process, 127.0.0.1)")
    base_b = timed(
        "baseline B: Catalog.list_records", lambda: sum(1 for _ in catalog.list_records("ds", "latest")), n
    )
    with served(home) as (url, _, _), httpx.Client(base_url=url, timeout=120) as client:

        def pages() -> None:
            cursor, seen = None, 0
            while True:
                params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
                body = client.get("/v1/datasets/ds/versions/latest/records", params=params).json()
                seen += len(body["items"])
                cursor = body["next_cursor"]
                if cursor is None:
                    break
            assert seen == n, seen

        def export() -> None:
            with client.stream("GET", "/v1/datasets/ds/versions/latest/export") as r:
                assert sum(1 for _ in r.iter_lines()) == n

        def small_requests() -> None:
            for _ in range(200):
                client.get("/v1/datasets/ds/versions/latest")

        timed("GET records, pages of 1000", pages, n, base_b)
        timed("GET export (NDJSON stream)", export, n, base_b)
        timed("GET one version x200 (requests/s)", small_requests, 200)
    stores.close()
    catalog.close()
    drop_memory_space("bench-src")


if __name__ == "__main__":
    main()
