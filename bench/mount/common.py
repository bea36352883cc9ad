"""What the mount benchmarks share: readers, the daemon's counters, the page cache, the data,
and the setup (:func:`dataset_bench`: objects uploaded to moto, a local-disk copy;
:func:`tiered_mount`: a mount whose disk tier holds every object).

One module so warm_path.py, ssd_hit.py, warm_open.py and ram_loop.py measure the same way:
the same reader loop, the same CPU accounting of the daemon (utime+stime from
/proc/PID/stat), the same ``Cached`` figure, the same moto-backed environment
(tests/fuse/conftest.py's).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# the test fixtures (pytest, boto3, the FUSE helpers) are imported where a bench sets up, not
# here: every script's `--help` paid about 1 CPU-s for them (tests/test_docs_commands.py asks
# each documented script for its flags)
if TYPE_CHECKING:
    from tests.fuse.conftest import Dataset, FuseEnv

TICK = os.sysconf("SC_CLK_TCK")


def read_py(path: str) -> int:
    """Python's buffered open(): what PIL and torch readers do (3.11: one isatty ioctl per open)."""
    with open(path, "rb") as f:
        return len(f.read())


def read_os(path: str, *, ask_isatty: bool = False) -> int:
    """os.open + os.read: no isatty, so a warm open asks the daemon nothing (``ask_isatty``: the
    one ioctl Python's ``open()`` sends, at the same place, right after the open)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if ask_isatty:
            os.isatty(fd)
        n = 0
        while chunk := os.read(fd, 1 << 20):
            n += len(chunk)
        return n
    finally:
        os.close(fd)


def daemon_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of ``pid`` so far; 0 for local disk (no daemon)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def daemon_reads(pid: int | None) -> int:
    """Read syscalls of ``pid`` so far: each FUSE request is one read of /dev/fuse."""
    if pid is None:
        return 0
    return next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/io").read_text().splitlines()
        if line.startswith("syscr")
    )


def cached_bytes() -> int:
    """``Cached`` of /proc/meminfo: the page cache, to count how often each byte sits in it."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Cached:"):
            return int(line.split()[1]) * 1024
    return 0


def drop_caches(level: int) -> None:
    """1: page cache only (a dataset larger than RAM, dentries kept); 3: dentries and inodes too."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text(f"{level}\n")


def read_all(
    paths: list[str], threads: int, reader: Callable[[str], int] = read_py, chunksize: int = 16
) -> float:
    """Seconds to read every path whole, in the given order, with ``threads`` readers."""
    t0 = time.perf_counter()
    if threads == 1:
        for p in paths:
            reader(p)
    else:
        with ThreadPoolExecutor(threads) as pool:
            for _ in pool.map(reader, paths, chunksize=chunksize):
                pass
    return time.perf_counter() - t0


def random_objects(count: int, seed: int, low: int, high: int) -> dict[str, bytes]:
    """``count`` objects of ``low``-``high`` random bytes in 20 class directories (reproducible)."""
    rng = random.Random(seed)
    return {
        f"train/c{i % 20:02d}/img_{i:06d}.jpg": rng.randbytes(rng.randint(low, high)) for i in range(count)
    }


def local_copy(root: Path, objects: dict[str, bytes]) -> list[str]:
    """The same objects on local disk: the baseline every mount figure is divided by."""
    for key, data in objects.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return [str(root / k) for k in objects]


@contextmanager
def bench_env(tmp: Path, *, ram_bytes: int, disk_bytes: int) -> Iterator[FuseEnv]:
    """A moto server on loopback and a datahub home over it with the given tier budgets."""
    from tests.fuse.conftest import make_env
    from tests.servers import MotoServer

    moto = MotoServer(keep_alive=True)
    try:
        env = make_env(tmp / "home", moto.endpoint)
        text = env.config_path.read_text().replace("ram_bytes = 67108864", f"ram_bytes = {ram_bytes}")
        env.config_path.write_text(text + f"disk_bytes = {disk_bytes}\n")
        yield env
    finally:
        moto.stop()


@dataclass
class BenchData:
    """One benchmark's data: the objects in a dataset version on moto and on local disk."""

    env: FuseEnv
    tmp: Path
    dataset: Dataset
    objects: dict[str, bytes]
    disk_paths: list[str]  # the local-disk copy: every ratio's baseline

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.objects.values())


