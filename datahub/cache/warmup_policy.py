"""When a bucket snapshot's mount warms its cache without being asked, and how much of it.

Why a policy and not "always": a dataset version is mounted to be read whole, so its mount
warms it by default. A bucket is often mounted to read a few files of millions; warming it
whole would cost one GET per object for nothing. So, with neither ``--prefetch`` nor
``--no-prefetch``, the mount warms only what a reader is about to read as soon as that can
be known (docs/cache.md "Warm-up of a bucket snapshot"):

- **fits**: once listed, a snapshot that fits below the disk tier's low watermark and has
  at most ``fits_max_objects`` objects is warmed whole at once. A reader of a handful of
  its files then costs at most that many GETs (the bound of the waste).
- **pattern**: otherwise, ``opens`` distinct cold opens (first reads of objects no local
  tier holds) within ``window_seconds`` are an epoch starting: the smallest directory that
  holds them (their URLs' common prefix, cut at a ``/``) is warmed, smallest object first,
  if it fits. A reader of fewer files than ``opens`` in a window causes no warm-up at all.
- a scope that does not fit is never warmed (skipped): a partial warm-up of a snapshot
  larger than the cache would only make readers' own pages and warmed ones evict each other.
- an automatic warm-up stops once the readers have been idle ``idle_stop_seconds`` (counted
  from its start at the earliest): the job that wanted it has gone. A later pattern resumes
  it (pages already cached cost no request).
- ``--prefetch`` (reason **flag**) warms the whole snapshot, only what fits, until it is
  done; ``--no-prefetch`` never warms.

This module only decides (no threads, no I/O, an injectable clock, so the decisions are
unit tested); the mount (``fuse_adapter.bucket_warmup``) runs the passes it asks for.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    FITS = "fits"
    PATTERN = "pattern"
    FLAG = "flag"


@dataclass(frozen=True)
class PolicySettings:
    """The policy's bounds (``cache.bucket_warmup_*`` settings)."""

    fits_max_objects: int = 5000
    opens: int = 32
    window_seconds: float = 30.0
    idle_stop_seconds: float = 120.0


@dataclass(frozen=True)
class Decision:
    """Warm the objects under ``scope`` (a URL prefix), for ``reason``; or skip them
    (``warm`` false: they do not fit)."""

    reason: Reason
    scope: str
    warm: bool


def common_dir(urls: Iterable[str]) -> str:
    """The longest prefix of every URL that ends at a ``/`` (a directory of the bucket)."""
    it = iter(urls)
    first = next(it, "")
    prefix = first
    for url in it:
        n = 0
        for a, b in zip(prefix, url, strict=False):
            if a != b:
                break
            n += 1
        prefix = prefix[:n]
    return prefix[: prefix.rfind("/") + 1]


class WarmupPolicy:
    """The decisions for one mount. ``mode``: True (``--prefetch``), False (``--no-prefetch``)
    or None (automatic). ``root`` is the URL prefix of the mounted snapshot.

    Not thread-safe: the caller serialises calls (the mount holds one lock around them).
    """

    def __init__(
        self,
        settings: PolicySettings,
        mode: bool | None,
        root: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.mode = mode
        self.root = root
        self._clock = clock
        self._recent: OrderedDict[str, float] = OrderedDict()  # cold opens in the window: url -> time
        self.covered: str | None = None  # the scope being warmed or warmed (one at a time)
        self._refused: set[str] = set()  # scopes found too large: not looked at again

    def listed(self, objects: int, nbytes: int, room: int) -> Decision | None:
        """The snapshot is listed (``objects``, ``nbytes``); ``room``: the bytes a warm-up
        may put below the cache's low watermark. What to warm now, if anything."""
        if self.mode is False:
            return None
        if self.mode is True:
            return self._cover(Decision(Reason.FLAG, self.root, True))
        if objects == 0 or nbytes > room or objects > self.settings.fits_max_objects:
            return None  # wait for readers to show what they read
        return self._cover(Decision(Reason.FITS, self.root, True))

    def cold_open(self, url: str, scope_fits: Callable[[str], bool]) -> Decision | None:
        """A reader read ``url`` for the first time and no local tier held it. Returns a
        decision when this completes an epoch pattern. ``scope_fits(prefix)`` says whether
        the objects under ``prefix`` fit (the caller knows the snapshot)."""
        if self.mode is not None:
            return None  # the flag decided
        if self.covered is not None and url.startswith(self.covered):
            return None  # being warmed (the reader is ahead of the warm-up)
        now = self._clock()
        recent = self._recent
        recent[url] = now
        recent.move_to_end(url)
        window = self.settings.window_seconds
        while recent and next(iter(recent.values())) < now - window:
            recent.popitem(last=False)
        if len(recent) < max(1, self.settings.opens):
            return None
        urls = list(recent)
        if self.covered is not None:
            urls.append(self.covered)  # widen what is warmed, never narrow it
        scope = common_dir(urls)
        if not scope.startswith(self.root):
            scope = self.root
        recent.clear()
        if scope in self._refused:
            return None
        if not scope_fits(scope):
            self._refused.add(scope)
            return Decision(Reason.PATTERN, scope, False)
        return self._cover(Decision(Reason.PATTERN, scope, True))

    def should_stop(self, reason: Reason, idle_for: float, running_for: float) -> bool:
        """Whether a running pass stops because its readers went idle (never a flag's pass)."""
        if reason is Reason.FLAG:
            return False
        return min(idle_for, running_for) >= self.settings.idle_stop_seconds

    def stopped(self) -> None:
        """The pass stopped before its end (idle): a later pattern may start it again."""
        self.covered = None
        self._recent.clear()

    def _cover(self, decision: Decision) -> Decision:
        self.covered = decision.scope
        return decision
