"""The dataset browser's goals (issue 28), each beside a same-run baseline.

    .venv/bin/python bench/web/browser.py [--sizes 1000,10000,100000,1000000] [--repeat 30]

1. Time to first byte of the datasets list with 1,000 datasets: goal <= 200 ms. Baselines:
   ``GET /healthz`` (the server's floor) and ``GET /v1/datasets`` (the JSON API's list of the
   same datasets).
2. The version page (first page of records) of versions of 10^3 .. 10^6 records: goal
   <= 300 ms at 10^6 and flat in the version's size. Baseline: the API's first page of the
   same records (``/v1/.../records?limit=100``).
3. 50 thumbnails of a cold version page, fetched 6 at a time (as a browser does): goal
   <= 2 s; then again, from the preview store. Baselines: reading the 50 originals straight
   from their store in this process, and the same 50 requests one at a time. CPU per file is
   this process's CPU (server and client share it) over the 50 files.

A real uvicorn server on loopback serves the app ``datahub serve`` builds; catalogs are SQLite
in a temporary directory. Times are medians (and p95) of ``--repeat`` requests after 3
warm-up requests. The machine may be shared: the load average is printed at each step.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx
import uvicorn
from PIL import Image

from datahub.catalog import Put, Record, open_catalog
from datahub.cli.serve_cmd import build_app
from datahub.config import load_config
from datahub.storage import StoreRegistry, open_store
from tests.servers import free_port


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def ttfb(client: httpx.Client, url: str, repeat: int) -> tuple[float, float]:
    """Median and p95 seconds from sending the request to the first byte of the body."""
    times = []
    for i in range(repeat + 3):
        t0 = time.perf_counter()
        with client.stream("GET", url) as resp:
            chunks = resp.iter_raw()
            next(chunks, b"")
            took = time.perf_counter() - t0
            assert resp.status_code == 200, (url, resp.status_code)
            for _ in chunks:  # the rest of the body
                pass
        if i >= 3:
            times.append(took)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


class Server:
    def __init__(self, app) -> None:
        self.port = free_port()
        self.srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.srv.run, daemon=True)
        self.thread.start()
        while not self.srv.started:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.srv.should_exit = True
        self.thread.join(timeout=30)


def env(tmp: Path):
    config = load_config(
        env={}, overrides={"home": str(tmp / "var"), "catalog_url": f"sqlite:///{tmp / 'catalog.db'}"}
    )
    return config, open_catalog(config.resolved_catalog_url), StoreRegistry(config)


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def bench_list(tmp: Path, repeat: int) -> None:
    config, catalog, stores = env(tmp)
    for i in range(1000):
        catalog.create_dataset(f"ds-{i:04d}", description=f"dataset number {i}", owner="bench")
        if i % 10 == 0:  # every tenth has a version: the list shows its head
            catalog.commit(f"ds-{i:04d}", [Put(Record("a", "memory://b/a", "e", 1))], message="one")
    app, cache = build_app(config, catalog, stores, labelx=False)
    server = Server(app)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            print(f"\n1. datasets list, 1,000 datasets ({load()})")
            for what, url in (("/healthz (floor)", "/healthz"), ("/v1/datasets (API)", "/v1/datasets"),
                              ("/ (browser, first page of 100)", "/")):  # fmt: skip
                med, p95 = ttfb(client, url, repeat)
                print(f"   {what:34} TTFB median {ms(med):>10}  p95 {ms(p95):>10}")
    finally:
        server.stop()
        cache.close()
        stores.close()
        catalog.close()


def bench_versions(tmp: Path, sizes: list[int], repeat: int) -> None:
    config, catalog, stores = env(tmp)
    for n in sizes:
        name = f"v{n}"
        catalog.create_dataset(name)
        t0 = time.perf_counter()
        puts = (
            Put(
                Record(
                    f"part-{i * 10 // n}/{i:07d}.bin",
                    f"memory://b/{i}",
                    f"e{i}",
                    1000 + i % 5000,
                    labels={"class": f"c{i % 7}"},
                )
            )  # fmt: skip
            for i in range(n)
        )
        catalog.store.commit(name, 0, puts, message=f"{n} records")
        print(f"   built {name} in {time.perf_counter() - t0:.1f} s")
    app, cache = build_app(config, catalog, stores, labelx=False)
    server = Server(app)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            print(f"\n2. version page, first page of records ({load()})")
            print(f"   {'records':>10} {'browser root':>14} {'browser folder':>15} {'API 100 records':>16}")
            for n in sizes:
                root, _ = ttfb(client, f"/datasets/v{n}/versions/1", repeat)
                folder, _ = ttfb(client, f"/datasets/v{n}/versions/1?prefix=part-5/", repeat)
                api, _ = ttfb(client, f"/v1/datasets/v{n}/versions/1/records?limit=100", repeat)
                print(f"   {n:>10,} {ms(root):>14} {ms(folder):>15} {ms(api):>16}")
    finally:
        server.stop()
        cache.close()
        stores.close()
        catalog.close()


def photo(i: int) -> bytes:
    img = Image.new("RGB", (1024, 768), ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256))
    for y in range(0, 768, 16):  # some detail, so the JPEG is not trivially small
        img.paste(((y * 3 + i) % 256, 128, (y * 7) % 256), (0, y, 1024, y + 4))
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


def bench_thumbs(tmp: Path) -> None:
    config, catalog, stores = env(tmp)
    objects = open_store((tmp / "objects").as_uri(), config)
    changes = []
    for i in range(50):
        info = objects.put(f"img/{i:03d}.jpg", photo(i))
        changes.append(
            Put(Record(f"img/{i:03d}.jpg", objects.url_for(f"img/{i:03d}.jpg"), info.etag, info.size))
        )
    catalog.create_dataset("photos")
    catalog.commit("photos", changes)
    total = sum(c.record.size for c in changes)
    urls = [f"/thumbs/photos/1/img/{i:03d}.jpg" for i in range(50)]

    def fetch_all(base: str, parallel: int) -> float:
        clients = [httpx.Client(base_url=base, timeout=60) for _ in range(parallel)]
        try:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(parallel) as pool:
                for resp in pool.map(lambda iu: clients[iu[0] % parallel].get(iu[1]), enumerate(urls)):
                    assert resp.status_code == 200 and resp.headers["content-type"] == "image/jpeg"
            return time.perf_counter() - t0
        finally:
            for c in clients:
                c.close()

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    print(f"\n3. 50 thumbnails of 1024x768 JPEGs ({total / 50 / 1024:.0f} KiB each) ({load()})")
    t0 = time.perf_counter()
    for c in changes:
        store, key = stores.for_url(c.record.url)
        store.read(key, etag=c.record.etag)
    print(f"   baseline: read the 50 originals from their store in-process: {ms(time.perf_counter() - t0)}")
    for label, parallel in (("cold, 6 at a time", 6), ("cold, one at a time (baseline)", 1)):
        home = tmp / f"home-{parallel}"
        cfg = load_config(env={}, overrides={"home": str(home), "catalog_url": config.resolved_catalog_url})
        regs = StoreRegistry(cfg)
        app, cache = build_app(cfg, catalog, regs, labelx=False)
        server = Server(app)
        try:
            c0 = cpu()
            cold = fetch_all(server.url, parallel)
            c1 = cpu()
            warm = fetch_all(server.url, parallel)
            c2 = cpu()
            print(f"   {label:34} {ms(cold):>10} (CPU {ms((c1 - c0) / 50)}/file);"
                  f" again, from the preview store {ms(warm):>9} (CPU {ms((c2 - c1) / 50)}/file)")  # fmt: skip
        finally:
            server.stop()
            cache.close()
            regs.close()
    stores.close()
    catalog.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--only", choices=("list", "versions", "thumbs"))
    args = ap.parse_args()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"bench/web/browser.py at {head}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
          f" {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, {load()}")  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.only in (None, "list"):
            bench_list(tmp / "list", args.repeat)
        if args.only in (None, "versions"):
            bench_versions(tmp / "versions", [int(s) for s in args.sizes.split(",")], args.repeat)
        if args.only in (None, "thumbs"):
            bench_thumbs(tmp / "thumbs")


if __name__ == "__main__":
    main()
