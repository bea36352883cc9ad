"""Writes through a real workspace mount vs the same files written to local disk with fsync.

    .venv/bin/python bench/writeback/mount_writes.py [--rounds 3] [--scale 1.0] [--dir DIR]
        [--ceph-env /tmp/ceph/env.sh [--only-ceph] [--rados]]

Issue 41. Three configurations, measured in the same run and taking turns round by round
(so a change in the load of the shared machine hits all of them alike):

- ``local``: the baseline, open/write(1 MiB calls)/fsync/close of plain files in a directory
  on the same disk (durable on disk at close, like the mount's close);
- ``mount --passthrough``: ``datahub mount --background --workspace ws MNT --passthrough``
  (staged files: the kernel writes them; the mount's log says whether passthrough was had);
- ``mount --no-passthrough``: the same mount with every WRITE through the daemon (the
  default; docs/writeback.md says why staged files are opt-in);
- ``mount --no-passthrough --writes-in-c`` (with ``--mounts ...,cw``): every WRITE through
  the daemon, new files staged and their WRITEs answered by pyfuse3's C reader thread
  (fastwrite.h, writec19);
- ``mount --writeback-cache`` (with ``--mounts ...,wbc``): the daemon path with the kernel's
  write-back cache (write(2) returns from the page cache; the kernel sends the pages in
  large WRITEs, at the latest at close).

``--mounts`` picks the mounts (``pt``, ``nopt``, ``cw``, ``wbc``; default ``pt,nopt``); with
``--alternate`` they take turns in reverse order every other round (an A/B in one run).

Each mount's close returns once the file is durable in the shared tier (a local directory
under the home, the embedded default) and journaled. ``cache.flush_interval`` is set to an
hour so the background copy to the origin (asynchronous, the same for both mounts) does not
run during a measurement. Workloads: 32 x 16 MiB (a checkpoint) and 1,000 x 100 KB
(outputs, logs), 1 and 4 writer threads, in write(2) calls of 1 MiB (``--piece``: e.g. 8192,
what Python's buffered files and many loggers write at a time). Printed per case: MiB/s (median of the rounds),
the ratio to local, the daemon's CPU per MiB written (utime+stime of the mount process),
FUSE requests per file by opcode (the kernel's fuse_request_send tracepoint, one extra
round, not timed), and ``uptime`` before and after.

With ``--ceph-env`` (a cluster from scripts/ceph-dev/ceph-up.sh), the same two mounts with
the shared tier on a Ceph RGW bucket, against a plain boto3 client PUTting the same files
with the same concurrency (each PUT returns once RGW stored the object); ``--rados`` adds
them on a RADOS pool against plain librados ``write_full`` calls, ``--no-rgw`` leaves RGW out.
``--base-tree DIR`` (another checkout, e.g. ``git archive BASE | tar -x -C DIR``) mounts every
case, local (each of ``--mounts``) and Ceph, from both trees, "(base)" and "(head)", and the
mounts take turns in reverse order every other round: an A/B in one run. Small files also
get the daemon's CPU per file. ``--head-site DIR`` (a ``pip install --target`` of another
pyfuse3 wheel) mounts every local case with the venv's build "(base)" and with that one first
on the daemon's ``PYTHONPATH`` "(head)", in turns: an A/B of two builds (perf41d).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuse.fuse_tracepoint import FuseRequests, available

REPO = Path(__file__).resolve().parents[2]
MiB = 1024**2
PIECE = MiB  # bytes per write(2) call (``--piece``)
CLEANUPS: list = []  # run after the mounts are gone (the RADOS objects of this run)


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_files(directory: Path, count: int, data: bytes, threads: int, fsync: bool) -> float:
    """Write ``count`` files of ``data`` (1 MiB calls), closing each; seconds taken."""
    directory.mkdir(parents=True)

    def one(i: int) -> None:
        fd = os.open(directory / f"f{i:05d}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            for off in range(0, len(data), PIECE):
                os.write(fd, view[off : off + PIECE])
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)  # the mount's FLUSH: durable in the shared tier when this returns

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    return time.perf_counter() - start


class Mount:
    def __init__(
        self,
        root: Path,
        name: str,
        extra: list[str],
        sections: str = "",
        cache: str = "",
        repo: Path = REPO,
        site: Path | None = None,
    ) -> None:
        """``repo``: the source tree the daemon runs (its working directory, so ``-m
        fuse_adapter`` imports that tree's code: ``tree_ab.py`` mounts two). ``site``: a
        directory holding another pyfuse3 build, put first on the daemon's ``PYTHONPATH``."""
        self.home = root / f"home-{name}"
        self.mnt = root / f"mnt-{name}"
        self.mnt.mkdir()
        self.config = root / f"{name}.toml"
        self.config.write_text(f'home = "{self.home}"\n{sections}\n[cache]\nflush_interval = 3600\n{cache}')
        cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(self.config), "mount", "--background"]
        self.repo = repo
        env = dict(os.environ)
        if site is not None:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
        out = subprocess.run([*cmd, *extra, "--workspace", "ws", str(self.mnt)], cwd=repo, env=env,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        self.pid = int(re.search(r"pid (\d+)", out).group(1))

    def build(self) -> str:
        """The pyfuse3 extension the daemon loaded (from its memory map)."""
        for line in Path(f"/proc/{self.pid}/maps").read_text().splitlines():
            if "pyfuse3" in line and line.endswith(".so"):
                return line.split()[-1]
        return "?"

    def log(self) -> str:
        return "".join(p.read_text() for p in (self.home / "run" / "mounts").glob("*.log"))

    def umount(self) -> None:
        cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(self.config), "umount", str(self.mnt)]
        subprocess.run(cmd, cwd=self.repo, capture_output=True, check=False)