@contextmanager
def dataset_bench(
    prefix: str, name: str, files: int, seed: int, *, ram_bytes: int, disk_bytes: int = 4 * 1024**3
) -> Iterator[BenchData]:
    """``files`` objects of 50-200 KB uploaded as dataset ``name`` to a moto server on
    loopback, with a local-disk copy, under a temporary directory removed afterwards."""
    from tests.fuse.conftest import upload_dataset

    objects = random_objects(files, seed, 50_000, 200_000)
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    try:
        with bench_env(tmp, ram_bytes=ram_bytes, disk_bytes=disk_bytes) as env:
            ds = upload_dataset(env, name, objects)
            yield BenchData(env, tmp, ds, objects, local_copy(tmp / "local", objects))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def tiered_mount(
    data: BenchData, config: str, flags: tuple[str, ...], *, bucket: bool = False
) -> Iterator[tuple[subprocess.Popen, Path, list[str]]]:
    """The real ``datahub mount --foreground`` daemon with ``flags`` (mountpoint named after
    ``config``), after a cold pass that puts every object in the disk tier (the first mount
    fetches them; later ones find them there): (daemon, mountpoint, the files' paths).
    ``bucket``: the same objects mounted as a bucket URL (their prefix), not the version."""
    from tests.fuse.conftest import wait_until

    mnt = data.env.mountpoint(config)
    source = f"s3://{data.env.bucket}/data" if bucket else data.dataset.name
    with data.env.mounted(mnt, source, *flags) as proc:
        root = mnt if bucket else mnt / data.dataset.name / f"v{data.dataset.seq}"
        paths = [str(root / k) for k in data.objects]
        for p in paths:
            read_py(p)
        wait_until(lambda: disk_pages(data.env) >= len(data.objects), 300)
        yield proc, mnt, paths


def load() -> str:
    """``load 1.23 1.10 0.98``: printed with every configuration (the machine may be shared)."""
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def disk_pages(env: FuseEnv) -> int:
    """Pages in the disk tier (a small object is one page): to wait until a cold pass landed."""
    return sum(1 for _ in env.root.rglob("*.page"))


def tier_counters(env: FuseEnv, pid: int, after: float, timeout: float = 10.0) -> dict[str, dict]:
    """Per tier (``ram``, ``disk``): the counters of mount ``pid`` from a stats snapshot written
    after ``after`` (time.time()), the figures ``datahub cache stats`` adds up. Snapshots are
    written every maintenance round (2 s), and hits answered in C are folded in once a second,
    hence the wait."""
    from datahub.cache.stats import read_snapshots, stats_dir, summarize

    deadline = time.monotonic() + timeout
    while True:
        snaps = [s for s in read_snapshots(stats_dir(env.config)) if s.get("pid") == pid]
        if snaps and snaps[0].get("time", 0) > after or time.monotonic() > deadline:
            return summarize(snaps)
        time.sleep(0.2)


def header(name: str, text: str) -> None:
    """The lines every run starts with: what was measured, on what, when, under which load."""
    import pyfuse3

    print(f"# {name}: {text}")
    print(f"# pyfuse3 {pyfuse3.__version__}, kernel {os.uname().release}, nproc {os.cpu_count()}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  load {os.getloadavg()[0]:.2f}")


def add_configs_option(ap, known, default: str | None = None) -> None:
    """``--configs``: comma-separated mount configurations of ``known`` (all by default)."""
    ap.add_argument(
        "--configs",
        default=",".join(known) if default is None else default,
        help=f"comma-separated mounts to measure (of {', '.join(known)}; local disk always)",
    )


def chosen_configs(ap, args, known) -> list[str]:
    """The ``--configs`` given, each checked against ``known`` (argparse's error otherwise)."""
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(known)
    if unknown:
        ap.error(f"unknown configs: {', '.join(sorted(unknown))}")
    return configs
