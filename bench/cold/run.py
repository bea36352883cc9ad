#!/usr/bin/env python3
"""Cold path at object-store latency (issue 13 item 7): datahub mounts and their peers,
measured in one run, at the same latency, on the same data.

Why: on loopback moto answers a GET in its own CPU time, but a real object store answers a
small GET in 10-50 ms, and that latency decides how the first (cold) epoch of a training job
goes. Each latency L gets its own ``bench/latency_proxy.py`` in front of one moto server;
every configuration reads through it. A throttling origin (the proxy answering 503 SlowDown
above N requests/s) is one more "latency".

Per (latency, configuration, workload), with the peers harness (``bench/peers``: its
workloads, request log and CPU accounting): fresh mount, empty caches, dropped page cache,
then the cold pass, then the warm pass (new process) on the same mount. Workloads: ``epoch``
(2,000 JPEGs once, shuffled, 8 threads; files/s) and ``torch`` (DataLoader, 2 workers,
decode + resize; img/s). Recorded per pass: the rate, GETs (moto's request log), 503s the
proxy answered, CPU of the mount daemon / moto / the workload. From the torch passes the
report computes the ceiling of a cold torch epoch on this machine,

    ceiling = cores / (workload CPU per image in the warm pass + endpoint CPU per GET in the cold pass)

and the cold torch rate as a fraction of it.

Configurations: ``dh-plain`` (``datahub mount`` of the bucket, default flags: the automatic
warm-up policy of issue 27), ``dh-prefetch`` (``mount --prefetch``), ``dh-noprefetch`` (a
mount that never warms), ``dh-version`` (the bucket's snapshot mounted as a dataset version;
``dh-version-dev``, chosen by name only: the same with ``--no-io-uring``),
``dh-3x`` / ``dh-3x-noprefetch`` (the too-large case: a disk tier a third of the snapshot),
``boto3-8`` / ``boto3-64`` (direct GETs, 8 / 64 threads: the endpoint ceiling),
``rclone-full`` (VFS cache full, ``--transfers 64 --checkers 64``), ``s3fs-cache``
(``use_cache``), ``local`` (the generator's copy on local disk: its warm pass is the page
cache, the bound of a warm epoch through any mount). The datahub configurations run the datahub source tree given by ``--tree``
(default: this repository), so an older commit is measured from a ``git worktree``::

    git worktree add /tmp/base13 937d701
    .venv/bin/python bench/cold/run.py --tree /tmp/base13 --label baseline --latencies 0,10,50
    .venv/bin/python bench/cold/run.py --label head --latencies 0,10,50 --configs dh-plain,dh-prefetch
    .venv/bin/python bench/cold/run.py --report /var/tmp/cold-bench/results/raw.jsonl

``--small-read N`` first mounts a bucket of N small objects with default flags and counts
every request (LIST pages included) of reading 10 of its files, on a new snapshot and on a
remount (issue 27's small-read case).

Needs root (drop_caches, FUSE), rclone and s3fs for those two configurations, and the
datahub virtualenv (moto, boto3, torch, Pillow). Everything stays on 127.0.0.1. Work files
(data, caches, mounts, logs, results) go to ``$BENCH_WORK`` (default /var/tmp/cold-bench).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
PEERS = REPO / "bench" / "peers"
WORK = Path(os.environ.setdefault("BENCH_WORK", "/var/tmp/cold-bench"))
PORT = int(os.environ.get("COLD_BENCH_PORT", "5032"))
MOTO_URL = f"http://127.0.0.1:{PORT}"
os.environ["BENCH_ENDPOINT"] = MOTO_URL  # read by the peers harness at import
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
sys.path[:0] = [str(PEERS), str(REPO)]

import run_bench  # noqa: E402  (bench/peers/run_bench.py: Config, run_pass, RequestLog, drop_caches)

from bench.cold.moto import Moto  # noqa: E402
from bench.latency_proxy import LatencyProxy  # noqa: E402

BUCKET = "bench"
MANY_BUCKET = "bench-many"  # the small-read case: many small objects, a reader of a few
ALL_CONFIGS = [
    "dh-plain", "dh-prefetch", "dh-noprefetch", "dh-version", "dh-3x", "dh-3x-noprefetch",
    "boto3-8", "boto3-64", "rclone-full", "s3fs-cache", "local",
]  # fmt: skip
#: chosen by name only (--configs): same-run baselines of one datahub feature
EXTRA_CONFIGS = ["dh-version-dev"]
TOO_LARGE_RAM = 32 * 1024**2  # dh-3x*: a RAM tier far below the snapshot too
THROTTLED_CONFIGS = ["dh-plain", "dh-prefetch", "boto3-8"]


def log(*parts: object) -> None:
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


def prepare_data(n: int, large: int) -> Path:
    """Generate (once) and upload the dataset with the peers harness's generator.

    ``large``: that many 512 MiB random blobs beside the images. No workload reads them, but
    they are in the mounted bucket, so the warm-up (and a plain mount's listing) meets them:
    the issue's "large files in the bucket" variant.
    """
    manifest = WORK / "manifest.json"
    cmd = [sys.executable, str(PEERS / "gen_data.py"), "--n", str(n), "--large", str(large)]
    cmd += ["--endpoint", MOTO_URL, "--bucket", BUCKET]
    subprocess.run(cmd, check=True)
    return manifest


class Datahub:
    """One datahub source tree's commands, home and catalog snapshot of the bucket."""

    def __init__(self, tree: Path, label: str) -> None:
        self.tree = tree
        self.home = WORK / "datahub" / label
        self.home.mkdir(parents=True, exist_ok=True)
        self.toml = self.home / "datahub.toml"
        self.toml.write_text(
            f'home = "{self.home / "home"}"\n[s3]\nendpoint_url = "{MOTO_URL}"\n'
            f'access_key_id = "{os.environ["AWS_ACCESS_KEY_ID"]}"\n'
            f'secret_access_key = "{os.environ["AWS_SECRET_ACCESS_KEY"]}"\n'
            'region = "us-east-1"\npath_style = true\n'
        )
        self.env = {"PYTHONPATH": str(tree)}
        self.cli = f"{sys.executable} -m fuse_adapter --config {self.toml}"
        where = subprocess.run(
            [sys.executable, "-c", "import datahub; print(datahub.__file__)"],
            env={**os.environ, **self.env},
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(str(tree)):
            raise RuntimeError(f"datahub imports from {where}, not from the tree {tree}")
        self.commit = subprocess.run(
            ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True
        ).stdout.strip()

    def snapshot(self) -> float:
        """Take the bucket's snapshot once, directly on moto (not part of any pass)."""
        mnt = self.home / "snapshot-mnt"
        mnt.mkdir(exist_ok=True)
        env = {**os.environ, **self.env}
        t0 = time.time()
        subprocess.run(
            [*self.cli.split(), "mount", str(mnt), f"s3://{BUCKET}", "--refresh", "--background"],
            env=env,
            check=True,
        )
        info = mnt / ".datahub"  # the snapshot is committed once the listing is in: wait for it
        while json.loads(info.read_text()).get("state") == "listing":
            time.sleep(0.2)
        seconds = time.time() - t0
        subprocess.run([*self.cli.split(), "umount", str(mnt)], env=env, check=True)
        return seconds

    def spec(
        self, flags: str = "", *, source: str = "s3://{bucket}", subdir: str = "", env: dict | None = None
    ) -> dict:
        """A mount of ``source`` (a bucket by default; ``s3.bench`` is the snapshot's dataset,
        mounted as a version) with ``flags``; ``env``: settings (``DATAHUB_CACHE_*``)."""
        return {
            "kind": "mount",
            "mount": f"{self.cli} mount {{mnt}} {source} --endpoint {{endpoint}} --cache-dir {{cache}}"
            f" --foreground{flags}",
            "unmount": f"{self.cli} umount {{mnt}}",
            "cache_dirs": ["{cache}"],
            "env": {**self.env, **(env or {})},
            "subdir": subdir,
            "workloads": ["epoch", "torch"],
        }

    def cache_figures(self, pid: int | None, since: float) -> dict | None:
        """The mount daemon's cache counters (its stats snapshot, written every 2 s) once it
        is newer than ``since``: per tier hits, misses, evictions; the warm-up's state."""
        if pid is None:
            return None
        path = self.home / "home" / "cache" / "stats" / f"{pid}.json"
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if path.stat().st_mtime > since:
                    snap = json.loads(path.read_text())
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        else:
            return None
        keys = ("hits", "misses", "evictions", "fills", "used_bytes", "limit_bytes")
        return {
            "tiers": {t["tier"]: {k: t.get(k, 0) for k in keys} for t in snap.get("tiers", [])},
            "warmups": snap.get("warmups", []),
        }


def config_specs(datahub: Datahub | None, epoch_threads: int = 8, snapshot_bytes: int = 0) -> dict[str, dict]:
    rclone = (
        "rclone mount s3bench:{bucket} {mnt} --config {work}/rclone.conf --read-only --vfs-cache-mode full"
        " --cache-dir {cache} --transfers 64 --checkers 64"
    )
    s3fs = (
        "s3fs {bucket} {mnt} -f -o ro,use_path_request_style,url={endpoint},"
        "passwd_file={work}/s3fs.passwd,use_cache={cache}"
    )
    specs = {
        "local": {"kind": "local", "root": "{work}/data", "workloads": ["epoch", "torch"]},
        "boto3-8": {
            "kind": "direct",
            "root": "s3://{bucket}",
            "backend": "boto3",
            "workloads": ["epoch", "torch"],
        },
        "boto3-64": {
            "kind": "direct",
            "root": "s3://{bucket}",
            "backend": "boto3",
            "workloads": ["epoch"],
            "args": {"epoch": ["--threads", "64"]},
        },
        "rclone-full": {
            "kind": "mount",
            "mount": rclone,
            "env_unset": ["AWS_CA_BUNDLE"],
            "cache_dirs": ["{cache}"],
            "workloads": ["epoch", "torch"],
        },
        "s3fs-cache": {
            "kind": "mount",
            "mount": s3fs,
            "cache_dirs": ["{cache}"],
            "workloads": ["epoch", "torch"],
        },
    }
    if datahub is not None:
        specs["dh-plain"] = datahub.spec()  # default flags: the bucket's automatic warm-up policy
        specs["dh-prefetch"] = datahub.spec(" --prefetch")
        specs["dh-noprefetch"] = datahub.spec(" --no-prefetch")
        # the same snapshot mounted as a dataset version (warm-up on by default)
        specs["dh-version"] = datahub.spec(source="s3.bench", subdir="s3.bench/latest")
        # the same with requests from /dev/fuse only (the baseline of FUSE over io_uring)
        specs["dh-version-dev"] = datahub.spec(" --no-io-uring", source="s3.bench", subdir="s3.bench/latest")
        # the too-large case: a disk tier a third of the snapshot, a small RAM tier
        small = {
            "DATAHUB_CACHE_DISK_BYTES": str(max(1, snapshot_bytes // 3)),
            "DATAHUB_CACHE_RAM_BYTES": str(TOO_LARGE_RAM),
        }
        specs["dh-3x"] = datahub.spec(env=small)
        specs["dh-3x-noprefetch"] = datahub.spec(" --no-prefetch", env=small)
    if epoch_threads != 8:  # the epoch workload's default; boto3-64 keeps its 64
        for name, spec in specs.items():
            if name != "boto3-64":
                spec["args"] = {**spec.get("args", {}), "epoch": ["--threads", str(epoch_threads)]}
    return specs


def run_latency(
    args: argparse.Namespace,
    datahub: Datahub | None,
    latency_ms: float,
    throttle: float | None,
    configs: list[str],
    out,
) -> None:
    """Every configuration through one proxy at ``latency_ms`` (and ``throttle`` req/s)."""
    with LatencyProxy(
        MOTO_URL, latency_ms, throttle_rps=throttle, throttle_burst=args.throttle_burst
    ) as proxy:
        run_bench.ENDPOINT = proxy.url  # the harness templates {endpoint} and workloads' --endpoint from it
        run_bench.write_peer_credentials()  # rclone.conf / s3fs point at the proxy
        specs = config_specs(datahub, getattr(args, "epoch_threads", 8), getattr(args, "snapshot_bytes", 0))
        reqlog = run_bench.RequestLog(str(WORK / "run" / "moto.log"))
        limits = {w: args.limit for w in ("epoch", "torch")}
        pass_args = SimpleNamespace(limits=limits, limit_scale=1.0, manifest=str(args.manifest))
        for name in configs:
            cfg = run_bench.Config(name, specs[name], {})
            for workload in args.workloads.split(","):
                if workload not in cfg.workloads:
                    continue
                extra = {"label": args.label, "latency_ms": latency_ms, "throttle_rps": throttle}
                if name.startswith("dh-") and datahub is not None:
                    extra["commit"] = datahub.commit
                try:
                    cfg.unmount()
                    cfg.clear_caches()
                    extra["drop_caches"] = run_bench.drop_caches()
                    reqlog.take()
                    mount_s = cfg.mount()
                    if mount_s is not None:
                        extra["mount_s"] = round(mount_s, 3)
                    extra["requests_at_mount"] = reqlog.take()
                    for phase in ("cold", "warm"):
                        before = proxy.stats().get("throttled", 0)
                        rec = run_bench.run_pass(cfg, workload, phase, 1, pass_args, reqlog, extra)
                        if name.startswith("dh-") and datahub is not None:
                            rec["cache"] = datahub.cache_figures(cfg.daemon_pid(), time.time())
                        rec["throttled_503"] = proxy.stats().get("throttled", 0) - before if throttle else 0
                        out.write(json.dumps(rec) + "\n")
                        out.flush()
                        log(f"L={latency_ms:g}ms thr={throttle} {name:12s} {workload:6s} {phase}: "
                            f"{run_bench.summary(rec)} 503s={rec['throttled_503']}")  # fmt: skip
                        extra = {"label": args.label, "latency_ms": latency_ms, "throttle_rps": throttle}
                except Exception as ex:  # keep going with the next workload/config
                    log(f"L={latency_ms:g}ms {name} {workload}: FAILED {ex}")
                    out.write(json.dumps({**extra, "config": name, "workload": workload, "phase": "cold",
                                          "result": {"ok": False, "error": str(ex)}}) + "\n")  # fmt: skip
                finally:
                    cfg.unmount()


# the small-read case --------------------------------------------------------------------------


def fill_many(n: int) -> None:
    """``n`` 1 KiB objects in MANY_BUCKET (once: kept while moto runs), 1,000 per directory."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=MOTO_URL)
    try:
        s3.create_bucket(Bucket=MANY_BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    last = f"d{(n - 1) // 1000:03d}/o{n - 1:06d}.bin"
    try:
        s3.head_object(Bucket=MANY_BUCKET, Key=last)
        return
    except s3.exceptions.ClientError:
        pass
    from concurrent.futures import ThreadPoolExecutor

    body = os.urandom(1024)
    t0 = time.time()
    with ThreadPoolExecutor(32) as pool:
        keys = (f"d{i // 1000:03d}/o{i:06d}.bin" for i in range(n))
        list(pool.map(lambda k: s3.put_object(Bucket=MANY_BUCKET, Key=k, Body=body), keys))
    log(f"small-read: {n:,} objects put in {time.time() - t0:.0f} s")


def small_read(args: argparse.Namespace, datahub: Datahub, out) -> None:
    """Mount a bucket of ``args.small_read`` objects with default flags, read 10 files, wait,
    count every request (LIST pages and GETs) in moto's log; then again on a remount (it
    reuses the snapshot if the first mount took one). The same-run baseline does both with
    ``cache.bucket_list_whole_objects = 0``: the whole listing first, as before issue 27's
    listing by directory. ``first_byte_s``: mount start to the first file's bytes."""
    import random

    fill_many(args.small_read)
    reqlog = run_bench.RequestLog(str(WORK / "run" / "moto.log"))
    rng = random.Random(27)
    whole = {"DATAHUB_CACHE_BUCKET_LIST_WHOLE_OBJECTS": "0"}
    attempts = (
        ("first mount", " --refresh", {}),
        ("remount", "", {}),
        ("baseline (whole listing) first mount", " --refresh", whole),
        ("baseline (whole listing) remount", "", whole),
    )
    for attempt, flags, env in attempts:
        spec = datahub.spec(flags, source=f"s3://{MANY_BUCKET}", env=env)
        cfg = run_bench.Config("dh-small-read", spec, {})
        cfg.unmount()
        cfg.clear_caches()
        reqlog.take()
        t0 = time.time()
        cfg.mount()
        picks = rng.sample(range(args.small_read), 10)
        (Path(cfg.root) / f"d{picks[0] // 1000:03d}/o{picks[0]:06d}.bin").read_bytes()
        first_byte_s = time.time() - t0
        info = Path(cfg.root) / ".datahub"
        while json.loads(info.read_text()).get("state") != "ready":  # the listing is in (or by directory)
            time.sleep(0.2)
        listed_s = time.time() - t0
        listing = json.loads(info.read_text()).get("listing", "whole")
        cpu0 = run_bench.cpu_s(cfg.daemon_pid())
        for i in picks[1:]:
            (Path(cfg.root) / f"d{i // 1000:03d}/o{i:06d}.bin").read_bytes()
        time.sleep(args.small_read_wait)  # time for a warm-up to show, if one started
        figures = datahub.cache_figures(cfg.daemon_pid(), time.time())
        cpu1 = run_bench.cpu_s(cfg.daemon_pid())
        cfg.unmount()
        requests = reqlog.take()
        rec = {
            "small_read": True, "label": args.label, "commit": datahub.commit, "attempt": attempt,
            "objects": args.small_read, "files_read": len(picks), "requests": requests,
            "listed_s": round(listed_s, 1), "first_byte_s": round(first_byte_s, 2), "listing": listing,
            "wait_s": args.small_read_wait,
            "daemon_cpu_s_reads": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2),
            "warmups": (figures or {}).get("warmups"),
        }  # fmt: skip
        out.write(json.dumps(rec) + "\n")
        out.flush()
        log(f"small-read {attempt}: requests {requests}, warm-up {rec['warmups']}")


def small_read_report(recs: list[dict]) -> list[str]:
    rows = [r for r in recs if r.get("small_read")]
    if not rows:
        return []
    lines = [
        "### The small-read case: 10 files of a bucket mount with default flags",
        "",
        "| | objects | listing | LIST pages | GETs of objects | all requests | first byte (s) | warm-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        q = r["requests"] or {}
        w = (r.get("warmups") or [{}])[0]
        state = f"{w.get('state', '—')}, {w.get('passes', 0)} passes, warmed {w.get('objects_warmed', 0)}"
        total = sum(q.get(k, 0) for k in ("GET", "HEAD", "LIST", "other"))
        lines.append(
            f"| {r['label']} {r['attempt']} | {r['objects']:,} | {r.get('listing', '—')} | {q.get('LIST', 0)} "
            f"| {q.get('GET', 0)} | {total} | {r.get('first_byte_s', '—')} | {state} |"
        )
    return [*lines, ""]


# report ------------------------------------------------------------------------------------

RATE = {"epoch": "files_per_s", "torch": "images_per_s"}


def _rate(rec: dict | None) -> str:
    if rec is None:
        return "—"
    res = rec["result"]
    value = res.get(RATE[rec["workload"]])
    if not isinstance(value, (int, float)):
        return "error"
    return f"{value:,.0f}{'†' if res.get('capped') else ''}"


def _gets(rec: dict | None) -> str:
    if rec is None or not rec.get("requests"):
        return "—"
    return f"{rec['requests']['GET']:,}"


def _last_line(text: str) -> str:
    """The line of a traceback that says what went wrong (its last one)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "failed"


def ceiling(cold: dict | None, warm: dict | None, cores: int) -> float | None:
    """cores / (workload CPU per image, warm torch pass + endpoint CPU per GET, cold torch pass)."""
    if cold is None or warm is None:
        return None
    images = warm["result"].get("images")
    gets = (cold.get("requests") or {}).get("GET")
    endpoint = cold["cpu_s"].get("endpoint")
    if not images or not gets or endpoint is None:
        return None
    return cores / (warm["cpu_s"]["workload"] / images + endpoint / gets)


def report(path: Path) -> str:
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    metas = [r for r in recs if r.get("meta")]
    small = small_read_report(recs)
    recs = [r for r in recs if not r.get("meta") and "config" in r]
    cores = metas[-1]["cpus"] if metas else os.cpu_count() or 1
    groups: dict[tuple, dict] = defaultdict(dict)
    for r in recs:  # the last record of a kind wins (a rerun replaces a figure)
        key = (r.get("label"), r.get("latency_ms"), r.get("throttle_rps"))
        groups[key][(r["config"], r["workload"], r["phase"])] = r
    lines = []
    for (label, latency, throttle), got in groups.items():
        configs = list(dict.fromkeys(c for c, _, _ in got))
        title = f"### {label}: L = {latency:g} ms" + (
            f", throttled at {throttle:g} requests/s" if throttle else ""
        )
        commits = {r.get("commit") for r in got.values() if r.get("commit")}
        lines += [title, ""]
        if commits:
            lines += [f"datahub at `{', '.join(sorted(commits))}`", ""]
        lines += _table(got, configs, cores, throttle)
    lines.append("† capped: the pass hit its time limit; the rate is over the work done.")
    lines += ["", *small]
    return "\n".join(lines)


def _table(got: dict, configs: list[str], cores: int, throttle: float | None) -> list[str]:
    """One latency's markdown table: a column per configuration, a row per figure."""
    lines = ["| | " + " | ".join(configs) + " |", "|---" * (len(configs) + 1) + "|"]

    def row(name: str, cell) -> None:
        lines.append(f"| {name} | " + " | ".join(cell(c) for c in configs) + " |")

    def get(c: str, w: str, p: str) -> dict | None:
        return got.get((c, w, p))

    row("epoch 8 thr, files/s, cold", lambda c: _rate(get(c, "epoch", "cold")))
    row("epoch, warm pass after it", lambda c: _rate(get(c, "epoch", "warm")))
    row("torch 2 workers, img/s, cold", lambda c: _rate(get(c, "torch", "cold")))
    row("torch, warm pass after it", lambda c: _rate(get(c, "torch", "warm")))
    row(
        "GETs epoch cold / warm",
        lambda c: f"{_gets(get(c, 'epoch', 'cold'))} / {_gets(get(c, 'epoch', 'warm'))}",
    )
    row(
        "GETs torch cold / warm",
        lambda c: f"{_gets(get(c, 'torch', 'cold'))} / {_gets(get(c, 'torch', 'warm'))}",
    )

    def cpu(c: str, w: str, who: str) -> str:
        vals = [(get(c, w, p) or {}).get("cpu_s", {}).get(who) for p in ("cold", "warm")]
        return " / ".join("—" if v is None else f"{v:.1f}" for v in vals)

    row("daemon CPU s, epoch cold / warm", lambda c: cpu(c, "epoch", "daemon"))
    row("daemon CPU s, torch cold / warm", lambda c: cpu(c, "torch", "daemon"))
    row("moto CPU s, torch cold / warm", lambda c: cpu(c, "torch", "endpoint"))

    def ceil(c: str) -> str:
        value = ceiling(get(c, "torch", "cold"), get(c, "torch", "warm"), cores)
        return "—" if value is None else f"{value:,.0f}"

    def frac(c: str) -> str:
        cold = get(c, "torch", "cold")
        value = ceiling(cold, get(c, "torch", "warm"), cores)
        rate = cold["result"].get("images_per_s") if cold else None
        return "—" if value is None or not rate else f"{rate / value:.2f}"

    row("ceiling, img/s", ceil)
    row("cold torch / ceiling", frac)

    def per_file(c: str) -> str:
        rec = get(c, "torch", "cold")
        images = (rec or {}).get("result", {}).get("images")
        cpu = (rec or {}).get("cpu_s", {})
        if not images or cpu.get("daemon") is None:
            return "—"
        return f"{1000 * cpu['daemon'] / images:.2f} / {1000 * cpu['workload'] / images:.2f}"

    row("CPU ms per image, torch cold: daemon / workload", per_file)

    def disk_tier(c: str) -> str:
        """The disk tier's page hit ratio (hits / lookups, counted since the mount: cumulative)
        and its evictions, after the cold and after the warm torch pass."""
        cells = []
        for phase in ("cold", "warm"):
            disk = (((get(c, "torch", phase) or {}).get("cache") or {}).get("tiers") or {}).get("disk")
            asked = (disk or {}).get("hits", 0) + (disk or {}).get("misses", 0)
            cells.append("—" if not asked else f"{disk['hits'] / asked:.2f} ({disk.get('evictions', 0)} ev.)")
        return " / ".join(cells)

    row("disk tier hit ratio (evictions), torch cold / warm", disk_tier)

    def warmup(c: str) -> str:
        ws = ((get(c, "torch", "cold") or {}).get("cache") or {}).get("warmups") or []
        if not ws:
            return "—"
        w = ws[0]
        return (
            f"{w['state']} {w['reason'] or ''} warmed {w['objects_warmed']}, skipped {w['objects_skipped']}"
        )

    row("bucket warm-up after torch cold", warmup)
    if throttle:
        row(
            "503s epoch cold / torch cold",
            lambda c: " / ".join(str((get(c, w, "cold") or {}).get("throttled_503", "—")) for w in RATE),
        )
    errors = [f"{c} {w} {p}: {_last_line(r['result'].get('error', ''))}" for (c, w, p), r in got.items()
              if not r["result"].get("ok", True) or r["result"].get("error")]  # fmt: skip
    lines.append("")
    if errors:
        lines += ["Errors:", "", *[f"- {e}" for e in errors], ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=REPO, help="datahub source tree for the dh-* configs")
    ap.add_argument("--label", default="head", help="name of this run in the results (e.g. baseline)")
    ap.add_argument("--latencies", default="0,10,50", help="ms, comma list ('' for none)")
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS))
    ap.add_argument("--workloads", default="epoch,torch")
    ap.add_argument("--epoch-threads", type=int, default=8, help="reader threads of the epoch workload")
    ap.add_argument("--throttle-rps", type=float, default=150.0, help="0: no throttled run")
    ap.add_argument("--throttle-burst", type=float, default=None, help="default rps/10")
    ap.add_argument("--throttle-latency", type=float, default=10.0, help="ms, the throttled run's latency")
    ap.add_argument("--throttle-configs", default=",".join(THROTTLED_CONFIGS))
    ap.add_argument("--n", type=int, default=2000, help="images")
    ap.add_argument("--large", type=int, default=0, help="512 MiB blobs in the bucket beside the images")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds per pass (then capped)")
    ap.add_argument("--out", type=Path, default=WORK / "results" / "raw.jsonl")
    ap.add_argument(
        "--small-read", type=int, default=0, help="objects of the small-read bucket (0: no such case)"
    )
    ap.add_argument(
        "--small-read-wait", type=float, default=15.0, help="seconds after the 10 reads, before counting"
    )
    ap.add_argument("--report", type=Path, help="only print the markdown report of this JSONL")
    args = ap.parse_args()
    if args.report:
        print(report(args.report))
        return
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(ALL_CONFIGS) - set(EXTRA_CONFIGS)
    if unknown:
        sys.exit(f"unknown configurations {sorted(unknown)}; known: {ALL_CONFIGS + EXTRA_CONFIGS}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    moto = Moto(PORT, WORK / "run")
    try:
        args.manifest = prepare_data(args.n, args.large)
        args.snapshot_bytes = sum(e["size"] for e in json.loads(Path(args.manifest).read_text())["entries"])
        datahub = None
        if any(c.startswith("dh-") for c in configs):
            datahub = Datahub(args.tree.resolve(), args.label)
            log(f"datahub {datahub.commit}: snapshot of s3://{BUCKET} in {datahub.snapshot():.1f} s")
        with open(args.out, "a") as out:
            load = Path("/proc/loadavg").read_text().split()[:3]
            out.write(json.dumps({"meta": True, "label": args.label, "cpus": os.cpu_count(),
                                  "ts": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                                  "loadavg": load, "commit": datahub.commit if datahub else None,
                                  "images": args.n, "large": args.large}) + "\n")  # fmt: skip
            if args.small_read and datahub is not None:
                small_read(args, datahub, out)
            for latency in [float(x) for x in args.latencies.split(",") if x]:
                run_latency(args, datahub, latency, None, configs, out)
            if args.throttle_rps:
                throttled = [c for c in args.throttle_configs.split(",") if c in configs]
                run_latency(args, datahub, args.throttle_latency, args.throttle_rps, throttled, out)
    finally:
        moto.stop()
    print(report(args.out))


if __name__ == "__main__":
    main()
