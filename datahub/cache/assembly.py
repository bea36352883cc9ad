"""Building a cache: the tiers a configuration asks for, the origin, the prefetcher and hints.

``TieredCache`` only keeps the collaborators it is given (its constructor constructs
nothing); this module is where a configuration becomes those collaborators: ``build_tiers``
(RAM, disk, shared), ``assemble_cache`` (single-flight table, prefetcher, hint workers, then
``start``) and ``open_cache`` (both, plus the process's origin scheduler).
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import lmdb

from datahub.cache import stats as stats_io
from datahub.cache.activity import WARMUP_IDLE_SECONDS, ReaderActivity
from datahub.cache.disk import DiskTier
from datahub.cache.fetch_workers import FetchWorkers, worker_count
from datahub.cache.origin import Origin
from datahub.cache.pins import Pins, PinStore
from datahub.cache.policy import make_policy
from datahub.cache.prefetch import LARGE_PAGES, HintAhead
from datahub.cache.prefetcher import Prefetcher
from datahub.cache.ram import RamTier
from datahub.cache.scheduler import process_scheduler
from datahub.cache.shared import SharedTier
from datahub.cache.singleflight import SingleFlight
from datahub.cache.tier import Tier
from datahub.cache.tiered import TieredCache
from datahub.config import Config
from datahub.errors import InvalidInput, StorageError
from datahub.procs import at_exit

log = logging.getLogger(__name__)
HINT_WORKERS = 32


def assemble_cache(
    tiers: Sequence[Tier],
    origin: Origin,
    *,
    page_size: int = 4 * 1024**2,
    prefetch_concurrency: int = 128,
    readahead_bytes: int = 64 * 1024**2,
    hint_budget_bytes: int = 512 * 1024**2,
    pin_index: PinStore | None = None,  # the disk tier's index, holding persistent pins, if any
    stats_dir: Path | None = None,
    policy: str = "",
    stream_min_bytes: int = 64 * 1024**2,
    max_streams: int = 4,
    stream_idle_seconds: float = 10.0,
    maintain_interval: float = 2.0,
    fill_whole_object_max: int = 4 * 1024**3,
    fill_after_random_reads: int = 4,
    fill_concurrency: int = 1,
    warmup_idle_seconds: float = WARMUP_IDLE_SECONDS,
    fetch_workers: FetchWorkers | None = None,
) -> TieredCache:
    """A started ``TieredCache`` over built ``tiers`` and ``origin``: its single-flight
    table, prefetcher and hint workers are made here (``open_cache`` calls this; tests
    that bring their own tiers do too)."""
    if page_size <= 0:
        raise InvalidInput(f"cache.page_size must be positive, not {page_size}")
    if maintain_interval <= 0:
        raise InvalidInput(f"cache.maintain_interval must be positive, not {maintain_interval}")
    flight: SingleFlight[bytes] = SingleFlight()
    concurrency = max(1, prefetch_concurrency)
    cache = TieredCache(
        tiers,
        origin,
        flight=flight,
        page_size=page_size,
        prefetch_concurrency=concurrency,
        pins=Pins(pin_index),
        stats_dir=stats_dir,
        policy=policy,
        activity=ReaderActivity(warmup_idle_seconds, LARGE_PAGES * page_size),
        fetch_workers=fetch_workers,
    )
    prefetcher = Prefetcher(
        cache.tiers,
        origin,
        flight,
        cache._page,
        page_size=page_size,
        readahead_bytes=readahead_bytes,
        queue_bytes=hint_budget_bytes,
        workers=min(8, concurrency),
        cached=cache._cached_locally,
        keep=cache._keep,
        stream_min_bytes=stream_min_bytes,
        fill_max_bytes=_fill_limit(cache._local_tiers, fill_whole_object_max),
        max_streams=max_streams,
        stream_idle_seconds=stream_idle_seconds,
        fill_after_random_reads=fill_after_random_reads,
        fill_concurrency=fill_concurrency,
    )
    # Hinted objects are small and wanted soon: enough workers to keep the scheduler's
    # HINTED class busy at 50 ms per GET (8 would cap it near 160 objects/s); the scheduler,
    # not this count, decides how many of their requests run at once.
    hints = HintAhead(cache._warm_hot, hint_budget_bytes, workers=min(HINT_WORKERS, concurrency))
    return cache.start(prefetcher, hints, maintain_interval=maintain_interval)


def build_tiers(config: Config, stores, *, clock: Callable[[], float] = time.monotonic) -> list[Tier]:
    """The read-only profile's tiers: RAM, disk, and the shared tier when one is configured.

    A tier whose budget is 0 is left out, and so is a disk tier whose directory cannot be
    used (logged as an error: reads still work, from RAM and the origin). The shared tier is used only when
    ``cache.shared_url`` is set explicitly: on a single node a local-directory shared
    tier would only duplicate the disk tier.
    """
    c = config.cache
    if not 0 < c.low_watermark <= c.high_watermark <= 1:
        raise InvalidInput(
            f"cache watermarks must satisfy 0 < low ({c.low_watermark}) <= high ({c.high_watermark}) <= 1"
        )
    marks = {"high_watermark": c.high_watermark, "low_watermark": c.low_watermark}
    tiers: list[Tier] = []
    if c.ram_bytes > 0:
        tiers.append(RamTier(c.ram_bytes, make_policy(c.policy, c.ram_bytes), **marks))
    if c.disk_bytes > 0:
        try:
            tiers.append(
                DiskTier(
                    config.resolved_disk_dir,
                    c.disk_bytes,
                    make_policy(c.policy, c.disk_bytes),
                    min_free_ratio=c.disk_min_free_ratio,
                    clock=clock,
                    **marks,
                )
            )
        except (OSError, lmdb.Error, StorageError) as exc:  # the cache is an optimisation: read without it
            # LMDB's own errors too: a full disk fails the index's first write transaction
            # (lmdb.DiskError), and a service restarted on a full disk must still serve.
            log.error(
                "disk cache at %s unusable (%s); running without a disk tier until restarted "
                "(free space there, or set cache.disk_bytes to 0)",
                config.resolved_disk_dir,
                exc,
            )
    if c.shared_url and c.shared_bytes > 0:
        tiers.append(SharedTier(stores.shared_store(c.shared_url), c.shared_bytes, clock=clock, **marks))
    return tiers


def open_cache(config: Config, stores, *, fetch_workers: bool = False) -> TieredCache:
    """The cache for ``config.cache`` reading through ``stores`` (a datahub.storage.StoreRegistry).

    ``fetch_workers``: start ``cache.fetch_workers`` worker processes that fetch cold pages
    into the disk tier (a mount daemon does; a library user such as a training job's
    fsspec or DataLoader worker does not, as it has cores of its own to spend)."""
    c = config.cache
    make_policy(c.policy, 1)  # an unknown policy name fails before anything is opened
    tiers = build_tiers(config, stores)
    disk = next((t for t in tiers if isinstance(t, DiskTier)), None)
    count = worker_count(c.fetch_workers) if fetch_workers and disk is not None else 0
    workers = None
    if count > 0:
        try:
            workers = FetchWorkers(config, count, disk)
        except OSError as exc:  # an optimisation: fetch in this process instead
            log.error("fetch workers could not be started (%s); cold pages are fetched by this process", exc)
    cache = assemble_cache(
        tiers,
        Origin(
            stores,
            scheduler=process_scheduler(
                c.origin_concurrency, maximum=c.origin_max_concurrency, max_bytes=c.origin_max_inflight_bytes
            ),
            stall_seconds=c.stall_memory_seconds,
        ),
        page_size=c.page_size,
        prefetch_concurrency=c.prefetch_concurrency,
        readahead_bytes=c.readahead_bytes,
        hint_budget_bytes=c.hint_budget_bytes,
        pin_index=disk.index if disk is not None else None,
        stats_dir=stats_io.stats_dir(config),
        policy=c.policy,
        stream_min_bytes=c.stream_min_bytes,
        fill_whole_object_max=c.fill_whole_object_max,
        warmup_idle_seconds=c.warmup_idle_seconds,
        maintain_interval=c.maintain_interval,
        fetch_workers=workers,
    )
    # Closed at exit if its user did not (a script, a notebook, a DataLoader worker: one that
    # ends with os._exit after multiprocessing's finalizers, procs.at_exit): else its claim on
    # the disk index outlives it, its batched index inserts are lost, and the next process
    # rebuilds the index from every page file. Weak: a closed cache is not kept for the hook.
    cache.exit_hook = functools.partial(_close_at_exit, weakref.ref(cache))
    at_exit(cache.exit_hook)
    fresh = getattr(stores, "fresh", None)  # a StoreRegistry: one like it, nothing open (no other kind)
    if fresh is not None:
        # a forked child reading through this cache reads through its own (TieredCache._here)
        cache.reopen = functools.partial(_reopen, config, fresh)
    return cache


def _reopen(config: Config, fresh_stores: Callable[[], object]) -> TieredCache:
    """The cache ``open_cache(config, ...)`` opened, opened again in this process (a forked
    child), over stores of its own (the parent's clients and connections are not the child's),
    which it closes with itself. No fetch workers: a library reader's cache has none."""
    stores = fresh_stores()
    try:
        cache = open_cache(config, stores)
    except BaseException:
        stores.close()  # type: ignore[attr-defined]
        raise
    cache.owned_stores = stores
    return cache


def _close_at_exit(cache: weakref.ref[TieredCache]) -> None:
    alive = cache()
    if alive is not None:
        alive.close()


def _fill_limit(local_tiers: Sequence[Tier], requested: int) -> int:
    """A whole-object fill must fit the largest local tier with room to spare, or it only churns it."""
    return min(requested, max((t.budget for t in local_tiers), default=0) // 2)