def put_files(bucket, prefix: str, count: int, data: bytes, threads: int) -> float:
    """The RGW baseline: a plain boto3 client PUTs the same files with the same concurrency."""

    def one(i: int) -> None:
        bucket.client.put_object(Bucket=bucket.name, Key=f"{prefix}/f{i:05d}", Body=data)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    return time.perf_counter() - start


def rados_group(root: Path, env_file: str, trees: dict[str, Path]):
    """The mounts with the shared tier on a RADOS pool (``rados://``), against plain
    librados ``write_full`` calls of the same files with the same concurrency."""
    env = {}
    for line in Path(env_file).read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = value.strip("'\"")
    os.environ["CEPH_CONF"] = env["CEPH_CONF"]  # the mounts inherit both
    os.environ["PYTHONPATH"] = env["CEPH_PYLIB"]
    sys.path.insert(0, env["CEPH_PYLIB"])
    import rados

    cluster = rados.Rados(conffile=env["CEPH_CONF"])
    cluster.connect()
    ioctx = cluster.open_ioctx(env["CEPH_POOL"])

    def plain(tag: str, count: int, data: bytes, threads: int) -> float:
        def one(i: int) -> None:
            ioctx.write_full(f"plain/{tag}/f{i:05d}", data)

        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, range(count)))
        secs = time.perf_counter() - start
        for i in range(count):
            ioctx.remove_object(f"plain/{tag}/f{i:05d}")
        return secs

    prefix = root.name  # this run's objects: removed at the end (memstore keeps them in RAM)
    mounts = ceph_mounts(root, "RADOS", "rados", "",
                         lambda tag: f'shared_url = "rados://{env["CEPH_POOL"]}/{prefix}/{tag}"\n', trees)  # fmt: skip

    def remove_objects() -> None:
        names = [o.key for o in ioctx.list_objects() if o.key.startswith(prefix + "/")]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(ioctx.remove_object, names))
        cluster.shutdown()

    CLEANUPS.append(remove_objects)
    return ("librados write_full", plain, mounts)


def ceph_mounts(
    root: Path, what: str, tag: str, sections: str, cache, trees: dict[str, Path]
) -> dict[str, Mount]:
    """The two mounts of a Ceph case (passthrough and not), from each tree of ``trees``
    (name -> source tree; one unnamed tree: no suffix); ``cache(tag)``: its [cache] lines."""
    mounts = {}
    for tree_name, tree in trees.items():
        for flag, short in (("--passthrough", "pt"), ("--no-passthrough", "nopt")):
            name = f"mount {flag}, {what}" + (f" ({tree_name})" if tree_name else "")
            t = f"{tag}-{short}" + (f"-{tree_name}" if tree_name else "")
            mounts[name] = Mount(root, t, [flag], sections, cache(t), repo=tree)
    return mounts


