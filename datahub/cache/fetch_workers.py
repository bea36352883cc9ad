"""Fetch worker processes: cold pages read from the origin and written on other cores.

Why processes: the work of a cold small page outside system calls is Python (the S3
client's signing and parsing, the page header, the store), and it holds the GIL, so more
fetch threads in the mount daemon add GIL hand-offs, not cores (docs/cache.md, "A cold
small file, and more than one core"). A worker is the same interpreter started with
``-c`` (never ``fork``: the daemon has threads and a FUSE session), with its own storage
registry (its own S3 connection pool) and the one page-file writer
(``datahub.cache.pagefile``) on the daemon's disk-tier directory.

Who owns what. The daemon keeps admission and bookkeeping: the single flight, the origin
scheduler's slot (taken before a request is sent, so limits and priority classes hold
across workers), the disk tier's room (``reserve`` before the worker writes), eviction,
pins, watermarks, the index entry and the verified backing-file record. A worker reads
one range under If-Match, checks its length, writes the page file whole (unnamed, linked
to its final name) and answers with its size, checksum and ``(dev, ino, size, ctime_ns)``
after linking, or with the error (class and fields of ``datahub.errors``, raised again
here). It never deletes anything.

One request is one pickled message on the worker's pipe; a worker serves up to
``WORKER_THREADS`` at once (origin latency, not CPU, is what they wait on). A worker that
dies fails its requests with ``NotFetched``: the daemon then fetches those pages itself
(once; a request that killed one worker is not handed to another). The unnamed file of a
write in progress vanishes with the process, so nothing half-written remains. A dead
worker is restarted at most ``RESTARTS_PER_MINUTE`` times a minute (each death and the
limit are logged once). Workers exit when the daemon closes the pool or dies (their
request pipe ends).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NamedTuple

import datahub
from datahub import errors
from datahub.cache import pages as fmt
from datahub.cache.counters import Counters
from datahub.cache.origin import Origin, read_range
from datahub.cache.pagefile import PageWriter
from datahub.cache.pages import PageKey
from datahub.cache.priority import current_priority
from datahub.config import Config
from datahub.storage.retry import observe_transient, report_transient

log = logging.getLogger(__name__)

WORKER_THREADS = 8  # requests one worker serves at once
RESTARTS_PER_MINUTE = 3
MAX_WORKERS = 4  # "auto": the number of cores, at most this many
_ENTRY = "from datahub.cache.fetch_workers import worker_main; worker_main()"


# --- messages (pickled on the pipes) ----------------------------------------------------------
class WorkerSetup(NamedTuple):
    config: Config
    disk_dir: str
    threads: int


class FetchRequest(NamedTuple):
    id: int
    url: str
    etag: str
    page_size: int
    index: int
    start: int
    end: int
    priority: int  # datahub.cache.priority.Priority of the reader (for the worker's log)


class Transient(NamedTuple):
    """A failed attempt the worker's retry policy saw (the daemon's scheduler slows down on it)."""

    message: str
    details: dict


class Written(NamedTuple):
    id: int
    size: int
    checksum: int
    state: tuple[int, int, int, int] | None  # (dev, ino, size, ctime_ns) after linking; None: renamed
    transient: tuple[Transient, ...]


class Failed(NamedTuple):
    id: int
    error: str  # a class name of datahub.errors; "" when the worker could not write the page
    message: str
    details: dict
    transient: tuple[Transient, ...]


class NotFetched(Exception):
    """A worker died or could not write the page: the daemon fetches it itself. Never
    reaches a reader (``FetchWorkers.fetch_page`` turns it into a fetch in this process)."""


class FetchWorkerCounters(Counters):
    FIELDS = (
        "fetches",  # pages fetched and written by workers
        "bytes",
        "failovers",  # requests a worker did not finish, fetched by the daemon instead
        "deaths",  # workers that exited while the pool was open
        "restarts",
    )


# --- the daemon's side ------------------------------------------------------------------------
class _Call:
    """One request waiting for its answer (a plain lock as the gate, as in SingleFlight)."""

    __slots__ = ("answer", "gate")

    def __init__(self) -> None:
        self.gate = threading.Lock()
        self.gate.acquire()
        self.answer: Written | Failed | None = None


class _Worker:
    def __init__(self, setup: WorkerSetup, on_exit) -> None:
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        env = dict(os.environ)
        root = str(Path(datahub.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _ENTRY, str(req_r), str(ans_w)],
                pass_fds=(req_r, ans_w),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            for fd in (req_r, req_w, ans_r, ans_w):
                os.close(fd)
            raise
        os.close(req_r)
        os.close(ans_w)
        self.pid = self.proc.pid
        self._requests = Connection(req_w, readable=False)
        self._answers = Connection(ans_r, writable=False)
        self._lock = threading.Lock()
        self.pending: dict[int, _Call] = {}
        self.alive = True
        self._on_exit = on_exit
        self._requests.send(setup)
        self._reader = threading.Thread(target=self._read, name="datahub-fetch-worker", daemon=True)
        self._reader.start()

    def submit(self, request: FetchRequest, call: _Call) -> None:
        with self._lock:
            if not self.alive:
                raise NotFetched(f"fetch worker {self.pid} has exited")
            self.pending[request.id] = call
            try:
                self._requests.send(request)
            except OSError as exc:  # the worker is gone; its reader thread fails the rest
                del self.pending[request.id]
                raise NotFetched(f"fetch worker {self.pid} has exited: {exc}") from exc

    def _read(self) -> None:
        while True:
            try:
                answer = self._answers.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                call = self.pending.pop(answer.id, None)
            if call is not None:
                call.answer = answer
                call.gate.release()
        with self._lock:
            self.alive = False
            lost, self.pending = list(self.pending.values()), {}
        for call in lost:
            call.gate.release()  # answer None: NotFetched
        with self._lock:
            self._answers.close()
            self._requests.close()
        code = self.proc.wait()
        self._on_exit(self, code)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the worker to exit (its request pipe ends); kill it if it does not."""
        with self._lock:
            self.alive = False
            try:
                self._requests.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout)


