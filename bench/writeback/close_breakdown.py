"""Where a 16 MiB close's wall time and disk bytes go: local disk + fsync against workspace
mounts, with the staged files on disk or in RAM (a tmpfs), side by side in one run.

    .venv/bin/python bench/writeback/close_breakdown.py [--rounds 4] [--files 8]
        [--size 16777216] [--threads 1] [--cases local,nopt,pt,pt-ram] [--dir DIR]

Issue 41 (stage41). Each round runs every case in turn (in reverse order every other
round), and each case writes ``--files`` new files in 1 MiB ``write(2)`` calls, then closes
them (the local case fsyncs first: durable on disk at close, as the mount's close is
durable in the shared tier). Cases:

- ``local``: plain files in a directory on the same disk, ``fsync`` before ``close``;
- ``nopt``: ``datahub mount --workspace ws MNT --no-passthrough`` (every WRITE through the daemon);
- ``pt``: the same mount with ``--passthrough`` (staged files on the shared tier's disk,
  ``<shared tier>/writeback-staging/ws``, each with a 64 MiB ``fallocate`` reservation);
- ``pt-ram``: ``--passthrough`` with that staging directory a tmpfs mounted by this script
  before the mount starts (needs root; ``--ram-mib``, 256 MiB a writer by default; a close
  that fails, ENOSPC for a staged file past its reservation, is counted): the staged files
  live in RAM, and the only disk write of a file is its chunk copy. (A ``memfd`` as the backing file is the same shmem
  inode as a tmpfs file: one case stands for both.)
- ``pt-noreserve``, ``pt-ram-noreserve``: the same with no ``fallocate`` reservation
  (``hooks/sitecustomize.py``; UNSAFE, a design not taken: a write failing for space would
  go unseen): what the reservation costs on each.
- ``pt-buffered``: the staged copy through the page cache (``splice``, then the chunk's
  ``fsync`` writes it back), not ``O_DIRECT`` (``hooks/``: the copy before bigwrites20);
- a ``-base`` suffix (with ``--base-tree DIR``, another checkout): that mount's daemon runs
  DIR's code (an A/B of two trees in one run: ``pt`` against ``pt-base``);
- a ``-16m`` suffix (``pt-16m``, ``nopt-16m``): the workspace's chunk size (``cache.page_size``,
  fixed at its creation) 16 MiB instead of 4: one chunk file, one ``fsync``, per 16 MiB file.

With ``--times`` the passthrough daemons append each staged fsync's breakdown (wall time,
journal commit, chunk copies, their ``O_DIRECT`` writes and ``fsync``; ``hooks/``) to a file,
summarised per case at the end.

Printed per case (medians over rounds, per file): the time of the writes and of the
``close`` (for ``local`` its ``fsync`` + ``close``); the device's sectors written, discards
and their sectors and device time (``/proc/diskstats`` of the disk under ``--dir``, read
after each case's files plus a 1 s settle, so a RELEASE's work lands in its own case), less
the same counters over an idle second of that round (the other tenants' I/O); the page-cache
bytes the writer and the daemon dirtied and those dropped before write-back
(``/proc/PID/io`` ``write_bytes``/``cancelled_write_bytes``: a staged file's pages dirtied by
the writer and dropped at its last close were never written to the disk); the daemon's CPU
per MiB. ``cache.flush_interval`` is an hour, so no flush to the origin runs meanwhile.
"""

from __future__ import annotations

import argparse
import os
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
from mount_writes import REPO, Mount, cpu_seconds, load

MiB = 1024**2
SETTLE = 1.0  # seconds after a case's last close before its counters are read
HOOKS = Path(__file__).resolve().parent / "hooks"


def disk_of(path: Path) -> str:
    """The block device name (``vda``) holding ``path``, for ``/proc/diskstats``."""
    dev = os.stat(path).st_dev
    name = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve().name
    part = Path(f"/sys/class/block/{name}/partition")
    return Path(f"/sys/class/block/{name}").resolve().parent.name if part.exists() else name


def diskstats(disk: str) -> dict[str, int]:
    """Sectors written, discards, discarded sectors and ms spent discarding, flushes."""
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == disk:
            v = [int(x) for x in f[3:]]
            return {"written": v[6], "write_ios": v[4], "discards": v[11], "discarded": v[13],
                    "discard_ms": v[14], "flushes": v[15] if len(v) > 15 else 0}  # fmt: skip
    raise SystemExit(f"no {disk} in /proc/diskstats")


def proc_io(pid: int | str) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = int(v)
    return out


