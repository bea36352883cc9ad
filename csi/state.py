"""The node plugin's memory across restarts: which targets it published, and with what.

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

FORMAT = 1


@dataclass
class Published:
    """One published target: the request that made it, what it resolved to, how it is mounted."""

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
