"""The tiered data cache: RAM -> disk (SSD) -> shared (Ceph or any object store) -> origin.

It knows nothing of the catalog: it caches immutable bytes named by (object URL, etag)
in fixed-size pages. ``open_cache(config, stores)`` builds the read-only profile; the
tier classes (``RamTier``, ``DiskTier``, ``SharedTier``) are reusable on their own, e.g. by
the write-back workspace in ``datahub.writeback``. See docs/cache.md.
"""

from datahub.cache.assembly import assemble_cache, open_cache
from datahub.cache.disk import DiskTier
from datahub.cache.pages import PageKey
from datahub.cache.policy import POLICIES, make_policy
from datahub.cache.prefetch import PrefetchReport
from datahub.cache.ram import RamTier
from datahub.cache.shared import SharedTier
from datahub.cache.tier import BudgetedTier, Tier, TierUsage
from datahub.cache.tiered import TieredCache

__all__ = [
    "POLICIES",
    "BudgetedTier",
    "DiskTier",
    "PageKey",
    "PrefetchReport",
    "RamTier",
    "SharedTier",
    "Tier",
    "TierUsage",
    "TieredCache",
    "assemble_cache",
    "make_policy",
    "open_cache",
]
