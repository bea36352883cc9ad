"""The background warm-up of a mount of dataset versions, shown like a bucket mount's.

A version mount warms its whole listing by default (``warm_up_wanted``: issue 13), so the
reason is ``default``, or ``flag`` with ``--prefetch``. Its status goes to the cache's stats
(``datahub cache stats``, /metrics) in the same shape as ``fuse_adapter.bucket_warmup``'s,
so an operator sees every mount's warm-up, not only the bucket mounts'.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator

from datahub.storage.base import ObjectRef

log = logging.getLogger("fuse_adapter")


class VersionWarmup:
    """One mount's warm-up: counts what it warmed and what is left, for stats."""

    def __init__(self, mountpoint: str, source_name: str, source, *, flag: bool) -> None:
        self._lock = threading.Lock()
        self._status: dict = {
            "mount": mountpoint,
            "source": source_name,
            "mode": "flag" if flag else "auto",
            "state": "listing",
            "reason": "flag" if flag else "default",
            "scope": source_name,
            "passes": 0,
            **dict.fromkeys(("objects_total", "bytes_total", "objects_warmed", "bytes_warmed"), 0),
            **dict.fromkeys(("objects_left", "bytes_left", "objects_skipped", "bytes_skipped"), 0),
        }
        source.report_warmup(self.status)

    def status(self) -> dict:
        with self._lock:
            return dict(self._status)

    def run(
        self, source, refs: Iterable[ObjectRef], objects: int, nbytes: int, stopping: threading.Event
    ) -> None:
        """Warm ``refs`` (``objects`` of ``nbytes`` in all, streamed in the order given) until
        done, stopped or the cache is full."""
        with self._lock:
            self._status.update(
                state="running",
                passes=1,
                objects_total=objects,
                bytes_total=nbytes,
                objects_left=objects,
                bytes_left=nbytes,
            )
        try:
            report = source.prefetch(self._counted(refs), cancel=stopping, progress=self)
        except Exception as exc:  # an optimisation: a failure is logged, reads still work
            log.warning("prefetch stopped: %s", exc)
            with self._lock:
                self._status["state"] = "failed"
            return
        log.info("prefetch finished: %s", report)
        with self._lock:
            s = self._status
            if stopping.is_set():
                s["state"] = "stopped"
            elif getattr(report, "budget_reached", False):
                s.update(state="skipped", objects_skipped=s["objects_left"], bytes_skipped=s["bytes_left"])
            else:
                s["state"] = "done"

    def _counted(self, refs: Iterable[ObjectRef]) -> Iterator[ObjectRef]:
        for ref in refs:
            yield ref
            with self._lock:  # handed to the warm-up: no longer left
                self._status["objects_left"] -= 1
                self._status["bytes_left"] -= ref.size

    def update(self, objects: int, nbytes: int) -> None:
        """``progress`` of ``ObjectSource.prefetch``."""
        with self._lock:
            self._status["objects_warmed"] += objects
            self._status["bytes_warmed"] += nbytes
