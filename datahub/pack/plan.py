"""Deterministic task split: a source version's key order cut into contiguous ranges.

The same source version and shard size always give the same ranges (the version is
immutable and listed in key order), so a job id plus a task index names the same work
on every run and on every machine; that is what makes resume and retries safe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from datahub.catalog.model import Record
from datahub.errors import InvalidInput
from datahub.pack.spec import PackSpec, is_image_key

MAX_RECORDS_PER_TASK = 20_000  # keeps one task's result (its key list) small


def job_id(source: str, seq: int, target: str, spec: PackSpec) -> str:
    """``pack-<hash>`` of what determines the output (not of the corrupt-image policy,
    so a job stopped by a corrupt image can be rerun with ``--on-corrupt skip`` and keep
    every shard already done)."""
    params = spec.to_dict()
    params.pop("on_corrupt")
    blob = json.dumps({"source": source, "seq": seq, "target": target, "spec": params}, sort_keys=True)
    return "pack-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def split(records: Iterable[Record], spec: PackSpec, *, source: str) -> list[dict[str, Any]]:
    """Task payloads ``{start_after, last, count, bytes}``: one key range per shard.

    A range closes once its source bytes reach ``spec.shard_bytes`` (a shrinking pack
    writes shards no bigger than that). Non-image records are refused here, before any
    work starts, unless the spec says to copy or skip them.
    """
    tasks: list[dict[str, Any]] = []
    start_after, count, nbytes, last = "", 0, 0, ""
    non_images: list[str] = []
    for record in records:
        if not is_image_key(record.key):
            non_images.append(record.key)  # the worker copies or skips it, and reports it
        count += 1
        nbytes += record.size
        last = record.key
        if nbytes >= spec.shard_bytes or count >= MAX_RECORDS_PER_TASK:
            tasks.append({"start_after": start_after, "last": last, "count": count, "bytes": nbytes})
            start_after, count, nbytes = last, 0, 0
    if count:
        tasks.append({"start_after": start_after, "last": last, "count": count, "bytes": nbytes})
    if non_images and not spec.non_image:
        examples = ", ".join(repr(k) for k in non_images[:3])
        raise InvalidInput(
            f"{source} has {len(non_images)} non-image records (e.g. {examples}); "
            "choose --non-image copy (store them as is) or --non-image skip",
            source=source,
            non_image=len(non_images),
        )
    return tasks
