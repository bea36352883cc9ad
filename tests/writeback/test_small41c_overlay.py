"""The overlay wakes a waiting namespace transaction when the creators and overlapped first commits
it waits for end (issue 41, small41c: ``Overlay.end_create`` and ``end_overlap`` notify only while
one waits, ``ns_waiting``; before, every small file's create and close notified an empty
condition). A missed wake-up is a namespace operation (a rename, an unlink) hung for good.

Each case holds a create or an overlapped commit open, starts a namespace transaction in a
thread (it must wait), ends what it waits for and checks that the transaction gets in. The
30 s bound is a hang detector, not a timing: the transaction gets in at once or never.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from datahub.writeback.overlay import Overlay

HANG = 30.0  # seconds: far beyond any wake-up; reached only when none comes


def _namespace_waits_then_gets_in(overlay: Overlay, end: Callable[[], None]) -> None:
    entered = threading.Event()

    def namespace() -> None:
        overlay.begin_namespace()
        entered.set()
        overlay.end_namespace()

    t = threading.Thread(target=namespace, daemon=True)
    t.start()
    while True:  # until it waits: counted under the lock it waits on
        with overlay.cond:
            if overlay.ns_waiting:
                break
        assert not entered.is_set(), "the namespace transaction ran beside a create or a first commit"
        threading.Event().wait(0.001)
    assert not entered.is_set()
    end()
    assert entered.wait(HANG), "the namespace transaction was never woken"
    t.join(HANG)


@pytest.mark.parametrize("holders", [1, 2])
def test_the_end_of_the_last_overlapped_commit_wakes_a_waiting_namespace_transaction(holders: int) -> None:
    overlay = Overlay("ws", "workspace 'ws'")
    for _ in range(holders):
        assert overlay.begin_overlap()

    def end_all() -> None:
        for _ in range(holders):
            overlay.end_overlap()

    _namespace_waits_then_gets_in(overlay, end_all)
    assert overlay.overlapping == 0


def test_the_end_of_a_create_wakes_a_waiting_namespace_transaction() -> None:
    overlay = Overlay("ws", "workspace 'ws'")
    overlay.begin_create()
    _namespace_waits_then_gets_in(overlay, lambda: overlay.end_create(None))
    assert overlay.creating == 0
