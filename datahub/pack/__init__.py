"""Offline resize/pack of a dataset version into LMDB shards, split into leased tasks.

``pack(config, catalog, "src@v3", "dst", spec, workers=2)`` is the whole job: plan the
tasks in the catalog's task queue, run local worker processes (remote ``datahub
pack-worker`` processes may join), then commit a version of ``dst`` made of the shards
and a per-sample ``index.json``. Running it again resumes the same job. See docs/pack.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from datahub.catalog import Catalog
from datahub.config import Config
from datahub.pack.executor import run_local
from datahub.pack.job import INDEX_KEY, PackResult, failure, finalize, parse_source, start_job
from datahub.pack.spec import PackSpec, TransformSpec, is_image_key
from datahub.pack.worker import PackServices, work
from datahub.storage import StoreRegistry
from datahub.tasks import open_task_queue

__all__ = [
    "INDEX_KEY",
    "PackResult",
    "PackServices",
    "PackSpec",
    "TransformSpec",
    "finalize",
    "is_image_key",
    "pack",
    "parse_source",
    "start_job",
    "work",
]


def pack(
    config: Config,
    catalog: Catalog,
    source: str,
    target: str,
    spec: PackSpec,
    *,
    workers: int = 2,
    lease_seconds: float = 60.0,
    author: str = "",
    on_progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
    restart: bool = False,
) -> PackResult:
    """Pack ``source`` (``DATASET[@REF]``) into a new version of ``target``; resumable.

    ``workers=0`` packs in this process (no child processes), which tests and tiny jobs use.
    ``restart``: pack every task again instead of resuming (``start_job``).
    """
    queue = open_task_queue(config.resolved_catalog_url)
    try:
        job = start_job(catalog, queue, source, target, spec, restart=restart).job
        if workers > 0:
            run_local(config, queue, job, workers=workers, lease_seconds=lease_seconds,
                      on_progress=on_progress, cancel=cancel)  # fmt: skip
        else:
            services = PackServices.open(config)
            try:
                work(services, job, lease_seconds=lease_seconds, stop=cancel)
            finally:
                services.close()
        error = failure(queue, job)
        if error is not None:
            raise error
        with StoreRegistry(config) as stores:
            objects = stores.store(config.resolved_objects_url)
            return finalize(catalog, queue, objects, job, stores=stores, author=author)
    finally:
        queue.close()
