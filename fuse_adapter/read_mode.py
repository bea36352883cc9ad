"""The automatic read mode of a read-only mount (issue 36, candidate (c)): start with FUSE
passthrough, switch once, one way, to zero-message opens when the mount's working set is in
the page cache.

Why two modes and a switch: passthrough serves an SSD-tier hit from the page file in the
reader's context (no READ; the daemon pays only the OPEN and RELEASE, answered in C), but
costs those two round trips on every open, so a warm epoch runs at about half of local
disk. Zero-message opens (OPEN answered ENOSYS once) cost a warm open nothing, but every
miss is a READ the daemon's C threads answer from the page file (its disk read and the
reply's copy are the daemon's). The kernel fixes the mode per connection: ``no_open``, set
by the first ENOSYS, cannot be undone, so the only switch possible is from passthrough to
zero-message opens.

What decides: pyfuse3's open table asks ``cachestat(2)`` at each open it answers in C
whether the whole page file was in the page cache *before the reader read it*
(``passthrough_sample_cached``; counters ``opens_sampled`` / ``opens_resident``). That is
the share of opens that would have been warm hits with zero-message opens. A dataset that
does not fit in RAM keeps evicting its page files, so its opens keep finding some of them
out; one that fits finds all of them in. :class:`Decision` switches after ``min_opens``
sampled opens in a row of ticks each with at least ``warm_share`` of them resident (a tick
with more cold opens starts the count again). Residency after a read is no evidence (the
reader just read the file), which is why the sample is taken at the open, in C.

The switch itself (:meth:`ReadMode.switch`, on the FUSE loop): the page files published for
passthrough are handed to the READ table (``fastread``: the same verified descriptors,
checked unchanged again), the passthrough entries are retracted so the next OPEN reaches
Python, which answers ENOSYS (``Route.ZERO_MESSAGE``) only once no passthrough handle is
open (the draining, :class:`ReadMode`: this kernel fails with EIO an open it makes by
itself of an inode whose passthrough handle is still open). The first epoch after the switch finds every FUSE inode's page
cache empty (passthrough cached the page files, not the FUSE inodes): each file costs one
READ, answered in C from the page file, which drops the page file's pages at its first
READ (one copy in RAM). A daemon restart is a new connection: it starts in passthrough and
decides again.

No pyfuse3 here: the shim hands in the policies and the counters, so this runs in plain
unit tests.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from fuse_adapter.fastread import FastReads
from fuse_adapter.passthrough import PassthroughOpens

log = logging.getLogger(__name__)

#: sampled opens, in a row of warm ticks, that decide (at most; fewer for a small dataset)
MIN_OPENS = 256
#: at least this share of a tick's sampled opens found their page file wholly cached
WARM_SHARE = 0.95


def min_opens_for(files: int) -> int:
    """The evidence asked of a mount of ``files`` files: ``MIN_OPENS``, or half the files of
    a smaller dataset (at least 16), so a small dataset is decided within its second epoch."""
    return max(16, min(MIN_OPENS, files // 2))


@dataclass
class Decision:
    """When to switch: fed the C table's cumulative counters once per tick (any thread)."""

    min_opens: int = MIN_OPENS
    warm_share: float = WARM_SHARE
    sampled: int = 0  # counters at the last tick
    resident: int = 0
    run_sampled: int = 0  # sampled opens in the current row of warm ticks
    run_resident: int = 0

    def tick(self, sampled: int, resident: int) -> bool:
        """True once the evidence is there (then keep answering True)."""
        ds, dr = sampled - self.sampled, resident - self.resident
        self.sampled, self.resident = sampled, resident
        if ds <= 0:
            return self.run_sampled >= self.min_opens
        if dr < self.warm_share * ds:  # cold opens in this tick: the working set is not in RAM
            self.run_sampled = self.run_resident = 0
            return False
        self.run_sampled += ds
        self.run_resident += dr
        return self.run_sampled >= self.min_opens


#: the longest a switch waits for the passthrough handles open at its start to close
DRAIN_SECONDS = 5.0
#: switches given up (handles held open) before the mount stays in passthrough for good
MAX_ABORTS = 3


