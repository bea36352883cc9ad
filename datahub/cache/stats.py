"""Stats snapshots: how a CLI process sees the counters of the cache processes running.

Each open cache writes its ``stats()`` as ``<home>/cache/stats/<pid>.json`` on every
maintenance round and when a mount reports to it (atomically: temp file + rename;
``TieredCache.publish_stats``) and removes it on close.
``read_snapshots`` returns the snapshots of processes still alive (and deletes those of
processes that died without closing); ``summarize`` adds them up per tier. Byte usage of
the disk tier does not depend on a live process: the CLI reads it from the LMDB index.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from datahub.config import Config
from datahub.procs import pid_alive

COUNTERS = (
    "hits",
    "misses",
    "evictions",
    "promotions",
    "demotions",
    "fills",
    "rejected",
    "errors",
    "corrupt",
)


def stats_dir(config: Config) -> Path:
    return config.home_path / "cache" / "stats"


def write_snapshot(directory: Path, snapshot: dict) -> None:
    """Owner-only, as the mount's record and log (``fuse_adapter.daemon._private``): a
    snapshot names the mount point and what it serves (review19b)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if directory.stat().st_mode & 0o077:
        os.chmod(directory, 0o700)
    path = directory / f"{os.getpid()}.json"
    tmp = directory / f".{os.getpid()}.json.tmp"
    tmp.write_text(json.dumps(snapshot))
    os.replace(tmp, path)


def remove_snapshot(directory: Path) -> None:
    (directory / f"{os.getpid()}.json").unlink(missing_ok=True)


def read_snapshots(directory: Path) -> list[dict]:
    out = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        try:
            pid = int(path.stem)
        except ValueError:
            continue
        if not pid_alive(pid):
            path.unlink(missing_ok=True)
            continue
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being replaced right now
    return out


def summarize(snapshots: list[dict]) -> dict[str, dict]:
    """Per tier name: counters summed over processes, usage from the latest snapshot."""
    tiers: dict[str, dict] = {}
    for snap in snapshots:
        for t in snap.get("tiers", []):
            row = tiers.setdefault(t["tier"], {"tier": t["tier"], **dict.fromkeys(COUNTERS, 0)})
            for name in COUNTERS:
                row[name] += int(t.get(name, 0))
            row["used_bytes"] = t.get("used_bytes", 0)
            row["limit_bytes"] = t.get("limit_bytes", 0)
    for row in tiers.values():
        asked = row["hits"] + row["misses"]
        row["hit_ratio"] = round(row["hits"] / asked, 4) if asked else 0.0
    return tiers
