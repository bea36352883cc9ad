"""A version mount's namespace at 10^6 and 5x10^6 records: paged (this tree) vs whole (a baseline tree).

    .venv/bin/python bench/mount/namespace.py --baseline-tree /tmp/ns-base [--records 1000000 5000000]

``--baseline-tree``: a checkout of the commit before the paged namespace (``git archive
1c2a17b | tar -x -C /tmp/ns-base``); its daemon runs with the same interpreter and this
tree's pyfuse3, so the only difference is the namespace code. Without it only the paged
design is measured.

Per record count, one catalog (SQLite, built with ``datahub commit --changes``, synthetic
URLs: no object is read) holds ``big`` (keys ``sNN/dNNN/fNNNNN.jpg``, 10^4 per directory,
10^6 per ``sNN``) and ``tiny`` (one record). For each design, alternating:

* ready: from starting ``datahub mount --no-prefetch`` until ``ls MNT/big/v1`` answers;
* cold ls: the first listing of a 10^4-entry directory, just after ready (``--cold N``: then
  N more cold directories, medians), with the CPU of the daemon, of the server (remote) and
  of the lister itself (the kernel's share: READDIRPLUS entries become dentries and inodes
  in the process that lists);
* RSS: the daemon's VmRSS after listing 100 random 10^4-entry directories, minus a
  ``tiny`` mount's after the same ready-and-ls (an empty mount);
* find: ``find MNT/big/v1/s00 -type f`` (10^6 files), entries per second and daemon CPU
  seconds per 10^6 entries.

The paged design is also measured through the remote catalog (``datahub serve`` in a
subprocess, the mount as an API client), with the server's CPU during the cold ``ls`` and
the ``find`` beside the daemon's. Every figure is printed with the load average (at the
mount's start, and again before the ``find``).

``--catalog DIR --records N`` measures a catalog kept by ``bench/scale/scale.py --layout tree
--keep`` (``DIR/catalog.db``, dataset ``big`` v1 of N records, the same keys as here) instead
of building one: how issue 38's mount figures were taken at 10^8 records. Its ``base``
(``--baseline`` records) is measured beside ``big``, alternated. The empty mount's one-record
``tiny`` is then a catalog of its own (the kept one may be busy with scale.py's 1 % commit).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PER_DIR, DIRS_PER_TOP = 10_000, 100
GOALS = {
    "ready_s": 2.0,
    "cold_ls_ms_embedded": 100.0,
    "cold_ls_ms_remote": 250.0,
    "rss_mb": 300.0,
    "find_rate": 100_000,
}


def uptime() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def key(i: int) -> str:
    d, f = divmod(i, PER_DIR)
    top, d = divmod(d, DIRS_PER_TOP)
    return f"s{top:02}/d{d:03}/f{f:05}.jpg"


def write_changes(path: Path, n: int) -> None:
    with open(path, "w") as out:
        for i in range(n):
            k = key(i)
            rec = {
                "key": k,
                "url": f"s3://synthetic-bench/{k}",
                "etag": f"{i:032x}",
                "size": 100_000 + i % 997,
            }
            out.write(json.dumps({"op": "put", "record": rec}, separators=(",", ":")) + "\n")


def datahub(config: Path, *args: str, tree: Path = REPO) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from datahub.cli.main import main; sys.exit(main())", "--config", str(config), *args],
        capture_output=True, text=True, cwd=tree, env=_env(tree), check=False,
    )  # fmt: skip
    if proc.returncode:
        raise SystemExit(f"datahub {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    return env


def adopt(root: Path, catalog: Path, n: int) -> Path:
    """A config over the kept catalog ``catalog/catalog.db`` (``big`` v1 must hold ``n``
    records), and ``tiny.toml`` beside it: a one-record catalog for the empty mount."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "datahub.toml"
    db = (catalog / "catalog.db").resolve()
    if not db.exists():
        raise SystemExit(f"no catalog at {db}: run bench/scale/scale.py --layout tree --keep first")
    config.write_text(
        f'home = "{root / "var"}"\ncatalog_url = "sqlite:///{db}"\n[cache]\nram_bytes = 67108864\ndisk_bytes = 0\n'
    )
    sys.path.insert(0, str(REPO))
    from datahub.catalog import Put, Record, open_catalog

    cat = open_catalog(f"sqlite:///{db}")
    try:
        if "big" not in {d.name for d in cat.list_datasets()}:
            raise SystemExit(f"{db} has no dataset 'big': run bench/scale/scale.py --layout tree --keep")
    finally:
        cat.close()
    # the empty mount's one-record "tiny" lives in a catalog of its own: the kept one may be
    # busy with a commit (scale.py's 1 % commit runs on while the mounts are measured)
    tiny_db = root / "tiny" / "catalog.db"
    if not tiny_db.exists():
        tiny_db.parent.mkdir(parents=True, exist_ok=True)
        cat = open_catalog(f"sqlite:///{tiny_db}")
        try:
            cat.create_dataset("tiny")
            k = key(0)
            cat.commit(
                "tiny", [Put(Record(k, f"s3://synthetic-bench/{k}", f"{0:032x}", 100_000))], message="bench"
            )
        finally:
            cat.close()
    (root / "tiny.toml").write_text(
        config.read_text().replace(f"sqlite:///{db}", f"sqlite:///{tiny_db.resolve()}")
    )
    print(f"  the kept catalog {db} ({db.stat().st_size / 2**20:,.0f} MiB), big v1 taken as {n:,} records")
    return config


