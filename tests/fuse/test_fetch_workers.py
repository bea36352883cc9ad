"""A real mount with ``cache.fetch_workers = 2`` (worker processes fetching cold pages into
the disk tier, datahub.cache.fetch_workers): every file byte-exact through the mount from
moto on loopback, the workers fetched the cold pages (``datahub cache stats``), a second
read is right too, and no worker outlives the unmount."""

from __future__ import annotations

from pathlib import Path

from tests.fuse.conftest import (
    FuseEnv,
    pid_alive,
    read_tree,
    sample_objects,
    upload_dataset,
    wait_until,
)
from tests.fuse.test_passthrough import cache_stats

GUARD = 60.0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def test_a_mount_with_fetch_workers_reads_every_file_right(env: FuseEnv) -> None:
    with env.config_path.open("a") as fh:
        fh.write("fetch_workers = 2\n")  # the [cache] section ends the file
    objects = sample_objects(seed=25)
    ds = upload_dataset(env, "w", objects)
    mnt = env.mountpoint("workers")
    with env.mounted(mnt, f"w@{ds.seq}", "--no-prefetch") as proc:
        wait_until(lambda: len(_children(proc.pid)) >= 2, GUARD)
        workers = _children(proc.pid)
        root = mnt / "w" / f"v{ds.seq}"
        assert read_tree(root) == objects
        one_page = {k for k, v in objects.items() if 0 < len(v) <= 4 * 1024**2}

        def fetched() -> int:
            pools = [p for p in cache_stats(env)["fetch_workers"] if p["pid"] == proc.pid]
            return pools[0]["fetches"] if pools else 0

        # every one-page object's page came from a worker (stats snapshots every 2 s)
        wait_until(lambda: fetched() >= len(one_page), GUARD, interval=0.5)
        shown = cache_stats(env, cli=True)["fetch_workers"]  # as the CLI shows it
        [pool] = [p for p in shown if p["pid"] == proc.pid]
        assert pool["running"] == 2 and pool["failovers"] == 0
        assert read_tree(root) == objects  # again: from RAM, the page files, passthrough
    assert not any(pid_alive(w) and _not_zombie(w) for w in workers)


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
