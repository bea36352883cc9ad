"""Real mounts for the FUSE tests: the daemon runs as a process of its own (so kill -9 is real),
forked from the worker's pre-imported zygote (tests/zygote.py; ``DATAHUB_TEST_ZYGOTE=0``: a
fresh interpreter, as before).

Every mount made here is unmounted in teardown, even when the test failed: first the
clean way (``datahub umount``'s handler, run in the test's process: ``FuseEnv.umount``), then
``fusermount3 -uz`` and a kill of our own daemon.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from datahub.cache.stats import read_snapshots, stats_dir, summarize
from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.config import Config, load_config
from datahub.console.context import CliContext
from datahub.storage import StoreRegistry
from fuse_adapter.daemon import READY, is_mounted, read_record
from tests import zygote
from tests.servers import MotoServer, S3Endpoint
from tests.zygote import ZygoteProcess

REPO = Path(__file__).resolve().parents[2]
MOUNT_TIMEOUT = 60.0
#: a mount's stats snapshot every 0.2 s, not 2 s: tests poll its counters (``polled_mount``)
#: after each action, and each poll waited about a second for the next snapshot
MAINTAIN_INTERVAL = 0.2
#: how long a teardown's unmount waits for a daemon's final flush (the command's run had 120 s)
UMOUNT_TIMEOUT = 120.0


@dataclass
class FuseEnv:
    """A datahub home (config file, catalog) whose objects live in a fresh S3 bucket."""

    root: Path
    config_path: Path
    config: Config
    bucket: str
    endpoint: S3Endpoint

    def cli(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(self.config_path), *args]
        proc = zygote.run(cmd, timeout=timeout, cwd=REPO)  # a fork of a pre-imported interpreter
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    def mountpoint(self, name: str) -> Path:
        path = self.root / "mnt" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextlib.contextmanager
    def mounted(
        self, mountpoint: Path, *args: str, module: str = "fuse_adapter"
    ) -> Iterator[subprocess.Popen | ZygoteProcess]:
        """``datahub mount MOUNTPOINT ARGS --foreground`` for the duration of the block.

        ``module``: what ``python -m`` runs, a launcher of fuse_adapter's own ``main`` with a
        constant lowered (e.g. tests/writeback/small_reserve_mount.py). The daemon is a fork of
        this process's pre-imported interpreter (tests/zygote.py), or a fresh one with
        ``DATAHUB_TEST_ZYGOTE=0``: the same argv, environment, working directory and streams."""
        log_path = self.root / f"mount-{mountpoint.name}.log"
        cmd = [sys.executable, "-m", module, "--config", str(self.config_path)]
        cmd += ["mount", str(mountpoint), *args, "--foreground", "--ready-fd", zygote.PASSED_FD]
        ready_r, ready_w = os.pipe()
        proc = None
        try:
            try:
                with open(log_path, "ab") as log:
                    proc = zygote.popen(
                        cmd, stdout=log.fileno(), stderr=log.fileno(), cwd=REPO, pass_fd=ready_w
                    )
            finally:
                os.close(ready_w)
            # ready as `--background` is: the daemon says so on its ``--ready-fd`` once the
            # kernel's INIT is answered and its record written (a `datahub umount` before the
            # record finds none of this home and refuses the mount as another home's). Before:
            # a poll of the mount table and the record every 20 ms, 10 ms late on average
            if not _ready_said(ready_r, proc, MOUNT_TIMEOUT):
                raise AssertionError(f"mount exited {proc.returncode}: {log_path.read_text()}")
            assert is_mounted(str(mountpoint)) and read_record(self.config.home_path, str(mountpoint))
            yield proc
        finally:
            os.close(ready_r)
            self.teardown(mountpoint, proc)

    def teardown(self, mountpoint: Path, proc: subprocess.Popen | ZygoteProcess | None) -> None:
        if proc is None or proc.poll() is None or is_mounted(str(mountpoint)):
            self.umount(mountpoint)
        if is_mounted(str(mountpoint)):
            subprocess.run(["fusermount3", "-uz", str(mountpoint)], check=False)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()

    def umount(self, mountpoint: Path) -> None:
        """What ``datahub umount`` does, in this process: ``run_umount``, the command's handler,
        with a context built as the command builds it (the config file read now: a test may
        have added to it). A workspace's recovery, when its daemon did not say its final flush
        and commit succeeded, re-checks them as the command does. An error is left to the steps
        after (``teardown``), as the command's exit status was.

        Why not the command: a Python start-up per mount torn down (0.4-0.6 CPU-s each, ~90
        workspace teardowns a suite). The tests of the command itself run it
        (``env.cli("umount", ...)``: tests/fuse/test_workspace.py, test_umount_finished15.py …)."""
        from fuse_adapter.mount_cmd import run_umount

        args = argparse.Namespace(mountpoint=str(mountpoint), timeout=UMOUNT_TIMEOUT)
        with contextlib.suppress(Exception):  # the command's exit status was not checked either
            ctx = CliContext(
                load_config(self.config_path), creates_catalog=False, out=io.StringIO(), err=io.StringIO()
            )
            try:
                run_umount(args, ctx)
            finally:
                ctx.close()


def _ready_said(fd: int, proc: subprocess.Popen | ZygoteProcess, timeout: float) -> bool:
    """Whether a mount daemon wrote ``READY`` on its ``--ready-fd`` (the read end ``fd``) within
    ``timeout`` s; False when it exited first (its status is then in ``proc.returncode``)."""
    deadline = time.monotonic() + timeout
    while True:
        # a short timeout only to see an exit: a child of the daemon (fusermount3) may hold
        # the pipe's write end open after the daemon is gone
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            said = os.read(fd, len(READY))
            if said == READY:
                return True
            if not said:  # closed unsaid: the daemon exited (or is exiting)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
                return False
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            raise AssertionError(f"the mount did not say it was ready within {timeout}s")


def wait_until(predicate, timeout: float, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        time.sleep(interval)


def recorded_snapshot(mnt: Path, timeout: float = 60) -> list[str]:
    """The versions (``name@vN``) a bucket mount at ``mnt`` shows in its ``.datahub`` once its
    listing is recorded as a snapshot (in the background after the mount is ready)."""
    wait_until(lambda: json.loads((mnt / ".datahub").read_text())["versions"], timeout=timeout)
    return json.loads((mnt / ".datahub").read_text())["versions"]


def snapshot_version(mnt: Path) -> tuple[str, int]:
    """The dataset and version number of the one snapshot a bucket mount at ``mnt`` recorded."""
    [shown] = recorded_snapshot(mnt)
    name, _, version = shown.partition("@")
    return name, int(version.removeprefix("v"))


def polled_stats(env: FuseEnv) -> dict[str, list[dict]]:
    """The ``mounts``, ``warmups``, ``backing_files`` and ``tiers`` (counters: the disk tier's
    usage is the CLI's, from the index) rows of ``datahub cache stats --json``,
    read in-process from the snapshot files that command reads (datahub.cache.stats).

    For ``wait_until`` polls only: a CLI run per poll is a fresh interpreter (about 1 s of CPU,
    several seconds on a loaded machine) competing with the daemon it waits for. Tests check
    the command's own output (``datahub cache stats``) once the wait is over."""
    snapshots = read_snapshots(stats_dir(env.config))
    rows = {
        key: [{"pid": s["pid"], **row} for s in snapshots for row in s.get(key, [])]
        for key in ("mounts", "warmups")
    }
    rows["backing_files"] = [{"pid": s["pid"], **s["backing"]} for s in snapshots if "backing" in s]
    rows["tiers"] = list(summarize(snapshots).values())
    return rows


def polled_mount(env: FuseEnv) -> dict:
    """The last mount's row of ``polled_stats`` (as ``mount_stats`` reads it from the CLI)."""
    mounts = polled_stats(env)["mounts"]
    return mounts[-1] if mounts else {}


def make_env(root: Path, endpoint: S3Endpoint, bucket: str | None = None, *, cache: str = "") -> FuseEnv:
    """A mount's config and home under ``root``, on a new bucket (or ``bucket``, which tests
    share when filling it is their large cost, e.g. tests/fuse/test_bucket_by_directory.py).
    ``cache``: more lines of its ``[cache]`` section (``"page_size = 16384\n"``), in ``config`` too."""
    bucket = bucket or endpoint.new_bucket("fuse")
    root.mkdir(parents=True, exist_ok=True)
    config_path = root / "datahub.toml"
    config_path.write_text(
        f'home = "{root / "var"}"\n'
        f'objects_url = "s3://{bucket}/objects"\n'
        "[s3]\n"
        f'endpoint_url = "{endpoint.url}"\n'
        f'access_key_id = "{endpoint.access_key}"\n'
        f'secret_access_key = "{endpoint.secret_key}"\n'
        'region = "us-east-1"\n'
        "path_style = true\n"
        "max_attempts = 3\n"
        "[cache]\n"
        "ram_bytes = 67108864\n"
        "flush_interval = 3600.0\n"
        f"maintain_interval = {MAINTAIN_INTERVAL}\n" + cache
    )
    return FuseEnv(root, config_path, load_config(config_path, env={}), bucket, endpoint)


@dataclass
class Dataset:
    name: str
    seq: int
    objects: dict[str, bytes]  # key -> bytes
    created_at: float


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` as relative path -> bytes, read through the file system."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def sample_objects(seed: int = 7) -> dict[str, bytes]:
    """Small, empty, odd-sized and multi-MiB objects in a few directories."""
    rng = random.Random(seed)
    sizes = [0, 1, 4095, 4096, 100_000, 131_072, 1_000_003, 9 * 1024**2 + 17]
    objects = {}
    for i, size in enumerate(sizes):
        objects[f"train/class_{i % 3}/img_{i:03d}.bin"] = rng.randbytes(size)
    for i in range(40):
        objects[f"many/f{i:03d}.jpg"] = rng.randbytes(rng.randint(1000, 60_000))
    objects["README.txt"] = b"sample dataset\n"
    return objects


def upload_dataset(env: FuseEnv, name: str, objects: dict[str, bytes], prefix: str = "data") -> Dataset:
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/{prefix}")
        changes = []
        for key, data in sorted(objects.items()):
            info = store.put(key, data)
            meta = {"mtime": 1_600_000_000.0 + len(key)} if key.startswith("train/") else {}
            changes.append(Put(Record(key, store.url_for(key), info.etag, len(data), meta=meta)))
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset(name)
        version = catalog.commit(name, changes, message="sample")
    finally:
        catalog.close()
    return Dataset(name, version.seq, objects, version.created_at)


@pytest.fixture(scope="module")
def ro_env(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path_factory.mktemp("fuse-ro"), moto_endpoint)


@pytest.fixture(scope="module")
def sample(ro_env: FuseEnv) -> Dataset:
    return upload_dataset(ro_env, "sample", sample_objects())


@pytest.fixture(scope="module")
def ro_mount(ro_env: FuseEnv, sample: Dataset) -> Iterator[Path]:
    """The sample dataset mounted read-only for the whole module: ``<mnt>/sample/v1``."""
    mnt = ro_env.mountpoint("ro")
    with ro_env.mounted(mnt, "sample"):
        yield mnt


@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path, moto_endpoint)


@pytest.fixture
def needs_passthrough() -> None:
    """Skip where pyfuse3 was built without passthrough (libfuse < 3.16): for the modules
    whose every test mounts with ``--passthrough`` (``pytest.mark.usefixtures``)."""
    from fuse_adapter import fuse_ops

    if not fuse_ops.PASSTHROUGH:
        pytest.skip("pyfuse3 built without libfuse >= 3.16")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def private_moto() -> Iterator[MotoServer]:
    """The module's own moto: its request log holds only this module's requests, and each
    test counts those of its own bucket (a server start is ~1 s)."""
    server = MotoServer()
    try:
        yield server
    finally:
        server.stop()
