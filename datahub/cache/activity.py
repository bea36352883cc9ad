"""Whether readers are busy with the cache now, and which large objects they have opened.

Why: warm-up fetches what no reader has asked for yet. For small objects that is the point
(the first epoch reads them next), but a large object nobody has opened (a checkpoint, an
archive beside the images) may never be read, and fetching it costs the origin, the
network and this node's CPU while a training job is running: measured on 2 cores, two
512 MiB files warming beside 2,000 images halved the warm epoch that followed
(docs/benchmarks.md). So warm-up holds back a large object until a reader opens it or the
readers have been idle for ``idle_seconds`` (docs/cache.md "Warm-up").

A reader that is served from the kernel's page cache never reaches the cache, so the mount
also gives a request counter (``watch``): the requests it serves, which count the ``isatty``
ioctl every warm Python ``open()`` still sends, whether the FUSE loop read it or pyfuse3's C
threads answered it (``fuse_adapter.mount_sys.request_counter``; docs/fuse.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from datahub.storage.base import ObjectRef

WARMUP_IDLE_SECONDS = 30.0  # default: cache.warmup_idle_seconds
POLL_SECONDS = 1.0  # how often a held warm-up worker looks again; counters are read at most this often
MAX_OPENED = 100_000  # large objects remembered as opened (bounded memory)


class ReaderActivity:
    """When a reader last read through the cache, and the large objects readers opened."""

    def __init__(self, idle_seconds: float, large_bytes: int) -> None:
        self.idle_seconds = idle_seconds
        self._large_bytes = large_bytes
        self._last = float("-inf")  # monotonic time of the last read seen
        self._opened: set[str] = set()
        self._counters: list[Callable[[], int]] = []
        self._counts: list[int] = []
        self._polled = float("-inf")  # when the counters were last read
        self._lock = threading.Lock()

    def saw(self, ref: ObjectRef) -> None:
        """A reader read ``ref`` (called on every read: cheap, no lock)."""
        self.saw_all((ref,))

    def saw_all(self, refs: Iterable[ObjectRef]) -> None:
        """Readers read these (a second's hits answered in C, reported at once): one clock
        read for the batch (none for no refs: nothing was read)."""
        large, opened, any_ref = self._large_bytes, self._opened, False
        for ref in refs:
            any_ref = True
            if ref.size > large and len(opened) < MAX_OPENED:
                opened.add(ref.url)
        if any_ref:
            self._last = time.monotonic()

    def watch(self, counter: Callable[[], int]) -> None:
        """Count a change of ``counter()`` (e.g. the mount's requests) as reader activity."""
        with self._lock:
            self._counters.append(counter)
            self._counts.append(_read(counter))
            self._polled = float("-inf")

    def idle_for(self) -> float:
        """Seconds since the last read or counted request (inf: none yet).

        The counters are read at most once per ``POLL_SECONDS`` whoever asks: a hundred
        held warm-up workers must not turn into a hundred /proc reads a second.
        """
        with self._lock:
            if time.monotonic() - self._polled >= POLL_SECONDS:
                self._polled = time.monotonic()
                for i, counter in enumerate(self._counters):
                    now = _read(counter)
                    if now != self._counts[i]:
                        self._counts[i] = now
                        self._last = time.monotonic()
        return time.monotonic() - self._last

    def hold(self, ref: ObjectRef, cancel: threading.Event) -> bool:
        """Wait until warming ``ref`` may go on; False when ``cancel`` was set meanwhile.

        A small object, a large one a reader opened, or any object once the readers have
        been idle for ``idle_seconds`` goes at once.
        """
        while ref.size > self._large_bytes and ref.url not in self._opened:
            if self.idle_for() >= self.idle_seconds:
                return True
            if cancel.wait(POLL_SECONDS):
                return False
        return True


def _read(counter: Callable[[], int]) -> int:
    try:
        return counter()
    except OSError:  # the counter's source went away (e.g. /proc of a finished thread)
        return -1
