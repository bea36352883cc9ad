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

One request is one pickled message on a channel: a pair of pipes served by one worker
thread, used by one daemon thread at a time, which writes the request and reads the
answer itself (a reader thread in between would be one more GIL hand-off per cold page).
A worker has ``WORKER_THREADS`` channels (origin latency, not CPU, is what its threads
wait on); free channels of all workers alternate, so the load spreads. A worker that dies
fails the requests on its channels with ``NotFetched``: the daemon then fetches those
pages itself (once; a request that killed one worker is not handed to another). The
unnamed file of a write in progress vanishes with the process, so nothing half-written
remains. A dead worker is restarted at most ``RESTARTS_PER_MINUTE`` times a minute (each
restart logged; past the limit logged once per window). Workers exit on SIGTERM when the
daemon closes the pool, and when the daemon dies (their pipes end).
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
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NamedTuple

import datahub
from datahub import errors
from datahub.cache import pages as fmt
from datahub.cache.counters import Counters
from datahub.cache.origin import Origin, read_range
from datahub.cache.pagefile import FileState, PageWriter
from datahub.cache.pages import PageKey
from datahub.cache.priority import current_priority
from datahub.config import Config
from datahub.storage.retry import observe_transient, report_transient

log = logging.getLogger(__name__)

WORKER_THREADS = 16  # requests one worker serves at once (threads, each with its own pipes)
RESTARTS_PER_MINUTE = 3
MAX_WORKERS = 4  # "auto" (-1): one fewer than the cores, at most this many
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
    ends_record: bool  # PageKey.ends_record
    start: int
    end: int
    to_end: bool  # ``end`` is where the record ends (datahub.cache.origin.read_range)
    priority: int  # datahub.cache.priority.Priority of the reader (for the worker's log)


class Transient(NamedTuple):
    """A failed attempt the worker's retry policy saw (the daemon's scheduler slows down on it)."""

    message: str
    details: dict


class Written(NamedTuple):
    id: int
    size: int
    checksum: int
    state: FileState | None  # (dev, ino, size, ctime_ns, mtime_ns) after linking; None: renamed
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
class _Channel:
    """One request at a time to one worker thread: the caller writes the request and reads
    the answer itself (no reader thread between them: each hop would be one more GIL
    hand-off per cold page in the daemon)."""

    __slots__ = ("answers", "requests", "worker")

    def __init__(self, worker: _Worker, requests: Connection, answers: Connection) -> None:
        self.worker, self.requests, self.answers = worker, requests, answers

    def call(self, request: FetchRequest) -> Written | Failed:
        try:
            self.requests.send(request)
            return self.answers.recv()
        except (EOFError, OSError) as exc:
            self.worker.alive = False
            raise NotFetched(f"fetch worker {self.worker.pid} exited before answering") from exc

    def close(self) -> None:
        self.requests.close()
        self.answers.close()


class _Worker:
    """One worker process and its channels (one per worker thread)."""

    def __init__(self, setup: WorkerSetup) -> None:
        ours: list[tuple[int, int]] = []  # (request write end, answer read end) per channel
        theirs: list[int] = []
        try:
            for _ in range(setup.threads):
                req_r, req_w = os.pipe()
                ans_r, ans_w = os.pipe()
                ours.append((req_w, ans_r))
                theirs += [req_r, ans_w]
            env = dict(os.environ)
            root = str(Path(datahub.__file__).resolve().parents[1])
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _ENTRY, ",".join(map(str, theirs))],
                pass_fds=theirs,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            for fd in theirs + [fd for pair in ours for fd in pair]:
                os.close(fd)
            raise
        for fd in theirs:
            os.close(fd)
        self.pid = self.proc.pid
        self.alive = True
        self.channels = [
            _Channel(self, Connection(w, readable=False), Connection(r, writable=False)) for w, r in ours
        ]
        self.channels[0].requests.send(setup)  # read by the worker before it starts its threads


