"""The one order a mount warms its files in: a version mount's warm-up and a bucket
mount's (``bucket_warmup``) both take it from here."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from datahub.storage.base import ObjectRef

PREFETCH_SORT_LIMIT = 200_000  # above this, warm up in key order, streamed (no list of every ref)


def warm_up_order(listed: Iterator[ObjectRef], limit: int = PREFETCH_SORT_LIMIT) -> Iterable[ObjectRef]:
    """The order a mount warms its files in: smallest first when there are at most ``limit``
    (the most files ready soonest), else key order, taken from ``listed`` as the warm-up
    goes, so a mount of millions of files never holds a list of every file's ref."""
    first = list(itertools.islice(listed, limit + 1))
    if len(first) <= limit:
        return sorted(first, key=lambda r: r.size)
    return itertools.chain(first, listed)
