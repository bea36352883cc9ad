"""pyfuse3.fastread_stats() names each switch and each counter once (warm16 found the
``direct`` switch hidden under the O_DIRECT reads' count of the same key)."""

from __future__ import annotations

import pyfuse3
import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(pyfuse3, "fastread_stats"), reason="pyfuse3 without the C read path"
)


def test_the_switches_and_the_counters_are_apart() -> None:
    stats = pyfuse3.fastread_stats()
    assert {k: type(stats[k]) for k in ("on", "dontneed", "direct_on")} == dict.fromkeys(
        ("on", "dontneed", "direct_on"), bool
    )
    assert all(
        type(stats[k]) is int
        for k in ("files", "published", "reads", "bytes", "direct", "changed", "handed", "swept")
    )