def build(root: Path, n: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    config = root / "datahub.toml"
    if (root / "built").exists():  # a --dir kept from an earlier run: the same catalog
        print(f"  reusing the catalog of {n:,} records in {root}")
        return config
    config.write_text(f'home = "{root / "var"}"\n[cache]\nram_bytes = 67108864\ndisk_bytes = 0\n')
    datahub(config, "init")
    for name, count in (("big", n), ("tiny", 1)):
        changes = root / f"{name}.jsonl"
        write_changes(changes, count)
        datahub(config, "dataset", "create", name)
        t0 = time.perf_counter()
        datahub(config, "commit", name, "--changes", str(changes), "-m", "bench")
        took = time.perf_counter() - t0
        changes.unlink()
        if name == "big":
            size = (root / "var" / "catalog.db").stat().st_size
            print(
                f"  built {n:,} records: commit {took:.1f} s ({n / took:,.0f}/s), catalog {size / 1e6:.0f} MB  load {uptime()}"
            )
    (root / "built").write_text(str(n))
    return config


def cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid``, all its threads (those that ended too), to the
    nanosecond: Linux's CPU clock of another process (``CPUCLOCK_SCHED`` of ``pid``; /proc's
    10 ms ticks are too coarse for one 20-50 ms listing)."""
    return time.clock_gettime((~pid << 3) | 2)


class Mount:
    def __init__(self, config: Path, tree: Path, mnt: Path, spec: str) -> None:
        self.mnt, self.log = mnt, mnt.with_suffix(".log")
        mnt.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(config), "mount", str(mnt), spec]
        self.t0 = time.perf_counter()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [*cmd, "--no-prefetch", "--foreground"], stdout=log, stderr=log, cwd=tree, env=_env(tree)
            )

    def wait_ready(self, listed: Path) -> float:
        """Seconds from start until ``listed`` lists (``self.mounted_s``: until the mount appeared)."""
        self.mounted_s = 0.0
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"mount exited: {self.log.read_text()[-2000:]}")
            if os.path.ismount(self.mnt):
                self.mounted_s = self.mounted_s or time.perf_counter() - self.t0
                try:
                    os.listdir(listed)
                    return time.perf_counter() - self.t0
                except OSError:
                    pass
            time.sleep(0.005)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def cpu_s(self) -> float:
        return cpu_s(self.proc.pid)

    def close(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], check=False, capture_output=True)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], check=False, capture_output=True)


def measure(
    config: Path,
    tree: Path,
    work: Path,
    n: int,
    label: str,
    rng: random.Random,
    dataset: str = "big",
    empty_config: Path | None = None,
    server: int | None = None,
    cold_more: int = 0,
) -> dict:
    """One mount's figures; ``server``: the pid of the remote catalog's server, whose CPU
    during the cold ``ls`` and the ``find`` is reported beside the daemon's; ``cold_more``:
    cold directories listed after the first one (their medians: a directory's own cost,
    without the first listing's start-up effects)."""
    dirs = [
        f"s{top:02}/d{d:03}"
        for top in range(max(1, n // (PER_DIR * DIRS_PER_TOP)))
        for d in range(DIRS_PER_TOP)
    ]
    dirs = [d for d in dirs if int(d[1:3]) * DIRS_PER_TOP * PER_DIR + int(d[5:8]) * PER_DIR < n]
    out: dict = {
        "design": label,
        "dataset": dataset,
        "records": n,
        "load": uptime(),
        "at": time.strftime("%H:%M:%S"),
    }
    empty = Mount(empty_config or config, tree, work / f"empty-{label}", "tiny@v1")
    try:
        empty.wait_ready(empty.mnt / "tiny" / "v1")
        os.listdir(empty.mnt / "tiny" / "v1" / "s00")
        time.sleep(0.5)
        empty_rss = empty.rss_mb()
    finally:
        empty.close()
    m = Mount(config, tree, work / f"{dataset}-{label}", f"{dataset}@v1")
    try:
        v1 = m.mnt / dataset / "v1"
        out["ready_s"] = m.wait_ready(v1)
        out["mounted_s"] = m.mounted_s  # the process started and mounted: the rest is the listing
        cold = rng.choice(dirs)
        server_cpu = (lambda: cpu_s(server)) if server else (lambda: 0.0)
        later = (
            [d for d in rng.sample(dirs, min(len(dirs), cold_more + 1)) if d != cold][:cold_more]
            if cold_more
            else []
        )
        listings = []
        for d in [cold, *later]:  # the first cold ls after mounting, then more cold directories
            cpu0, s0, t0, me0 = m.cpu_s(), server_cpu(), time.perf_counter(), time.thread_time()
            entries = len(os.listdir(v1 / d))
            # wall ms; daemon, server and this process's CPU-ms (the kernel's READDIRPLUS work
            # runs in the lister: its dentries and inodes)
            listings.append(
                ((time.perf_counter() - t0) * 1000, (m.cpu_s() - cpu0) * 1000, (server_cpu() - s0) * 1000,
                 (time.thread_time() - me0) * 1000)
            )  # fmt: skip
            assert entries == PER_DIR, entries
        (out["cold_ls_ms"], out["cold_ls_cpu_ms"], server_ms, out["cold_ls_lister_cpu_ms"]) = listings[0]
        if server:
            out["cold_ls_server_cpu_ms"] = server_ms
        if later:
            for i, name in enumerate(
                ("cold_more_ms", "cold_more_cpu_ms", "cold_more_server_cpu_ms", "cold_more_lister_cpu_ms")
            ):
                out[name] = statistics.median(x[i] for x in listings[1:])
        for d in rng.sample(dirs, min(100, len(dirs))):
            os.listdir(v1 / d)
        time.sleep(0.5)
        out["rss_mb"] = m.rss_mb() - empty_rss
        out["empty_rss_mb"] = empty_rss
        out["load_find"] = uptime()
        cpu0, s0, t0 = m.cpu_s(), server_cpu(), time.perf_counter()
        found = subprocess.run(
            ["find", str(v1 / "s00"), "-type", "f"], capture_output=True, check=True
        ).stdout.count(b"\n")
        took = time.perf_counter() - t0
        out["find_entries"] = found
        out["find_rate"] = found / took
        out["find_cpu_s_per_1e6"] = (m.cpu_s() - cpu0) / found * 1e6
        if server:
            out["find_server_cpu_s_per_1e6"] = (server_cpu() - s0) / found * 1e6
        out["rss_after_find_mb"] = m.rss_mb() - empty_rss
    finally:
        m.close()
    return out


def serve_remote(config: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from datahub.cli.main import main; sys.exit(main())", "--config", str(config), "serve", "--host", "127.0.0.1",
         "--port", str(port), "--local", "--no-labelx"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=_env(REPO),
    )  # fmt: skip
    import urllib.request

    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/datasets", timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.1)
    raise SystemExit("datahub serve did not come up")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, nargs="+", default=[1_000_000, 5_000_000])
    p.add_argument("--baseline-tree", type=Path, help="a checkout of the commit before the paged namespace")
    p.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed)")
    p.add_argument("--catalog", type=Path, help="a catalog kept by bench/scale/scale.py --layout tree --keep")
    p.add_argument(
        "--baseline", type=int, default=1_000_000, help="with --catalog: records of its dataset 'base'"
    )
    p.add_argument(
        "--baseline-label",
        default="whole",
        help="the baseline tree's label (e.g. main: the same design, older code)",
    )
    p.add_argument(
        "--remote-baseline", action="store_true", help="run the baseline tree through the remote catalog too"
    )
    p.add_argument("--rounds", type=int, default=1, help="rounds of the designs, alternated (A B, then B A)")
    p.add_argument(
        "--cold", type=int, default=0, help="cold directories listed after the first one (medians reported)"
    )
    args = p.parse_args()
    # a daemon that must compile its sources at every start (no bytecode cache written, e.g.
    # PYTHONDONTWRITEBYTECODE=1 and no __pycache__) starts ~0.5-1 CPU-s slower: say which
    print(f"  bytecode written: {not sys.flags.dont_write_bytecode}  load {uptime()}")
    work = args.dir or Path(tempfile.mkdtemp(prefix="ns-bench-"))
    rng = random.Random(38)
    results = []
    try:
        for n in args.records:
            print(f"{n:,} records  load {uptime()}")
            config = adopt(work / f"n{n}", args.catalog, n) if args.catalog else build(work / f"n{n}", n)
            empty_config = config.with_name("tiny.toml") if args.catalog else None
            # with --catalog, its 10^6-record "base" is measured beside "big", alternated (A B, B A)
            sets = [("base", args.baseline), ("big", n)] if args.catalog else [("big", n)]
            base = args.baseline_label
            designs = [("paged", REPO)] + ([(base, args.baseline_tree)] if args.baseline_tree else [])
            port = 20000 + rng.randrange(20000)
            server = serve_remote(config, port)
            try:
                remote = config.with_name("remote.toml")
                own = [line for line in config.read_text().splitlines() if not line.startswith("catalog_url")]
                remote.write_text(f'catalog_url = "http://127.0.0.1:{port}"\n' + "\n".join(own) + "\n")
                # A B, then B A (embedded), B A, then A B (remote): each design starts a pair once
                for round_ in range(args.rounds):
                    order = designs if round_ % 2 == 0 else designs[::-1]
                    for cfg, kind, pairs in ((config, "", order), (remote, "-remote", order[::-1])):
                        if kind and not args.remote_baseline:
                            pairs = pairs[:1] if pairs[0][0] == "paged" else pairs[-1:]
                        for label, tree in pairs:
                            for dataset, count in sets if not kind else sets[::-1]:
                                r = measure(
                                    cfg, tree, work / f"n{n}", count, label + kind, rng, dataset, empty_config,
                                    server.pid if kind else None, args.cold,
                                )  # fmt: skip
                                r["round"] = round_ + 1
                                results.append(r)
                                print("  " + json.dumps(r), flush=True)
            finally:
                server.terminate()
                server.wait(timeout=30)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    summary(results)


def summary(results: list[dict]) -> None:
    """One line per measured mount (also: ``python -c`` over the JSON lines of a run's output)."""
    print(
        "\nsummary (goals: ready <= 2 s, cold ls <= 100 ms embedded / 250 ms remote, RSS <= 300 MB, find >= 100k/s)"
    )
    for r in results:
        server = "cold_ls_server_cpu_ms" in r
        print(
            f"  {r['records']:>11,} {r.get('dataset', 'big'):<4} {r['design']:<13} r{r.get('round', 1)} ready {r['ready_s']:7.2f} s (mounted {r['mounted_s']:.2f})  "
            f"cold ls {r['cold_ls_ms']:7.1f} ms ({r['cold_ls_cpu_ms']:.0f} CPU-ms"
            + (f", server {r['cold_ls_server_cpu_ms']:.0f}" if server else "")
            + (f", lister {r['cold_ls_lister_cpu_ms']:.0f}" if "cold_ls_lister_cpu_ms" in r else "")
            + ")"
            + (
                f" then {r['cold_more_ms']:.0f} ms ({r['cold_more_cpu_ms']:.0f}"
                + (f", server {r['cold_more_server_cpu_ms']:.0f}" if server else "")
                + f", lister {r['cold_more_lister_cpu_ms']:.0f})"
                if "cold_more_ms" in r
                else ""
            )
            + f"  RSS +{r['rss_mb']:6.1f} MB (after find +{r['rss_after_find_mb']:6.1f})  "
            f"find {r['find_rate']:9,.0f}/s ({r['find_cpu_s_per_1e6']:.2f} CPU-s per 10^6"
            + (f", server {r['find_server_cpu_s_per_1e6']:.2f}" if server else "")
            + f")  load {r['load']}, at find {r.get('load_find', '?')}"
        )


if __name__ == "__main__":
    main()
