"""The dataset names bucket snapshots are recorded under: ``s3://b/p`` -> ``s3.b.p``.

Why one module: three parts decide by this name, and each got it subtly wrong alone. The
bucket mount records its listing under it (``fuse_adapter.layout.bucket_view``); the API
keeps such names from tokens (``datahub.api.access.require_creatable``) and makes one for a
node only as a mount would (``datahub.api.routes.remote.mount_made``); the CSI plugin keeps a
``commitTo`` from taking one (``csi.node``). Any of them claiming a snapshot's name for
something else stopped every mount of that bucket from recording its listing (review13b).
"""

from __future__ import annotations

import hashlib
import re

from datahub.errors import InvalidInput
from datahub.storage import SCHEMES
from datahub.validation import check_name

MAX_NAME = 63


def snapshot_dataset_name(url: str) -> str:
    """``s3://bench/train/`` -> ``s3.bench.train``: a valid, stable dataset name per bucket
    prefix (lower case; hashed past 63 characters)."""
    scheme, _, rest = url.partition("://")
    if not rest:
        raise InvalidInput(f"not an object-store URL: {url!r} (use s3://bucket[/prefix])")
    name = ".".join([scheme, *[p for p in rest.split("/") if p]]).lower()
    name = re.sub(r"[^a-z0-9._-]", "-", name)
    if len(name) > MAX_NAME:
        name = name[:54] + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return check_name(name, "snapshot dataset")


def snapshot_name(name: str) -> bool:
    """Whether ``name`` is one a bucket mount records its listing under: ``<scheme>.…`` for a
    storage scheme."""
    scheme, dot, _ = name.partition(".")
    return bool(dot) and scheme in SCHEMES


def names_snapshot_of(name: str, source: str) -> bool:
    """Whether ``name`` is the snapshot dataset of bucket URL ``source`` as a mount of that URL
    names it (a source that is no bucket URL names none)."""
    try:
        return snapshot_dataset_name(source) == name
    except InvalidInput:
        return False