class FetchWorkers:
    """A pool of fetch worker processes writing into the disk tier ``disk`` (a DiskTier)."""

    def __init__(self, config: Config, count: int, disk, *, threads: int = WORKER_THREADS) -> None:
        self.count = count
        self.disk = disk
        self.counters = FetchWorkerCounters()
        self._setup = WorkerSetup(config, str(disk.dir), threads)
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._free_channel = threading.Condition(self._lock)
        self._free: collections.deque[_Channel] = collections.deque()
        self._closed = False
        self._restarts: collections.deque[float] = collections.deque()
        self._workers: list[_Worker] = []
        try:
            for _ in range(count):
                self._start()
        except BaseException:
            self.close()
            raise

    # --- a page ----------------------------------------------------------------------------
    def fetch_page(
        self, origin: Origin, key: PageKey, start: int, end: int, *, to_end: bool, hot: bool = False
    ) -> bytes | None:
        """The verified bytes of ``key``'s range ``[start, end)``, fetched by a worker and
        stored as the disk tier's page file, or None: fetch it in this process (the tier
        refused the page, or the worker did not finish it). Origin errors are raised as in
        ``Origin.fetch``; ``to_end`` as there."""
        size = end - start
        if self.disk.reserve(key, size, hot=hot) is not True:
            return None
        stored = False
        try:
            try:
                written = origin.fetch_via(
                    key, start, end, lambda: self._fetch(key, start, end, to_end), _size
                )
                data = self.disk.load_written(key, size, written.state)
                if data is not None and _checksum(data) != written.checksum:
                    # The file changed between the state check and the read: its bytes never
                    # reach a reader (promise 2); this process fetches the page again.
                    log.warning(
                        "fetch worker: page %d of %s changed on disk after it was written", key.index, key.url
                    )
                    data = None
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

    def _fetch(self, key: PageKey, start: int, end: int, to_end: bool) -> Written:
        request = FetchRequest(next(self._ids), key.url, key.etag, key.page_size, key.index, key.ends_record, start, end,
                               to_end, int(current_priority()))  # fmt: skip
        channel = self._take()
        try:
            answer = channel.call(request)
        finally:
            self._give_back(channel)
        for t in answer.transient:
            report_transient(errors.TransientStorageError(t.message, **t.details))
        if isinstance(answer, Failed):
            raise _rebuilt(answer)
        return answer

    def _take(self) -> _Channel:
        """A free channel of a running worker (channels of all workers alternate, so the load
        spreads); waits while every channel is busy."""
        with self._lock:
            while True:
                if self._closed or not self._workers:
                    raise NotFetched("no fetch worker is running")
                while self._free:
                    channel = self._free.popleft()
                    if channel.worker.alive:
                        return channel
                self._free_channel.wait()

    def _give_back(self, channel: _Channel) -> None:
        with self._lock:
            if channel.worker.alive and not self._closed:
                self._free.append(channel)
                self._free_channel.notify()
                return
        channel.close()  # its worker is gone: nobody uses this channel again

    # --- workers coming and going ----------------------------------------------------------
    def _start(self) -> None:
        worker = _Worker(self._setup)
        with self._lock:
            self._workers.append(worker)
            # interleave: the next free channels belong to different workers
            free = list(self._free)
            self._free.clear()
            for i in range(max(len(free), len(worker.channels))):
                if i < len(worker.channels):
                    self._free.append(worker.channels[i])
                if i < len(free):
                    self._free.append(free[i])
            self._free_channel.notify_all()
        threading.Thread(target=self._watch, args=(worker,), name="datahub-fetch-watch", daemon=True).start()

    def _watch(self, worker: _Worker) -> None:
        """Wait for the worker to exit (a thread blocked in waitpid: no cost per request)."""
        code = worker.proc.wait()
        worker.alive = False
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
            idle = [c for c in self._free if c.worker is worker]
            for c in idle:
                self._free.remove(c)
            self._free_channel.notify_all()
            closed = self._closed
        for c in idle:
            c.close()
        if closed:
            return
        self.counters.add("deaths")
        now = time.monotonic()
        with self._lock:
            while self._restarts and now - self._restarts[0] > 60:
                self._restarts.popleft()
            restart = len(self._restarts) < RESTARTS_PER_MINUTE
            if restart:
                self._restarts.append(now)
        if restart:
            log.warning(
                "fetch worker %d exited (code %s); its requests were fetched by the daemon; restarting it",
                worker.pid,
                code,
            )
            try:
                self._start()
                self.counters.add("restarts")
            except OSError as exc:
                log.error("fetch workers: restarting one failed: %s", exc)
        elif self._restarts_logged_at != self._restarts[0]:
            self._restarts_logged_at = self._restarts[0]  # once per full window
            log.error(
                "fetch worker %d exited (code %s): %d restarts within a minute already, not restarting "
                "(cold pages are fetched by the daemon meanwhile)",
                worker.pid,
                code,
                RESTARTS_PER_MINUTE,
            )

    _restarts_logged_at = -1.0

    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._workers if w.alive]

    def stats(self) -> dict:
        return {"configured": self.count, "running": len(self.pids()), **self.counters.snapshot()}

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers (SIGTERM, SIGKILL after ``timeout``): a write in progress leaves
        no file. A reader waiting on one gets NotFetched and fetches its page itself."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
            free, self._free = list(self._free), collections.deque()
            self._free_channel.notify_all()
        for worker in workers:
            worker.alive = False
            worker.proc.terminate()
        for worker in workers:
            try:
                worker.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
        for channel in free:
            channel.close()


