"""The node plugin's memory across restarts: which volumes it staged and published, and with what.

Three kinds of record share one list, keyed by path:

* a staged volume (``staged``): NodeStageVolume's mount process, its view bound onto the
  CO's staging path (the record's ``target_path``);
* a target published from a staged volume (``staging_path`` set): a bind mount of that
  stage's view, no process of its own;
* a target published without staging (an inline volume): its own mount process, as before
  staging existed (a state file written then loads as such).

One JSON file (``<state_dir>/published.json``) replaced atomically (write a temp file,
fsync, rename), so a crash leaves either the old or the new state, never half of one. It
holds no secrets: those live in each volume's 0600 config file next to it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from csi.volumes import VolumeSpec

FORMAT = 2  # 2: staged volumes and targets bound from them (format 1 files load as inline targets)


@dataclass
class Published:
    """One published target or staged volume: the request that made it, what it resolved to,
    how it is mounted (see the module docstring for the three kinds)."""

    target_path: str
    volume_id: str
    spec: VolumeSpec
    readonly: bool
    fingerprint: str  # of the request parameters, for the idempotency check
    sources: list[str]  # mount arguments with refs resolved at publish time (dataset@7)
    subdir: str  # what of the FUSE view is bound to the target ("" = its root)
    volume_dir: str  # <state>/volumes/<key>: config (0600), log, FUSE mount point
    resolved: str = ""  # "dataset@v7" for dataset volumes
    pid: int = 0  # the mount process
    unpublishing: bool = False  # an unpublish started (and failed): never remount, let the CO retry
    published_at: float = 0.0
    extra: dict = field(default_factory=dict)
    staged: bool = False  # a NodeStageVolume record: target_path is the staging path
    staging_path: str = ""  # a target bound from the volume staged at this path (no process of its own)

    @property
    def owns_process(self) -> bool:
        """A staged volume or an inline target runs a mount process; a bind of a stage does not."""
        return not self.staging_path

    @property
    def staging(self) -> str:
        return os.path.join(self.volume_dir, "mnt")

    @property
    def config_path(self) -> str:
        return os.path.join(self.volume_dir, "datahub.toml")

    @property
    def log_path(self) -> str:
        return os.path.join(self.volume_dir, "mount.log")

    def to_dict(self) -> dict:
        data = asdict(self)
        data["spec"] = self.spec.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Published:
        return cls(**{**data, "spec": VolumeSpec.from_dict(data["spec"])})


class StateFile:
    """``published.json``: load once at start, save after every change (atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._write_lock = threading.Lock()  # serialises writers of this one file

    def load(self) -> dict[str, Published]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return {p["target_path"]: Published.from_dict(p) for p in data.get("published", [])}

    def save(self, snapshot: Callable[[], list[Published]]) -> None:
        """Write what ``snapshot()`` returns; it is called once this writer's turn has come, so
        the last write always holds the newest state (two writers cannot reorder)."""
        tmp = self.path.with_suffix(".tmp")
        with self._write_lock:
            payload = json.dumps({"format": FORMAT, "published": [p.to_dict() for p in snapshot()]}, indent=1)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
