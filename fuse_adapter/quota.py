"""A workspace mount's size quota: the bytes its files hold, against a limit.

A CSI workspace volume's capacity (the PVC's ``storage`` request) is this quota. ``df``
shows it (statfs: size = the quota, available = what is left), and a write that would pass
it fails as a whole with ENOSPC. Usage is measured once at mount (the sizes of the
workspace's files) and then kept up to date by the view on every write, truncate, unlink
and replacing rename (a file open when its name goes stays counted, charged as any file,
until its last close refunds it, as ext4 keeps an open unlinked file's blocks:
``WorkspaceView._nameless``); it counts file
sizes, not shared-tier chunks, which is what a pod can see and reason about. Concurrent writers are charged under one lock, so together they
never pass the limit.
"""

from __future__ import annotations

import threading

from datahub.errors import NoSpace

QUOTA_BLOCK = 4096  # statfs unit of a quota'd workspace: df rounds a quota down to it, not to 1 MiB


class Quota:
    def __init__(self, limit: int, used: int = 0, *, what: str = "workspace") -> None:
        self.limit = limit
        self.used = used
        self.what = what
        self._lock = threading.Lock()

    @classmethod
    def measure(cls, workspace, limit: int) -> Quota:
        """The quota of ``workspace`` (a writeback Workspace), charged with its files' sizes."""
        used, todo = 0, [""]
        while todo:
            path = todo.pop()
            for name, attr in workspace.listdir(path):
                child = f"{path}/{name}" if path else name
                if attr.is_dir:
                    todo.append(child)
                else:
                    used += attr.size
        return cls(limit, used, what=f"workspace {workspace.name!r}")

    def charge(self, nbytes: int, path: str) -> None:
        """Take ``nbytes`` more, or raise NoSpace (ENOSPC) and take nothing."""
        if nbytes <= 0:
            self.refund(-nbytes)
            return
        with self._lock:
            if self.used + nbytes > self.limit:
                raise NoSpace(
                    f"{path!r}: the {self.what} quota of {self.limit} bytes is full "
                    f"({self.used} used, {nbytes} more asked); the volume's capacity is its quota: "
                    "ask for a larger PVC or delete files",
                    path=path,
                    quota_bytes=self.limit,
                )
            self.used += nbytes

    def force(self, nbytes: int) -> None:
        """Take ``nbytes`` even past the limit: bytes already acknowledged (a release's growth,
        a revert's kept file) are counted whatever the quota says. Under the lock, as every
        change of ``used`` is: an unlocked ``+=`` beside a ``refund`` lost one of the two and
        let the quota admit more than its limit (review20c)."""
        if nbytes > 0:
            with self._lock:
                self.used += nbytes

    def refund(self, nbytes: int) -> None:
        if nbytes > 0:
            with self._lock:
                self.used = max(0, self.used - nbytes)

    @property
    def available(self) -> int:
        return max(0, self.limit - self.used)

    def df(self) -> tuple[int, int, int]:
        """What statfs shows: (block size, blocks, blocks available) of the quota."""
        return QUOTA_BLOCK, self.limit // QUOTA_BLOCK, self.available // QUOTA_BLOCK