class ReadMode:
    """A mount's read mode: fixed (``auto=False``: what ``fast_path.decide`` chose) or
    automatic: ``passthrough`` until the decision, then ``draining`` (no new passthrough
    handle but of inodes whose passthrough handles are still open; other opens get ordinary
    handles) until no passthrough handle is open, then ``zero-message`` for good.

    Why the draining: this kernel (6.18) fails with EIO an open the kernel makes by itself
    (after ``no_open``) of an inode that still has a passthrough handle open (its I/O mode
    is passthrough and the new handle cannot take it; measured, tests/fuse/test_read_mode.py).
    So ENOSYS is answered only when no passthrough handle is open at all; from then on the
    kernel sends no OPEN, so none can be made. A mount whose passthrough handles never all
    close (a file held open or mapped) gives the switch up after :data:`DRAIN_SECONDS` and
    stays in passthrough, deciding again later (at most :data:`MAX_ABORTS` times)."""

    def __init__(
        self,
        *,
        auto: bool,
        passthrough: PassthroughOpens,
        fastread: FastReads,
        still_verified: Callable[[int, int], bool],
        min_opens: int = MIN_OPENS,
        drain_seconds: float = DRAIN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.auto = auto
        self.passthrough = passthrough
        self.fastread = fastread
        self._still_verified = still_verified
        self.decision = Decision(min_opens=min_opens)
        self.drain_seconds = drain_seconds
        self._clock = clock
        self.state = "passthrough"
        self.switched_after = 0.0  # seconds after start
        self.carried = 0  # page files handed from the passthrough table to the READ table
        self.aborts = 0
        self._start = clock()
        self._draining_since = 0.0
        #: after the switch, until the first epoch is over: READs in C read the page file
        #: buffered (it is in the page cache: passthrough read it there) and drop its range,
        #: instead of with O_DIRECT from the disk
        self.transition = False
        self._reads_at_switch = -1
        self._reads = 0

    @property
    def switched(self) -> bool:
        return self.state == "zero-message"

    @property
    def waiting(self) -> bool:
        """Automatic, in passthrough, still deciding: the C table samples its opens."""
        return (
            self.auto and self.state == "passthrough" and self.aborts < MAX_ABORTS and self.passthrough.active
        )

    @property
    def draining(self) -> bool:
        return self.auto and self.state == "draining"

    def tick(self, counters: dict) -> bool:
        """Once per tick, from any thread: whether to begin the switch now (``counters``:
        ``passthrough_stats()``)."""
        if not self.waiting:
            return False
        return self.decision.tick(counters.get("opens_sampled", 0), counters.get("opens_resident", 0))

    def begin(self) -> bool:
        """On the FUSE loop: stop making passthrough handles (but for inodes that hold
        some) and hand the verified page files to the READ table. True if it began now."""
        if not self.waiting:
            return False
        pt, fr = self.passthrough, self.fastread
        for ino in pt.published_inodes():
            fd = pt.held_fd(ino)
            if fd >= 0 and fr.publish(ino, fd, lambda ino=ino, fd=fd: self._still_verified(ino, fd)):
                self.carried += 1
            pt.retract(ino)  # its open handles keep the backing id until they close
        pt.disable("switching to zero-message opens (automatic read mode)", warn=False)
        self.state = "draining"
        self._draining_since = self._clock()
        return True

    def drained(self, handles_open: int) -> bool:
        """On the FUSE loop, at an OPEN while draining: True when it may be answered ENOSYS
        (no passthrough handle open: the switch is made); gives the switch up when the
        handles stay open too long (the mount goes on in passthrough)."""
        if not self.draining:
            return self.switched
        if handles_open <= 0:
            self.state = "zero-message"
            self.passthrough.disable("zero-message opens (automatic read mode)", warn=False)
            self.switched_after = self._clock() - self._start
            self.transition = True
            d = self.decision
            log.info(
                "read mode: switched from passthrough to zero-message opens after %.1f s: %d of %d "
                "opens in a row found their page file wholly in the page cache; %d page files "
                "handed to the READ table",
                self.switched_after,
                d.run_resident,
                d.run_sampled,
                self.carried,
            )
            return True
        if self._clock() - self._draining_since > self.drain_seconds:
            self.abort(handles_open)
        return False

    def transition_tick(self, reads: int) -> bool:
        """Once per tick after the switch (``reads``: READs answered in C so far): True when
        the first epoch after the switch is over, so READs in C may use O_DIRECT again: a
        tick without READs (the epoch is warm), or twice as many READs as page files were
        handed over (what the page cache held then is read)."""
        if not self.transition:
            return False
        if self._reads_at_switch < 0:
            self._reads_at_switch = self._reads = reads
            return False
        quiet = reads == self._reads
        self._reads = reads
        if quiet or reads - self._reads_at_switch >= 2 * self.carried + 64:
            self.transition = False
            log.info("read mode: first epoch after the switch over; READs in C read with O_DIRECT again")
            return True
        return False

    def drop_page_files(self, fd_of: Callable[[int], int | None]) -> int:
        """Blocking, once the first epoch after the switch is over: drop the cached pages of
        every page file published for READs in C (``fd_of``: a descriptor of one, metadata
        only, or None). Why: reads of ordinary handles answered during the draining, and
        passthrough handles still open after the switch, read page files through the page
        cache after C's one drop at their first READ; their pages would be a second copy of
        bytes the FUSE inodes now hold. Returns the files dropped."""
        dropped, inos = 0, []
        for _ in range(3):  # the loop's thread may publish meanwhile: copy again
            try:
                inos = self.fastread.published_inodes()
                break
            except RuntimeError:
                continue
        for ino in inos:
            try:
                fd = fd_of(ino)
            except Exception as exc:  # a page file gone meanwhile: nothing to drop
                log.debug("dropping the page file of inode %d: %s", ino, exc)
                continue
            if fd is None or fd < 0:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                dropped += 1
            finally:
                os.close(fd)
        return dropped

    def abort(self, handles_open: int) -> None:
        """Give the switch up: passthrough again, the decision from scratch."""
        self.aborts += 1
        self.state = "passthrough"
        self.passthrough.enable()
        self.decision = Decision(
            min_opens=self.decision.min_opens,
            warm_share=self.decision.warm_share,
            sampled=self.decision.sampled,
            resident=self.decision.resident,
        )
        log.warning(
            "read mode: switch to zero-message opens given up (%d passthrough handles still open after "
            "%.0f s); staying in passthrough%s",
            handles_open,
            self.drain_seconds,
            "" if self.aborts < MAX_ABORTS else " for good",
        )

    def stats(self) -> dict:
        if not self.auto:
            return {"read_mode": "passthrough" if self.passthrough.active else "zero-message"}
        d = self.decision
        return {
            "read_mode": f"auto: {self.state}",
            "read_mode_switched_after_s": round(self.switched_after, 1) if self.switched else None,
            "read_mode_opens_sampled": d.sampled,
            "read_mode_opens_resident": d.resident,
            "read_mode_page_files_carried": self.carried,
            "read_mode_switches_given_up": self.aborts,
            "read_mode_first_epoch_after_switch": self.transition,
        }