def _checksum(data: bytes) -> int:
    """The checksum a worker's page header holds (``fmt.encode_header``: the default algorithm)."""
    return fmt.CHECKSUMS[fmt.DEFAULT_CHECKSUM](data)


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
    """``cache.fetch_workers`` as a number of processes: -1 is one fewer than the cores
    (at least 1, at most ``MAX_WORKERS``). Why not one per core: the daemon's request loop
    (pyfuse3 and trio) needs a core of its own; on 2 cores 2 workers read fewer files/s
    than 1 (docs/benchmarks.md, "Fetch worker processes")."""
    if setting < 0:
        return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0)) - 1))
    return setting


# --- the worker's side ------------------------------------------------------------------------
def worker_main() -> None:
    """A worker process: one thread per channel, each serving its requests in turn, until
    the daemon closes (or dies: the pipes end)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon decides when its workers stop
    logging.basicConfig(level=logging.WARNING, format="fetch worker %(process)d: %(levelname)s %(message)s")
    fds = [int(fd) for fd in sys.argv[1].split(",")]
    channels = [
        (Connection(fds[i], writable=False), Connection(fds[i + 1], readable=False))
        for i in range(0, len(fds), 2)
    ]
    try:
        setup: WorkerSetup = channels[0][0].recv()
    except (EOFError, OSError):
        os._exit(0)
    from datahub.storage import StoreRegistry

    stores = StoreRegistry(setup.config)
    writer = PageWriter(setup.disk_dir)

    def serve(requests: Connection, answers: Connection) -> None:
        try:
            while True:
                request = requests.recv()
                answers.send(_serve(stores, writer, request))
        except (EOFError, OSError):
            os._exit(0)  # the daemon closed or died; writes in flight leave nothing (unnamed files)

    threads = [threading.Thread(target=serve, args=pair, daemon=True) for pair in channels]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _serve(stores, writer: PageWriter, request: FetchRequest) -> Written | Failed:
    key = PageKey(request.url, request.etag, request.page_size, request.index, request.ends_record)
    seen: list[Transient] = []
    with observe_transient(lambda exc: seen.append(Transient(exc.message, _plain(exc.details)))):
        try:
            data = read_range(stores, key, request.start, request.end, to_end=request.to_end)
            header = fmt.encode_header(key, data)
            state = writer.write(key, data, header=header)
        except errors.DatahubError as exc:
            return Failed(request.id, type(exc).__name__, exc.message, _plain(exc.details), tuple(seen))
        except Exception as exc:  # the page file (ENOSPC, ...) or a bug: the daemon fetches it itself
            log.warning("page %d of %s: %s", key.index, key.url, exc, exc_info=not isinstance(exc, OSError))
            return Failed(request.id, "", f"{type(exc).__name__}: {exc}", {}, tuple(seen))
    checksum = fmt.parse_header(header).checksum
    return Written(request.id, len(data), checksum, state, tuple(seen))


def _plain(details: dict) -> dict:
    """The fields of an error that survive the pipe (what ``datahub.errors`` errors carry)."""
    return {k: v for k, v in details.items() if isinstance(v, (str, int, float, bool, type(None)))}