class FetchWorkers:
    """A pool of fetch worker processes writing into the disk tier ``disk`` (a DiskTier)."""

    def __init__(self, config: Config, count: int, disk, *, threads: int = WORKER_THREADS) -> None:
        self.count = count
        self.disk = disk
        self.counters = FetchWorkerCounters()
        self._setup = WorkerSetup(config, str(disk.dir), threads)
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._restarts: collections.deque[float] = collections.deque()
        self._restart_limit_logged = False
        self._workers: list[_Worker] = []
        try:
            for _ in range(count):
                self._workers.append(_Worker(self._setup, self._exited))
        except BaseException:
            self.close()
            raise

    # --- a page ----------------------------------------------------------------------------
    def fetch_page(
        self, origin: Origin, key: PageKey, start: int, end: int, *, hot: bool = False
    ) -> bytes | None:
        """The verified bytes of ``key``'s range ``[start, end)``, fetched by a worker and
        stored as the disk tier's page file, or None: fetch it in this process (the tier
        refused the page, or the worker did not finish it). Origin errors are raised as in
        ``Origin.fetch``."""
        size = end - start
        if self.disk.reserve(key, size, hot=hot) is not True:
            return None
        stored = False
        try:
            try:
                written = origin.fetch_via(key, start, end, lambda: self._fetch(key, start, end), _size)
                data = self.disk.load_written(key, size, written.state)
            except NotFetched as exc:
                log.debug("fetch worker: page %d of %s: %s; fetching it here", key.index, key.url, exc)
                data = None
            if data is None:
                self.counters.add("failovers")
                return None
            self.disk.stored_elsewhere(key, size, written.state)
            stored = True
            self.counters.add_many(fetches=1, bytes=size)
            return data
        finally:
            self.disk.settle(key, size, stored=stored)

    def _fetch(self, key: PageKey, start: int, end: int) -> Written:
        call = _Call()
        request = FetchRequest(next(self._ids), key.url, key.etag, key.page_size, key.index, start, end,
                               int(current_priority()))  # fmt: skip
        self._pick().submit(request, call)
        call.gate.acquire()
        answer = call.answer
        if answer is None:
            raise NotFetched("the fetch worker exited before answering")
        for t in answer.transient:
            report_transient(errors.TransientStorageError(t.message, **t.details))
        if isinstance(answer, Failed):
            raise _rebuilt(answer)
        return answer

    def _pick(self) -> _Worker:
        with self._lock:
            alive = [w for w in self._workers if w.alive]
        if not alive:
            raise NotFetched("no fetch worker is running")
        return min(alive, key=lambda w: len(w.pending))

    # --- workers coming and going ----------------------------------------------------------
    def _exited(self, worker: _Worker, code: int) -> None:
        with self._lock:
            if self._closed:
                return
            self.counters.add("deaths")
            if worker in self._workers:
                self._workers.remove(worker)
            now = time.monotonic()
            while self._restarts and now - self._restarts[0] > 60:
                self._restarts.popleft()
            restart = len(self._restarts) < RESTARTS_PER_MINUTE
            if restart:
                self._restarts.append(now)
            elif not self._restart_limit_logged:
                self._restart_limit_logged = True
                log.error(
                    "fetch workers: %d restarts within a minute; not restarting more this minute "
                    "(cold pages are fetched by the daemon meanwhile)",
                    RESTARTS_PER_MINUTE,
                )
        log.warning(
            "fetch worker %d exited (code %s); its requests were fetched by the daemon%s",
            worker.pid,
            code,
            ", restarting it" if restart else "",
        )
        if not restart:
            return
        try:
            replacement = _Worker(self._setup, self._exited)
        except OSError as exc:
            log.error("fetch workers: restarting one failed: %s", exc)
            return
        with self._lock:
            if self._closed:
                replacement.stop()
                return
            self._workers.append(replacement)
            self._restart_limit_logged = False
        self.counters.add("restarts")

    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._workers if w.alive]

    def stats(self) -> dict:
        return {"configured": self.count, "running": len(self.pids()), **self.counters.snapshot()}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()