def write_files(
    directory: Path, count: int, data: bytes, threads: int, fsync: bool, refused: list[int]
) -> tuple[float, float]:
    """``count`` new files of ``data`` in 1 MiB calls; (seconds in writes, seconds in
    fsync + close), summed over files; a close that fails adds its errno to ``refused``."""
    directory.mkdir(parents=True)
    times: list[tuple[float, float]] = []

    def one(i: int) -> None:
        start = time.perf_counter()
        fd = os.open(directory / f"f{i:05d}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            for off in range(0, len(data), MiB):
                os.write(fd, view[off : off + MiB])
            wrote = time.perf_counter()
            if fsync:
                os.fsync(fd)
        finally:
            try:
                os.close(fd)
            except OSError as exc:  # a refused close (ENOSPC: a staged file past its reservation)
                refused.append(exc.errno)
        times.append((wrote - start, time.perf_counter() - wrote))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    return sum(t[0] for t in times), sum(t[1] for t in times)


def tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "dh-stage41", str(path)], check=True
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--size", type=int, default=16 * MiB)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="local,nopt,pt,pt-ram")
    ap.add_argument("--dir", default=None, help="where to work (default: a temp dir under /tmp)")
    ap.add_argument(
        "--ram-mib", type=int, default=0, help="the pt-ram tmpfs's size (default 256 MiB a writer)"
    )
    ap.add_argument("--base-tree", help="another checkout: the daemons of the cases ending in -base run it")
    ap.add_argument("--times", action="store_true", help="the passthrough daemons time each staged fsync")
    args = ap.parse_args()
    cases = args.cases.split(",")
    root = Path(tempfile.mkdtemp(prefix="wb-breakdown-", dir=args.dir))
    disk = disk_of(root)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  dir {root} on {disk}")
    print(
        f"# load before: {load()}; {args.files} x {args.size:,} B per case and round, {args.threads} writer(s)"
    )
    data = os.urandom(args.size)
    mounts: dict[str, Mount] = {}
    ram: list[Path] = []
    try:
        for case in cases:
            if case == "local":
                continue
            parts = case.split("-")
            if "ram" in parts:  # the staging directory a tmpfs before the daemon first stages
                staging = root / f"home-{case}" / "cache" / "shared" / "writeback-staging" / "ws"
                tmpfs(staging, f"{args.ram_mib or max(256, 256 * args.threads)}m")
                ram.append(staging)
            hooks = [h for h, on in (("noreserve", "noreserve" in parts), ("buffered", "buffered" in parts),
                                     ("times", args.times and case.startswith("pt"))) if on]  # fmt: skip
            tree = Path(args.base_tree).resolve() if "base" in parts else REPO
            saved = dict(os.environ)
            os.environ["PYTHONPATH"] = str(tree)  # the hook imports datahub first: from that tree
            if hooks:
                os.environ["PYTHONPATH"] = os.pathsep.join([str(HOOKS), str(tree)])
                os.environ["DH_BENCH_HOOK"] = ",".join(hooks)
                os.environ["DH_BENCH_TIMES"] = str(root / f"times-{case}.txt")
            try:
                pages = [p for p in parts if p.endswith("m") and p[:-1].isdigit()]  # ``-16m``: chunk size
                cache = f"page_size = {int(pages[0][:-1]) * MiB}\n" if pages else ""
                flag = "--passthrough" if parts[0] == "pt" else "--no-passthrough"
                mounts[case] = Mount(root, case, [flag], cache=cache, repo=tree)
            finally:
                os.environ.clear()
                os.environ.update(saved)
        time.sleep(1)
        for case, m in mounts.items():
            writes = [line for line in m.log().splitlines() if "writes" in line]
            print(f"# {case}: pid {m.pid}; {writes[-1].split(': ', 1)[-1] if writes else m.log()[-200:]}")
        rows: dict[str, dict[str, list[float]]] = {c: {} for c in [*cases, "idle"]}

        def add(case: str, key: str, value: float) -> None:
            rows[case].setdefault(key, []).append(value)

        n, mib = args.files, args.files * args.size / MiB
        for r in range(args.rounds):
            idle0 = diskstats(disk)
            time.sleep(SETTLE)
            idle = {k: v - idle0[k] for k, v in diskstats(disk).items()}
            for k, v in idle.items():
                add("idle", k, v)
            for case in cases[::-1] if r % 2 else cases:
                target = (root / "local" if case == "local" else mounts[case].mnt) / f"r{r}"
                pid = mounts[case].pid if case != "local" else None
                d0, me0 = diskstats(disk), proc_io("self")
                daemon0 = proc_io(pid) if pid else {}
                cpu0 = cpu_seconds(pid) if pid else time.process_time()
                refused: list[int] = []
                w, c = write_files(target, n, data, args.threads, case == "local", refused)
                add(case, "refused", len(refused))
                time.sleep(SETTLE)
                d1, me1 = diskstats(disk), proc_io("self")
                cpu = (cpu_seconds(pid) if pid else time.process_time()) - cpu0
                add(case, "write_ms", 1000 * w / n)
                add(case, "close_ms", 1000 * c / n)
                add(case, "MiB/s", mib / ((w + c) / args.threads))
                add(case, "cpu_ms_per_MiB", 1000 * cpu / mib)
                for k in d1:
                    add(case, k, (d1[k] - d0[k] - idle[k]) / n)
                dirtied = me1["write_bytes"] - me0["write_bytes"]
                dropped = me1["cancelled_write_bytes"] - me0["cancelled_write_bytes"]
                if pid:
                    daemon1 = proc_io(pid)
                    dirtied += daemon1["write_bytes"] - daemon0["write_bytes"]
                    dropped += daemon1["cancelled_write_bytes"] - daemon0["cancelled_write_bytes"]
                add(case, "dirtied_MiB", dirtied / n / MiB)
                add(case, "dropped_MiB", dropped / n / MiB)
                if case == "local":  # its files go (the mounts' stay in the shared tier): timed apart
                    d0 = diskstats(disk)
                    start = time.perf_counter()
                    shutil.rmtree(target)
                    rm = time.perf_counter() - start
                    time.sleep(SETTLE)
                    d1 = diskstats(disk)
                    add(case, "rm_ms", 1000 * rm / n)
                    add(case, "rm_discarded_MiB", (d1["discarded"] - d0["discarded"]) * 512 / n / MiB)
            print(f"# round {r} done, load {load().split('average: ')[-1]}", flush=True)

        def med(case: str, key: str) -> float:
            return statistics.median(rows[case][key]) if rows[case].get(key) else float("nan")

        base = med("local", "MiB/s") if "local" in cases else float("nan")
        print(f"\nper file, medians of {args.rounds} rounds (disk counters less an idle second's):")
        print("| case | MiB/s | ratio | write ms | close ms | daemon CPU ms/MiB | disk MiB written | "
              "write I/Os | flushes | discards | MiB discarded | discard ms | dirtied MiB | dropped MiB |")  # fmt: skip
        print("|---" * 14 + "|")
        for case in cases:
            sectors = med(case, "written") * 512 / MiB
            print(f"| {case} | {med(case, 'MiB/s'):.0f} | {med(case, 'MiB/s') / base:.2f} | "
                  f"{med(case, 'write_ms'):.1f} | {med(case, 'close_ms'):.1f} | "
                  f"{med(case, 'cpu_ms_per_MiB'):.2f}{' (own)' if case == 'local' else ''} | {sectors:.1f} | "
                  f"{med(case, 'write_ios'):.0f} | {med(case, 'flushes'):.1f} | {med(case, 'discards'):.1f} | "
                  f"{med(case, 'discarded') * 512 / MiB:.1f} | {med(case, 'discard_ms'):.1f} | "
                  f"{med(case, 'dirtied_MiB'):.1f} | {med(case, 'dropped_MiB'):.1f} |")  # fmt: skip
        for case in cases:
            if sum(rows[case]["refused"]):
                print(
                    f"# {case}: {sum(rows[case]['refused']):.0f} closes refused (ENOSPC) in {args.rounds} rounds"
                )
        for case in cases:
            print(f"# {case} rounds: MiB/s {', '.join(f'{v:.0f}' for v in rows[case]['MiB/s'])}; "
                  f"close ms {', '.join(f'{v:.1f}' for v in rows[case]['close_ms'])}; disk MiB/file "
                  f"{', '.join(f'{v * 512 / MiB:.1f}' for v in rows[case]['written'])}")  # fmt: skip
        if "local" in cases:
            print(
                f"# local: rm of its files afterwards {med('local', 'rm_ms'):.1f} ms/file, "
                f"{med('local', 'rm_discarded_MiB'):.1f} MiB discarded per file (not timed above)"
            )
        for case in cases:
            times = root / f"times-{case}.txt"
            if not times.exists():
                continue
            fsyncs: dict[str, list[float]] = {}
            closed: list[float] = []
            for line in times.read_text().splitlines():
                kind, *pairs = line.split()
                values = {k: float(v) for k, v in (p.split("=") for p in pairs)}
                if kind == "closed":
                    closed.append(values["total"])
                elif values["total"] > 1:  # a FLUSH/RELEASE with nothing to copy is not one of these
                    for k, v in values.items():
                        fsyncs.setdefault(k, []).append(v)
            print(
                f"# {case} daemon, staged fsyncs ({len(fsyncs.get('total', []))}), median ms: "
                + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in fsyncs.items())
                + f"; last close of a staged file (its blocks freed) {statistics.median(closed or [0]):.1f}"
            )
        print(
            f"# idle second: {', '.join(f'{k} {statistics.median(v):.0f}' for k, v in rows['idle'].items())}"
        )
        print(f"# load after: {load()}")
    finally:
        for m in mounts.values():
            m.umount()
        for path in ram:
            subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
