"""A warm-up pass over a version of 10^8 files holds no object per file (issue 38 item 1):
the large objects it defers to the end, and the hinted objects it remembers, are bounded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from datahub.cache import prefetch
from datahub.cache.prefetch import WarmOrder
from datahub.storage.base import ObjectRef

PAGE = 1024


class Counted:
    """The refs of a pass, counting how many were taken from it."""

    def __init__(self, refs: list[ObjectRef]) -> None:
        self.refs, self.taken = refs, 0

    def __iter__(self) -> Iterator[ObjectRef]:
        for ref in self.refs:
            self.taken += 1
            yield ref


def _ref(i: int, size: int) -> ObjectRef:
    return ObjectRef(f"s3://b/{i:06}", "e", size)


def test_large_objects_deferred_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch, "DEFERRED_MAX", 8)
    refs = [_ref(i, 10 * PAGE) for i in range(100)] + [_ref(100 + i, 10) for i in range(5)]
    source = Counted(refs)
    order = WarmOrder(source, PAGE)
    got = []
    while (item := order.next()) is not None:
        got.append(item[0])
        assert source.taken - len(got) <= 8  # taken from the refs and not warmed yet
    assert sorted(r.url for r in got) == sorted(r.url for r in refs)  # each once, none lost
    assert got[:92] == refs[:92]  # past the bound, the oldest deferred one goes first
    assert got[-8:] == refs[92:100]  # the last ones deferred still go last, after the small ones


def test_hinted_objects_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch, "HINT_DONE_MAX", 16)
    hinted = [_ref(i, 10) for i in range(100)]
    order = WarmOrder(iter(hinted[90:] + [_ref(500, 10)]), PAGE, hinted=lambda: (1, hinted))
    got = []
    while (item := order.next()) is not None:
        got.append(item[0])
        assert len(order._hint_done) <= 16
    # the recent hinted ones are not warmed twice; the new one comes once
    assert got == hinted + [_ref(500, 10)]
