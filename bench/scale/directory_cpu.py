"""CPU per entry of a cold directory listing in a paged version mount (issue 38 item 1).

What a mount's first ``ls`` of a directory not in its page cache costs the daemon, without
FUSE: ``PagedTree.readdir(..., wait=True)`` on a fresh tree, which is one
``Catalog.list_directory`` query and the building of the page. Measured

* embedded: the SQLite catalog in this process (process CPU = all of it);
* remote: ``datahub serve --local`` in a subprocess, the tree an API client of it. The
  client's CPU (this process) and the server's (its /proc stat) are printed apart.

Two shapes of records, 10^4 files in one directory each (plus a few subdirectories):
without meta, and with ``meta = {"mtime": ..., "split": "train"}`` (the mtime a mount shows).
Each figure is the median of ``--repeat`` listings; the same run prints, as the baseline,
the CPU of reading the same rows with plain ``sqlite3`` (``SELECT key, url, etag, size``),
the floor of any listing from this store. Run it on the commits to compare (A/B)::

    .venv/bin/python bench/scale/directory_cpu.py [--entries 10000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from datahub.catalog import Put, Record, open_catalog  # noqa: E402
from datahub.catalog.catalog import Catalog  # noqa: E402
from datahub.catalog.http_store import HttpCatalogStore  # noqa: E402
from fuse_adapter.paged_tree import PagedTree, PagedVersion  # noqa: E402
from fuse_adapter.tree import ROOT_INODE, ListingTree  # noqa: E402

GOALS_MS_PER_1E4 = {"embedded": 100.0, "remote": 250.0}  # issue 38: first ls of a cold 10^4 dir


def records(name: str, n: int, with_meta: bool) -> list[Put]:
    out = []
    for i in range(n):
        key = f"{name}/f{i:06d}.jpg"
        meta = {"mtime": 1_700_000_000.5 + i, "split": "train"} if with_meta else {}
        out.append(Put(Record(key, f"s3://bench-bucket/{key}", f"{i:032x}", 100_000 + i, meta=meta)))
    for j in range(4):
        key = f"{name}/sub{j}/x.jpg"
        out.append(Put(Record(key, f"s3://bench-bucket/{key}", "e", 1)))
    return out


def server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listing_cpu(catalog: Catalog, prefix: str, repeat: int, server: int | None) -> tuple[float, float, int]:
    """Median process CPU (and server CPU) of one cold listing of ``prefix``; entries listed."""
    version = catalog.resolve("big", None)
    pv = PagedVersion("big", version.seq, int(version.created_at * 1e9))
    mine, theirs, count = [], [], 0
    for _ in range(repeat):
        static = ListingTree()
        root = static.add_dir(ROOT_INODE, "big")
        tree = PagedTree(static, lambda v, p: catalog.list_directory(v.dataset, v.seq, prefix=p))
        tree.attach(root, pv)
        dir_ino = tree.lookup(root, prefix.rstrip("/"))
        assert dir_ino is not None
        s0 = server_cpu(server) if server else 0.0
        c0 = time.process_time()
        start, count = 0, 0
        while chunk := tree.readdir(dir_ino, start, wait=True):
            count += len(chunk)
            start = chunk[-1][2]
        tree.attr(dir_ino << 32 | 1)
        mine.append(time.process_time() - c0)
        theirs.append((server_cpu(server) - s0) if server else 0.0)
    return statistics.median(mine), statistics.median(theirs), count


def sqlite_floor(db: Path, prefix: str, repeat: int) -> float:
    con = sqlite3.connect(db)
    sql = "SELECT key, url, etag, size FROM records WHERE key > ? AND key < ? ORDER BY key"
    took = []
    for _ in range(repeat):
        c0 = time.process_time()
        rows = con.execute(sql, (prefix, prefix[:-1] + "0")).fetchall()
        took.append(time.process_time() - c0)
    con.close()
    assert rows
    return statistics.median(took)


def serve(config: Path, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "import sys; from datahub.cli.main import main; sys.exit(main())",
           "--config", str(config), "serve", "--host", "127.0.0.1", "--port", str(port), "--local", "--no-labelx"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    import urllib.request

    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/datasets", timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("datahub serve did not come up")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--profile", action="store_true", help="cProfile one embedded listing (with meta)")
    args = p.parse_args()
    n = args.entries
    print(f"load: {os.getloadavg()}  entries per directory: {n}")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = home / "datahub.toml"
        config.write_text(f'home = "{home}"\n')
        db = home / "catalog.db"
        catalog = open_catalog(f"sqlite:///{db}")
        catalog.create_dataset("big")
        catalog.commit("big", records("plain", n, False) + records("meta", n, True), message="bench")
        if args.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            listing_cpu(catalog, "meta/", 1, None)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        port = free_port()
        server = serve(config, port)
        try:
            remote = Catalog(HttpCatalogStore(f"http://127.0.0.1:{port}"))
            runs: dict[str, Callable[[str], tuple[float, float, int]]] = {
                "embedded": lambda prefix: listing_cpu(catalog, prefix, args.repeat, None),
                "remote": lambda prefix: listing_cpu(remote, prefix, args.repeat, server.pid),
            }
            for prefix in ("plain/", "meta/"):
                floor = sqlite_floor(db, prefix, args.repeat)
                print(
                    f"\n{prefix!r}: sqlite3 floor (key, url, etag, size rows) {floor / n * 1e6:.2f} µs/entry"
                )
                for label, run in runs.items():
                    mine, theirs, count = run(prefix)
                    per = mine / count * 1e6
                    line = (
                        f"  {label:8s} {count} entries: client {mine * 1e3:7.1f} ms CPU = {per:5.2f} µs/entry"
                        f" ({per / (floor / n * 1e6):4.1f}x the floor)"
                    )
                    if label == "remote":
                        line += f"; server {theirs * 1e3:7.1f} ms CPU = {theirs / count * 1e6:5.2f} µs/entry"
                    goal = GOALS_MS_PER_1E4[label] * count / 1e4
                    print(line + f"; goal {goal:.0f} ms")
                    print(f"    load {os.getloadavg()[0]:.1f}")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