def run_group(
    base_name: str,
    baseline,
    mounts: dict[str, Mount],
    workloads,
    rounds: int,
    why_not,
    alternate: bool = False,
) -> None:
    """Every workload, 1 and 4 writers: ``baseline(tag, count, data, threads) -> seconds``
    and each mount, taking turns round by round (``alternate``: in reverse order every other
    round, for an A/B of two trees)."""
    for label, count, size in workloads:
        data = os.urandom(size)
        total = count * size / MiB
        for threads in (1, 4):
            speeds: dict[str, list[float]] = {base_name: [], **{k: [] for k in mounts}}
            cpu: dict[str, list[float]] = {base_name: [], **{k: [] for k in mounts}}
            for r in range(rounds):
                tag = f"{label.split()[0]}-{size}-{threads}-{r}"
                before = time.process_time()  # the baseline's own CPU: its writes and fsyncs (or PUTs)
                speeds[base_name].append(total / baseline(tag, count, data, threads))
                cpu[base_name].append((time.process_time() - before) / total)
                order = list(mounts.items())
                for name, m in order[::-1] if alternate and r % 2 else order:
                    before = cpu_seconds(m.pid)
                    secs = write_files(m.mnt / tag, count, data, threads, False)
                    cpu[name].append((cpu_seconds(m.pid) - before) / total)
                    speeds[name].append(total / secs)
            base = statistics.median(speeds[base_name])
            print(f"{label:14s} {threads} writer(s): {base_name} {base:7.0f} MiB/s, its own CPU "
                  f"{1000 * statistics.median(cpu[base_name]):.2f} ms/MiB "
                  f"(rounds {', '.join(f'{s:.0f}' for s in speeds[base_name])})", flush=True)  # fmt: skip
            for name in mounts:
                mine = statistics.median(speeds[name])
                per_file = (
                    f" = {statistics.median(cpu[name]) * size / MiB * 1000:.2f} ms/file" if size < MiB else ""
                )
                print(f"  {name:32s} {mine:7.0f} MiB/s  ratio {mine / base:5.2f}  "
                      f"daemon CPU {1000 * statistics.median(cpu[name]):6.2f} ms/MiB{per_file}  "
                      f"(rounds {', '.join(f'{s:.0f}' for s in speeds[name])})", flush=True)  # fmt: skip
            if why_not is None and threads == 1:
                for name, m in mounts.items():
                    with FuseRequests(str(m.mnt)) as reqs:
                        write_files(m.mnt / f"trace-{size}", count, data, 1, False)
                    per_file = ", ".join(f"{op.removeprefix('FUSE_')} {n / count:.2f}"
                                         for op, n in sorted(reqs.counts().items()))  # fmt: skip
                    print(f"  {name:32s} FUSE requests per file: {per_file}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--dir", default=None, help="where to work (default: a temp dir under /tmp, same disk)")
    ap.add_argument(
        "--ceph-env", help="env.sh of a running Ceph (scripts/ceph-dev/ceph-up.sh): RGW shared tier too"
    )
    ap.add_argument(
        "--only-ceph", action="store_true", help="with --ceph-env: skip the local-directory cases"
    )
    ap.add_argument(
        "--rados", action="store_true", help="with --ceph-env: a RADOS shared tier (librados) too"
    )
    ap.add_argument(
        "--rgw", action=argparse.BooleanOptionalAction, default=True, help="with --ceph-env: the RGW cases"
    )
    ap.add_argument("--base-tree", help="another checkout: every mount (local and Ceph) from both trees")
    ap.add_argument(
        "--head-site",
        help="a directory holding another pyfuse3 build (pip install --target of its wheel): every local "
        "mount from both builds, the venv's '(base)' and this one first on PYTHONPATH '(head)'",
    )
    ap.add_argument("--piece", type=int, default=MiB, help="bytes per write(2) call (default 1 MiB)")
    ap.add_argument(
        "--mounts", default="pt,nopt", help="local shared tier: which of pt, nopt, cw, wbc to mount"
    )
    ap.add_argument("--alternate", action="store_true", help="the mounts in reverse order every other round")
    args = ap.parse_args()
    global PIECE
    PIECE = args.piece
    trees = {"base": Path(args.base_tree).resolve(), "head": REPO} if args.base_tree else {"": REPO}
    sites = {}
    if args.head_site:  # an A/B of two pyfuse3 builds (from one tree, or with --base-tree two)
        trees = {"base": trees.get("base", REPO), "head": REPO}
        sites = {"head": Path(args.head_site).resolve()}
    root = Path(tempfile.mkdtemp(prefix="wb-mount-", dir=args.dir))
    workloads = [("32 x 16 MiB", max(1, int(32 * args.scale)), 16 * MiB),
                 ("1000 x 100 KB", max(1, int(1000 * args.scale)), 100_000)]  # fmt: skip
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  dir {root}")
    print(f"# load before: {load()}; {PIECE} bytes per write(2)")
    why_not = available()
    if why_not is not None:
        print(f"# FUSE requests not counted: {why_not}")
    groups: list[tuple[str, object, dict[str, Mount]]] = []
    bucket = None
    try:
        if not args.only_ceph:

            def local(tag: str, count: int, data: bytes, threads: int) -> float:
                secs = write_files(root / "local" / tag, count, data, threads, True)
                shutil.rmtree(root / "local" / tag)
                return secs

            flags = {
                "pt": ["--passthrough"],
                "nopt": ["--no-passthrough"],  # the default: every WRITE answered in Python
                "cw": ["--no-passthrough", "--writes-in-c"],  # staged files' WRITEs answered in C
                "wbc": ["--writeback-cache"],
            }
            mounts = {}
            for tree_name, tree in trees.items():  # with --base-tree: each mount from both trees
                for k in args.mounts.split(","):
                    suffix = f" ({tree_name})" if tree_name else ""
                    tag = f"{k}-{tree_name}" if tree_name else k
                    mounts[f"mount {' '.join(flags[k])}{suffix}"] = Mount(
                        root, tag, flags[k], repo=tree, site=sites.get(tree_name)
                    )
            groups.append(("local+fsync", local, mounts))
        if args.ceph_env and args.rgw:
            from write_throughput import CephBucket

            bucket = CephBucket(args.ceph_env)
            o = bucket.overrides()
            s3 = "".join(
                f"{k} = {v!r}\n".replace("'", '"').replace("True", "true") for k, v in o["s3"].items()
            )
            shared = o["cache"]["shared_url"]

            def rgw(tag: str, count: int, data: bytes, threads: int) -> float:
                return put_files(bucket, f"plain/{tag}", count, data, threads)

            mounts = ceph_mounts(root, "RGW", "rgw", f"\n[s3]\n{s3}", lambda tag: f'shared_url = "{shared}/{tag}"\n',
                                 trees)  # fmt: skip
            groups.append(("boto3 PUT to RGW", rgw, mounts))
        if args.ceph_env and args.rados:
            groups.append(rados_group(root, args.ceph_env, trees))
        time.sleep(1)
        for _, _, mounts in groups:
            for name, m in mounts.items():
                writes = [line for line in m.log().splitlines() if "writes" in line]
                print(f"# {name}: pid {m.pid}; {writes[-1].split(': ', 1)[-1] if writes else m.log()[-200:]}")
                print(f"#   pyfuse3: {m.build()}")
        for base_name, baseline, mounts in groups:
            alternate = args.alternate or args.base_tree is not None or args.head_site is not None
            run_group(base_name, baseline, mounts, workloads, args.rounds, why_not, alternate)
        print(f"# load after: {load()}")
    finally:
        for _, _, mounts in groups:
            for m in mounts.values():
                m.umount()
        if bucket is not None:
            bucket.remove()
        for cleanup in CLEANUPS:
            cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
