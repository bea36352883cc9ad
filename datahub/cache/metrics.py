"""Prometheus text exposition of a cache's counters (served by the API on /metrics).

Built from ``TieredCache.stats()`` so the metric set and ``datahub cache stats`` agree.
"""

from __future__ import annotations

_TIER_METRICS = {
    # stats key: (metric name, type, help)
    "used_bytes": ("datahub_cache_used_bytes", "gauge", "Bytes stored in the tier."),
    "limit_bytes": ("datahub_cache_limit_bytes", "gauge", "Byte budget of the tier."),
    "entries": ("datahub_cache_pages", "gauge", "Pages stored in the tier."),
    "hits": ("datahub_cache_hits_total", "counter", "Page lookups answered by the tier."),
    "misses": ("datahub_cache_misses_total", "counter", "Page lookups the tier could not answer."),
    "evictions": ("datahub_cache_evictions_total", "counter", "Pages evicted from the tier."),
    "promotions": ("datahub_cache_promotions_total", "counter", "Pages copied up into the tier."),
    "demotions": ("datahub_cache_demotions_total", "counter", "Pages moved down into the tier."),
    "fills": ("datahub_cache_fills_total", "counter", "Pages stored after an origin fetch."),
    "rejected": ("datahub_cache_rejected_total", "counter", "Pages the tier refused to store."),
    "errors": ("datahub_cache_errors_total", "counter", "Tier failures turned into misses."),
    "corrupt": ("datahub_cache_corrupt_total", "counter", "Pages that failed verification."),
}
_ORIGIN_METRICS = {
    "fetches": ("datahub_origin_fetches_total", "counter", "Range reads from the object store."),
    "bytes": ("datahub_origin_bytes_total", "counter", "Bytes read from the object store."),
    "retries": ("datahub_origin_retries_total", "counter", "Origin reads retried after a transient error."),
    "errors": ("datahub_origin_errors_total", "counter", "Origin reads that failed."),
}


def prometheus_text(cache) -> str:
    """The cache's metrics in the Prometheus text format (version 0.0.4)."""
    stats = cache.stats()
    lines: list[str] = []
    for key, (name, kind, help_text) in _TIER_METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for tier in stats["tiers"]:
            lines.append(f'{name}{{tier="{tier["tier"]}"}} {tier.get(key, 0)}')
    for key, (name, kind, help_text) in _ORIGIN_METRICS.items():
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} {kind}",
            f"{name} {stats['origin'].get(key, 0)}",
        ]
    lines += _scheduler_lines(stats["origin"].get("scheduler"))
    lines += [
        "# HELP datahub_cache_merged_fetches_total Concurrent misses merged into another caller's fetch.",
        "# TYPE datahub_cache_merged_fetches_total counter",
        f"datahub_cache_merged_fetches_total {stats['merged_fetches']}",
        "# HELP datahub_cache_readahead_dropped_total Speculative fetches dropped because the queue was full.",
        "# TYPE datahub_cache_readahead_dropped_total counter",
        f"datahub_cache_readahead_dropped_total {stats['readahead']['dropped']}",
        "# HELP datahub_cache_pinned_objects Objects held by pins.",
        "# TYPE datahub_cache_pinned_objects gauge",
        f"datahub_cache_pinned_objects {stats['pinned_objects']}",
    ]
    return "\n".join(lines) + "\n"


def _scheduler_lines(sched: dict | None) -> list[str]:
    """The origin scheduler's limit, per-class in-flight and queued requests, and latency."""
    if not sched:
        return []

    def gauge(name: str, help_text: str, value: object) -> list[str]:
        return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]

    lines = gauge("datahub_origin_limit", "Origin requests allowed in flight (adaptive).", sched["limit"])
    lines += gauge(
        "datahub_origin_flush_limit", "Write-back uploads allowed in flight (adaptive).", sched["flush_limit"]
    )
    for key, help_text in (("in_flight", "Origin requests in flight"), ("queued", "Origin requests waiting")):
        name = f"datahub_origin_{key}"
        lines += [f"# HELP {name} {help_text}, per priority class.", f"# TYPE {name} gauge"]
        lines += [f'{name}{{class="{cls}"}} {n}' for cls, n in sched[key].items()]
    latency = sched.get("latency_ms")
    base = sched.get("base_latency_ms")
    if latency is not None:
        lines += gauge(
            "datahub_origin_latency_seconds", "Mean origin latency of the last window.", latency / 1000
        )
    if base is not None:
        lines += gauge("datahub_origin_base_latency_seconds", "Lowest recent window latency.", base / 1000)
    lines += [
        "# HELP datahub_origin_backoffs_total Limit halvings after throttling or timeouts.",
        "# TYPE datahub_origin_backoffs_total counter",
        f"datahub_origin_backoffs_total {sched['backoffs']}",
        "# HELP datahub_origin_promoted_total Origin requests raised to the class of a reader waiting on them.",
        "# TYPE datahub_origin_promoted_total counter",
        f"datahub_origin_promoted_total {sched.get('promoted', 0)}",
    ]
    return lines