def _size(written: Written) -> int:
    return written.size


def _rebuilt(answer: Failed) -> Exception:
    """The worker's error as the daemon would have raised it (a datahub.errors class), or
    NotFetched when it was not an origin error (e.g. the page file could not be written)."""
    cls = getattr(errors, answer.error, None) if answer.error else None
    if isinstance(cls, type) and issubclass(cls, errors.DatahubError):
        return cls(answer.message, **answer.details)
    return NotFetched(answer.message)


def worker_count(setting: int) -> int:
    """``cache.fetch_workers`` as a number of processes: -1 is the number of cores, at most
    ``MAX_WORKERS``."""
    if setting < 0:
        return min(MAX_WORKERS, len(os.sched_getaffinity(0)))
    return setting


# --- the worker's side ------------------------------------------------------------------------
def worker_main() -> None:
    """A worker process: serve requests from the pipe until it ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon decides when its workers stop
    logging.basicConfig(level=logging.WARNING, format="fetch worker %(process)d: %(levelname)s %(message)s")
    requests = Connection(int(sys.argv[1]), writable=False)
    answers = Connection(int(sys.argv[2]), readable=False)
    setup: WorkerSetup = requests.recv()
    from datahub.storage import StoreRegistry

    stores = StoreRegistry(setup.config)
    writer = PageWriter(setup.disk_dir)
    send_lock = threading.Lock()

    def serve(request: FetchRequest) -> None:
        answer = _serve(stores, writer, request)
        with send_lock:
            answers.send(answer)

    pool = ThreadPoolExecutor(setup.threads, thread_name_prefix="fetch")
    try:
        while True:
            try:
                request = requests.recv()
            except (EOFError, OSError):
                break
            pool.submit(serve, request)
    finally:
        os._exit(0)  # requests in flight are abandoned: their unnamed files vanish


def _serve(stores, writer: PageWriter, request: FetchRequest) -> Written | Failed:
    key = PageKey(request.url, request.etag, request.page_size, request.index)
    seen: list[Transient] = []
    with observe_transient(lambda exc: seen.append(Transient(exc.message, _plain(exc.details)))):
        try:
            data = read_range(stores, key, request.start, request.end)
            header = fmt.encode_header(key, data)
            st = writer.write(key, data, header=header)
        except errors.DatahubError as exc:
            return Failed(request.id, type(exc).__name__, exc.message, _plain(exc.details), tuple(seen))
        except Exception as exc:  # the page file (ENOSPC, ...) or a bug: the daemon fetches it itself
            log.warning("page %d of %s: %s", key.index, key.url, exc, exc_info=not isinstance(exc, OSError))
            return Failed(request.id, "", f"{type(exc).__name__}: {exc}", {}, tuple(seen))
    checksum = fmt.parse_header(header).checksum
    state = None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns)
    return Written(request.id, len(data), checksum, state, tuple(seen))


def _plain(details: dict) -> dict:
    """The fields of an error that survive the pipe (what ``datahub.errors`` errors carry)."""
    return {k: v for k, v in details.items() if isinstance(v, (str, int, float, bool, type(None)))}
