"""Daemon CPU per cold small file (issue 25 item 8), with same-run baselines.

    .venv/bin/python bench/mount/cold.py [--files 2000] [--origins local,moto,moto10] [--passes 2]
    .venv/bin/python bench/mount/cold.py --tree base=/tmp/base --tree head=/tmp/head  # A/B
    .venv/bin/python bench/mount/cold.py --origins local,moto --fetch-workers 0,1,2  # cache.fetch_workers

``--files`` files of 50-200 KB. Origins: ``local`` (``datahub import`` of a local
directory: the origin is that directory, no network, so the daemon's own cost shows),
``moto`` (a moto server on loopback, over HTTP/1.1 keep-alive connections as a real
object store: ``tests/moto_http11.py``), ``motoN`` (the same behind
``bench/latency_proxy.py`` at N ms), and ``moto-close`` / ``motoN-close`` (the same through
``moto_server``, which closes every connection: each GET then pays a TCP connect, the
harness of the figures before 2026-11-28). Per origin and pass: a fresh mount with an empty
cache directory (RAM tier at its default), ``drop_caches`` (3), then every file read whole
with ``open().read()`` in a shuffled order by 8 threads. Printed: files/s, the ratio to
the same-run baseline (the local directory read directly, page cache dropped), and the
daemon's CPU per file (utime+stime of the mount process from after ``drop_caches`` to the
end of the pass and its background stores). Mounts use ``--no-prefetch``, so every
fetch is a reader's (with the default ``--prefetch`` a warm-up races the readers and
the per-file figure mixes both). ``--mount-flag`` adds flags (repeatable). ``--configs
default,no-io-uring,no-fastloop``: mounts alternating in every pass (FUSE over io_uring,
its /dev/fuse baseline, and requests read on the trio loop).

``--fetch-workers 0,1,2``: mount with ``DATAHUB_CACHE_FETCH_WORKERS`` set to each value in
turn (alternating within every pass, like ``--tree``). The fetch worker processes' CPU per
file is printed beside the daemon's (from after ``drop_caches`` to the end of the pass and
its stores; their start-up, once per mount, is before that): a training job on the same
node loses both.

``--profiler CMD``: run ``CMD -p DAEMON_PID`` during each pass and stop it with SIGINT
after the pass, e.g. ``"py-spy record -f raw -r 200 --gil -o /tmp/p.txt"`` (Python frames of
the thread holding the GIL), ``"perf record -F 999 -g -o /tmp/p.perf"`` (kernel and native
frames) or ``"strace -c -f -o /tmp/p.txt"`` (system calls). A profiler costs the daemon CPU
itself: the CPU figure of a profiled pass is not comparable.

The machine may be shared: files/s moves with other load, CPU per file is the stable figure.
Everything stays on 127.0.0.1; needs root (FUSE, drop_caches).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench.mount.common import (  # noqa: E402
    TICK,
    add_configs_option,
    chosen_configs,
    daemon_cpu,
    drop_caches,
    read_py,
)

if TYPE_CHECKING:  # the fixtures themselves are imported where a run needs them, not by `--help`
    from tests.fuse.conftest import FuseEnv


def threads_cpu(pid: int) -> dict[str, list[float]]:
    """OS thread name -> [utime, stime] seconds, summed over the daemon's live threads."""
    out: dict[str, list[float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = name.rstrip("0123456789 ").rstrip("-_:") or name
        cpu = out.setdefault(name, [0.0, 0.0])
        cpu[0] += int(fields[11]) / TICK
        cpu[1] += int(fields[12]) / TICK
    return out


def children_of(pid: int) -> list[str]:
    """Pids of the daemon's child processes alive now."""
    out: list[str] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += (task / "children").read_text().split()
        except OSError:
            continue
    return out


def workers_cpu(pid: int) -> float:
    """CPU seconds of the daemon's child processes alive now (its fetch workers)."""
    total = 0.0
    for child in children_of(pid):
        try:
            total += daemon_cpu(int(child))
        except OSError:  # exited meanwhile
            continue
    return total


def cold_pass(paths: list[str], threads: int = 8) -> float:
    order = paths[:]
    random.shuffle(order)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(read_py, order, chunksize=8):
            pass
    return time.perf_counter() - t0


def settle(pid: int, cache: Path, n: int) -> None:
    """Wait until the disk tier holds every file and the daemon's CPU stops moving (its
    background stores are part of the cost of a cold file)."""
    from tests.fuse.conftest import wait_until

    wait_until(lambda: sum(1 for _ in cache.rglob("*.page")) >= n, 120)
    idle(lambda: daemon_cpu(pid) + workers_cpu(pid))


def idle(cpu) -> None:
    """Wait until ``cpu()`` (CPU seconds) stops moving."""
    last = cpu()
    while True:
        time.sleep(0.3)
        now = cpu()
        if now - last < 0.011:
            return
        last = now


def local_env(root: Path, src: Path) -> tuple[Path, str]:
    """A datahub home whose dataset ``ds`` is ``src`` imported in place."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "datahub.toml"
    config.write_text(f'home = "{root / "var"}"\n')
    cmd = [
        sys.executable,
        "-m",
        "datahub.cli.main",
        "--config",
        str(config),
        "import",
        str(src),
        "--to",
        "ds",
    ]
    subprocess.run(cmd, check=True, cwd=REPO, capture_output=True)
    return config, "ds@1"


def mount_and_read(
    config: Path,
    source: str,
    mnt: Path,
    cache: Path,
    n: int,
    flags: list[str],
    spy: list[str] | None,
    tree: Path = REPO,
    fetch_workers: int = 0,
) -> tuple[float, float, float]:
    """(seconds, daemon CPU seconds, fetch workers' CPU seconds) of one cold pass through a fresh mount over ``cache``, a
    new directory. Why new, and old ones removed only at the end: ext4 without a journal
    scans past inodes freed in the last 30 s for each new inode (``recently_deleted``), so a
    cache deleted just before the pass would charge its deletion to the pass's page files."""
    mnt.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(config), "mount", str(mnt), source]
    cmd += ["--cache-dir", str(cache), *flags, "--foreground"]
    log = open(mnt.parent / f"{mnt.name}.log", "ab")  # noqa: SIM115 - closed below
    env = {**os.environ, "DATAHUB_CACHE_FETCH_WORKERS": str(fetch_workers)}
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=tree, env=env)  # ``-m``: the tree's datahub
    try:
        from fuse_adapter.daemon import is_mounted
        from tests.fuse.conftest import wait_until

        wait_until(lambda: is_mounted(str(mnt)) or proc.poll() is not None, 60)
        if proc.poll() is not None:
            log.flush()
            raise RuntimeError(
                f"mount exited {proc.returncode}: {(mnt.parent / f'{mnt.name}.log').read_text()}"
            )
        root = mnt / source.split("@")[0] / f"v{source.split('@')[1]}"
        paths = sorted(str(p) for p in root.rglob("*") if p.is_file())
        assert len(paths) == n, f"{len(paths)} files in the mount, expected {n}"
        drop_caches(3)
        profiler = None
        if spy is not None:
            profiler = subprocess.Popen(
                [*spy, "-p", str(proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            time.sleep(1)
        wait_until(lambda: len(children_of(proc.pid)) >= fetch_workers, 60)
        idle(lambda: workers_cpu(proc.pid))  # their start-up (imports) is not a cold file's cost
        cpu0, threads0, workers0 = daemon_cpu(proc.pid), threads_cpu(proc.pid), workers_cpu(proc.pid)
        dt = cold_pass(paths)
        settle(proc.pid, cache, n)
        cpu = daemon_cpu(proc.pid) - cpu0
        workers = workers_cpu(proc.pid) - workers0
        threads1 = threads_cpu(proc.pid)
        parts = []
        for name, (user, system) in sorted(threads1.items(), key=lambda kv: -sum(kv[1])):
            u0, s0 = threads0.get(name, (0.0, 0.0))
            if (user - u0) + (system - s0) >= 0.01:
                parts.append(f"{name} {(user - u0) / n * 1e6:.0f}+{(system - s0) / n * 1e6:.0f}")
        print(f"#   daemon threads, user+system us/file (threads alive at the end): {', '.join(parts)}")
        if profiler is not None:
            profiler.send_signal(2)
            profiler.wait(60)
        return dt, cpu, workers
    finally:
        subprocess.run(
            [sys.executable, "-m", "fuse_adapter", "--config", str(config), "umount", str(mnt)],
            cwd=REPO,
            capture_output=True,
        )
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


#: mount configurations: name -> extra ``datahub mount`` flags (alternating in every pass)
CONFIGS = {"default": (), "no-io-uring": ("--no-io-uring",), "no-fastloop": ("--no-fastloop",)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--origins", default="local,moto,moto10")
    ap.add_argument("--mount-flag", action="append", default=["--no-prefetch"])
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="mount with the datahub source tree DIR (a `git worktree` of a commit) instead of this"
        " checkout; given twice or more, the trees alternate in every pass (a same-run A/B)",
    )
    ap.add_argument("--profiler", help="a command run with -p DAEMON_PID during each pass")
    ap.add_argument(
        "--fetch-workers",
        default="0",
        help="comma-separated cache.fetch_workers values, alternating in every pass (same-run)",
    )
    add_configs_option(ap, CONFIGS, default="default")
    args = ap.parse_args()
    from tests.fuse.conftest import make_env, upload_dataset
    from tests.servers import MotoServer

    configs = chosen_configs(ap, args, CONFIGS)
    rng = random.Random(25)
    objects = {
        f"train/c{i % 20:02d}/img_{i:06d}.jpg": rng.randbytes(rng.randint(50_000, 200_000))
        for i in range(args.files)
    }
    total = sum(len(v) for v in objects.values())
    tmp = Path(tempfile.mkdtemp(prefix="cold-cpu-"))
    src = tmp / "src"
    for key, data in objects.items():
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / key).write_bytes(data)
    local_paths = [str(src / k) for k in objects]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    print(f"# cold: {args.files} files (50-200 KB, {total / 1e6:.0f} MB), 8 threads, {args.passes} passes")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  load {os.getloadavg()[0]:.2f}")
    print(f"# head {commit.stdout.strip()}, kernel {os.uname().release}, flags {' '.join(args.mount_flag)}")
    trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1])) for t in args.tree] or [("head", REPO)]
    counts = [int(w) for w in args.fetch_workers.split(",")]
    variants = [
        (
            "/".join(
                [label] + ([config] if len(configs) > 1 else []) + ([f"w{w}"] if len(counts) > 1 else [])
            ),
            tree,
            w,
            [*args.mount_flag, *CONFIGS[config]],
        )
        for label, tree in trees
        for config in configs
        for w in counts
    ]
    print(
        f"{'origin':10} {'tree':22} {'pass':>4} {'files/s':>9} {'local dir':>10} {'ratio':>6}"
        f" {'daemon us/file':>15} {'workers us/file':>16}"
    )
    motos: dict[bool, MotoServer] = {}  # by keep_alive
    proxy = None
    summary: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    try:
        for origin in args.origins.split(","):
            if origin == "local":
                config, source = local_env(tmp / "local-home", src)
            else:
                from latency_proxy import LatencyProxy

                rest, close, _ = origin[4:].partition("-close")
                keep_alive = not close
                if keep_alive not in motos:
                    motos[keep_alive] = MotoServer(keep_alive=keep_alive)
                endpoint = motos[keep_alive].endpoint
                latency = float(rest or 0)
                if latency:
                    proxy = LatencyProxy(endpoint.url, latency).start()
                    endpoint = dataclasses.replace(endpoint, url=proxy.url)
                env: FuseEnv = make_env(tmp / f"{origin}-home", endpoint)
                ds = upload_dataset(env, "ds", objects)
                config, source = env.config_path, f"ds@{ds.seq}"
            for i in range(args.passes):
                for label, tree, workers, flags in variants:
                    drop_caches(3)
                    base = cold_pass(local_paths)
                    spy = args.profiler.split() if args.profiler else None
                    mnt = tmp / "mnt" / origin
                    dt, cpu, wcpu = mount_and_read(
                        config,
                        source,
                        mnt,
                        tmp / f"cache-{origin}-{label.replace('/', '-')}-{i}",
                        args.files,
                        flags,
                        spy,
                        tree,
                        workers,
                    )
                    rate, base_rate = args.files / dt, args.files / base
                    per_file, workers_per_file = cpu / args.files * 1e6, wcpu / args.files * 1e6
                    summary.setdefault((origin, label), []).append(
                        (rate / base_rate, per_file, workers_per_file)
                    )
                    print(
                        f"{origin:10} {label:22} {i:>4} {rate:>9,.0f} {base_rate:>10,.0f} {rate / base_rate:>6.2f}"
                        f" {per_file:>15.0f} {workers_per_file:>16.0f}",
                        flush=True,
                    )
            if proxy is not None:
                proxy.stop()
                proxy = None
        print("# medians over the passes: ratio to the local directory, daemon + workers us/file")
        for (o, t), v in summary.items():
            ratio, daemon, workers = (statistics.median(x[k] for x in v) for k in range(3))
            print(f"#   {o} {t}: ratio {ratio:.2f}, daemon {daemon:.0f} + workers {workers:.0f} us/file")
    finally:
        if proxy is not None:
            proxy.stop()
        for moto in motos.values():
            moto.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
