"""Mount start time and daemon memory for a large version (issue 16 item 3: 10^6 entries).

    .venv/bin/python bench/mount/start_memory.py [--entries 1000000]

Commits ``--entries`` records (keys ``train/class_XXX/img_XXXXXXXX.jpg`` in 1,000
directories, S3 URLs, MD5 etags) into a fresh SQLite catalog under a temporary home, then
runs the real ``datahub mount MNT ds@1 --background`` (a FUSE daemon in its own process)
and measures:

- ready: from starting the command until it returns (the daemon serves; listings load in
  the background);
- listed: until ``stat`` of the version's last key answers (a lookup waits for the
  listing to get there, so the whole version is in the daemon's index);
- the daemon's VmRSS / VmHWM then, against the same daemon mounting a 1-record version in
  the same run (baseline): (RSS - baseline) / entries is the index's cost per entry.

No object is read (record URLs point at a loopback endpoint nothing listens on).
Goals (issue 16): ready <= 10 s; <= 200 B/entry.

The mount runs with ``--no-prefetch``: the figures are the listing index's. The background
warm-up (on by default for dataset versions) collects every file's ObjectRef in a list
before it starts, which costs ~300 B/entry more; ``--warm-up`` measures the mount with it.

``--catalog remote`` mounts through the remote catalog instead: a real ``datahub serve
--local`` in its own process over the same SQLite file (127.0.0.1, a free port), and the
mount (with a home of its own) gets ``DATAHUB_CATALOG_URL=http://127.0.0.1:PORT``, so its
listing streams over HTTP. ``--catalog both`` (the default) measures both in one run, each
against its own baseline (the baseline daemon's catalog client is the same kind).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "api"))
from bench_import_api import served  # noqa: E402  (datahub serve in its own process)

WARM_UP = False  # --warm-up: mount with the background warm-up (on by default in `datahub mount`)
ENDPOINT = "http://127.0.0.1:9"  # loopback, nothing listens: no object is read


def key_of(i: int) -> str:
    return f"train/class_{i % 1000:03d}/img_{i:08d}.jpg"


def commit(home: Path, n: int) -> None:
    """The version to mount, committed in a child process so this one stays small."""
    code = f"""
import hashlib
from datahub.catalog import Put, Record, open_catalog
cat = open_catalog("sqlite:///{home}/catalog.db")
cat.create_dataset("ds")
def records():
    for i in range({n}):
        key = "train/class_%03d/img_%08d.jpg" % (i % 1000, i)
        yield Put(Record(key, "s3://bench/" + key, hashlib.md5(key.encode()).hexdigest(), 100000 + i % 5000))
cat.commit("ds", records())
cat.close()
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def datahub(home: Path, *args: str, catalog_url: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("DATAHUB_CATALOG_URL", None)
    if catalog_url:
        env["DATAHUB_CATALOG_URL"] = catalog_url
    return subprocess.run(
        [sys.executable, "-m", "datahub.cli.main", "--home", str(home), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )


@contextmanager
def catalog_of(home: Path, kind: str) -> Iterator[tuple[Path, str]]:
    """(the mount's home, its catalog URL): the SQLite file in ``home`` itself, or a
    ``datahub serve --local`` over it, mounted from a home of its own (``home/client``)."""
    if kind == "sqlite":
        yield home, ""
        return
    client = home / "client"
    client.mkdir(exist_ok=True)
    with served(home, "--local", "--no-labelx", "--host", "127.0.0.1") as (url, _port, _pid):
        yield client, url


def status_mib(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[name] = int(value.split()[0]) / 1024
    return out


def mount_and_measure(home: Path, n: int, kind: str) -> dict[str, float]:
    with catalog_of(home, kind) as (mount_home, url):
        return _mount_and_measure(mount_home, n, url)


def _mount_and_measure(home: Path, n: int, catalog_url: str) -> dict[str, float]:
    mnt = home / "mnt"
    mnt.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    args = ("mount", str(mnt), "ds@1", "--endpoint", ENDPOINT, "--background")
    args += () if WARM_UP else ("--no-prefetch",)
    out = datahub(home, *args, catalog_url=catalog_url).stdout
    ready = time.perf_counter() - t0
    pid = int(re.search(r"pid (\d+)", out).group(1))  # type: ignore[union-attr]
    try:
        last = mnt / "ds" / "v1" / key_of(n - 1)
        os.stat(last)
        listed = time.perf_counter() - t0
        # The daemon opens the S3 client (boto3) once a listing is in: wait until its RSS
        # holds still for 2 s, in the baseline and the big mount alike.
        rss, still = status_mib(pid)["VmRSS"], 0
        while still < 4:
            time.sleep(0.5)
            now = status_mib(pid)["VmRSS"]
            still, rss = (still + 1, rss) if abs(now - rss) < 0.5 else (0, now)
        return {"ready": ready, "listed": listed, **status_mib(pid)}
    finally:
        datahub(home, "umount", str(mnt), catalog_url=catalog_url)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--catalog", choices=("sqlite", "remote", "both"), default="both")
    p.add_argument("--warm-up", action="store_true", help="keep the mount's background warm-up on")
    args = p.parse_args()
    global WARM_UP
    WARM_UP = args.warm_up
    n = args.entries
    kinds = ("sqlite", "remote") if args.catalog == "both" else (args.catalog,)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    print(
        f"mount start/memory: {n:,} entries, git {rev.stdout.strip()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        f", warm-up {'on' if WARM_UP else 'off (--no-prefetch)'}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="bench-mount-start-") as base_home,
        tempfile.TemporaryDirectory(prefix="bench-mount-start-") as home,
    ):
        commit(Path(base_home), 1)
        t = time.perf_counter()
        commit(Path(home), n)
        print(f"committed {n:,} records in {time.perf_counter() - t:.1f} s | {uptime()}")
        for kind in kinds:
            base = mount_and_measure(Path(base_home), 1, kind)
            load = uptime()
            big = mount_and_measure(Path(home), n, kind)
            report(kind, n, base, big, load)


def report(kind: str, n: int, base: dict[str, float], big: dict[str, float], load: str) -> None:
    per_entry = (big["VmRSS"] - base["VmRSS"]) * 2**20 / n
    print(f"[{kind}] baseline daemon (1 entry): ready {base['ready']:.2f} s, VmRSS {base['VmRSS']:.0f} MiB")
    print(
        f"[{kind}] {n:,} entries: ready {big['ready']:.2f} s (goal <= 10 s: {'met' if big['ready'] <= 10 else 'MISSED'}), "
        f"whole listing in {big['listed']:.1f} s | {load}"
    )
    print(
        f"[{kind}] daemon VmRSS {big['VmRSS']:.0f} MiB (anon {big['RssAnon']:.0f}, file {big['RssFile']:.0f}), "
        f"VmHWM {big['VmHWM']:.0f} MiB; (VmRSS - baseline) / entries = {per_entry:.0f} B/entry "
        f"(goal <= 200: {'met' if per_entry <= 200 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
