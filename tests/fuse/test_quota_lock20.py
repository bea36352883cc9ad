"""review20c: every change of a quota's ``used`` takes its lock. A revert's kept bytes and a
release's growth were added with an unlocked ``+=`` while ``refund`` (under the lock, called
outside the view's lock) could run between its read and its write: one of the two was lost and
the quota then admitted more than its limit. Shown here without a mount: ``force`` waits for the
lock a concurrent ``refund`` or ``charge`` holds, so the two changes add up."""

from __future__ import annotations

import threading

from fuse_adapter.quota import Quota


def test_force_waits_for_the_lock_and_adds_up_with_a_refund() -> None:
    quota = Quota(100, used=50)
    done = threading.Event()
    with quota._lock:  # a refund or a charge in progress
        adder = threading.Thread(target=lambda: (quota.force(30), done.set()))
        adder.start()
        assert not done.wait(0.2), "force changed the count while another change held the lock"
        quota.used = max(0, quota.used - 20)  # the refund's own step, under the lock
    adder.join(5)
    assert done.is_set()
    assert quota.used == 60  # 50 - 20 + 30: neither change lost


def test_force_counts_past_the_limit_and_ignores_nothing_to_take() -> None:
    quota = Quota(100, used=90)
    quota.force(30)  # acknowledged bytes stay counted even past the limit
    quota.force(0)
    quota.force(-5)
    assert quota.used == 120 and quota.available == 0
