"""A bucket snapshot's warm-up: runs the passes ``datahub.cache.warmup_policy`` decides on.

Why here: the policy needs what only the mount knows (the snapshot's listing, which objects
readers open for the first time), and the cache runs the passes (``prefetch``: warm-up
priority, hints first, only what fits). This glue watches the mount's reads through
``ObservedSource``, sums the listing per directory once (so "does this subtree fit" is a
dictionary look-up on a reader's thread), runs one pass at a time on a thread of its own,
stops it when the readers go idle, and reports its state to the cache's stats
(``datahub cache stats``, /metrics).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence

from datahub.cache.warmup_policy import Decision, WarmupPolicy
from datahub.storage.base import ObjectRef
from fuse_adapter.bucket_access import ObjectAccess
from fuse_adapter.source import ByteSource
from fuse_adapter.warmup_order import warm_up_order

log = logging.getLogger("fuse_adapter")

MAX_SEEN = 1_000_000  # objects remembered as read, by hash (~60 MB at most; beyond it no new pattern is seen)
POLL_SECONDS = 1.0


class BucketWarmup:
    """The warm-up of one bucket mount (``start`` once the view exists; ``saw`` on every read)."""

    def __init__(
        self,
        source: ByteSource,
        policy: WarmupPolicy,
        mountpoint: str,
        stopping: threading.Event,
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._source = source
        self.policy = policy
        self._stopping = stopping
        self._clock = clock
        self._poll = poll_seconds
        self._lock = threading.Lock()  # the policy, the status and the pending decision
        self._wake = threading.Event()
        self._seen: set[int] = set()  # hashes of the URLs readers have read
        self._dirs: dict[str, tuple[int, int]] = {}  # directory URL -> (objects, bytes) below it
        self._room = 0
        self._listed = False
        self._pending: Decision | None = None
        self._running: _Pass | None = None
        self._files: Callable[[], Iterator[ObjectRef]] = iter  # set by start()
        self._want_listing: Callable[[], None] | None = None  # set by start()
        self._early: set[int] = set()  # hashes of files read before the listing was in
        mode = {None: "auto", True: "flag", False: "off"}[policy.mode]
        self._status: dict = {
            "mount": mountpoint,
            "source": policy.root,
            "mode": mode,
            "state": "off" if policy.mode is False else "listing",
            "reason": "",
            "scope": "",
            "passes": 0,
            **dict.fromkeys(("objects_total", "bytes_total", "objects_warmed", "bytes_warmed"), 0),
            **dict.fromkeys(("objects_left", "bytes_left", "objects_skipped", "bytes_skipped"), 0),
        }
        source.report_warmup(self.status)

    # --- what readers do (any thread) --------------------------------------------------------------
    def saw(self, ref: ObjectRef) -> None:
        """A reader reads ``ref`` (called on every cold-path read: cheap after the first)."""
        url = ref.url
        key = hash(url)  # a collision only hides one cold open from the pattern
        if not self._listed:
            self._before_listed(key)
            return
        if key in self._seen or self.policy.mode is not None:
            return
        if len(self._seen) >= MAX_SEEN:
            return
        self._seen.add(key)
        if self._source.holds(ref):
            return  # not cold: an earlier mount or the warm-up brought it in
        with self._lock:
            decision = self.policy.cold_open(url, self._fits)
            if decision is not None:
                self._pending = decision
        if decision is not None:
            self._wake.set()

    def _before_listed(self, key: int) -> None:
        """A large bucket listed by directory has no whole listing until asked for it
        (fuse_adapter.bucket_listing): ask once readers have opened as many distinct files
        as a pattern needs, so a reader of a handful of files never pays for the listing."""
        want = self._want_listing
        if want is None or self.policy.mode is not None:
            return
        opens = max(1, self.policy.settings.opens)
        with self._lock:
            if len(self._early) >= opens or key in self._early:
                return
            self._early.add(key)
            if len(self._early) < opens:
                return
            self._status["state"] = "listing"
        want()

    def listing_deferred(self) -> None:
        """The mount lists its bucket by directory: the whole listing waits for readers."""
        with self._lock:
            if self._status["state"] == "listing" and len(self._early) < max(1, self.policy.settings.opens):
                self._status["state"] = "deferred"

    def status(self) -> dict:
        with self._lock:
            return dict(self._status)

    # --- the controller ---------------------------------------------------------------------------
    def start(
        self,
        files: Callable[[], Iterator[ObjectRef]],
        wait_listed: Callable[[], bool],
        want_listing: Callable[[], None] | None = None,
    ) -> None:
        """Run the controller on a thread: ``wait_listed()`` blocks (polling ``stopping``) until
        the listing is in, False if unmounted meanwhile; ``files()`` yields the snapshot's refs;
        ``want_listing()`` asks for a listing that waits for readers (a large bucket)."""
        self._files = files
        self._want_listing = want_listing
        threading.Thread(
            target=self._run, args=(wait_listed,), name="datahub-bucket-warmup", daemon=True
        ).start()

    def _run(self, wait_listed: Callable[[], bool]) -> None:
        try:
            if not wait_listed():
                return
            self._sum_listing()
            self._control()
        except Exception as exc:  # a thread's top level: an optimisation failed, reads still work
            log.warning("bucket warm-up stopped: %s", exc)
            with self._lock:
                self._status["state"] = "failed"

    def _sum_listing(self) -> None:
        root = self.policy.root
        dirs: dict[str, list[int]] = {}
        for ref in self._files():
            for d in _dirs_of(ref.url, root):
                row = dirs.setdefault(d, [0, 0])
                row[0] += 1
                row[1] += ref.size
        objects, nbytes = dirs.get(root, [0, 0])
        room = self._source.warm_room()
        with self._lock:
            self._dirs = {d: (n, b) for d, (n, b) in dirs.items()}
            self._room = room
            self._status.update(objects_total=objects, bytes_total=nbytes)
            if self.policy.mode is not False:
                self._status["state"] = "waiting"
            decision = self.policy.listed(objects, nbytes, room)
            if decision is not None:
                self._pending = decision
            self._listed = True
        log.info(
            "bucket warm-up (%s): %d objects, %d bytes listed; room %d bytes below the low watermark",
            self._status["mode"], objects, nbytes, room,
        )  # fmt: skip

    def _fits(self, scope: str) -> bool:
        return self._dirs.get(scope, (0, 0))[1] <= self._room

    def _control(self) -> None:
        running: _Pass | None = None
        while not self._stopping.is_set():
            with self._lock:
                decision, self._pending = self._pending, None
            if decision is not None and not decision.warm:
                self._skip(decision)
            elif decision is not None:
                if running is not None:
                    running.cancel.set()
                    running.thread.join()
                running = self._begin(decision)
                with self._lock:
                    self._running = running
                if self._stopping.is_set():
                    running.cancel.set()
            if running is not None and running.thread.is_alive():
                idle = self._source.idle_for()
                if self.policy.should_stop(running.decision.reason, idle, self._clock() - running.started):
                    running.cancel.set()
                    running.thread.join()
                    with self._lock:
                        self.policy.stopped()
                        self._status["state"] = "stopped-idle"
                    log.info("bucket warm-up stopped: the readers have been idle %.0f s", idle)
                    running = None
            elif running is not None:
                running = None  # finished: _Pass recorded how
            self._wake.wait(self._poll)
            self._wake.clear()
        if running is not None:
            running.cancel.set()

    def close(self) -> None:
        """Unmount: the running pass stops now (before the cache closes), not at the next poll."""
        self._stopping.set()
        with self._lock:
            running = self._running
        if running is not None:
            running.cancel.set()
        self._wake.set()

    def _skip(self, decision: Decision) -> None:
        objects, nbytes = self._dirs.get(decision.scope, (0, 0))
        with self._lock:
            if self._status["state"] in ("waiting", "done", "stopped-idle"):
                self._status["state"] = "skipped"
            self._status.update(objects_skipped=objects, bytes_skipped=nbytes)
        log.info(
            "bucket warm-up: %s (%d objects, %d bytes) does not fit below the low watermark (%d bytes): not warmed",
            decision.scope, objects, nbytes, self._room,
        )  # fmt: skip

    def _begin(self, decision: Decision) -> _Pass:
        objects, nbytes = self._dirs.get(decision.scope, (0, 0))
        with self._lock:
            self._status.update(
                state="running", reason=str(decision.reason), scope=decision.scope,
                objects_left=objects, bytes_left=nbytes, objects_skipped=0, bytes_skipped=0,
                passes=self._status["passes"] + 1,
            )  # fmt: skip
        log.info(
            "bucket warm-up started (%s): %s, %d objects, %d bytes",
            decision.reason,
            decision.scope,
            objects,
            nbytes,
        )
        p = _Pass(decision, threading.Event(), self._clock())
        p.thread = threading.Thread(target=self._pass, args=(p,), name="datahub-prefetch", daemon=True)
        p.thread.start()
        return p

    def _pass(self, p: _Pass) -> None:
        scope = p.decision.scope
        refs = warm_up_order(r for r in self._files() if r.url.startswith(scope))
        try:
            report = self._source.prefetch(self._counted(refs), cancel=p.cancel, progress=self)
        except Exception as exc:  # an optimisation: a failure is logged, reads still work
            log.warning("bucket warm-up stopped: %s", exc)
            with self._lock:
                self._status["state"] = "failed"
            return
        with self._lock:
            if getattr(report, "budget_reached", False):
                self._status.update(
                    state="stopped-full",
                    objects_skipped=self._status["objects_left"], bytes_skipped=self._status["bytes_left"],
                    objects_left=0, bytes_left=0,
                )  # fmt: skip
            elif not getattr(report, "cancelled", False):
                self._status["state"] = "done"
        log.info("bucket warm-up finished (%s): %s", p.decision.reason, report)

    def _counted(self, refs: Iterable[ObjectRef]) -> Iterator[ObjectRef]:
        """``refs``, counting each one the pass takes out of what is left."""
        for ref in refs:
            with self._lock:
                self._status["objects_left"] -= 1
                self._status["bytes_left"] -= ref.size
            yield ref

    def update(self, objects: int, nbytes: int) -> None:
        """Progress of the running pass (``run_prefetch``): objects done, bytes fetched."""
        with self._lock:
            self._status["objects_warmed"] += objects
            self._status["bytes_warmed"] += nbytes


class _Pass:
    def __init__(self, decision: Decision, cancel: threading.Event, started: float) -> None:
        self.decision = decision
        self.cancel = cancel
        self.started = started
        self.thread: threading.Thread


def _dirs_of(url: str, root: str) -> Iterator[str]:
    """The directories of ``url`` from ``root`` down (``root`` itself included)."""
    yield root
    i = url.find("/", len(root))
    while i != -1:
        yield url[: i + 1]
        i = url.find("/", i + 1)


class ObservedSource:
    """The mount's ``ByteSource`` with every read shown to the warm-up first, and (``access``,
    what a bucket mount always gives) no bytes served of an object this mount's credentials
    were not allowed to read (``fuse_adapter.bucket_access``). Every other method of
    ``ByteSource`` is forwarded as it is (tests/fuse/test_bucket_passthrough.py): one left out
    is one the view finds missing, and it silently does without (passthrough did, once)."""

    def __init__(self, source: ByteSource, warmup: BucketWarmup, access: ObjectAccess | None = None) -> None:
        self._source = source
        self._warmup = warmup
        self._access = access
        if access is not None:
            source.watch_origin(access.granted)  # a page this process fetched is its own check

    def read(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None, *, reader: Hashable = None
    ) -> bytes | memoryview:
        self._warmup.saw(ref)
        data = self._source.read(ref, offset, size, reader=reader)
        if self._access is not None:
            self._access.check(ref)  # after the read: a cold read checked itself at the origin
        return data

    def read_cached(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None
    ) -> bytes | memoryview | None:
        if self._access is not None and not self._access.allowed(ref):
            return None  # the reader's thread reads it, and checks first
        return self._source.read_cached(ref, offset, size)  # RAM: not a cold open

    def hint(self, refs: Sequence[ObjectRef]) -> None:
        self._source.hint(refs)

    def prefetch(
        self, refs: Iterable[ObjectRef], *, cancel: threading.Event | None = None, progress=None
    ) -> object:
        return self._source.prefetch(refs, cancel=cancel, progress=progress)

    def watch_requests(self, counter: Callable[[], int]) -> None:
        self._source.watch_requests(counter)

    def holds(self, ref: ObjectRef) -> bool:
        return self._source.holds(ref)

    def idle_for(self) -> float:
        return self._source.idle_for()

    def warm_room(self) -> int:
        return self._source.warm_room()

    def report_warmup(self, status: Callable[[], dict]) -> None:
        self._source.report_warmup(status)

    def backing_fd(self, ref: ObjectRef, *, verify: bool = True, fetch: bool = False) -> int | None:
        if fetch:  # a cold open reads the object in (its first READ, done at OPEN)
            self._warmup.saw(ref)
        fd = self._source.backing_fd(ref, verify=verify, fetch=fetch)  # else a disk-tier hit
        access = self._access
        if access is None or fd is None or fd < 0 or access.allowed(ref):
            return fd
        if not verify:  # on the FUSE loop: no request here, ask again from a worker thread
            os.close(fd)
            return -1
        try:
            access.check(ref)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def backing_unchanged(self, ref: ObjectRef, fd: int) -> bool:
        return self._source.backing_unchanged(ref, fd)

    def backing_check(self, ref: ObjectRef, fd: int) -> bool:
        return self._source.backing_check(ref, fd)

    def watch_backing(self, listener: Callable[[int, int], None]) -> None:
        self._source.watch_backing(listener)

    def backing_hits(self, refs: list[ObjectRef]) -> None:
        self._source.backing_hits(refs)  # opens answered in C: hits of files already held

    def backs_files(self) -> bool:
        return self._source.backs_files()

    def report_mount(self, status: Callable[[], dict]) -> None:
        self._source.report_mount(status)

    def watch_origin(self, listener: Callable[[str, str], None]) -> None:
        self._source.watch_origin(listener)

    def close(self) -> None:
        self._source.close()
