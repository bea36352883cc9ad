"""Prometheus text for ``/metrics``: request counters per route and status, plus cache figures.

The registry is an object held by the app (no process-global state), so two apps in one
process (tests) count separately.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RequestMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: Counter[tuple[str, str, int]] = Counter()
        self._seconds: Counter[tuple[str, str]] = Counter()

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self._count[(method, route, status)] += 1
            self._seconds[(method, route)] += seconds

    def prometheus_text(self) -> str:
        with self._lock:
            count, seconds = dict(self._count), dict(self._seconds)
        lines = [
            "# HELP datahub_api_worker_info The server process that answered (serve --workers N: one of N).",
            "# TYPE datahub_api_worker_info gauge",
            f'datahub_api_worker_info{{pid="{os.getpid()}"}} 1',
            "# HELP datahub_http_requests_total HTTP requests by method, route template and status.",
            "# TYPE datahub_http_requests_total counter",
        ]
        for (method, route, status), n in sorted(count.items()):
            lines.append(
                f'datahub_http_requests_total{{method="{method}",route="{route}",status="{status}"}} {n}'
            )
        lines += [
            "# HELP datahub_http_request_seconds_total Time spent serving requests.",
            "# TYPE datahub_http_request_seconds_total counter",
        ]
        for (method, route), s in sorted(seconds.items()):
            lines.append(f'datahub_http_request_seconds_total{{method="{method}",route="{route}"}} {s:.6f}')
        return "\n".join(lines) + "\n"


class MetricsMiddleware:
    """Counts every request under its route template (``/v1/datasets/{name}``), never the raw path."""

    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe(scope["method"], route, status, time.perf_counter() - start)


def cache_text(cache) -> str:
    """The cache engineer's exposition, if that module exists (it is optional here)."""
    if cache is None:
        return ""
    try:
        from datahub.cache.metrics import prometheus_text
    except ImportError:
        return ""
    return prometheus_text(cache)


def warmups_text(config) -> str:
    """The warm-ups, open modes (FUSE passthrough) and fetch workers of the mounts whose cache shares this
    home (their stats snapshots): a mount is its own process, so this is how /metrics sees it."""
    from datahub.cache.metrics import fetch_workers_text, mount_text, warmup_text
    from datahub.cache.stats import read_snapshots, stats_dir

    snapshots = read_snapshots(stats_dir(config))
    return warmup_text(snapshots) + mount_text(snapshots) + fetch_workers_text(snapshots)
