"""Helpers shared by the cache benchmarks: timing, a temp home, a results table."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from datahub.config import Config, load_config  # noqa: E402
from tests.servers import CephCluster, MotoServer, S3Endpoint  # noqa: E402


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """Fastest of ``repeat`` runs, in seconds (the least disturbed by the shared machine)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def compare(
    baseline: Callable[[], object], subject: Callable[[], object], repeat: int = 9
) -> tuple[float, float]:
    """Best times of ``baseline`` and ``subject``, run alternately so a burst of load from
    other processes on the shared machine hits both sides alike."""
    tb, ts = [], []
    for _ in range(repeat):
        tb.append(best_of(baseline, 1))
        ts.append(best_of(subject, 1))
    return min(tb), min(ts)


def config_in(home: Path, **cache: object) -> Config:
    config = load_config(env={}, overrides={"home": str(home)})
    return config.model_copy(update={"cache": config.cache.model_copy(update=cache)})


def header(title: str) -> None:
    print(f"# {title}")
    print(
        f"# {platform.node()} python {platform.python_version()} {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def row(name: str, seconds: float, nbytes: int | None = None, extra: str = "") -> None:
    rate = f"{nbytes / seconds / 2**20:10.0f} MiB/s" if nbytes else ""
    print(f"{name:<48} {seconds * 1000:10.1f} ms {rate} {extra}")


@contextmanager
def s3_endpoint(kind: str) -> Iterator[S3Endpoint]:
    """A moto server started here, or Ceph RGW: the cluster named by DATAHUB_TEST_CEPH_ENV
    if set (left running), else a throw-away one (~1 min to start, purged after)."""
    server = MotoServer(keep_alive=True) if kind == "moto" else CephCluster()
    try:
        yield server.endpoint
    finally:
        server.stop()


def load_average() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
