"""The dataset names bucket snapshots are recorded under: ``s3://b/p`` -> ``s3.b.p``.

Why one module: three parts decide by this name, and each got it subtly wrong alone. The
bucket mount records its listing under it (``fuse_adapter.layout.bucket_view``); the API
keeps such names from tokens (``datahub.api.access.require_creatable``) and makes one for a
node only as a mount would (``datahub.api.routes.remote.mount_made``); the CSI plugin keeps a
``commitTo`` from taking one (``csi.node``). Any of them claiming a snapshot's name for
something else stopped every mount of that bucket from recording its listing (review13b).

Why no two URLs share a name (snapname14): a mount commits only into the snapshot whose
source is its own URL, so a URL whose name another URL's snapshot already held recorded
nothing, and any token could make that other snapshot through the remote store's
mount-shaped create (``s3.platform.team-b`` with source ``s3://platform/Team-B``). The old
map lower-cased, turned odd characters into ``-``, joined bucket and path with ``.``, and
cut long names to an 8-hex hash, so ``s3://platform.team-b``, ``s3://platform/team b`` and a
chosen long URL all met ``s3://platform/team-b``. Now a *plain* URL keeps its readable name,
and every other gets a name marked by ``--`` (which no plain name holds) and 80 bits of
sha256 of the URL itself.
"""

from __future__ import annotations

import hashlib
import re

from datahub.errors import InvalidInput
from datahub.storage import SCHEMES
from datahub.validation import check_name

MAX_NAME = 63
HASHED = "--"  # in every name made with a hash, in no plain name
HASH_HEX = 20  # 80 bits: matching a given URL's name by a chosen URL costs ~2^80 sha256 runs

# A plain URL, its trailing '/' stripped: a scheme in lower case, then bucket and path
# segments of [a-z0-9_-] ("--" is excluded below). Its name joins them with '.', which no
# segment holds, so the name gives the URL back: no other URL has it.
_SEGMENTS = r"[a-z0-9_-]+(?:/[a-z0-9_-]+)*"
_PLAIN = re.compile(rf"(?:s3|memory|rados)://{_SEGMENTS}|file:///{_SEGMENTS}")


def snapshot_dataset_name(url: str) -> str:
    """The dataset bucket mounts of ``url`` record their listings in; no other URL's.

    A plain URL (``s3://bench/train/`` -> ``s3.bench.train``: a lower-case scheme, segments
    of ``[a-z0-9_-]`` without ``--``, 63 characters at most) keeps the readable name mounts
    always gave it. Any other gets a readable prefix, ``--`` and 20 hex of sha256 of the URL
    (``s3://platform/Team-B`` -> ``s3.platform.team-b--…``). A trailing ``/`` names the same
    prefix (``bucket_listing.foreign_snapshot`` says so too), so it never changes the name."""
    scheme, sep, rest = url.partition("://")
    if not rest:
        raise InvalidInput(f"not an object-store URL: {url!r} (use s3://bucket[/prefix])")
    if scheme.lower() not in SCHEMES:
        raise InvalidInput(
            f"not an object-store URL: {url!r} (the scheme must be one of {', '.join(SCHEMES)})", url=url
        )
    exact = f"{scheme}{sep}{rest.rstrip('/')}"
    path = re.sub(r"[^a-z0-9._-]", "-", ".".join(p for p in rest.split("/") if p).lower())
    readable = f"{scheme.lower()}.{path}"
    if _PLAIN.fullmatch(exact) and HASHED not in exact and len(readable) <= MAX_NAME:
        return check_name(readable, "snapshot dataset")
    # surrogatepass: a lone surrogate a JSON body may hold hashes too, and still one way only
    digest = hashlib.sha256(exact.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_HEX]
    return check_name(f"{readable[: MAX_NAME - len(HASHED) - HASH_HEX]}{HASHED}{digest}", "snapshot dataset")


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


def is_bucket_snapshot(name: str, source: str) -> bool:
    """Whether a dataset named ``name`` with ``source`` is a bucket snapshot (the CSI plugin's
    ``csi/access.py`` ``bucket_snapshot`` asks this too): named after its source
    URL's scheme. Such a dataset with no owner and no access list is open to no pod, where
    any other so made is open to every pod (docs/csi.md)."""
    scheme, _, rest = source.partition("://")
    return bool(rest) and name.startswith(f"{scheme}.")