_WARMUP_FIGURES = {
    # status key: (metric name, help)
    "objects_warmed": ("datahub_warmup_objects_warmed", "Objects a mount's warm-up has warmed."),
    "bytes_warmed": ("datahub_warmup_bytes_fetched", "Bytes a mount's warm-up fetched from the origin."),
    "objects_left": (
        "datahub_warmup_objects_left",
        "Objects the running or stopped warm-up has not reached.",
    ),
    "bytes_left": ("datahub_warmup_bytes_left", "Bytes the running or stopped warm-up has not reached."),
    "objects_skipped": ("datahub_warmup_objects_skipped", "Objects not warmed because they do not fit."),
    "bytes_skipped": ("datahub_warmup_bytes_skipped", "Bytes not warmed because they do not fit."),
}


def warmup_text(snapshots: list[dict]) -> str:
    """The background warm-ups of this node's mounts (from their processes' stats snapshots):
    one series per mount, labelled with the mount point, its state and why it started."""
    warmups = [w for snap in snapshots for w in snap.get("warmups", [])]
    if not warmups:
        return ""
    lines = [
        "# HELP datahub_warmup_running Whether a mount's background warm-up is running (1) or not (0).",
        "# TYPE datahub_warmup_running gauge",
    ]
    for w in warmups:
        labels = _labels(mount=w["mount"], mode=w["mode"], state=w["state"], reason=w.get("reason", ""))
        lines.append(f"datahub_warmup_running{{{labels}}} {int(w['state'] == 'running')}")
    for key, (name, help_text) in _WARMUP_FIGURES.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [f"{name}{{{_labels(mount=w['mount'])}}} {w.get(key, 0)}" for w in warmups]
    return "\n".join(lines) + "\n"


def mount_text(snapshots: list[dict]) -> str:
    """How each mount of this node opens files (FUSE passthrough or why not) and how many
    opens the kernel serves itself (from the mounts' stats snapshots)."""
    mounts = [m for snap in snapshots for m in snap.get("mounts", [])]
    if not mounts:
        return ""
    lines = [
        "# HELP datahub_mount_passthrough Whether a mount answers opens with FUSE passthrough (1) or not (0).",
        "# TYPE datahub_mount_passthrough gauge",
    ]
    for m in mounts:
        labels = _labels(mount=m["mountpoint"], mode=m["mode"])
        lines.append(f"datahub_mount_passthrough{{{labels}}} {int(m['mode'] == 'passthrough')}")
    for key, name, kind, help_text in (
        (
            "passthrough_opens",
            "datahub_mount_passthrough_opens_total",
            "counter",
            "Opens the kernel serves itself.",
        ),
        (
            "passthrough_opens_in_c",
            "datahub_mount_passthrough_opens_in_c_total",
            "counter",
            "Of those, opens answered in C without entering the daemon's Python (fastopen).",
        ),
        (
            "ordinary_opens",
            "datahub_mount_daemon_opens_total",
            "counter",
            "Opens whose reads go through the daemon.",
        ),
        (
            "backing_ids_open",
            "datahub_mount_backing_ids",
            "gauge",
            "Passthrough backing files registered now.",
        ),
        (
            "namespace_page_bytes",
            "datahub_mount_namespace_bytes",
            "gauge",
            "Bytes of directory pages a version mount holds (bounded by its namespace budget).",
        ),
        (
            "namespace_directory_listings",
            "datahub_mount_namespace_listings_total",
            "counter",
            "Directory listings a version mount asked its catalog for.",
        ),
        (
            "io_uring_queues",
            "datahub_mount_io_uring_queues",
            "gauge",
            "FUSE over io_uring queues serving the mount (0: requests come from /dev/fuse).",
        ),
        (
            "io_uring_requests",
            "datahub_mount_io_uring_requests_total",
            "counter",
            "Requests taken from the mount's io_uring queues.",
        ),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{_labels(mount=m['mountpoint'])}}} {m.get(key, 0)}" for m in mounts]
    return "\n".join(lines) + "\n"


_WORKER_FIGURES = (
    # stats key, metric, type, help
    ("running", "datahub_cache_fetch_workers", "gauge", "Fetch worker processes running (cache.fetch_workers)."),
    ("fetches", "datahub_cache_fetch_worker_pages_total", "counter", "Cold pages fetched and written by workers."),
    ("bytes", "datahub_cache_fetch_worker_bytes_total", "counter", "Bytes of those pages."),
    ("failovers", "datahub_cache_fetch_worker_failovers_total", "counter",
     "Requests a worker did not finish, fetched by the daemon itself."),
    ("restarts", "datahub_cache_fetch_worker_restarts_total", "counter", "Workers restarted after they died."),
)  # fmt: skip


def fetch_workers_text(snapshots: list[dict]) -> str:
    """The fetch worker processes of this node's cache processes (mount daemons), one series
    per daemon pid (from their stats snapshots)."""
    pools = [(snap["pid"], snap["fetch_workers"]) for snap in snapshots if "fetch_workers" in snap]
    lines: list[str] = []
    for key, name, kind, help_text in _WORKER_FIGURES if pools else ():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{_labels(pid=pid)}}} {pool.get(key, 0)}" for pid, pool in pools]
    return "\n".join(lines) + "\n" if lines else ""


def _labels(**values: str) -> str:
    def escape(v: str) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{escape(v)}"' for k, v in values.items())
