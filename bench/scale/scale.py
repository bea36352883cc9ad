"""Catalog figures of issue 38 at 10^7..10^8 records (SQLite), each beside a same-run baseline.

    .venv/bin/python bench/scale/scale.py [--records 100000000] [--baseline 1000000]
        [--fraction 0.01] [--cli-records 1000000] [--dir DIR] [--keep] [--repeat 10]
        [--layout flat|tree] [--generator-records N] [--list-records N] [--via objects|lines]

Steps, in one process, all through the public ``Catalog`` facade (validation included):

1. a baseline dataset of ``--baseline`` records (flatness is judged against it), then the
   large one: ``--records`` puts, 10,000 keys per directory
   (``train/DDDDD/NNNNNNNNN.jpg``) with synthetic ``s3://`` URLs (the objects need not exist),
   in key order as an S3 listing or an import gives them. The same run times the generator
   alone (what the bench itself costs) beside the commit. ``--via lines`` commits both
   from the records' JSON lines in checked chunks (``put_lines``: what ``datahub commit
   --changes`` hands the catalog; the "generator alone" is then the lines and their checks);
2. a commit of ``--fraction`` of the records spread over the key space (60 % modified,
   20 % deleted, 20 % added): its time against the full commit's (goal <= 3 %);
3. ``datahub commit --changes FILE.jsonl`` (the CLI, which validates the file and then
   commits it) of ``--cli-records`` records into a third dataset, as the issue measured;
4. a real uvicorn server of the app ``datahub serve`` builds, over the same catalog file:
   time to first byte of the browser's version page (root and a folder), a deep page of the
   large diff (its middle, by cursor), and the API's first page of records and the same deep
   diff page, for the large dataset and for the baseline one, requests alternated between
   them, with the CPU seconds of each request (goal <= 300 ms each and flat);
5. the large version's whole listing (v2, as ``Record`` objects; issue 16's goal >= 250,000
   records/s) and its whole diff v1..v2;
6. peak RSS (``VmHWM``) of the process after the commits and the reads (before the server
   starts) and the catalog's size on disk (goal <= 400 MB).

This is the one catalog scale bench: ``bench/catalog/scale.py`` (issue 16: commit, 1 %
commit, listing, diff at 10^7) was merged into it.

``--keep`` keeps the catalog (``--dir``) so mount benches can use it: datasets ``big``
(v1: all records, v2: the small commit) and ``base``; with ``--layout tree`` its keys are
``bench/mount/namespace.py``'s (``sNN/dNNN/fNNNNN.jpg``: 10^6-entry subtrees to ``find``),
and ``namespace.py --catalog`` mounts it. At 10^8 the steps that say nothing new at that size
are shrunk: ``--generator-records`` times the generator alone on a sample (scaled in the
report, and said so), ``--list-records`` lists only the first N records of v2, and
``--cli-records 0`` skips the CLI. A long commit prints a progress line every 5 % of its
records, and the catalog files' disk peak during each full commit is sampled every 2 s. Every step prints the load average
(the machine may be shared) and this process's CPU seconds beside wall seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "web"))

from datahub.catalog import Delete, Put, Record, open_catalog  # noqa: E402
from datahub.catalog.put_lines import CHUNK_LINES, PutLines, put_lines  # noqa: E402

PER_DIR = 10_000
# list_rate: issue 16's goal for a whole listing, kept from bench/catalog/scale.py (merged here)
GOALS = {
    "commit_rate": 250_000,
    "small_ratio": 0.03,
    "page_ms": 300,
    "peak_rss_mb": 400,
    "list_rate": 250_000,
}


def key_flat(i: int) -> str:
    """``train/DDDDD/NNNNNNNNN.jpg``: every 10^4-key directory under one ``train/``."""
    return f"train/{i // PER_DIR:05d}/{i:09d}.jpg"


def key_tree(i: int) -> str:
    """``sNN/dNNN/fNNNNN.jpg`` (bench/mount/namespace.py's keys): 10^4 keys per directory,
    10^6 per ``sNN``, so a mount has 10^6-entry subtrees to ``find`` (10^8 fills s00..s99)."""
    d, f = divmod(i, PER_DIR)
    top, d = divmod(d, 100)
    return f"s{top:02}/d{d:03}/f{f:05}.jpg"


key_of = key_flat  # --layout tree switches it (before any record is made)


def record(i: int, generation: int = 0) -> Record:
    """Record ``i``: a synthetic S3 URL, an etag that changes with ``generation``."""
    key = key_of(i)
    return Record(
        key,
        f"s3://bench-bucket/imagenet/{key}",
        f"{i:024x}{generation:08x}",
        100_000 + i % 50_000,
        meta={"split": "train"},
    )


def full_changes(
    n: int, progress: Callable[[int], None] | None = None, every: int = 10_000_000
) -> Iterator[Put]:
    """The ``n`` puts of a first version, in key order; ``progress(done)`` is called between
    chunks of ``every`` records (a long commit says how far it got, at no per-record cost)."""
    if progress is None:
        return (Put(record(i)) for i in range(n))
    return _chunked(n, progress, every)


def _chunked(n: int, progress: Callable[[int], None], every: int) -> Iterator[Put]:
    for start in range(0, n, every):
        yield from (Put(record(i)) for i in range(start, min(n, start + every)))
        progress(min(n, start + every))


def full_line_chunks(
    n: int, progress: Callable[[int], None] | None = None, every: int = 10_000_000
) -> Iterator[PutLines]:
    """``full_changes(n)`` as ``datahub commit --changes`` hands them to the catalog: the
    lines of ``change_lines`` in chunks checked by ``put_lines`` (``--via lines``)."""
    lines, done = change_lines(n), 0
    while chunk := list(islice(lines, CHUNK_LINES)):
        checked = put_lines(chunk)
        if checked is None:
            raise AssertionError(f"the bench's own lines are not plain puts: {chunk[0]!r}")
        yield checked
        done += len(chunk)
        if progress is not None and (done % every < len(chunk) or done == n):
            progress(done)


def small_changes(n: int, fraction: float) -> Iterator[Put | Delete]:
    """``fraction`` of the records, one every 1/fraction keys: 3 modified, 1 deleted, 1 added
    (``n + j``, after the last key) in every 5."""
    step = round(1 / fraction)
    for j, i in enumerate(range(0, n, step)):
        kind = j % 5
        if kind < 3:
            yield Put(record(i, generation=1))
        elif kind == 3:
            yield Delete(key_of(i))
        else:
            yield Put(record(n + j))


def change_lines(n: int) -> Iterator[str]:
    """``full_changes(n)`` as the JSON lines ``datahub commit --changes`` reads."""
    for i in range(n):
        r = record(i)
        yield (
            f'{{"op":"put","record":{{"key":"{r.key}","url":"{r.url}","etag":"{r.etag}",'
            f'"size":{r.size},"meta":{{"split":"train"}}}}}}\n'
        )


def vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def reporter(label: str, workdir: Path) -> Callable[[int], None]:
    """A progress line for a long step: records generated so far, wall, CPU, RSS, disk, load."""
    start, cpu = time.perf_counter(), time.process_time()

    def report(done: int) -> None:
        wall, used = time.perf_counter() - start, time.process_time() - cpu
        print(
            f"   {label}: {done:,} records handed over, {wall:,.0f} s wall, {used:,.0f} CPU-s "
            f"({done / max(used, 1e-9):,.0f}/CPU-s), VmHWM {vm_hwm_mb():.0f} MB, catalog files "
            f"{size_mib(workdir):,.0f} MiB, {time.strftime('%H:%M:%S', time.gmtime())} UTC | {load()}",
            flush=True,
        )

    return report


def step(label: str, fn: Callable[[], Any], rows: dict[str, dict]) -> Any:
    at = load()
    start, cpu = time.perf_counter(), time.process_time()
    value = fn()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    rows[label] = {"wall": wall, "cpu": cpu, "load": at}
    print(f"{label:<34} {wall:9.2f} s wall {cpu:9.2f} CPU-s  VmHWM {vm_hwm_mb():6.0f} MB  | {at}", flush=True)
    return value


def size_mib(workdir: Path) -> float:
    total = 0
    for p in workdir.iterdir():
        if p.name.startswith("catalog.db"):
            try:
                total += p.stat().st_size
            except FileNotFoundError:  # the WAL or -shm went away between listing and stat
                pass
    return total / 2**20


class DiskPeak:
    """The catalog files' largest total size (file + WAL + shm), sampled every ``every`` s in
    a thread: a one-transaction commit needs about twice the version it writes at its
    checkpoint (docs/benchmarks.md, issue 38 item 3, third pass)."""

    def __init__(self, workdir: Path, every: float = 2.0) -> None:
        import threading

        self.workdir, self.every, self.peak, self.peak_at = workdir, every, 0.0, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        now = size_mib(self.workdir)
        if now > self.peak:
            self.peak, self.peak_at = now, time.strftime("%H:%M:%S", time.gmtime())

    def reset(self) -> float:
        peak, self.peak = self.peak, 0.0
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cli_commit(workdir: Path, db: Path, n: int, rows: dict[str, dict]) -> None:
    """``datahub commit --changes`` of ``n`` records (a subprocess: the CLI as users run it)."""
    changes = workdir / "changes.jsonl"
    with changes.open("w") as fh:
        fh.writelines(change_lines(n))
    env = {**os.environ, "DATAHUB_HOME": str(workdir / "home"), "DATAHUB_CATALOG_URL": f"sqlite:///{db}"}
    datahub = [str(Path(sys.executable).with_name("datahub"))]
    subprocess.run([*datahub, "dataset", "create", "cli"], env=env, check=True, capture_output=True)
    at = load()
    start = time.perf_counter()
    before = os.times()
    subprocess.run(
        [*datahub, "commit", "cli", "--changes", str(changes), "-m", "bench"],
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    rows["cli commit"] = {"wall": wall, "cpu": cpu, "load": at}
    print(f"{'datahub commit --changes':<34} {wall:9.2f} s wall {cpu:9.2f} CPU-s  | {at}", flush=True)
    changes.unlink()


def pages(
    db: Path, workdir: Path, datasets: list[tuple[str, int]], repeat: int
) -> dict[tuple[str, str], tuple[float, float]]:
    """Median seconds to the first byte, and median CPU seconds, of each page kind for each
    (dataset, records), one server for all.

    Requests alternate between the datasets (A B, then B A, ...) so that load changes on a
    shared machine and the warming of caches hit every dataset alike: measured one dataset
    after the other, the 10^7 run's listing pages looked 3-6x slower on the larger dataset
    while their queries, and this process's CPU per request, were the same (issue 38 item 4;
    docs/benchmarks.md). The server runs in this process (a thread), so the CPU figure is the
    server's work plus the client's, the same client for every dataset.
    """
    import httpx
    from browser import Server  # bench/web/browser.py: a uvicorn server on loopback

    from datahub.api.routes.diff import diff_listing
    from datahub.api.routes.pagination import at_version, encode_cursor
    from datahub.cli.serve_cmd import build_app
    from datahub.config import load_config
    from datahub.storage import StoreRegistry

    config = load_config(env={}, overrides={"home": str(workdir / "home"), "catalog_url": f"sqlite:///{db}"})
    catalog = open_catalog(config.resolved_catalog_url)
    stores = StoreRegistry(config)
    app, cache = build_app(config, catalog, stores, labelx=False)
    server = Server(app)
    urls: dict[str, dict[str, str]] = {}
    for name, n in datasets:
        middle = encode_cursor(key_of(n // 2))  # the browser's pages: a position, no listing
        api_middle = encode_cursor(  # the API's: its diff, the position in both its versions
            at_version(1, at_version(2, key_of(n // 2))), diff_listing(name, "1", "2", "")
        )
        folder = key_of(n // 2).rsplit("/", 1)[0] + "/"
        urls[name] = {
            "browser: version root": f"/datasets/{name}/versions/1",
            "browser: a folder": f"/datasets/{name}/versions/1?prefix={folder}",
            "browser: deep diff page": f"/datasets/{name}/diff?from=1&to=2&cursor={middle}",
            "API: first 100 records": f"/v1/datasets/{name}/versions/1/records?limit=100",
            "API: deep diff page": f"/v1/datasets/{name}/diff?from=1&to=2&limit=100&cursor={api_middle}",
        }
    names = [name for name, _ in datasets]
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    out: dict[tuple[str, str], tuple[float, float]] = {}
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            for round_ in range(repeat + 3):  # the first 3 rounds warm up
                for what in urls[names[0]]:
                    for name in names if round_ % 2 else names[::-1]:
                        took = _first_byte(client, urls[name][what])
                        if round_ >= 3:
                            samples.setdefault((name, what), []).append(took)
        for name, n in datasets:
            print(f"   {name} ({n:,} records)")
            for what in urls[name]:
                runs = samples[(name, what)]
                wall = statistics.median(t for t, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                out[(name, what)] = (wall, cpu)
                print(
                    f"      {what:28} TTFB median {wall * 1000:8.1f} ms  CPU {cpu * 1000:7.1f} ms", flush=True
                )
    finally:
        server.stop()
        cache.close()
        stores.close()
        catalog.close()
    return out


def _first_byte(client: Any, url: str) -> tuple[float, float]:
    """Seconds to the first byte of ``url``'s body, and this process's CPU seconds for the
    whole request (server and client)."""
    t0, c0 = time.perf_counter(), time.process_time()
    with client.stream("GET", url) as resp:
        chunks = resp.iter_raw()
        next(chunks, b"")
        took = time.perf_counter() - t0
        if resp.status_code != 200:
            raise RuntimeError(f"GET {url}: HTTP {resp.status_code}")
        for _ in chunks:  # the rest of the body
            pass
    return took, time.process_time() - c0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    global key_of
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000_000)
    parser.add_argument("--baseline", type=int, default=1_000_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--cli-records", type=int, default=1_000_000, help="0: skip the CLI step")
    parser.add_argument("--repeat", type=int, default=10, help="requests per page (after 3 warm-up ones)")
    parser.add_argument("--dir", default=None, help="where the catalog goes (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the catalog (prints its path)")
    parser.add_argument(
        "--layout", choices=("flat", "tree"), default="flat",
        help="keys train/DDDDD/N.jpg (flat) or bench/mount/namespace.py's sNN/dNNN/fNNNNN.jpg (tree)",
    )  # fmt: skip
    parser.add_argument(
        "--via", choices=("objects", "lines"), default="objects",
        help="full commits from Put objects (a caller's generator) or from checked JSON lines "
        "(what `datahub commit --changes FILE` hands the catalog, without reading a file)",
    )  # fmt: skip
    parser.add_argument(
        "--generator-records", type=int, default=None,
        help="time the generator alone on this many records (default: --records), after the commits",
    )  # fmt: skip
    parser.add_argument(
        "--list-records", type=int, default=None,
        help="list only the first N records of v2 (default: the whole version)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    key_of = key_tree if args.layout == "tree" else key_flat
    n, base_n = args.records, args.baseline
    gen_n = n if args.generator_records is None else args.generator_records
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-", dir=args.dir))
    db = workdir / "catalog.db"
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    print(
        f"bench/scale/scale.py: {n:,} records (baseline {base_n:,}), {args.fraction:.0%} change, "
        f"{args.layout} keys, SQLite {sqlite3.sqlite_version}, {db}\n"
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
        f"git {head.stdout.strip() or '?'}, {platform.platform()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {load()}",
        flush=True,
    )
    rows: dict[str, dict] = {}
    disk = DiskPeak(workdir)
    full = full_line_chunks if args.via == "lines" else full_changes
    try:
        catalog = open_catalog(f"sqlite:///{db}")
        for name, size in (("base", base_n), ("big", n)):
            catalog.create_dataset(name)
            if name == "base":  # the large one's generator is timed after the commits
                step(
                    f"{name}: generator alone ({size:,})",
                    lambda size=size: sum(1 for _ in full(size)),
                    rows,
                )
            disk.sample()
            disk.reset()
            step(
                f"{name}: commit v1 ({size:,})",
                lambda name=name, size=size: catalog.commit(
                    name, full(size, reporter(f"{name} v1", workdir), max(size // 20, 1))
                ),
                rows,
            )
            disk.sample()
            rows[f"{name}: commit v1 ({size:,})"]["disk_peak"] = disk.reset()
            print(f"   disk peak during the commit: {rows[f'{name}: commit v1 ({size:,})']['disk_peak']:,.0f} MiB "
                  f"(catalog files, sampled every {disk.every:.0f} s)", flush=True)  # fmt: skip
            v2 = step(
                f"{name}: commit v2 ({args.fraction:.0%})",
                lambda name=name, size=size: catalog.commit(name, small_changes(size, args.fraction)),
                rows,
            )
        gen_label = "big: generator alone" + (f" ({gen_n:,})" if gen_n == n else f", a sample ({gen_n:,})")
        step(gen_label, lambda: sum(1 for _ in full(gen_n)), rows)
        rows["big: generator alone"] = {**rows[gen_label], "records": gen_n}
        listing = catalog.list_records("big", 2, limit=args.list_records)
        list_label = (
            "big: list v2 (whole)"
            if args.list_records is None
            else f"big: list v2 (first {args.list_records:,})"
        )
        listed = step(list_label, lambda: sum(1 for _ in listing), rows)
        rows["big: list v2"] = rows[list_label]
        diffed = step("big: diff v1..v2 (whole)", lambda: sum(1 for _ in catalog.diff("big", 1, 2)), rows)
        catalog.close()
        peak_commits = vm_hwm_mb()
        on_disk = size_mib(workdir)
        print(
            f"catalog on disk: {on_disk:,.0f} MiB; peak RSS so far (VmHWM) {peak_commits:.0f} MB", flush=True
        )
        if args.cli_records:
            cli_commit(workdir, db, args.cli_records, rows)
        print(f"\npages, median of {args.repeat} requests ({load()})", flush=True)
        figures = pages(db, workdir, [("base", base_n), ("big", n)], args.repeat)
    finally:
        disk.stop()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report = summary(n, base_n, args, rows, figures, peak_commits, on_disk, v2, (listed, diffed))
    return report


def summary(n, base_n, args, rows, figures, peak_commits, on_disk, v2, read) -> dict[str, Any]:
    full, small = rows[f"big: commit v1 ({n:,})"], rows[f"big: commit v2 ({args.fraction:.0%})"]
    gen = rows["big: generator alone"]
    gen_cpu = gen["cpu"] * n / gen["records"]  # scaled from a sample when --generator-records < n
    sampled = "" if gen["records"] == n else f", scaled from {gen['records']:,} records"
    rate, ratio = n / full["wall"], small["wall"] / full["wall"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    changed = v2.added + v2.removed + v2.modified
    print(f"\n| measure ({n:,} records; baseline dataset {base_n:,}) | figure | goal | | load at the step |")
    print("|---|---|---|---|---|")
    print(
        f"| full commit | {full['wall']:.1f} s = **{rate:,.0f} records/s** ({n / full['cpu']:,.0f} per CPU-s; "
        f"the generator alone: {gen_cpu:.1f} CPU-s of it"
        f"{sampled}; "
        f"disk peak {full['disk_peak']:,.0f} MiB) | ≥ {GOALS['commit_rate']:,}/s "
        f"| {verdict(rate >= GOALS['commit_rate'])} | {full['load']} |"
    )
    print(
        f"| {args.fraction:.0%} commit ({changed:,} changes) | {small['wall']:.2f} s = **{ratio:.2%}** of the full "
        f"commit (CPU {small['cpu'] / full['cpu']:.2%}) | ≤ {GOALS['small_ratio']:.0%} "
        f"| {verdict(ratio <= GOALS['small_ratio'])} | {small['load']} |"
    )
    if "cli commit" in rows:
        cli = rows["cli commit"]
        print(
            f"| `datahub commit --changes`, {args.cli_records:,} records | {cli['wall']:.1f} s = "
            f"{args.cli_records / cli['wall']:,.0f} records/s ({args.cli_records / cli['cpu']:,.0f} per CPU-s) "
            f"| — | | {cli['load']} |"
        )
    listed, diffed = read
    listing, diff = rows["big: list v2"], rows["big: diff v1..v2 (whole)"]
    list_rate = listed / listing["wall"]
    print(
        f"| list v2 {'whole' if args.list_records is None else 'first'} ({listed:,} records) | {listing['wall']:.1f} s = **{list_rate:,.0f} records/s** "
        f"({listed / listing['cpu']:,.0f} per CPU-s) | ≥ {GOALS['list_rate']:,}/s "
        f"| {verdict(list_rate >= GOALS['list_rate'])} | {listing['load']} |"
    )
    print(
        f"| diff v1..v2 whole ({diffed:,} entries) | {diff['wall']:.2f} s ({diff['cpu']:.2f} CPU-s) | — | | {diff['load']} |"
    )
    for what in sorted({w for _, w in figures}):
        (big, big_cpu), (base, base_cpu) = figures[("big", what)], figures[("base", what)]
        print(
            f"| {what} (requests alternated) | **{big * 1000:.1f} ms**, CPU {big_cpu * 1000:.1f} ms "
            f"({base * 1000:.1f} ms, CPU {base_cpu * 1000:.1f} ms at {base_n:,}: x{big / base:.2f} wall, "
            f"x{big_cpu / base_cpu:.2f} CPU) | ≤ {GOALS['page_ms']} ms | {verdict(big * 1000 <= GOALS['page_ms'])} | |"
        )
    print(
        f"| peak RSS of the catalog operations (VmHWM after the commits) | **{peak_commits:.0f} MB** "
        f"| ≤ {GOALS['peak_rss_mb']} MB | {verdict(peak_commits <= GOALS['peak_rss_mb'])} | |"
    )
    print(
        f"| catalog on disk | **{on_disk:,.0f} MiB** ({on_disk * 2**20 / (n + base_n):.0f} B/record) | — | | |"
    )
    print(f"| peak RSS with the server (VmHWM, end) | {vm_hwm_mb():.0f} MB | — | | {load()} (end) |")
    return {
        "rate": rate, "ratio": ratio, "list_rate": list_rate, "diffed": diffed, "pages": figures,
        "peak_mb": peak_commits, "disk_mib": on_disk,
    }  # fmt: skip


if __name__ == "__main__":
    main()
